"""Transactions end to end with confluent-kafka's transactional producer and consumers:
committed and aborted transactions as read_committed and read_uncommitted consumers see
them, the last stable offset held back by an open transaction, consume-transform-produce
exactly once across a SIGKILL of the app (tests/compat/eos_app.py), and a transaction
coordinator killed on a 3-node cluster while a producer is mid-transaction.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from clients import (
    RawConnection,
    consume,
    create_topic,
    make_consumer,
    wait_until,
    watermarks,
)
from confluent_kafka import Producer, TopicPartition
from harness import REPO_ROOT
from test_transactions import CONFIG, describe

APP = Path(__file__).resolve().parent / "eos_app.py"


def transactional_producer(bootstrap: str, transactional_id: str, **conf: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "socket.timeout.ms": 10000,
            **conf,
        }
    )
    producer.init_transactions(60)
    return producer


def list_offset_latest(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets(LATEST) of one partition: the LSO under read_committed (1), the high
    watermark under read_uncommitted (0)."""
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.static.primitive import i8, i32, i64

    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(isolation_level),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(-1)),
                ),
            ),
        ),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        response = conn.recv_response(ListOffsetsResponse)
    part = response.topics[0].partitions[0]
    assert int(part.error_code) == 0, part
    return int(part.offset)


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str
) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record a consumer with `isolation` reads from offset 0 up to
    its end of each partition (the LSO under read_committed, the high watermark otherwise)."""
    got = consume(bootstrap, topic, partitions, isolation_level=isolation, timeout=60)
    return {p: [(m.offset(), m.value()) for m in msgs] for p, msgs in got.items()}


# -- one broker: commit, abort, the LSO ---------------------------------------------------------


def test_committed_and_aborted_transactions_as_consumers_see_them(broker_factory):
    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    topic = f"txn-e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    producer = transactional_producer(bootstrap, f"e2e-{uuid.uuid4().hex[:8]}")

    # Each partition's expected log: (offset, value) of data records, and marker offsets.
    layout: dict[int, list[tuple[int, bytes | None]]] = {0: [], 1: []}

    def run(name: str, count: int, outcome: str | None) -> None:
        producer.begin_transaction()
        for i in range(count):
            partition = i % 2
            value = f"{name}-{i}".encode()
            producer.produce(topic, value=value, partition=partition)
            layout[partition].append((len(layout[partition]), value))
        # Without a flush, an abort would purge the unsent records and prove nothing.
        assert producer.flush(30) == 0
        if outcome == "commit":
            producer.commit_transaction(30)
        elif outcome == "abort":
            producer.abort_transaction(30)
        if outcome is not None:
            for partition in (0, 1):
                layout[partition].append((len(layout[partition]), None))

    plan = [("t1", 6, "commit"), ("t2", 4, "abort"), ("t3", 5, "commit"), ("t4", 7, "abort")]
    for name, count, outcome in plan:
        run(name, count, outcome)
    run("t5", 4, None)  # left open: it holds the LSO back
    committed_names = {"t1", "t3"}

    def values(partition: int, names: set[str]) -> list[tuple[int, bytes | None]]:
        return [
            (offset, value)
            for offset, value in layout[partition]
            if value is not None and value.decode().split("-")[0] in names
        ]

    all_names = {name for name, _, _ in plan} | {"t5"}
    open_start = {p: next(o for o, v in layout[p] if v and v.startswith(b"t5")) for p in (0, 1)}
    log_end = {p: len(layout[p]) for p in (0, 1)}

    for partition in (0, 1):
        assert list_offset_latest(bootstrap, topic, partition, 1) == open_start[partition]
        assert list_offset_latest(bootstrap, topic, partition, 0) == log_end[partition]
        # librdkafka's watermark query uses its default isolation.level=read_committed.
        assert watermarks(bootstrap, topic, partition) == (0, open_start[partition])

    committed = read_all(bootstrap, topic, 2, "read_committed")
    uncommitted = read_all(bootstrap, topic, 2, "read_uncommitted")
    for partition in (0, 1):
        assert committed[partition] == values(partition, committed_names)
        assert uncommitted[partition] == values(partition, all_names)

    producer.commit_transaction(30)
    committed_names.add("t5")
    for partition in (0, 1):
        layout[partition].append((len(layout[partition]), None))
        end = len(layout[partition])
        assert list_offset_latest(bootstrap, topic, partition, 1) == end
        assert list_offset_latest(bootstrap, topic, partition, 0) == end
        assert watermarks(bootstrap, topic, partition) == (0, end)

    committed = read_all(bootstrap, topic, 2, "read_committed")
    uncommitted = read_all(bootstrap, topic, 2, "read_uncommitted")
    for partition in (0, 1):
        assert committed[partition] == values(partition, committed_names)
        assert uncommitted[partition] == values(partition, all_names)
        # The offsets no consumer saw are exactly the five transactions' markers.
        seen = {offset for offset, _ in uncommitted[partition]}
        markers = [o for o in range(len(layout[partition])) if o not in seen]
        assert markers == [o for o, v in layout[partition] if v is None]
        assert len(markers) == 5


# -- consume-transform-produce, exactly once across a crash ------------------------------------


def start_app(bootstrap: str, log_path: Path, *args: object) -> subprocess.Popen[bytes]:
    from harness import _set_parent_death_signal

    argv = [sys.executable, str(APP), "--bootstrap", bootstrap, *map(str, args)]
    with open(log_path, "ab") as log:
        log.write(f"=== {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_set_parent_death_signal,
        )


@pytest.mark.slow
def test_consume_transform_produce_is_exactly_once_across_a_crash(broker_factory, tmp_path):
    from clients import produce

    inputs = 3000
    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"eos-in-{suffix}", f"eos-out-{suffix}"
    group, transactional_id = f"eos-group-{suffix}", f"eos-app-{suffix}"
    for topic in (source, sink):
        create_topic(bootstrap, topic, partitions=2)
    result = produce(
        bootstrap,
        source,
        ({"value": f"in-{i}".encode(), "partition": i % 2} for i in range(inputs)),
        enable_idempotence=True,
    )
    assert not result.errors

    app_args = ["--input", source, "--output", sink, "--group", group]
    app_args += ["--transactional-id", transactional_id, "--inputs", inputs, "--batch", 100]
    stall_file = tmp_path / "stalled"
    log_path = tmp_path / "eos_app.log"
    app = start_app(bootstrap, log_path, *app_args, "--stall-after", 7, "--stall-file", stall_file)
    try:
        wait_until(
            lambda: stall_file.exists() or app.poll() is not None, 90, "the app to stall mid-txn"
        )
        assert app.poll() is None, log_path.read_text()
        state = describe(bootstrap, transactional_id)
        assert state.transaction_state == "Ongoing", state
        app.send_signal(signal.SIGKILL)
        app.wait(10)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)

    # The same transactional.id fences the killed instance; its open transaction is aborted.
    app = start_app(bootstrap, log_path, *app_args)
    try:
        code = app.wait(110)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
    assert code == 0, log_path.read_text()

    committed = read_all(bootstrap, sink, 2, "read_committed")
    uncommitted = read_all(bootstrap, sink, 2, "read_uncommitted")
    committed_values = sorted(v for records in committed.values() for _, v in records)
    uncommitted_values = [v for records in uncommitted.values() for _, v in records]
    assert committed_values == sorted(f"out-{i}".encode() for i in range(inputs))
    aborted = len(uncommitted_values) - len(committed_values)
    print(
        f"eos: inputs={inputs} committed_outputs={len(committed_values)} "
        f"aborted_outputs={aborted} uncommitted_outputs={len(uncommitted_values)}"
    )
    assert aborted >= 50  # the killed instance's half transaction is in the log, aborted
    assert set(uncommitted_values) == set(committed_values)

    group_consumer = make_consumer(bootstrap, group_id=group)
    try:
        offsets = group_consumer.committed([TopicPartition(source, p) for p in (0, 1)], 10)
    finally:
        group_consumer.close()
    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, inputs // 2), (1, inputs // 2)]
    assert describe(bootstrap, transactional_id).transaction_state == "CompleteCommit"
