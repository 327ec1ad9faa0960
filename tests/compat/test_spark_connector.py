"""Spark's own Kafka connector (spark-sql-kafka-0-10) against raftka, replayed call for call.

The connector jar cannot be downloaded here, but all it does with Kafka goes through the Java
kafka-clients library, which can: `KafkaTool spark-*` (java/KafkaTool.java) makes the same
client calls with the same configs as Spark's driver (an Admin: describeTopics, listOffsets
with ListOffsetsOptions(isolation.level)), its executors (a KafkaConsumer with no group
management: assign, seek, poll, position, seekToBeginning/seekToEnd; invisible offsets and
OffsetOutOfRange handled as KafkaDataConsumer does under failOnDataLoss) and its sink (a
KafkaProducer with default settings: idempotent, acks=all). These tests check what a Spark
user would see: the rows of a batch query over `[startingOffsets, endingOffsets)` are exactly
the records written, with their keys, values, headers, offsets and timestamps.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clients import wait_until
from conftest import create_topic
from harness import ClusterProcess, JavaTool

SPARK_POLL_TIMEOUT_MS = 30000
BASE_TIMESTAMP_MS = 1_700_000_000_000


# -- records as Spark's sink writes them -----------------------------------------------------


@dataclass(frozen=True)
class SinkRecord:
    """One row given to Spark's Kafka sink: None partition/timestamp leave the choice to the
    producer (its partitioner, the current time)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None
    timestamp: int | None = None

    def line(self) -> str:
        def b64(data: bytes | None) -> str:
            return "-" if data is None else base64.b64encode(data).decode()

        headers = ",".join(f"{b64(name.encode())}:{b64(value)}" for name, value in self.headers)
        fields = [
            "-" if self.partition is None else str(self.partition),
            "-" if self.timestamp is None else str(self.timestamp),
            b64(self.key),
            b64(self.value),
            headers or "-",
        ]
        return "\t".join(fields)


def sample_records(count: int, partitions: int, seed: int = 7) -> list[SinkRecord]:
    """Keys, null keys, null and empty values, binary bytes, headers (repeated names, null
    values, none at all) and explicit timestamps that grow by 10 ms a record."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        if i % 11 == 5:
            value = None
        elif i % 13 == 6:
            value = b""
        else:
            value = b"value-%d-" % i + rng.randbytes(rng.randrange(0, 40))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("source", b"spark"), ("seq", str(i).encode()))
        elif i % 3 == 1:
            headers = (("dup", b"a"), ("dup", None), ("bin", bytes([0, 255, i % 256])))
        out.append(
            SinkRecord(
                key=key,
                value=value,
                headers=headers,
                partition=i % partitions,
                timestamp=BASE_TIMESTAMP_MS + 10 * i,
            )
        )
    return out


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@dataclass
class Written:
    """What the sink's producer acknowledged: offsets and timestamps by record index."""

    records: list[SinkRecord]
    offsets: dict[int, tuple[int, int]]  # index -> (partition, offset)
    timestamps: dict[int, int]

    def by_partition(self) -> dict[int, list[int]]:
        """Record indexes per partition, in offset order."""
        out: dict[int, list[int]] = {}
        for index, (partition, _) in sorted(self.offsets.items(), key=lambda kv: kv[1]):
            out.setdefault(partition, []).append(index)
        return out

    def expected_row(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        partition, offset = self.offsets[index]
        return {
            "partition": partition,
            "offset": offset,
            "timestamp": self.timestamps[index],
            "timestamp_type": "CreateTime",
            "key": record.key,
            "value": record.value,
            "headers": [(name, value) for name, value in record.headers],
        }


def parse_write(lines: Iterable[dict[str, Any]], records: list[SinkRecord]) -> Written:
    lines = list(lines)
    failures = [row["query_failed"] for row in lines if "query_failed" in row]
    assert not failures, f"the sink's write failed: {failures}"
    [summary] = [row["write"] for row in lines if "write" in row]
    acks = [row["ack"] for row in lines if "ack" in row]
    assert summary == {"sent": len(records), "acked": len(records), "failed": None}, summary
    assert sorted(a["index"] for a in acks) == list(range(len(records))), "an ack is missing"
    return Written(
        records=records,
        offsets={a["index"]: (a["partition"], a["offset"]) for a in acks},
        timestamps={a["index"]: a["timestamp"] for a in acks},
    )


def records_file(tmp_path: Path, records: list[SinkRecord]) -> Path:
    path = tmp_path / f"records-{uuid.uuid4().hex[:8]}.tsv"
    path.write_text("".join(r.line() + "\n" for r in records))
    return path


def spark_write(
    java_tool: JavaTool,
    bootstrap: str,
    topic: str,
    records: list[SinkRecord],
    tmp_path: Path,
    *client_props: str,
) -> Written:
    """Spark's sink (KafkaWriteTask) writing `records`: a default KafkaProducer."""
    path = records_file(tmp_path, records)
    lines = java_tool.json("spark-write", bootstrap, topic, path, 0, *client_props, timeout=120)
    return parse_write(lines, records)


# -- a batch query as Spark's driver and executors run it ------------------------------------


@dataclass
class Query:
    """What one `spark-replay` printed, grouped by kind."""

    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    data_loss: list[dict[str, Any]] = field(default_factory=list)
    done: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, Any] | None = None
    retries: list[dict[str, Any]] = field(default_factory=list)

    def add(self, line: dict[str, Any]) -> None:
        [(kind, body)] = line.items()
        if kind == "range":
            self.ranges[body["partition"]] = (body["from"], body["until"])
        elif kind == "record":
            self.rows.append(decode_row(body))
        elif kind == "skipped":
            self.skipped.append(body)
        elif kind == "data_loss":
            self.data_loss.append(body)
        elif kind == "done":
            self.done[body["partition"]] = body
        elif kind == "query_failed":
            self.failed = body
        elif kind == "retry":
            self.retries.append(body)

    def rows_of(self, partition: int) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["partition"] == partition]

    def succeeded(self) -> Query:
        assert self.failed is None, f"the query failed: {self.failed}"
        assert set(self.done) == set(self.ranges), (self.done, self.ranges)
        return self


