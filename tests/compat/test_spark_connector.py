"""Spark's own Kafka connector (spark-sql-kafka-0-10) against raftka, replayed call for call.

The connector jar cannot be downloaded here, but everything it does with Kafka goes through
the Java kafka-clients library, which is installed: `KafkaTool spark-*` (java/KafkaTool.java)
makes the same client calls with the same configs as Spark's driver (an Admin: describeTopics,
listOffsets with ListOffsetsOptions(isolation.level)), its executors (a KafkaConsumer with no
group management: assign, seek, poll, position, seekToBeginning/seekToEnd; invisible offsets
and OffsetOutOfRange handled as KafkaDataConsumer does under failOnDataLoss) and its sink (a
KafkaProducer with default settings: idempotent, acks=all). These tests check what a Spark
user would see: the rows of a batch query over `[startingOffsets, endingOffsets)` are exactly
the records written, with their keys, values, headers, offsets and timestamps.
"""

from __future__ import annotations

import base64
import json
import queue
import random
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clients import create_topic, wait_until
from harness import ClusterProcess, JavaTool

# Replays of Spark's Kafka connector calls through the Java client.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

SPARK_POLL_TIMEOUT_MS = 30000


def recent_base_timestamp_ms() -> int:
    """An hour ago, to the second: old enough to look up, too young for retention."""
    return (int(time.time()) - 3600) * 1000


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


def sample_records(
    count: int, partitions: int, base_timestamp_ms: int | None = None, seed: int = 7
) -> list[SinkRecord]:
    """Keys, null keys, null and empty values, binary bytes, headers (repeated names, null
    values, none at all) and explicit timestamps that grow by 10 ms a record; record i goes
    to partition i % partitions."""
    base = recent_base_timestamp_ms() if base_timestamp_ms is None else base_timestamp_ms
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
                timestamp=base + 10 * i,
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

    # The next micro-batch of a streaming query starts where the last one ended: after
    # more writes it holds exactly the new rows.
    ended = {p: done["until"] for p, done in query.done.items()}
    more = sample_records(90, partitions, seed=8)
    more_written = spark_write(java_tool, bootstrap, topic, more, tmp_path)
    starting = "offsets:" + ",".join(f"{p}={o}" for p, o in sorted(ended.items()))
    query = spark_read(java_tool, bootstrap, topic, starting, "latest").succeeded()
    assert {p: d["from"] for p, d in query.done.items()} == ended
    assert_rows_are(query, more_written, more_written.by_partition())

    # The "assign" strategy and specific offsets: one partition, [5, 20).
    query = spark_read(
        java_tool, bootstrap, f"{topic}:1", "offsets:1=5", "offsets:1=20"
    ).succeeded()
    assert query.ranges == {1: (5, 20)}
    assert_rows_are(query, written, {1: by_partition[1][5:20]})


