"""One send_offsets_to_transaction after the only broker was killed and started again, step by
step as the test drives it over stdin/stdout:

1. init_transactions and one committed transaction with send_offsets_to_transaction (so the
   producer knows the group's coordinator); prints `committed`.
2. On the line `killed`: polls until the producer reports all brokers down (librdkafka then
   re-bootstraps); prints `all brokers down`.
3. On the line `restarted`: begins a transaction and produces one record until it is
   delivered (the producer is connected again); prints `reconnected`.
4. Calls send_offsets_to_transaction with `--timeout-s` and prints `returned`, `raised <error>`
   or, when the call outlives its timeout by `--guard-s`, `hung` (then exits at once).

Run by tests/compat/test_txn_broker_restart.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--guard-s", type=float, default=20.0)
    parser.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def say(line: str) -> None:
    print(line, flush=True)


def expect(line: str) -> None:
    got = sys.stdin.readline().strip()
    if got != line:
        raise SystemExit(f"expected {line!r} on stdin, got {got!r}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    all_down = threading.Event()

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            all_down.set()

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "error_cb": on_error,
            **dict(kv.split("=", 1) for kv in args.producer_config),
        }
    )
    # Not subscribed: its group metadata names the group only, as a simple consumer's does.
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group})
    metadata = consumer.consumer_group_metadata()
    offsets = [TopicPartition(args.input, 0, 1)]

    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(args.output, b"before the kill")
    producer.send_offsets_to_transaction(offsets, metadata, 30)
    producer.commit_transaction(30)
    say("committed")

    expect("killed")
    while not all_down.is_set():
        producer.poll(0.1)
    say("all brokers down")

    expect("restarted")
    delivered = threading.Event()
    producer.begin_transaction()
    producer.produce(
        args.output, b"after the restart", on_delivery=lambda e, m: e is None and delivered.set()
    )
    while not delivered.is_set():
        producer.poll(0.1)
    say("reconnected")

    started = time.monotonic()

    def watch() -> None:
        while time.monotonic() - started < args.timeout_s + args.guard_s:
            time.sleep(0.2)
        say("hung")
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    offsets = [TopicPartition(args.input, 0, 2)]
    try:
        producer.send_offsets_to_transaction(offsets, metadata, args.timeout_s)
    except KafkaException as exc:
        say(f"raised {exc.args[0]}")
        os._exit(0)
    say("returned")
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