def decode_row(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "partition": body["partition"],
        "offset": body["offset"],
        "timestamp": body["timestamp"],
        "timestamp_type": body["timestamp_type"],
        "key": unb64(body["key"]),
        "value": unb64(body["value"]),
        "headers": [(name, unb64(value)) for name, value in body["headers"]],
    }


def replay_args(
    topic: str,
    starting: str,
    ending: str,
    fail_on_data_loss: bool,
    options: Iterable[str],
) -> list[str]:
    return [
        topic,
        starting,
        ending,
        "true" if fail_on_data_loss else "false",
        f"--poll-timeout-ms={SPARK_POLL_TIMEOUT_MS}",
        *options,
    ]


def spark_read(
    java_tool: JavaTool,
    bootstrap: str,
    topic: str,
    starting: str = "earliest",
    ending: str = "latest",
    fail_on_data_loss: bool = True,
    *options: str,
) -> Query:
    """`spark.read.format("kafka")` with these options, collected."""
    query = Query()
    args = replay_args(topic, starting, ending, fail_on_data_loss, options)
    for line in java_tool.json("spark-replay", bootstrap, *args, timeout=120):
        query.add(line)
    return query


def spark_offsets(
    java_tool: JavaTool, bootstrap: str, topic: str, timestamps: list[int]
) -> dict[tuple[str, int], dict[str, Any]]:
    """listOffsets earliest/latest/forTimestamp by (isolation level, partition)."""
    wanted = ",".join(map(str, timestamps)) or "-"
    lines = java_tool.json("spark-offsets", bootstrap, topic, wanted)
    return {
        (row["offsets"]["isolation"], row["offsets"]["partition"]): row["offsets"]
        for row in lines
        if "offsets" in row
    }


def assert_rows_are(query: Query, written: Written, indexes_by_partition: dict[int, list[int]]):
    """Each partition's rows are exactly these written records, in offset order."""
    for partition, indexes in sorted(indexes_by_partition.items()):
        got = query.rows_of(partition)
        want = [written.expected_row(i) for i in indexes]
        assert [r["offset"] for r in got] == [w["offset"] for w in want], (
            f"partition {partition}: offsets read differ from offsets written"
        )
        for g, w in zip(got, want, strict=True):
            assert g == w, f"partition {partition} offset {w['offset']}: read {g}, wrote {w}"
    assert len(query.rows) == sum(len(v) for v in indexes_by_partition.values())


# -- one broker -------------------------------------------------------------------------------


def test_sink_write_then_batch_read_every_field(java_tool, bootstrap, new_topic, tmp_path):
    """df.write.format("kafka") then spark.read.format("kafka"): every row comes back with
    its key, value, headers, partition, offset and timestamp, under both isolation levels."""
    partitions = 3
    topic = new_topic(partitions=partitions)
    records = sample_records(300, partitions)
    written = spark_write(java_tool, bootstrap, topic, records, tmp_path)

    by_partition = written.by_partition()
    for partition, indexes in by_partition.items():
        offsets = [written.offsets[i][1] for i in indexes]
        assert offsets == list(range(len(indexes))), f"partition {partition}: {offsets[:10]}"
        assert indexes == sorted(indexes), "the producer reordered records of one partition"
    assert all(written.timestamps[i] == r.timestamp for i, r in enumerate(records))

    for isolation in ("read_uncommitted", "read_committed"):
        query = spark_read(
            java_tool, bootstrap, topic, "earliest", "latest", True, f"isolation.level={isolation}"
        ).succeeded()
        assert query.ranges == {p: (-2, -1) for p in range(partitions)}, "late binding"
        for p, done in query.done.items():
            assert (done["from"], done["until"]) == (0, len(by_partition[p])), done
            assert done["group_id"].startswith("spark-kafka-relation-"), done
            assert done["group_id"].endswith("-executor"), done
            assert done["data_loss"] == 0, done
        assert not query.skipped and not query.data_loss
        assert_rows_are(query, written, by_partition)

    # The "assign" strategy and specific offsets: one partition, [5, 20).
    query = spark_read(java_tool, bootstrap, f"{topic}:1", "offsets:1=5", "offsets:1=20").succeeded()
    assert query.ranges == {1: (5, 20)}
    assert_rows_are(query, written, {1: by_partition[1][5:20]})