def test_log_append_time_topic(java_tool, bootstrap, new_topic, tmp_path):
    """On a LogAppendTime topic the rows carry the broker's append time, as the sink's
    acknowledgements reported it, whatever timestamp the writer gave."""
    topic = new_topic(partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    records = sample_records(50, 1, base_timestamp_ms=before_ms - 3600 * 1000)
    written = spark_write(java_tool, bootstrap, topic, records, tmp_path)
    after_ms = int(time.time() * 1000)
    query = spark_read(java_tool, bootstrap, topic).succeeded()
    assert len(query.rows) == len(records)
    for index, row in enumerate(query.rows):
        assert row["timestamp_type"] == "LogAppendTime", row
        assert row["timestamp"] == written.timestamps[index], (row, written.timestamps[index])
        assert before_ms - 1000 <= row["timestamp"] <= after_ms + 1000, row
        assert (row["key"], row["value"]) == (records[index].key, records[index].value)


def first_at_or_after(
    written: Written, partition: int, timestamp: int, log_start: int = 0
) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after `log_start` stamped at or after
    `timestamp`, or (-1, -1): ListOffsets by timestamp as Kafka answers it."""
    for index in written.by_partition()[partition]:
        offset = written.offsets[index][1]
        if offset >= log_start and written.timestamps[index] >= timestamp:
            return offset, written.timestamps[index]
    return -1, -1


def test_list_offsets_and_timestamp_ranges(java_tool, bootstrap, new_topic, tmp_path):
    """The driver's Admin.listOffsets: earliest, latest (the high watermark) and by timestamp
    agree under read_uncommitted and read_committed, and startingOffsetsByTimestamp /
    endingOffsetsByTimestamp / startingTimestamp select exactly the matching rows."""
    partitions = 3
    topic = new_topic(partitions=partitions)
    base = recent_base_timestamp_ms()
    records = sample_records(240, partitions, base_timestamp_ms=base)
    written = spark_write(java_tool, bootstrap, topic, records, tmp_path)
    counts = {p: len(ix) for p, ix in written.by_partition().items()}

    # Before every record, exactly on one (index 100 is in partition 1), between two records
    # of each partition, after every record.
    probes = [base - 60_000, base + 10 * 100, base + 10 * 150 + 5, base + 10 * 240 + 1]
    found = spark_offsets(java_tool, bootstrap, topic, probes)
    assert set(found) == {(i, p) for i in ("read_uncommitted", "read_committed") for p in range(3)}
    for (isolation, p), row in found.items():
        assert (row["earliest"], row["latest"]) == (0, counts[p]), (isolation, row)
        for probe in row["by_timestamp"]:
            want = first_at_or_after(written, p, probe["timestamp"])
            got = (probe["offset"], probe["record_timestamp"])
            assert got == want, f"{isolation} partition {p} timestamp {probe['timestamp']}"

    # startingOffsetsByTimestamp / endingOffsetsByTimestamp: per partition [start, end).
    start_ts = {p: base + 10 * (30 + p) for p in range(partitions)}
    end_ts = {p: base + 10 * (200 + p) + 1 for p in range(partitions)}
    query = spark_read(
        java_tool,
        bootstrap,
        topic,
        "timestamps:" + ",".join(f"{p}={t}" for p, t in start_ts.items()),
        "timestamps:" + ",".join(f"{p}={t}" for p, t in end_ts.items()),
    ).succeeded()
    want: dict[int, list[int]] = {}
    for p in range(partitions):
        start = first_at_or_after(written, p, start_ts[p])[0]
        end = first_at_or_after(written, p, end_ts[p])[0]
        assert query.ranges[p] == (start, end), (p, query.ranges[p])
        want[p] = [i for i in written.by_partition()[p] if start <= written.offsets[i][1] < end]
        assert want[p], "the probe timestamps select nothing"
    assert_rows_are(query, written, want)

    # startingTimestamp (one timestamp for every partition) after the last record: Spark
    # fails the query by default, or starts at latest with the "latest" strategy.
    late = f"timestamp:{base + 10 * 240 + 1}"
    failed = spark_read(java_tool, bootstrap, topic, late, "latest").failed
    assert failed is not None and failed["error"] == "no_offset_for_timestamp", failed
    query = spark_read(
        java_tool, bootstrap, topic, late, "latest", True, "--timestamp-strategy=latest"
    ).succeeded()
    assert query.ranges == {p: (counts[p], -1) for p in range(partitions)}
    assert {p: (d["from"], d["until"]) for p, d in query.done.items()} == {
        p: (counts[p], counts[p]) for p in range(partitions)
    }
    assert query.rows == []
    # An ending timestamp after the last record means latest.
    query = spark_read(java_tool, bootstrap, topic, "earliest", late).succeeded()
    assert query.ranges == {p: (-2, counts[p]) for p in range(partitions)}
    assert_rows_are(query, written, written.by_partition())


def test_deleted_start_of_range_fails_or_skips_per_fail_on_data_loss(
    java_tool, bootstrap, new_topic, tmp_path
):
    """DeleteRecords removes the start of a range a query planned earlier (as a streaming
    query's next batch would): with failOnDataLoss=true the query fails naming the partition
    and offsets; with false it skips to the earliest offset and reads the rest exactly."""
    partitions = 2
    topic = new_topic(partitions=partitions)
    records = sample_records(200, partitions)
    written = spark_write(java_tool, bootstrap, topic, records, tmp_path)
    by_partition = written.by_partition()
    deleted_before = 37
    [low] = java_tool.json("delete-records", bootstrap, topic, 0, deleted_before)
    assert low["low_watermark"] == deleted_before

    found = spark_offsets(java_tool, bootstrap, topic, [recent_base_timestamp_ms() - 60_000])
    for isolation in ("read_uncommitted", "read_committed"):
        assert found[(isolation, 0)]["earliest"] == deleted_before
        assert found[(isolation, 1)]["earliest"] == 0
        # A timestamp before every record finds the first record still there.
        [probe] = found[(isolation, 0)]["by_timestamp"]
        assert probe["offset"] == deleted_before, probe

    planned = "offsets:0=0,1=0"
    failed = spark_read(java_tool, bootstrap, topic, planned, "latest", True).failed
    assert failed is not None, "failOnDataLoss=true read a deleted range without failing"
    assert failed["error"] == "data_loss", failed
    assert (failed["partition"], failed["from"]) == (0, 0), failed
    assert failed["until"] == len(by_partition[0]), failed
    assert "OffsetOutOfRange" in (failed["cause"] or ""), failed

    query = spark_read(java_tool, bootstrap, topic, planned, "latest", False).succeeded()
    assert [(d["partition"], d["from"], d["to"]) for d in query.data_loss] == [
        (0, 0, deleted_before)
    ], query.data_loss
    assert query.done[0]["offset_out_of_range"] == deleted_before
    assert_rows_are(query, written, {0: by_partition[0][deleted_before:], 1: by_partition[1]})

    # "earliest" is bound on the executor: it starts after the deletion, no data loss.
    query = spark_read(java_tool, bootstrap, topic, "earliest", "latest", True).succeeded()
    assert query.done[0]["from"] == deleted_before and not query.data_loss
    assert_rows_are(query, written, {0: by_partition[0][deleted_before:], 1: by_partition[1]})

    # A range entirely deleted: skipped whole with failOnDataLoss=false.
    query = spark_read(
        java_tool, bootstrap, f"{topic}:0", "offsets:0=3", "offsets:0=20", False
    ).succeeded()
    assert query.rows == []
    assert [(d["from"], d["to"]) for d in query.data_loss] == [(3, 20)], query.data_loss


def test_retention_deleted_start_of_range(java_tool, broker_factory, new_topic, tmp_path):
    """Time retention deletes the segments holding the start of a planned range: the
    earliest offset moves past them, and the executor treats the range as Spark does with
    failOnDataLoss true (the query fails) and false (it reads from the earliest offset)."""
    broker = broker_factory({"log.retention.check.interval.ms": "200"})
    topic = new_topic(
        partitions=1,
        bootstrap=broker.bootstrap,
        config={"segment.bytes": "2048", "retention.ms": str(3600 * 1000)},
    )
    now_ms = int(time.time() * 1000)

    def batch(name: str, count: int, timestamp: int) -> list[SinkRecord]:
        return [
            SinkRecord(
                key=f"{name}-{i}".encode(),
                value=b"%s-%04d-" % (name.encode(), i) + bytes(40),
                partition=0,
                timestamp=timestamp + i,
            )
            for i in range(count)
        ]

    # Two writes stamped two hours ago fill segments of their own; the recent write lands
    # in the last, active segment, which retention never deletes.
    old_a = batch("old-a", 80, now_ms - 2 * 3600 * 1000)
    old_b = batch("old-b", 80, now_ms - 2 * 3600 * 1000 + 1000)
    recent = batch("recent", 40, now_ms - 60 * 1000)
    written = [
        spark_write(java_tool, broker.bootstrap, topic, part, tmp_path)
        for part in (old_a, old_b, recent)
    ]
    rows = [
        (written_part.offsets[i][1], written_part.expected_row(i))
        for written_part in written
        for i in range(len(written_part.records))
    ]
    assert [offset for offset, _ in rows] == list(range(200))

    def earliest() -> int | None:
        found = spark_offsets(java_tool, broker.bootstrap, topic, [now_ms - 3 * 3600 * 1000])
        first = found[("read_uncommitted", 0)]
        return first["earliest"] if first["earliest"] > 0 else None

    start = wait_until(earliest, 30, "retention to delete the old segments", 0.5)
    print(f"\nretention moved the earliest offset to {start}")
    assert 0 < start <= 160, start
    found = spark_offsets(java_tool, broker.bootstrap, topic, [now_ms - 3 * 3600 * 1000])
    for isolation in ("read_uncommitted", "read_committed"):
        row = found[(isolation, 0)]
        assert (row["earliest"], row["latest"]) == (start, 200), row
        assert row["by_timestamp"][0]["offset"] == start, row

    failed = spark_read(java_tool, broker.bootstrap, topic, "offsets:0=0", "latest", True).failed
    assert failed is not None and failed["error"] == "data_loss", failed
    assert (failed["partition"], failed["from"], failed["until"]) == (0, 0, 200), failed

    query = spark_read(java_tool, broker.bootstrap, topic, "offsets:0=0", "latest", False)
    query.succeeded()
    assert [(d["from"], d["to"]) for d in query.data_loss] == [(0, start)], query.data_loss
    assert query.rows == [row for offset, row in rows if offset >= start]


# -- three brokers ----------------------------------------------------------------------------


class ToolProcess:
    """A KafkaTool command running in the background: its JSON lines arrive on a queue while
    the test kills brokers; a line on stdin resumes a `--pause-after` pause."""

    def __init__(self, java_tool: JavaTool, *args: object) -> None:
        argv = [java_tool.java, "-XX:TieredStopAtLevel=1", "-cp", java_tool.classpath]
        argv += ["KafkaTool", *map(str, args)]
        self.args = args
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by __exit__
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        """Until a line satisfies `predicate` (every line is kept in `seen`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"KafkaTool {self.args[0]}: no such line in {timeout} s "
                    f"({len(self.seen)} lines)\n{self.stderr_tail()}"
                ) from None
            if line is None:
                raise AssertionError(
                    f"KafkaTool {self.args[0]} exited with {self.proc.wait()}\n{self.stderr_tail()}"
                )
            self.seen.append(line)
            if predicate(line):
                return

    def resume(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float) -> list[dict[str, Any]]:
        """Every line, once the process exited with 0."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"KafkaTool {self.args[0]} still running after {timeout} s\n{self.stderr_tail()}"
            ) from None
        self.reader.join(10)
        while (line := self.lines.get_nowait() if not self.lines.empty() else None) is not None:
            self.seen.append(line)
        assert code == 0, f"KafkaTool {self.args[0]} exited with {code}\n{self.stderr_tail()}"
        return self.seen

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return "--- stderr ---\n" + self.stderr.read()[-4000:]

    def __enter__(self) -> ToolProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def describe(java_tool: JavaTool, bootstrap: str, topic: str) -> dict[int, dict[str, Any]]:
    """Admin.describeTopics through the tool: partition -> {leader, replicas, isr}."""
    rows = java_tool.json("describe-topic", bootstrap, topic)
    return {r["partition"]: r for r in rows}


def wait_leader(
    java_tool: JavaTool,
    nodes: list[Any],
    topic: str,
    partition: int = 0,
    not_on: int | None = None,
    isr: int = 1,
    timeout: float = 30,
) -> int:
    """The partition's leader as the live `nodes` report it, once it is not `not_on` and
    the ISR has at least `isr` brokers."""
    bootstrap = ",".join(n.bootstrap for n in nodes)

    def settled() -> int | None:
        state = describe(java_tool, bootstrap, topic)[partition]
        ok = state["leader"] not in (-1, not_on) and len(state["isr"]) >= isr
        return state["leader"] if ok else None

    return wait_until(settled, timeout, f"a leader for {topic}-{partition} (not {not_on})", 0.5)


def test_three_nodes_sink_and_batch_read_rf3(java_tool, cluster_factory, tmp_path):
    """The same round trip on a three-broker cluster, replication factor 3."""
    cluster: ClusterProcess = cluster_factory()
    topic = f"spark-rf3-{uuid.uuid4().hex[:8]}"
    partitions = 3
    create_topic(cluster.bootstrap, topic, partitions=partitions, replication_factor=3)
    records = sample_records(300, partitions)
    written = spark_write(java_tool, cluster.bootstrap, topic, records, tmp_path)
    counts = {p: len(ix) for p, ix in written.by_partition().items()}
    found = spark_offsets(java_tool, cluster.bootstrap, topic, [records[0].timestamp or 0])
    for (isolation, p), row in found.items():
        assert (row["earliest"], row["latest"]) == (0, counts[p]), (isolation, row)
        [probe] = row["by_timestamp"]
        assert (probe["offset"], probe["record_timestamp"]) == first_at_or_after(
            written, p, probe["timestamp"]
        )
    for isolation in ("read_uncommitted", "read_committed"):
        query = spark_read(
            java_tool,
            cluster.bootstrap,
            topic,
            "earliest",
            "latest",
            True,
            f"isolation.level={isolation}",
        ).succeeded()
        assert_rows_are(query, written, written.by_partition())
        assert not query.skipped and not query.data_loss


def write_through_failover_with_gap(
    java_tool: JavaTool,
    cluster: ClusterProcess,
    topic: str,
    records: list[SinkRecord],
    tmp_path: Path,
) -> tuple[Written, int, int]:
    """The sink writes `records` at 500 a second to a one-partition RF 3 topic while its
    leader is replaced by one that must append a control batch.

    A new leader appends that batch when it cannot tell its log is committed to its end.
    Both followers are stopped (SIGSTOP) for a moment in the middle of the write: the
    leader keeps appending and sending what it can no longer commit, and the followers find
    those entries in their sockets once resumed, after the leader itself was stopped. One
    of them is elected with uncommitted entries, appends the control batch, and the sink's
    producer carries on there once the old leader is SIGKILLed. The old leader is restarted
    and back in the ISR on return. Returns (what was written, old leader, new leader)."""
    leader = wait_leader(java_tool, cluster.nodes, topic, isr=3)
    followers = [n for n in cluster.nodes if n.node_id != leader]
    path = records_file(tmp_path, records)
    with ToolProcess(java_tool, "spark-write", cluster.bootstrap, topic, path, 500) as writer:
        acks = 0

        def counted(line: dict[str, Any]) -> bool:
            nonlocal acks
            acks += "ack" in line
            return acks >= len(records) // 3

        writer.wait_for(counted, 60)
        for node in followers:
            node.pause()
        time.sleep(0.3)  # well under the leader's check-quorum timeout
        cluster.node(leader).pause()
        for node in followers:
            node.resume()
        successor = wait_leader(java_tool, followers, topic, not_on=leader, timeout=30)
        cluster.node(leader).kill()
        written = parse_write(writer.finish(120), records)
    cluster.node(leader).start()
    wait_leader(java_tool, cluster.nodes, topic, isr=3, timeout=60)
    return written, leader, successor


@pytest.mark.timeout(240)
def test_three_nodes_gap_and_leader_killed_mid_read(java_tool, cluster_factory, tmp_path):
    """A leader change leaves a gap in the offsets (the new leader's control batch), and a
    leader SIGKILLed in the middle of the executor's read does not change the result: the
    query returns exactly the written rows of the range it planned, skipping the gap as
    invisible offsets, never as data loss."""
    cluster: ClusterProcess = cluster_factory()
    topic = f"spark-kill-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    records = [
        SinkRecord(
            key=f"k{i}".encode(),
            value=b"v%05d" % i,
            headers=(("i", str(i).encode()),),
            partition=0,
        )
        for i in range(3000)
    ]
    written, old, new = write_through_failover_with_gap(
        java_tool, cluster, topic, records, tmp_path
    )
    offsets = [written.offsets[i][1] for i in range(len(records))]
    assert offsets == sorted(set(offsets)), "the idempotent sink wrote twice or out of order"
    found = spark_offsets(java_tool, cluster.bootstrap, topic, [])
    latest = found[("read_uncommitted", 0)]["latest"]
    assert found[("read_committed", 0)]["latest"] == latest
    assert offsets[-1] < latest
    gap = sorted(set(range(latest)) - set(offsets))
    print(f"\nsink: leader {old} replaced by {new}; of {latest} offsets, {gap} hold no record")
    assert gap, "the new leader appended no control batch"

    # The executor reads [earliest, latest), a few KB a fetch; a third of the way through
    # the current leader dies.
    leader = wait_leader(java_tool, cluster.nodes, topic, isr=3)
    options = [f"--pause-after={latest // 3}", "max.partition.fetch.bytes=4096"]
    args = replay_args(topic, "earliest", "latest", True, options)
    with ToolProcess(java_tool, "spark-replay", cluster.bootstrap, *args) as reader:
        reader.wait_for(lambda line: "paused" in line, 60)
        cluster.node(leader).kill()
        killed_at = time.monotonic()
        reader.resume()
        query = Query()
        for line in reader.finish(120):
            query.add(line)
    took = time.monotonic() - killed_at
    new_leader = wait_leader(java_tool, cluster.nodes, topic, not_on=leader)
    print(
        f"read: leader {leader} killed after {latest // 3} rows; {new_leader} took over; "
        f"the read finished {took:.1f} s after the kill"
    )

    query.succeeded()
    assert (query.done[0]["from"], query.done[0]["until"]) == (0, latest), query.done
    assert query.done[0]["data_loss"] == 0 and not query.data_loss, query.data_loss
    assert_rows_are(query, written, {0: list(range(len(records)))})
    skipped = sorted({o for s in query.skipped for o in range(s["from"], s["to"])})
    assert skipped == gap, f"skipped as invisible {skipped}, offsets without records {gap}"
    cluster.node(leader).start()

    # read_committed reads the same rows; timestamps around the gap find the records.
    query = spark_read(
        java_tool,
        cluster.bootstrap,
        topic,
        "earliest",
        "latest",
        True,
        "isolation.level=read_committed",
    ).succeeded()
    assert_rows_are(query, written, {0: list(range(len(records)))})
    around = [
        written.timestamps[i] for i, o in enumerate(offsets) if o in (gap[0] - 1, gap[-1] + 1)
    ]
    found = spark_offsets(java_tool, cluster.bootstrap, topic, around)
    for isolation in ("read_uncommitted", "read_committed"):
        for probe in found[(isolation, 0)]["by_timestamp"]:
            want = first_at_or_after(written, 0, probe["timestamp"])
            assert (probe["offset"], probe["record_timestamp"]) == want, (isolation, probe)
