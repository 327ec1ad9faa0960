"""`raftka backup` of a 3-node cluster under load and `raftka restore` into a fresh single
broker, run as a user runs them (subprocesses), checked record by record over the wire."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

from clients import create_topic, make_consumer, make_producer, run_raftka, wait_until
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from raftka.broker.admin.backup import PartitionReader
from raftka.broker.admin.backup_format import split_batches
from raftka.broker.admin.common import Target
from raftka.broker.admin.wire import WireCluster
from raftka.protocol.batch_builder import decode_batch
from raftka.protocol.records import read_batch_header

CLI_TIMEOUT_S = 300
GROUP = "backup-group"


def raftka(*args: object) -> subprocess.CompletedProcess[str]:
    return run_raftka(*args, timeout=CLI_TIMEOUT_S)


def ok_json(*args: object) -> Any:
    result = raftka(*args, "--output", "json", "--timeout", 30)
    assert result.returncode == 0, f"raftka {args} exited {result.returncode}: {result.stderr}"
    return json.loads(result.stdout)


def record(topic: str, i: int) -> dict[str, Any]:
    return {
        "key": f"key-{i}".encode(),
        "value": f"value-{i}-{uuid.uuid4().hex}".encode(),
        "headers": [("n", str(i).encode()), ("empty", b"")],
        "timestamp": 1_700_000_000_000 + i,
    }


class Load:
    """An idempotent producer to every topic and a group committing what it consumed."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.stop = threading.Event()
        self.produced = 0
        self.consumed = 0
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _produce(self) -> None:
        producer = make_producer(self.bootstrap, enable_idempotence=True, linger_ms=5)

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        i = 0
        while not self.stop.is_set():
            for topic in self.topics:
                producer.produce(topic, on_delivery=report, **record(topic, i))
            i += 1
            self.produced = i * len(self.topics)
            if i % 50 == 0:
                producer.flush(30)
        assert producer.flush(30) == 0

    def _consume(self) -> None:
        consume_and_commit(self.bootstrap, self.topics, self.stop)


def consume_and_commit(
    bootstrap: str, topics: list[str], stop: threading.Event, limit: int | None = None
) -> int:
    consumer = make_consumer(bootstrap, group_id=GROUP, enable_partition_eof=False)
    consumer.subscribe(topics)
    n = 0
    try:
        while not stop.is_set() and (limit is None or n < limit):
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            consumer.store_offsets(message)
            n += 1
            if n % 40 == 0:
                consumer.commit(asynchronous=False)
        if n % 40:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return n


def raw_log(bootstrap: str, topic: str, partition: int, end: int) -> list[Any]:
    """Every batch of the partition up to `end`: header fields and decoded records."""
    out: list[Any] = []
    (start,) = offsets(bootstrap, [(topic, partition)], OffsetSpec.earliest()).values()
    with WireCluster(Target(bootstrap, 15)) as cluster:
        reader = PartitionReader(cluster)
        reader.refresh([topic])
        offset = start
        while offset < end:
            batches, _ = split_batches(reader.fetch(topic, partition, offset))
            assert batches, f"{topic}[{partition}] returned nothing at {offset} (end {end})"
            for batch in batches:
                header = read_batch_header(batch.raw)
                if batch.is_control:
                    out.append(("control", batch.base_offset, batch.last_offset))
                else:
                    out.append(
                        (
                            batch.base_offset,
                            batch.last_offset,
                            header.producer_id,
                            header.producer_epoch,
                            header.base_sequence,
                            header.attributes,
                            header.max_timestamp,
                            decode_batch(batch.raw),
                        )
                    )
                offset = batch.last_offset + 1
    return out


def offsets(bootstrap: str, keys: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in keys})
    return {(tp.topic, tp.partition): f.result(30).offset for tp, f in futures.items()}


def committed(bootstrap: str) -> dict[tuple[str, int], tuple[int, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])
    listed = futures[GROUP].result(30)
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
        for tp in listed.topic_partitions
        if tp.offset >= 0
    }


