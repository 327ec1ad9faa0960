"""The share-group workload (`--workload share`) and its checker.

Workload: the log workload's idempotent producers (`workload.ProducerWorker`) write unique
values to the topic while `ShareWorker`s, members of one share group in explicit
acknowledgement mode, poll, acknowledge every record they get (ACCEPT; RELEASE for about
one first delivery in twenty, so redelivery is exercised) and commit after every poll. Each
poll is a `share-poll` event ([partition, offset, value, delivery count, ack type] per record);
each answer to an acknowledgement commit (confluent-kafka's acknowledgement-commit callback,
per partition) is a `share-ack` event with the acknowledged [partition, offset, delivery
count, ack type] and its outcome: `ok`, `failed` (an error that means not applied, e.g.
INVALID_RECORD_STATE or NOT_LEADER_OR_FOLLOWER) or `unknown` (a timeout, a lost connection,
or the state write failed: COORDINATOR_NOT_AVAILABLE and the like, `INDEFINITE_ACK_ERRORS`;
may or may not have been applied).
After the faults the producers stop and the share consumers drain: they poll on until every
record the producers had acknowledged is settled (accepted, rejected or archived at the
delivery-count limit), or the drain times out; then the log is read back in full as in the
log workload (`final`), to tell a record missing from the log from one the share group lost.

What Kafka promises a share group (KIP-932), and so what the checker checks: delivery is
at least once. A record can be delivered again when its acknowledgement was not applied (the
lock expired, the commit failed or never arrived, the member left), so redeliveries and
failed acknowledgements are expected; an acknowledgement is applied only for the member that
holds the record's acquisition, and once a record is acknowledged it is never delivered
again. A record released or expired at the delivery-count limit is archived without being
acknowledged, which is not a loss.

Anomaly kinds, besides the run's own (`checker.RUN_ANOMALY_KINDS`):

- `acked-twice`: two acknowledgements (ACCEPT or REJECT) of one record both succeeded.
- `redelivered-after-ack`: a record delivered again, with a higher delivery count, after an
  acknowledgement of it succeeded: to another consumer at any time (the acknowledging one held
  the only acquisition, or its acknowledgement should have failed), or to the same consumer
  by a poll begun after the success was reported. Not counted: a delivery whose poll had
  ended before the poll that gave the acknowledging consumer the acquisition it acknowledged
  began. Acquisitions are not persisted (KIP-932: an acquired record is written as
  available, its delivery count as of its last write), so a share-partition reloaded from its
  state after a failed write hands a record out again with a lower count than an earlier
  delivery's; that earlier delivery came before the acknowledged one, not after it.
- `over-limit`: a delivery count above `group.share.delivery.count.limit`.
- `lost`: a record the producer had acknowledged that no acknowledgement (ok, or unknown) of
  it settled and that was never delivered at the limit; the example says whether the log's
  final read had it (a share-group loss) or not (a log loss).
- `inconsistent-offset`: one offset holding two values (sends, deliveries and the log's read).
- `drain-incomplete`: the drain ended before every acknowledged record was settled (each
  such record is also `lost`), `final-read-incomplete`: as in the log checker.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer

from tests.chaos.checker import EXAMPLES_PER_KIND, RUN_ANOMALY_KINDS, CheckResult, check_run_events
from tests.chaos.history import Event, History, read_history
from tests.chaos.workload import INDEFINITE_SEND_ERRORS, Worker, WorkloadConfig, client_config

SHARE_ANOMALY_KINDS = (
    "acked-twice",
    "redelivered-after-ack",
    "over-limit",
    "lost",
    "inconsistent-offset",
    "drain-incomplete",
    "final-read-incomplete",
    *RUN_ANOMALY_KINDS,
)
SHARE_GROUP = "chaos-share"
DELIVERY_LIMIT = 5
LOCK_MS = 5000
#: Broker settings of a share run (Kafka's defaults: 30 s locks, group config for the reset).
SHARE_BROKER_CONFIG = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "10000",
    "share.auto.offset.reset": "earliest",
    "share.coordinator.state.topic.num.partitions": "4",
}
RELEASE_SHARE = 0.05
COMMIT_TIMEOUT_S = 10.0
POLL_TIMEOUT_S = 0.5
# Error codes after which an acknowledgement may or may not have been applied: the client's
# own timeouts and lost connections, and the share-partition leader's answers when writing
# the share-group state failed (Kafka's `SharePartition.fetchPersisterError`). Such a write
# may still have reached the state's log: Kafka then rolls its in-memory state back but a
# new leader loads the acknowledgement; a raftka leader reloads what was persisted at once.
INDEFINITE_ACK_ERRORS = INDEFINITE_SEND_ERRORS | {
    KafkaError._DESTROY,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.UNKNOWN,
}
INDEFINITE_ACK_ERROR_NAMES = frozenset(KafkaError(code).name() for code in INDEFINITE_ACK_ERRORS)
ACK_NAMES = {
    AcknowledgeType.ACCEPT: "accept",
    AcknowledgeType.RELEASE: "release",
    AcknowledgeType.REJECT: "reject",
}


class Settled:
    """Values whose records the share consumers settled, shared by them and the drain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            self._values.update(values)

    def missing(self, values: Iterable[str]) -> list[str]:
        with self._lock:
            return [v for v in values if v not in self._values]


