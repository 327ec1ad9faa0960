"""A consume-transform-produce app, exactly once with confluent-kafka's transactions, that
rides out a broker restart the way confluent-kafka's transactions example does.

Reads `in-N` records from an input topic as a group member (read_committed), writes one
`out-N` record per input to the output topic and commits the consumed offsets in the same
transaction, `--batch` inputs per transaction. On an error:
- retriable (e.g. a timeout while the broker is down): the same call is made again;
- abortable (`txn_requires_abort`): abort_transaction, then rewind the consumer to the group's
  committed offsets and do the batch again;
- fatal (e.g. fenced): a new producer with the same transactional.id, then rewind.

Exits 0 once the group's committed offsets cover `--inputs` records. `--producer-config
KEY=VALUE` adds librdkafka settings to the producer (the test sets
`metadata.recovery.strategy=none`: see docs/design/transactions-across-restarts.md). Every
transactional call is watched: one that neither returns nor raises within its timeout plus
`--guard-s` makes the app print `HUNG <call> ...` and exit 3, so the test names the call that
hung. Each call that raised is printed as `ERROR <call> <error>`. Run by
tests/compat/test_txn_broker_restart.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

T = TypeVar("T")

CALL_TIMEOUT_S = 10.0
HUNG_EXIT = 3


class Watchdog:
    """Exits the process when the call in progress outlives its timeout plus the guard."""

    def __init__(self, guard_s: float) -> None:
        self.guard_s = guard_s
        self.lock = threading.Lock()
        self.call: tuple[str, float, float] | None = None
        threading.Thread(target=self.watch, daemon=True).start()

    def run(self, name: str, timeout_s: float, fn: Callable[[], T]) -> T:
        with self.lock:
            self.call = (name, time.monotonic(), timeout_s)
        try:
            return fn()
        finally:
            with self.lock:
                self.call = None

    def watch(self) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                call = self.call
            if call is None:
                continue
            name, started, timeout_s = call
            elapsed = time.monotonic() - started
            if elapsed > timeout_s + self.guard_s:
                print(
                    f"HUNG {name}: no return or error after {elapsed:.1f} s "
                    f"(its timeout {timeout_s:.0f} s)",
                    flush=True,
                )
                os._exit(HUNG_EXIT)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--inputs", type=int, required=True, help="records in the input topic")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--guard-s", type=float, default=20.0)
    parser.add_argument("--deadline-s", type=float, default=150.0)
    parser.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka settings of the transactional producer",
    )
    return parser.parse_args(argv)


class App:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.watchdog = Watchdog(args.guard_s)
        self.consumer = Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": args.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 1000,
            }
        )
        self.producer = self.new_producer()
        self.committed_txns = 0
        self.aborted_txns = 0

    def new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.args.bootstrap,
                "transactional.id": self.args.transactional_id,
                "transaction.timeout.ms": 60000,
                **dict(kv.split("=", 1) for kv in self.args.producer_config),
            }
        )
        self.retrying("init_transactions", producer.init_transactions)
        return producer

    def call(self, name: str, fn: Callable[[float], T]) -> T:
        """One transactional call with its timeout, watched; its error printed and raised."""
        try:
            return self.watchdog.run(name, CALL_TIMEOUT_S, lambda: fn(CALL_TIMEOUT_S))
        except KafkaException as exc:
            print(f"ERROR {name} {exc.args[0]}", flush=True)
            raise

    def retrying(self, name: str, fn: Callable[[float], T]) -> T:
        """Call again while the error is retriable (the client asks for that)."""
        while True:
            try:
                return self.call(name, fn)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable() and not error.txn_requires_abort() and not error.fatal():
                    continue
                raise

    def rewind(self) -> None:
        """Back to the group's committed offsets: the aborted batch is read again."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        committed = self.consumer.committed(assignment, 30)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = -2  # OFFSET_BEGINNING: nothing committed yet
            self.consumer.seek(tp)

    def recover(self, error: KafkaError) -> None:
        if error.fatal():
            self.producer = self.new_producer()
        else:
            self.retrying("abort_transaction", self.producer.abort_transaction)
            self.aborted_txns += 1
        self.rewind()

    def poll_batch(self, deadline: float) -> list[Any]:
        batch: list[Any] = []
        while len(batch) < self.args.batch and time.monotonic() < deadline:
            message = self.consumer.poll(0.5)
            if message is None:
                if batch:
                    break
                return batch
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    continue
                print(f"consumer error: {message.error()}", flush=True)
                continue
            batch.append(message)
        return batch

    def transact(self, batch: list[Any]) -> None:
        producer = self.producer
        producer.begin_transaction()
        for message in batch:
            out = b"out-" + message.value().removeprefix(b"in-")
            while True:
                try:
                    producer.produce(
                        self.args.output,
                        key=message.key(),
                        value=out,
                        partition=message.partition(),
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        next_offsets: dict[int, int] = {}
        for message in batch:
            next_offsets[message.partition()] = message.offset() + 1
        positions = [TopicPartition(self.args.input, p, o) for p, o in next_offsets.items()]
        metadata = self.consumer.consumer_group_metadata()
        self.retrying(
            "send_offsets_to_transaction",
            lambda t: producer.send_offsets_to_transaction(positions, metadata, t),
        )
        self.retrying("commit_transaction", producer.commit_transaction)

    def run(self) -> int:
        deadline = time.monotonic() + self.args.deadline_s
        self.consumer.subscribe([self.args.input])
        while time.monotonic() < deadline:
            batch = self.poll_batch(deadline)
            if not batch:
                if self.covered() >= self.args.inputs:
                    print(
                        f"done after {self.committed_txns} transactions, "
                        f"{self.aborted_txns} aborted",
                        flush=True,
                    )
                    self.consumer.close()
                    return 0
                continue
            try:
                self.transact(batch)
                self.committed_txns += 1
            except KafkaException as exc:
                self.recover(exc.args[0])
        print("deadline passed", flush=True)
        return 1

    def covered(self) -> int:
        """Records of the input the group's committed offsets cover (0 while unassigned)."""
        assignment = [tp for tp in self.consumer.assignment() if tp.topic == self.args.input]
        if not assignment:
            return 0
        try:
            committed = self.consumer.committed(assignment, 10)
        except KafkaException as exc:
            print(f"committed: {exc.args[0]}", flush=True)
            return 0
        return sum(max(tp.offset, 0) for tp in committed)


def main(argv: list[str]) -> int:
    return App(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
