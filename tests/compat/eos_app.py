"""A consume-transform-produce app, exactly once with confluent-kafka's transactions.

Reads `in-N` records from an input topic as a group member (read_committed), writes one
`out-N` record per input to the output topic, and commits the consumed offsets in the same
transaction (send_offsets_to_transaction), `--batch` inputs per transaction. Exits 0 once the
group's committed offsets cover `--inputs` records.

With `--stall-after K` it commits K transactions, then produces half of the next one, flushes
it to the broker, writes `--stall-file` and sleeps: the test kills it there (SIGKILL), mid
transaction. Run by tests/compat/test_transactions_e2e.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--inputs", type=int, required=True, help="records in the input topic")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--stall-after", type=int, default=-1)
    parser.add_argument("--stall-file", type=Path)
    parser.add_argument("--deadline-s", type=float, default=80.0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.deadline_s
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # The killed instance stays a member until its session times out.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    committed_txns = 0
    while time.monotonic() < deadline:
        batch = []
        while len(batch) < args.batch and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if batch:
                    break
                if covered(consumer, args.input) >= args.inputs:
                    print(f"eos_app: done after {committed_txns} transactions", flush=True)
                    consumer.close()
                    return 0
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {message.error()}")
            batch.append(message)
        if not batch:
            continue
        producer.begin_transaction()
        stall = committed_txns == args.stall_after
        for i, message in enumerate(batch):
            if stall and i == len(batch) // 2:
                # Half a transaction is in the log; wait here to be killed.
                producer.flush(30)
                assert args.stall_file is not None
                args.stall_file.write_text(f"{committed_txns} {i}\n")
                time.sleep(3600)
            out = b"out-" + message.value().removeprefix(b"in-")
            producer.produce(
                args.output, key=message.key(), value=out, partition=message.partition()
            )
        next_offsets: dict[int, int] = {}
        for message in batch:
            next_offsets[message.partition()] = message.offset() + 1
        positions = [TopicPartition(args.input, p, o) for p, o in next_offsets.items()]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed_txns += 1
    print("eos_app: deadline passed", file=sys.stderr, flush=True)
    return 1


def covered(consumer: Consumer, topic: str) -> int:
    """Records of `topic` the group's committed offsets cover (0 while unassigned)."""
    assignment = [tp for tp in consumer.assignment() if tp.topic == topic]
    if not assignment:
        return 0
    committed = consumer.committed([TopicPartition(topic, tp.partition) for tp in assignment], 10)
    return sum(max(tp.offset, 0) for tp in committed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