def test_backup_under_load_then_incremental_restores_into_a_fresh_broker(
    cluster_factory: Any, broker_factory: Any, tmp_path: Path
) -> None:
    cluster = cluster_factory()
    source = cluster.bootstrap
    topics = [f"bk-a-{uuid.uuid4().hex[:6]}", f"bk-b-{uuid.uuid4().hex[:6]}"]
    create_topic(source, topics[0], partitions=3, replication_factor=3,
                 config={"retention.ms": "86400000"})  # fmt: skip
    create_topic(source, topics[1], partitions=2, replication_factor=3)
    keys = [(topics[0], p) for p in range(3)] + [(topics[1], p) for p in range(2)]
    directory = tmp_path / "backup"

    # A partition whose log no longer starts at 0: one batch per record, the first 37 deleted.
    producer = make_producer(source, enable_idempotence=True)
    for i in range(40):
        producer.produce(topics[1], partition=0, **record(topics[1], i))
        assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": source})
    (deleted,) = admin.delete_records([TopicPartition(topics[1], 0, 37)]).values()
    assert deleted.result(30).low_watermark == 37

    with Load(source, topics) as load:
        wait_until(lambda: load.produced >= 600, 60, "load to start")
        first = ok_json("backup", directory, "--bootstrap-servers", source)
    assert not load.errors, load.errors[:5]
    assert first["kind"] == "full" and first["offsets"] > 0
    first_ranges = {(p["topic"], p["partition"]): (p["from"], p["to"]) for p in first["partitions"]}
    assert set(first_ranges) == set(keys)
    assert first_ranges[(topics[1], 0)][0] == 37

    # More writes and commits after the first run, then an incremental run.
    for i in range(10_000, 10_200):
        for topic in topics:
            producer.produce(topic, **record(topic, i))
    assert producer.flush(30) == 0
    consume_and_commit(source, topics, threading.Event(), limit=150)
    second = ok_json("backup", directory, "--bootstrap-servers", source)
    assert second["kind"] == "incremental"
    ends = offsets(source, keys, OffsetSpec.latest())
    for p in second["partitions"]:
        key = (p["topic"], p["partition"])
        assert p["from"] == first_ranges[key][1], (key, p, first_ranges[key])
        assert p["to"] == ends[key]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [r["kind"] for r in manifest["runs"]] == ["full", "incremental"]

    target = broker_factory().bootstrap
    # As an interrupted restore leaves it: one topic already created in restore mode.
    create_topic(target, topics[1], partitions=2, config={"raftka.restore.in.progress": "true"})
    restored = ok_json("restore", directory, "--bootstrap-servers", target)
    assert sorted(restored["topics"]) == sorted(topics)

    starts = offsets(source, keys, OffsetSpec.earliest())
    assert starts[(topics[1], 0)] == 37
    assert offsets(target, keys, OffsetSpec.earliest()) == starts
    assert offsets(target, keys, OffsetSpec.latest()) == ends
    for topic, partition in keys:
        original = raw_log(source, topic, partition, ends[(topic, partition)])
        copy = raw_log(target, topic, partition, ends[(topic, partition)])
        data = [b for b in original if b[0] != "control"]
        assert data, f"{topic}[{partition}] has no data"
        assert [b for b in copy if b[0] != "control"] == data, f"{topic}[{partition}] differs"
        # Control batches keep their offsets (a configuration entry becomes LEADER_CHANGE).
        assert [b[1:3] if b[0] == "control" else b[:2] for b in copy] == [
            b[1:3] if b[0] == "control" else b[:2] for b in original
        ]

    source_offsets = committed(source)
    assert source_offsets and committed(target) == source_offsets

    # A consumer of the restored group resumes where the group had committed.
    consumer = make_consumer(target, group_id=GROUP, enable_partition_eof=False)
    consumer.subscribe(topics)
    first_seen: dict[tuple[str, int], int] = {}
    wanted = {k for k, (o, _) in source_offsets.items() if o < ends[k]}

    def resumed() -> bool:
        # Everything fetched so far, not one record per call: wait_until sleeps between
        # calls, and one partition's backlog read a record at a time outlasted the wait.
        for message in consumer.consume(1000, 0.5):
            if not message.error():
                first_seen.setdefault((message.topic(), message.partition()), message.offset())
        return wanted <= set(first_seen)

    try:
        wait_until(resumed, 60, "the restored group to consume every partition")
    finally:
        consumer.close()
    assert {k: first_seen[k] for k in wanted} == {k: source_offsets[k][0] for k in wanted}

    # The topics exist now and are not being restored: a second restore refuses, naming them.
    again = raftka("restore", directory, "--bootstrap-servers", target, "--timeout", 30)
    assert again.returncode == 1
    assert "not being restored" in again.stderr and topics[0] in again.stderr
    assert "--topics" in again.stderr