class ShareWorker(Worker):
    """A share-group member in explicit mode: poll, acknowledge each record, commit."""

    def __init__(self, *args: Any, seed: str, settled: Settled, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)
        self.settled = settled
        # (partition, offset) -> (delivery count, ack type, value) acknowledged, not answered
        self.pending: dict[tuple[int, int], tuple[int, str, str]] = {}

    def _on_commit(self, offsets: dict[Any, set[int]], exception: KafkaException | None) -> None:
        if exception is None:
            outcome, error = "ok", None
        else:
            kafka_error = exception.args[0]
            error = kafka_error.name()
            outcome = "unknown" if kafka_error.code() in INDEFINITE_ACK_ERRORS else "failed"
        for tp, acked in offsets.items():
            acks = []
            for offset in sorted(acked):
                count, ack_type, value = self.pending.pop(
                    (tp.partition, offset), (None, "unrecorded", None)
                )
                acks.append([tp.partition, offset, count, ack_type, value])
            self._record_acks(acks, outcome, error)

    def _record_acks(self, acks: list[list[Any]], outcome: str, error: str | None) -> None:
        self.history.record(
            "share-ack", process=self.process, outcome=outcome, error=error, acks=acks
        )
        if outcome != "failed":
            self.settled.add(a[4] for a in acks if a[3] in ("accept", "reject") and a[4])

    def work(self) -> None:
        config = {
            **client_config(self.config, self.logger),
            "group.id": SHARE_GROUP,
            "share.acknowledgement.mode": "explicit",
        }
        del config["topic.metadata.refresh.interval.ms"]
        consumer = ShareConsumer(config)
        consumer.set_acknowledgement_commit_callback(self._on_commit)
        consumer.subscribe([self.config.topic])
        try:
            while not self.stop_event.is_set():
                self._poll_once(consumer)
        finally:
            try:
                consumer.close()
            except KafkaException as exc:
                self.logger.warning("%s: close: %s", self.process, exc)
            if self.pending:  # never answered: applied or not, no one can say
                acks = [[p, o, c, k, v] for (p, o), (c, k, v) in sorted(self.pending.items())]
                self.pending.clear()
                self._record_acks(acks, "unknown", "no answer by close")

    def _poll_once(self, consumer: ShareConsumer) -> None:
        t0 = self.history.now()
        try:
            messages = consumer.poll(POLL_TIMEOUT_S)
        except KafkaException as exc:
            self.history.record("poll-error", process=self.process, error=str(exc.args[0]))
            return
        records = []
        at_limit = []
        for message in messages:
            error = message.error()
            if error is not None:
                self.history.record(
                    "poll-error", process=self.process, error=error.name(), detail=str(error)
                )
                continue
            count = message.delivery_count()
            ack = AcknowledgeType.ACCEPT
            if count == 1 and self.rng.random() < RELEASE_SHARE:
                ack = AcknowledgeType.RELEASE
            partition, offset, value = message.partition(), message.offset(), message.value()
            records.append([partition, offset, value.decode(), count, ACK_NAMES[ack]])
            if count is not None and count >= DELIVERY_LIMIT:
                at_limit.append(value.decode())
            self.pending[(partition, offset)] = (count, ACK_NAMES[ack], value.decode())
            consumer.acknowledge(message, ack)
        if not records:
            return
        self.history.record("share-poll", process=self.process, t0=t0, records=records)
        # At the limit a failed acknowledgement archives it: settled either way.
        self.settled.add(at_limit)
        try:
            consumer.commit_sync(COMMIT_TIMEOUT_S)
        except KafkaException as exc:
            self.logger.warning("%s: commit_sync: %s", self.process, exc)


