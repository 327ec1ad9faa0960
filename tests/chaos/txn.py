"""The transactional workload (`--workload txn`) and its checker.

Workload:

- `TxnProducer`: a transactional producer (`transactional.id` of its own) running one
  transaction after another; each writes 1-3 records to each of 2-3 partitions, then commits
  or, a quarter of the time, aborts on purpose. Every transaction ends in the history as one
  `txn` event: its records (value, partition, offset from the delivery report), what it meant
  to do (`intent`), and what came of it (`outcome`):
  `committed` (commit_transaction returned), `aborted` (it never called commit_transaction, or
  a commit that raised an abortable error was then aborted successfully: either way no
  commit can follow, since only the producer's EndTxn(commit) commits), or `unknown` (a
  commit that raised a fatal error or kept timing out: the coordinator may or may not have
  committed it).
- `ReadCommittedConsumer`: reads every partition from the beginning by `assign` with
  `isolation.level=read_committed` for the whole run.
- The final read (`workload.final_read`, also read_committed) once faults have stopped and
  every producer has finished its last transaction.

Checker (`check_txn`), anomaly kinds besides the run's own (`checker.RUN_ANOMALY_KINDS`):

- `txn-partial`: the final read holds some but not all records of a transaction (atomicity
  across every partition it wrote; an `unknown` outcome may be all or nothing, never part).
- `txn-lost`: a committed transaction, or an `unknown` one some read_committed poll showed
  a record of, with none of its records in the final read.
- `aborted-read`: a read_committed poll (during the run or the final read) returned a record
  of an aborted transaction.
- `phantom-read`: a poll returned a value no transaction wrote.
- `duplicate`: one value at two offsets, or the final read returned it twice;
  `inconsistent-offset`: one offset holding two values.
- `nonmonotonic-poll`, `poll-skip`: as in the log checker, over read_committed polls (an
  offset some read_committed poll returned holds a committed record; aborted records and
  markers between them are legitimately skipped).
- `final-read-incomplete`: the final read did not reach every high watermark in time (with
  read_committed, a transaction left open holds it at the last stable offset).

During the run a committed transaction may be visible on one partition before another: the
coordinator writes its markers partition by partition. So atomicity is checked on the final
read only, as Kafka promises it.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any, ClassVar

from confluent_kafka import (
    KafkaError,
    KafkaException,
    Message,
    Producer,
)

from tests.chaos.checker import (
    EXAMPLES_PER_KIND,
    RUN_ANOMALY_KINDS,
    CheckResult,
    check_final_read_complete,
    check_polls,
    check_run_events,
)
from tests.chaos.history import Event
from tests.chaos.workload import (
    AssignConsumer,
    Worker,
    WorkloadConfig,
    client_config,
)

TXN_ANOMALY_KINDS = (
    "txn-partial",
    "txn-lost",
    "aborted-read",
    "phantom-read",
    "duplicate",
    "inconsistent-offset",
    "nonmonotonic-poll",
    "poll-skip",
    "final-read-incomplete",
    *RUN_ANOMALY_KINDS,
)
ABORT_SHARE = 0.25
TRANSACTION_TIMEOUT_MS = 15_000  # the coordinator aborts a transaction left open this long
CALL_TIMEOUT_S = 10.0  # each init/commit/abort call
FINISH_WITHIN_S = 30.0  # retries of one commit or abort
TXNS_PER_SECOND = 8.0  # per producer, at most
#: The transactional id of producer x0, whose coordinator kill-coordinator kills.
TXN_COORDINATED_ID = "chaos-x0"


class TxnProducer(Worker):
    """Runs transactions as described in the module docstring until stopped; the
    transaction in flight when `stop()` comes is finished first."""

    def __init__(self, *args: Any, seed: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)
        self.delivered: dict[str, tuple[int, int | None, str | None]] = {}
        self.number = 0

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        value = message.value().decode()
        if error is None:
            self.delivered[value] = (message.partition(), message.offset(), None)
        else:
            self.delivered[value] = (message.partition(), None, error.name())

    def _producer(self) -> Producer | None:
        """A producer whose init_transactions succeeded (None when stopped first)."""
        while not self.stop_event.is_set():
            producer = Producer(
                {
                    **client_config(self.config, self.logger),
                    "transactional.id": f"chaos-{self.process}",
                    "acks": "all",
                    "linger.ms": 5,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "message.timeout.ms": self.config.message_timeout_ms,
                    "request.timeout.ms": 5000,
                    "retry.backoff.ms": 100,
                    "debug": "eos",
                }
            )
            while not self.stop_event.is_set():
                try:
                    producer.init_transactions(CALL_TIMEOUT_S)
                    return producer
                except KafkaException as exc:
                    error = exc.args[0]
                    self.logger.warning("%s: init_transactions: %s", self.process, error)
                    if error.fatal() or not error.retriable():
                        self.history.record(
                            "client-fatal", process=self.process, error=f"init: {error}"
                        )
                        break  # a new producer
                    time.sleep(0.2)
        return None

    def work(self) -> None:
        producer = self._producer()
        interval_s = 1.0 / TXNS_PER_SECOND
        while producer is not None and not self.stop_event.is_set():
            started = time.monotonic()
            healthy = self._transaction(producer)
            if not healthy:
                producer = self._producer()
                continue
            self.stop_event.wait(max(0.0, interval_s - (time.monotonic() - started)))

    def _transaction(self, producer: Producer) -> bool:
        """One transaction, recorded; False when the producer must be replaced."""
        self.number += 1
        txn = f"{self.process}-t{self.number}"
        chosen = self.rng.sample(
            range(self.config.partitions), self.rng.randint(2, min(3, self.config.partitions))
        )
        planned = [
            (f"{txn}-{i}", partition)
            for i, partition in enumerate(
                p for p in sorted(chosen) for _ in range(self.rng.randint(1, 3))
            )
        ]
        intent = "abort" if self.rng.random() < ABORT_SHARE else "commit"
        errors: list[str] = []
        t0 = self.history.now()
        healthy = True
        produced: list[tuple[str, int]] = []
        try:
            producer.begin_transaction()
            for value, partition in planned:
                producer.produce(
                    self.config.topic,
                    value.encode(),
                    partition=partition,
                    on_delivery=self._on_delivery,
                )
                produced.append((value, partition))
            producer.poll(0)
        except (KafkaException, BufferError) as exc:
            errors.append(f"produce: {_describe(exc)}")
            intent = "abort"  # cannot commit a transaction missing records
            if isinstance(exc, KafkaException) and exc.args[0].fatal():
                healthy = False
        if intent == "commit":
            outcome, healthy = self._finish(producer, commit=True, errors=errors)
        elif healthy:
            _, healthy = self._finish(producer, commit=False, errors=errors)
            outcome = "aborted"
        else:
            outcome = "aborted"  # never asked to commit; a new producer's init aborts it
        self.history.record(
            "txn",
            process=self.process,
            txn=txn,
            t0=t0,
            intent=intent,
            outcome=outcome,
            records=[[value, partition, *self._delivery(value)] for value, partition in produced],
            errors=errors,
        )
        for value, _ in produced:
            self.delivered.pop(value, None)
        return healthy

    def _delivery(self, value: str) -> list[Any]:
        _partition, offset, error = self.delivered.get(value, (None, None, "no report"))
        return [offset, error]

    def _finish(self, producer: Producer, *, commit: bool, errors: list[str]) -> tuple[str, bool]:
        """Commit (or abort) with retries; (outcome, whether the producer is still usable)."""
        deadline = time.monotonic() + FINISH_WITHIN_S
        what = "commit" if commit else "abort"
        while True:
            try:
                if commit:
                    producer.commit_transaction(CALL_TIMEOUT_S)
                    return "committed", True
                producer.abort_transaction(CALL_TIMEOUT_S)
                return "aborted", True
            except KafkaException as exc:
                error = exc.args[0]
                errors.append(f"{what}: {_describe(exc)}")
                if error.fatal():
                    return ("unknown" if commit else "aborted"), False
                if commit and error.txn_requires_abort():
                    outcome, healthy = self._finish(producer, commit=False, errors=errors)
                    return outcome, healthy
                if not error.retriable() or time.monotonic() >= deadline:
                    return ("unknown" if commit else "aborted"), False
                time.sleep(0.1)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KafkaException):
        error = exc.args[0]
        flags = [
            name
            for name, on in (
                ("fatal", error.fatal()),
                ("retriable", error.retriable()),
                ("abortable", error.txn_requires_abort()),
            )
            if on
        ]
        return f"{error.name()} {','.join(flags)} {error.str()}".strip()
    return repr(exc)


class ReadCommittedConsumer(AssignConsumer):
    """Reads every partition from the beginning with read_committed, for the whole run."""

    extra_config: ClassVar[dict[str, str]] = {"isolation.level": "read_committed"}


def start_txn_workload(
    config: WorkloadConfig, history: Any, logger: Any, seed: int
) -> tuple[list[Worker], list[Worker]]:
    """Start the transactional producers and the read_committed consumer."""
    producers: list[Worker] = [
        TxnProducer(f"x{i}", history, config, logger, seed=f"{seed}:x{i}")
        for i in range(config.producers)
    ]
    consumers: list[Worker] = [ReadCommittedConsumer("c0", history, config, logger)]
    for worker in [*producers, *consumers]:
        worker.start()
    return producers, consumers


def check_txn(events: Iterable[Event]) -> CheckResult:
    """The transactional invariants of the module docstring over one run's events."""
    events = list(events)
    result = CheckResult(anomalies=dict.fromkeys(TXN_ANOMALY_KINDS, 0))
    check_run_events(events, result)
    txns: dict[str, Event] = {}
    txn_of: dict[str, str] = {}  # value -> transaction
    offsets_of_value: dict[str, set[tuple[int, int]]] = defaultdict(set)
    values_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    polled_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    final_count: Counter[str] = Counter()
    seen_running: set[str] = set()  # transactions a read_committed poll showed during the run
    final_read: Event | None = None
    outcomes: Counter[str] = Counter()
    for event in events:
        kind = event["type"]
        if kind == "txn":
            txns[event["txn"]] = event
            outcomes[event["outcome"]] += 1
            for value, partition, offset, _error in event["records"]:
                txn_of[value] = event["txn"]
                if offset is not None:
                    offsets_of_value[value].add((partition, offset))
                    values_at[(partition, offset)].add(value)
        elif kind == "final-read":
            final_read = event
    # Polls may come before the `txn` event of what they read (it is written at the end).
    for event in events:
        if event["type"] != "poll":
            continue
        result.polls += 1
        final = event["process"] == "final"
        for partition, offset, value in event["records"]:
            result.records_read += 1
            offsets_of_value[value].add((partition, offset))
            values_at[(partition, offset)].add(value)
            polled_at[(partition, offset)].add(value)
            where = {"process": event["process"], "t": event["t"], "partition": partition}
            txn = txn_of.get(value)
            if txn is None:
                result.add("phantom-read", {**where, "offset": offset, "value": value})
                continue
            if txns[txn]["outcome"] == "aborted":
                result.add(
                    "aborted-read",
                    {**where, "offset": offset, "value": value, "txn": _summary(txns[txn])},
                )
            if final:
                final_count[value] += 1
            else:
                seen_running.add(txn)
    result.sends = len(txns)
    result.acknowledged = outcomes["committed"]
    result.failed = outcomes["aborted"]
    result.unknown = outcomes["unknown"]
    result.operations = len(txns) + result.polls
    records = sum(len(t["records"]) for t in txns.values())
    result.counts = {
        "transactions": len(txns),
        "committed": outcomes["committed"],
        "aborted": outcomes["aborted"],
        "unknown_outcome": outcomes["unknown"],
        "records_written": records,
    }
    result.counts_line = (
        f"operations {result.operations}: transactions {len(txns)} (committed "
        f"{outcomes['committed']}, aborted {outcomes['aborted']}, unknown "
        f"{outcomes['unknown']}; {records} records), read_committed polls {result.polls} "
        f"({result.records_read} records); faults {result.faults}"
    )

    for value, places in offsets_of_value.items():
        if len(places) > 1 or final_count[value] > 1:
            result.add(
                "duplicate",
                {"value": value, "offsets": sorted(places), "final_reads": final_count[value]},
            )
    for (partition, offset), values in values_at.items():
        if len(values) > 1:
            result.add(
                "inconsistent-offset",
                {"partition": partition, "offset": offset, "values": sorted(values)},
            )

    if not check_final_read_complete(final_read, result):
        return result
    for txn, event in txns.items():
        if not event["records"] or event["outcome"] == "aborted":
            continue  # an aborted one read at all is `aborted-read` already
        read = [r for r in event["records"] if final_count[r[0]]]
        if 0 < len(read) < len(event["records"]):
            result.add(
                "txn-partial",
                {
                    **_summary(event),
                    "missing": [r[:3] for r in event["records"] if not final_count[r[0]]][
                        :EXAMPLES_PER_KIND
                    ],
                },
            )
        elif not read and (event["outcome"] == "committed" or txn in seen_running):
            result.add(
                "txn-lost",
                {**_summary(event), "seen_during_run": txn in seen_running},
            )
    check_polls(events, polled_at, result)
    return result


def _summary(event: Event) -> dict[str, Any]:
    return {
        "txn": event["txn"],
        "outcome": event["outcome"],
        "t0": event["t0"],
        "t": event["t"],
        "records": [r[:3] for r in event["records"]][:EXAMPLES_PER_KIND],
        "errors": event["errors"][:4],
    }
