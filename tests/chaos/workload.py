"""The workload: idempotent acks=all producers and three kinds of consumers, all recorded.

- `ProducerWorker`: an idempotent producer (`enable.idempotence=true`, `acks=all`) sending
  unique values (`<process>-<n>`) at a steady rate; every send ends in the history as ok
  (partition, offset), failed or unknown. `KeyedProducerWorker` gives each value a key
  (`compact_key`), for the compacted topic of the `compact` workload.
- `AssignConsumer`: assigns every partition from the beginning and polls.
- `GroupConsumer`: subscribes with the run's group, records each (re)assignment, and commits
  the offsets it has read synchronously after every poll that returned records.
- `CommittedObserver`: reads the group's committed offsets back (OffsetFetch) every second.
- `final_read`: once faults have stopped, reads every partition from the beginning up to its
  high watermark.

Workers are threads that own their client; `stop()` asks them to finish, `join()` waits.
A worker that dies records a `workload-error` event, which fails the run.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, ClassVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tests.chaos.history import History

# Errors after which the broker may or may not have stored the record.
INDEFINITE_SEND_ERRORS = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._PURGE_INFLIGHT,
        KafkaError._FATAL,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
#: Keys of the `compact` workload: every producer writes each of them about once a second.
COMPACT_KEYS = 32
POLL_BATCH = 500
POLL_TIMEOUT_S = 0.5
OBSERVE_EVERY_S = 1.0


@dataclass(frozen=True)
class WorkloadConfig:
    """What the clients connect to and how hard they push."""

    bootstrap: str
    topic: str
    partitions: int
    group: str
    producers: int = 3
    sends_per_second: float = 40.0  # per producer
    assign_consumers: int = 1
    group_consumers: int = 2
    message_timeout_ms: int = 12_000


def client_config(config: WorkloadConfig, logger: logging.Logger) -> dict[str, Any]:
    """Settings every client shares: short timeouts so faults show up within a run."""
    return {
        "bootstrap.servers": config.bootstrap,
        "socket.timeout.ms": 6000,
        "socket.connection.setup.timeout.ms": 3000,
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 2000,
        "logger": logger,
        "error_cb": lambda error: logger.warning("client error: %s", error),
    }


class Worker(threading.Thread):
    """A workload thread with a stop flag; an exception ends up in the history."""

    def __init__(
        self, name: str, history: History, config: WorkloadConfig, logger: logging.Logger
    ) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.process = name
        self.history = history
        self.config = config
        self.logger = logger
        self.stop_event = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - recorded, then the run fails
            self.history.record(
                "workload-error",
                process=self.process,
                error=repr(exc),
                traceback=traceback.format_exc(),
            )

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    """Sends `<process>-<n>` values at `sends_per_second`; a fatal producer is replaced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending: dict[str, float] = {}
        self.sequence = 0

    def _producer(self) -> Producer:
        return Producer(
            {
                **client_config(self.config, self.logger),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": self.config.message_timeout_ms,
                "request.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                # Idempotence state changes (epoch bumps and why) go to clients.log.
                "debug": "eos",
            }
        )

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        value = message.value().decode()
        t0 = self.pending.pop(value, None)
        if error is None:
            self.history.record(
                "send",
                process=self.process,
                value=value,
                t0=t0,
                outcome="ok",
                partition=message.partition(),
                offset=message.offset(),
            )
            return
        outcome = "unknown" if error.code() in INDEFINITE_SEND_ERRORS else "failed"
        self._record_unsent(value, t0, outcome, error.name())

    def key(self, sequence: int) -> bytes | None:
        """The key of the `sequence`th value (none: the partitioner spreads them)."""
        return None

    def _record_unsent(self, value: str, t0: float | None, outcome: str, error: str) -> None:
        self.history.record(
            "send", process=self.process, value=value, t0=t0, outcome=outcome, error=error
        )

    def work(self) -> None:
        producer = self._producer()
        interval_s = 1.0 / self.config.sends_per_second
        next_send = time.monotonic()
        while not self.stop_event.is_set():
            self.sequence += 1
            value = f"{self.process}-{self.sequence}"
            self.pending[value] = self.history.now()
            try:
                producer.produce(
                    self.config.topic,
                    value.encode(),
                    key=self.key(self.sequence),
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self._record_unsent(value, self.pending.pop(value), "failed", "local queue full")
            except KafkaException as exc:
                error = exc.args[0]
                self._record_unsent(value, self.pending.pop(value), "failed", error.name())
                if error.fatal():
                    # Delivery reports of the dead producer's queue arrive through flush.
                    self.history.record("client-fatal", process=self.process, error=str(error))
                    producer.flush(1)
                    producer = self._producer()
            next_send += interval_s
            # poll returns early after serving a callback: wait out the interval in a loop.
            while (wait_s := next_send - time.monotonic()) > 0 and not self.stop_event.is_set():
                producer.poll(wait_s)
            if next_send < time.monotonic() - 1.0:
                next_send = time.monotonic()  # do not burst after a stall
        remaining = producer.flush(self.config.message_timeout_ms / 1000 + 2)
        for value, t0 in list(self.pending.items()):
            self.history.record(
                "send",
                process=self.process,
                value=value,
                t0=t0,
                outcome="unknown",
                error=f"no delivery report at the end ({remaining} in the queue)",
            )
        self.pending.clear()


def compact_key(value: str) -> str:
    """The key of a `compact` workload value `<process>-<n>`: `k<n mod COMPACT_KEYS>`, so
    every producer writes every key (a checker finds a value's key without its record)."""
    return f"k{int(value.rsplit('-', 1)[1]) % COMPACT_KEYS}"


class KeyedProducerWorker(ProducerWorker):
    """A `ProducerWorker` whose values carry their `compact_key`."""

    def key(self, sequence: int) -> bytes | None:
        return compact_key(f"{self.process}-{sequence}").encode()


class ProtocolErrorRecorder(logging.Handler):
    """Turns librdkafka's protocol parse failures into `client-protocol-error` events.

    A parse failure means a client could not read a broker's response, so it never saw that
    response's error codes (it keeps asking the same broker instead of refreshing metadata).
    The first few per client are recorded with their log lines; `record_summary()` records
    the count per client.
    """

    KEPT_PER_CLIENT = 3

    def __init__(self, history: History) -> None:
        super().__init__(logging.DEBUG)
        self.history = history
        self.failures: dict[str, int] = {}
        self.pending: dict[str, str] = {}  # a kept failure waiting for its cause line

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        process = record.threadName.removeprefix("chaos-")
        if message.startswith("ERRSEQ") or (
            message.startswith("DRAIN") and "bumped epoch" in message
        ):
            # Why an idempotent producer changed epoch: duplicates across epochs follow.
            self.history.record("client-epoch", process=process, detail=message[:800])
            return
        if not message.startswith("PROTOERR"):
            return
        if "parse failure" not in message:  # what was wrong follows, on its own line
            failure = self.pending.pop(process, None)
            if failure is not None:
                self._record(process, f"{failure} / {message}")
            return
        count = self.failures[process] = self.failures.get(process, 0) + 1
        if count <= self.KEPT_PER_CLIENT:
            previous = self.pending.pop(process, None)
            if previous is not None:
                self._record(process, previous)
            self.pending[process] = message

    def _record(self, process: str, detail: str) -> None:
        self.history.record("client-protocol-error", process=process, detail=detail[:800])

    def record_summary(self) -> None:
        for process, failure in self.pending.items():
            self._record(process, failure)
        self.pending.clear()
        if self.failures:
            self.history.record("client-protocol-errors", failures=self.failures)


def record_poll(history: History, process: str, messages: list[Message]) -> list[Message]:
    """Record one poll's records (and errors); returns the messages that are records."""
    records = []
    for message in messages:
        error = message.error()
        if error is not None:
            history.record("poll-error", process=process, error=error.name(), detail=str(error))
            continue
        records.append(message)
    if records:
        history.record(
            "poll",
            process=process,
            records=[[m.partition(), m.offset(), m.value().decode()] for m in records],
        )
    return records


def consumer_config(config: WorkloadConfig, logger: logging.Logger, group: str) -> dict[str, Any]:
    return {
        **client_config(config, logger),
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Reading committed data never needs a reset; if one happens the poll order shows it.
        "auto.offset.reset": "earliest",
        # librdkafka's default, stated: the txn workload's checks rest on it.
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 100,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }


class AssignConsumer(Worker):
    """Reads every partition from the beginning by `assign`, for the whole run."""

    #: Client settings over the workload's consumer config. Each Fetch's offset and
    #: broker, what its answer enqueued, and any seek or offset validation go to
    #: clients.log: a poll-skip can be traced to its cause.
    extra_config: ClassVar[dict[str, str]] = {"debug": "fetch,topic"}

    def work(self) -> None:
        group = f"{self.config.group}-{self.process}"  # never joined; librdkafka wants one
        consumer = Consumer(
            {**consumer_config(self.config, self.logger, group), **self.extra_config}
        )
        partitions = list(range(self.config.partitions))
        consumer.assign(
            [TopicPartition(self.config.topic, p, OFFSET_BEGINNING) for p in partitions]
        )
        self.history.record("assign", process=self.process, partitions=partitions, how="assign")
        try:
            while not self.stop_event.is_set():
                record_poll(
                    self.history, self.process, consumer.consume(POLL_BATCH, POLL_TIMEOUT_S)
                )
        finally:
            consumer.close()


class GroupConsumer(Worker):
    """A member of the run's group: polls, then commits what it read, synchronously."""

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.history.record(
            "assign",
            process=self.process,
            partitions=sorted(tp.partition for tp in partitions),
            how="rebalance",
        )

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.history.record(
            "assign",
            process=self.process,
            partitions=[],
            how="revoke",
            revoked=sorted(tp.partition for tp in partitions),
        )

    def work(self) -> None:
        consumer = Consumer(consumer_config(self.config, self.logger, self.config.group))
        consumer.subscribe(
            [self.config.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        try:
            while not self.stop_event.is_set():
                records = record_poll(
                    self.history, self.process, consumer.consume(POLL_BATCH, POLL_TIMEOUT_S)
                )
                if records:
                    self._commit(consumer, records)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, records: list[Message]) -> None:
        next_offsets: dict[int, int] = {}
        for message in records:
            next_offsets[message.partition()] = max(
                next_offsets.get(message.partition(), 0), message.offset() + 1
            )
        offsets = [TopicPartition(self.config.topic, p, o) for p, o in sorted(next_offsets.items())]
        t0 = self.history.now()
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.history.record(
                "commit",
                process=self.process,
                group=self.config.group,
                t0=t0,
                offsets=next_offsets,
                outcome="failed",
                error=exc.args[0].name(),
            )
            return
        committed = {tp.partition: tp.offset for tp in result or [] if tp.error is None}
        failed = {tp.partition: tp.error.name() for tp in result or [] if tp.error is not None}
        if committed:
            self.history.record(
                "commit",
                process=self.process,
                group=self.config.group,
                t0=t0,
                offsets=committed,
                outcome="ok",
            )
        if failed:
            self.history.record(
                "commit",
                process=self.process,
                group=self.config.group,
                t0=t0,
                offsets={p: next_offsets[p] for p in failed},
                outcome="failed",
                error=",".join(sorted(set(failed.values()))),
            )


class CommittedObserver(Worker):
    """Reads the group's committed offsets (OffsetFetch) once a second without joining."""

    def work(self) -> None:
        consumer = Consumer(consumer_config(self.config, self.logger, self.config.group))
        partitions = [TopicPartition(self.config.topic, p) for p in range(self.config.partitions)]
        try:
            while not self.stop_event.wait(OBSERVE_EVERY_S):
                t0 = self.history.now()
                try:
                    result = consumer.committed(partitions, timeout=5)
                except KafkaException:
                    continue
                # No committed offset reads as -1: after an acknowledged commit, a regression.
                offsets = {tp.partition: max(tp.offset, -1) for tp in result if tp.error is None}
                if offsets:
                    self.history.record(
                        "committed",
                        process=self.process,
                        group=self.config.group,
                        t0=t0,
                        offsets=offsets,
                    )
        finally:
            consumer.close()


def start_workload(
    config: WorkloadConfig,
    history: History,
    logger: logging.Logger,
    producer_class: type[ProducerWorker] = ProducerWorker,
) -> tuple[list[ProducerWorker], list[Worker]]:
    """Start every worker; returns (producers, consumers and the observer)."""
    producers = [producer_class(f"p{i}", history, config, logger) for i in range(config.producers)]
    consumers: list[Worker] = [
        AssignConsumer(f"a{i}", history, config, logger) for i in range(config.assign_consumers)
    ]
    consumers += [
        GroupConsumer(f"g{i}", history, config, logger) for i in range(config.group_consumers)
    ]
    consumers.append(CommittedObserver("observer", history, config, logger))
    for worker in [*producers, *consumers]:
        worker.start()
    return producers, consumers


def stop_workers(workers: list[Worker], timeout_s: float) -> list[str]:
    """Stop and join workers within `timeout_s` in all; names of those still running."""
    for worker in workers:
        worker.stop()
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    return [w.process for w in workers if w.is_alive()]


def final_read(
    config: WorkloadConfig, history: History, logger: logging.Logger, timeout_s: float
) -> bool:
    """Read every partition from the beginning to its high watermark as process `final`.

    Returns whether every partition was read to its high watermark within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(consumer_config(config, logger, f"{config.group}-final"))
    partitions = list(range(config.partitions))
    high_watermarks: dict[int, int] = {}
    try:
        while len(high_watermarks) < len(partitions) and time.monotonic() < deadline:
            for p in partitions:
                if p in high_watermarks:
                    continue
                try:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(config.topic, p), timeout=5, cached=False
                    )
                    high_watermarks[p] = high
                except KafkaException as exc:
                    logger.warning("final read: watermarks of partition %d: %s", p, exc)
        consumer.assign([TopicPartition(config.topic, p, OFFSET_BEGINNING) for p in partitions])
        history.record("assign", process="final", partitions=partitions, how="assign")
        positions: dict[int, int] = {}
        while time.monotonic() < deadline:
            record_poll(history, "final", consumer.consume(POLL_BATCH, POLL_TIMEOUT_S))
            for tp in consumer.position([TopicPartition(config.topic, p) for p in high_watermarks]):
                if tp.offset >= 0:
                    positions[tp.partition] = tp.offset
            if len(high_watermarks) == len(partitions) and all(
                positions.get(p, 0) >= hw or hw == 0 for p, hw in high_watermarks.items()
            ):
                break
        complete = len(high_watermarks) == len(partitions) and all(
            positions.get(p, 0) >= hw or hw == 0 for p, hw in high_watermarks.items()
        )
        history.record(
            "final-read", complete=complete, high_watermarks=high_watermarks, positions=positions
        )
        return complete
    finally:
        consumer.close()