def start_share_consumers(
    config: WorkloadConfig,
    history: History,
    logger: logging.Logger,
    seed: int,
    settled: Settled,
    count: int = 3,
) -> list[Worker]:
    """Start `count` share-group members that report what they settle to `settled`."""
    workers: list[Worker] = [
        ShareWorker(f"s{i}", history, config, logger, seed=f"{seed}:s{i}", settled=settled)
        for i in range(count)
    ]
    for worker in workers:
        worker.start()
    return workers


def drain(history: History, settled: Settled, timeout_s: float) -> bool:
    """Wait until every value the producers had acknowledged is settled; records a
    `share-drain` event and returns whether all were, within `timeout_s`."""
    acked = [
        e["value"]
        for e in read_history(history.path)
        if e["type"] == "send" and e["outcome"] == "ok"
    ]
    deadline = time.monotonic() + timeout_s
    missing = settled.missing(acked)
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = settled.missing(missing)
    history.record(
        "share-drain",
        complete=not missing,
        acknowledged=len(acked),
        missing=missing[:50],
        missing_count=len(missing),
    )
    return not missing


def check_share(events: Iterable[Event]) -> CheckResult:
    """The share-group invariants of the module docstring over one run's events."""
    events = list(events)
    result = CheckResult(anomalies=dict.fromkeys(SHARE_ANOMALY_KINDS, 0))
    check_run_events(events, result)
    limit = DELIVERY_LIMIT
    acked_sends: dict[str, Event] = {}
    values_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    log_values: set[str] = set()
    # (partition, offset) -> [(delivery count, process, poll t0, poll t)]
    deliveries: dict[tuple[int, int], list[tuple[int, str, float, float]]] = defaultdict(list)
    max_count: dict[str, int] = {}
    # (partition, offset) -> [(delivery count, process, t)] of acknowledgements that succeeded
    applied: dict[tuple[int, int], list[tuple[int | None, str, float]]] = defaultdict(list)
    settled: set[str] = set()  # values with an ok or unknown ACCEPT / REJECT
    drained: Event | None = None
    final_read: Event | None = None
    acks = {"ok": 0, "failed": 0, "unknown": 0}
    delivered = 0
    for event in events:
        kind = event["type"]
        if kind == "workload":
            limit = event.get("delivery_limit", limit)
        elif kind == "send":
            result.sends += 1
            if event["outcome"] == "ok":
                result.acknowledged += 1
                acked_sends[event["value"]] = event
                if event["offset"] is not None:
                    values_at[(event["partition"], event["offset"])].add(event["value"])
            elif event["outcome"] == "failed":
                result.failed += 1
            else:
                result.unknown += 1
        elif kind == "poll" and event["process"] == "final":
            for partition, offset, value in event["records"]:
                values_at[(partition, offset)].add(value)
                log_values.add(value)
        elif kind == "share-poll":
            result.polls += 1
            for partition, offset, value, count, _ack in event["records"]:
                delivered += 1
                values_at[(partition, offset)].add(value)
                deliveries[(partition, offset)].append(
                    (count, event["process"], event["t0"], event["t"])
                )
                max_count[value] = max(max_count.get(value, 0), count or 0)
                if count is not None and count > limit:
                    result.add(
                        "over-limit",
                        {
                            "process": event["process"],
                            "t": event["t"],
                            "partition": partition,
                            "offset": offset,
                            "delivery_count": count,
                            "limit": limit,
                        },
                    )
        elif kind == "share-ack":
            result.commits += 1
            outcome = event["outcome"]
            if outcome == "failed" and event["error"] in INDEFINITE_ACK_ERROR_NAMES:
                outcome = "unknown"  # a history recorded before the error counted as indefinite
            acks[outcome] += len(event["acks"])
            for partition, offset, count, ack_type, value in event["acks"]:
                if ack_type not in ("accept", "reject"):
                    continue
                if outcome == "ok":
                    applied[(partition, offset)].append((count, event["process"], event["t"]))
                if outcome != "failed" and value is not None:
                    settled.add(value)
        elif kind == "share-drain":
            drained = event
        elif kind == "final-read":
            final_read = event
    result.records_read = delivered
    result.operations = result.sends + result.polls + result.commits
    result.counts = {
        "deliveries": delivered,
        "redeliveries": delivered - len(deliveries),
        "acks_ok": acks["ok"],
        "acks_failed": acks["failed"],
        "acks_unknown": acks["unknown"],
    }
    result.counts_line = (
        f"operations {result.operations}: sends {result.sends} (acknowledged "
        f"{result.acknowledged}, failed {result.failed}, unknown {result.unknown}), share "
        f"polls {result.polls} ({delivered} deliveries of {len(deliveries)} records), "
        f"acknowledgements ok {acks['ok']}, failed {acks['failed']}, unknown "
        f"{acks['unknown']}; faults {result.faults}"
    )

    for (partition, offset), wins in applied.items():
        where = {"partition": partition, "offset": offset}
        if len(wins) > 1:
            result.add("acked-twice", {**where, "acknowledgements": wins})
        count, process, t = min(wins, key=lambda w: w[2])
        if count is None:
            continue
        delivered_to = deliveries.get((partition, offset), [])
        # When the poll that gave `process` the acquisition it acknowledged began: its
        # latest delivery with that count answered before the acknowledgement's success.
        acquired_t0 = max(
            (d[2] for d in delivered_to if d[0] == count and d[1] == process and d[3] <= t),
            default=None,
        )
        for later_count, later_process, poll_t0, poll_t in delivered_to:
            if later_count is None or later_count <= count:
                continue
            if acquired_t0 is not None and poll_t < acquired_t0:
                continue  # delivered before the acknowledged acquisition (a reload between)
            if later_process != process or poll_t0 > t:
                result.add(
                    "redelivered-after-ack",
                    {
                        **where,
                        "acknowledged": {"delivery_count": count, "by": process, "t": t},
                        "delivered": {
                            "delivery_count": later_count,
                            "to": later_process,
                            "poll_t0": poll_t0,
                        },
                    },
                )
                break
    for (partition, offset), values in values_at.items():
        if len(values) > 1:
            result.add(
                "inconsistent-offset",
                {"partition": partition, "offset": offset, "values": sorted(values)},
            )
    if drained is None:
        result.add("drain-incomplete", {"detail": "no drain in the history"})
    elif not drained["complete"]:
        # What the drain waited for, less what this checker counts as settled.
        unsettled = [
            v for v in drained["missing"] if v not in settled and max_count.get(v, 0) < limit
        ]
        if unsettled or len(drained["missing"]) < drained.get("missing_count", 0):
            result.add("drain-incomplete", {"missing": unsettled[:EXAMPLES_PER_KIND]})
    if final_read is None:
        result.add("final-read-incomplete", {"detail": "no final read in the history"})
    elif not final_read["complete"]:
        result.add(
            "final-read-incomplete",
            {
                "high_watermarks": final_read["high_watermarks"],
                "positions": final_read["positions"],
            },
        )
    for value, send in acked_sends.items():
        if value in settled or max_count.get(value, 0) >= limit:
            continue
        result.add(
            "lost",
            {
                "value": value,
                "partition": send["partition"],
                "offset": send["offset"],
                "acked_at": send["t"],
                "deliveries": max_count.get(value, 0),
                "in_log": value in log_values if final_read is not None else None,
            },
        )
    return result
