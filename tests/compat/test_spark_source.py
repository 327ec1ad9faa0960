"""`format("raftka")`, the PySpark data source in `pipeline/`, against real brokers.

Batch reads (codecs, keys, null values, headers, offset gaps after a leader change, ranges,
timestamps), streaming reads with Trigger.AvailableNow, restarts from a checkpoint, batch and
streaming writes, lost data, and the errors bad options give. One SparkSession serves every
test (`spark_fixtures.spark`).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clients import consume, create_topic, make_consumer, produce, wait_until, watermarks
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from harness import free_port

from raftka.pipeline.options import (
    OptionError,
    offsets_from_json,
    offsets_to_json,
    parse_assign,
    parse_source_options,
    rate_limit,
)

# A Spark session and streaming queries: minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

pytest_plugins = ["spark_fixtures"]  # the shared SparkSession fixture `spark`

CODECS = ("gzip", "snappy", "lz4", "zstd")
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def read_options(bootstrap: str, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **options}


def batch_read(spark: Any, bootstrap: str, **options: str) -> list[Any]:
    """Rows of a batch read, sorted by (topic, partition, offset)."""
    rows = spark.read.format("raftka").options(**read_options(bootstrap, **options)).load()
    return sorted(rows.collect(), key=lambda r: (r.topic, r.partition, r.offset))


def as_utc(moment: datetime.datetime) -> datetime.datetime:
    """Spark hands back naive datetimes in the session time zone (UTC here)."""
    return moment.replace(tzinfo=datetime.UTC) if moment.tzinfo is None else moment


def spark_error(action: Callable[[], Any]) -> str:
    """The text of the exception `action` raises (Spark wraps Python errors in its own)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's wrappers vary
        action()
    return str(caught.value)


# -- options, no Spark ---------------------------------------------------------------------


def test_offsets_json_is_sparks_shape() -> None:
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    as_json = offsets_to_json(offsets)
    assert json.dumps(as_json) == '{"a": {"2": 5, "10": 3}, "b": {"1": 7}}'
    assert offsets_from_json(json.loads(json.dumps(as_json))) == offsets
    assert parse_assign('{"t":[1,0,1]}') == {"t": [0, 1]}


def test_rate_limit_shares_in_proportion_and_starves_none() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 1000, ("t", 1): 101, ("t", 2): 5}
    limited = rate_limit(start, latest, 100)
    assert limited[("t", 0)] == 99  # 100 * 1000/1001, rounded down
    assert limited[("t", 1)] == 101  # less than one offset's share still gets one
    assert limited[("t", 2)] == 5
    assert rate_limit(start, latest, 5000) == latest


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "'kafka.bootstrap.servers' must be specified"),
        ({"kafka.bootstrap.servers": "h:1"}, False, "One of the following options"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t":[0]}'},
            False,
            "Only one of",
        ),
        ({"kafka.bootstrap.servers": "h:1", "assign": "t"}, False, "No topicpartitions"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "latest"},
            False,
            "can't be latest for batch",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "endingOffsets": "latest"},
            True,
            "ending offset not valid in streaming",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{bad"},
            True,
            "expected e.g.",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            True,
            "'maxOffsetsPerTrigger' must be a positive integer",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.auto.offset.reset": "x"},
            True,
            "'auto.offset.reset' is not supported",
        ),
    ],
)
def test_bad_options_are_named(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        parse_source_options(options, streaming=streaming)


# -- batch reads ---------------------------------------------------------------------------


def wait_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 30) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def ready() -> bool:
        found = admin.list_topics(topic=topic, timeout=5).topics[topic]
        return len(found.partitions) == partitions and all(
            p.leader >= 0 for p in found.partitions.values()
        )

    wait_until(ready, timeout, f"a leader for every partition of {topic}")


@pytest.mark.timeout(240)
def test_batch_read_codecs_keys_nulls_headers_and_offset_gaps(cluster_factory, spark) -> None:
    """Every codec, null keys and values, headers; then every broker is killed and started
    again, so each partition's new leader appends a control batch (an offset with no
    record). Partitions 0 and 1 get records after that gap, partition 2 ends in it."""
    cluster = cluster_factory(3)
    topic = f"spark-gaps-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    expected: dict[tuple[int, int], tuple[Any, ...]] = {}

    def send(records: list[dict[str, Any]], **conf: Any) -> None:
        result = produce(cluster.bootstrap, topic, records, acks="all", **conf)
        assert not result.errors, result.errors
        for report in result.reports:
            record = records[report.index]
            headers = record.get("headers")
            expected[(report.partition, report.offset)] = (
                record.get("key"),
                record.get("value"),
                [tuple(h) for h in headers] if headers else None,
            )

    for codec in CODECS:
        records = []
        for i in range(24):
            records.append(
                {
                    "partition": i % 3,
                    "key": None if i % 4 == 0 else f"{codec}-key-{i}".encode(),
                    "value": None if i % 5 == 0 else f"{codec}-value-{i}".encode() * (i + 1),
                    "headers": [("codec", codec.encode()), ("empty", None)] if i % 2 else None,
                }
            )
        send(records, compression_type=codec, linger_ms=50)

    cluster.kill()
    cluster.start()
    wait_leaders(cluster.bootstrap, topic, 3)
    send([{"partition": p, "key": b"after", "value": f"after-{p}".encode()} for p in (0, 1, 1)])

    highs = {p: watermarks(cluster.bootstrap, topic, p)[1] for p in range(3)}
    for p in range(3):
        records_in_p = sum(1 for (q, _) in expected if q == p)
        assert highs[p] == records_in_p + 1, (
            f"partition {p}: high watermark {highs[p]} for {records_in_p} records; the "
            f"restart was expected to leave one control batch (see docs/design/replication.md)"
        )
    started = time.monotonic()
    rows = batch_read(spark, cluster.bootstrap, subscribe=topic, includeHeaders="true")
    print(f"batch read of {len(rows)} records took {time.monotonic() - started:.1f} s")
    got = {
        (r.partition, r.offset): (
            r.key,
            r.value,
            [(h.key, h.value) for h in r.headers] if r.headers is not None else None,
        )
        for r in rows
    }
    assert len(rows) == len(expected)
    assert got == expected
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    now = datetime.datetime.now(datetime.UTC)
    assert all(now - as_utc(r.timestamp) < datetime.timedelta(minutes=5) for r in rows)

    # A range that ends in the gap and one that starts right after it.
    gap = {p: max(o for (q, o) in expected if q == p and o < highs[p] - 1) + 1 for p in (2,)}
    ranged = batch_read(
        spark,
        cluster.bootstrap,
        assign=json.dumps({topic: [2]}),
        startingOffsets=json.dumps({topic: {"2": gap[2] - 3}}),
        endingOffsets=json.dumps({topic: {"2": highs[2]}}),
    )
    assert [r.offset for r in ranged] == [gap[2] - 3, gap[2] - 2, gap[2] - 1]


def test_batch_read_ranges_timestamps_and_patterns(bootstrap, new_topic, spark) -> None:
    topic = new_topic(partitions=2)
    base_ms = int(time.time() * 1000) - 60_000
    records = [
        {"partition": i % 2, "value": f"v{i}".encode(), "timestamp": base_ms + 1000 * i}
        for i in range(20)
    ]
    result = produce(bootstrap, topic, records)
    assert not result.errors

    every = batch_read(spark, bootstrap, subscribe=topic)
    assert [r.value for r in every if r.partition == 0] == [
        f"v{i}".encode() for i in range(0, 20, 2)
    ]
    assert every[0].timestamp == datetime.datetime.fromtimestamp(
        base_ms / 1000, datetime.UTC
    ).replace(tzinfo=None)

    # endingOffsets JSON with -1 (latest); startingOffsets JSON with -2 (earliest).
    ranged = batch_read(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 5, "1": -1}}),
    )
    assert [(r.partition, r.offset) for r in ranged if r.partition == 0] == [(0, 3), (0, 4)]
    assert len([r for r in ranged if r.partition == 1]) == 10

    # Records at or after a timestamp: i >= 14 in partition 0 (even i), 1 (odd i).
    by_time = batch_read(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": base_ms + 14_000, "1": base_ms}}),
    )
    assert [r.value for r in by_time if r.partition == 0] == [b"v14", b"v16", b"v18"]
    assert len([r for r in by_time if r.partition == 1]) == 10
    single = batch_read(spark, bootstrap, subscribe=topic, startingTimestamp=str(base_ms + 17_000))
    assert sorted(r.value for r in single) == [b"v17", b"v18", b"v19"]

    pattern = batch_read(spark, bootstrap, subscribePattern=topic[:-10] + "[0-9a-f]{10}")
    assert {(r.topic, r.partition, r.offset) for r in pattern} >= {
        (r.topic, r.partition, r.offset) for r in every
    }
    assert batch_read(spark, bootstrap, subscribePattern="no-such-topic-[0-9]+") == []


# -- streaming reads -----------------------------------------------------------------------


class BatchCollector:
    """A foreachBatch sink that keeps each micro-batch's (partition, offset, value)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int, bytes]]] = {}

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches[batch_id] = sorted(
            (r.partition, r.offset, r.value)
            for r in frame.select("partition", "offset", "value").collect()
        )

    def records(self) -> list[tuple[int, int, bytes]]:
        return sorted(r for rows in self.batches.values() for r in rows)


def run_available_now(
    spark: Any, bootstrap: str, checkpoint: Path, sink: BatchCollector, **options: str
) -> Any:
    query = (
        spark.readStream.format("raftka")
        .options(**read_options(bootstrap, **options))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow query did not finish within 120 s"
    return query


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """Remove a batch's commit (and Hadoop's checksum of it) from a checkpoint, as if the
    query had died after running the batch but before recording it as done."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def checkpointed_offsets(checkpoint: Path) -> dict[str, Any]:
    """The source offsets of the newest batch in the checkpoint's offset log."""
    newest = max(
        (checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    return json.loads(newest.read_text().splitlines()[-1])


@pytest.mark.timeout(240)
def test_stream_available_now_twice_reads_exactly_the_new_records(
    bootstrap, new_topic, spark, tmp_path
) -> None:
    topic = new_topic(partitions=3)
    checkpoint = tmp_path / "checkpoint"
    first = [{"value": f"a{i}".encode(), "partition": i % 3} for i in range(40)]
    assert not produce(bootstrap, topic, first).errors

    sink = BatchCollector()
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    run_available_now(spark, bootstrap, checkpoint, sink, **options)
    assert sorted(v for _, _, v in sink.records()) == sorted(r["value"] for r in first)
    assert checkpointed_offsets(checkpoint) == {topic: {"0": 14, "1": 13, "2": 13}}

    second = [{"value": f"b{i}".encode(), "partition": i % 3} for i in range(25)]
    assert not produce(bootstrap, topic, second).errors
    seen = len(sink.batches)
    run_available_now(spark, bootstrap, checkpoint, sink, **options)
    new_batches = [b for i, b in sink.batches.items() if i >= seen]
    assert sorted(v for rows in new_batches for _, _, v in rows) == sorted(
        r["value"] for r in second
    )
    assert checkpointed_offsets(checkpoint) == {topic: {"0": 23, "1": 21, "2": 21}}

    # A batch whose commit never reached the checkpoint (a crash) is replayed from the offset
    # log: the same range, so exactly the same records.
    last = max(sink.batches)
    replayed_rows = sink.batches.pop(last)
    forget_commit(checkpoint, last)
    run_available_now(spark, bootstrap, checkpoint, sink, **options)
    assert sink.batches[last] == replayed_rows


@pytest.mark.timeout(240)
def test_restart_mid_stream_loses_and_duplicates_nothing_in_a_file_sink(
    bootstrap, new_topic, spark, tmp_path
) -> None:
    topic = new_topic(partitions=2)
    values = [f"r{i:04d}" for i in range(300)]
    assert not produce(bootstrap, topic, [{"value": v.encode()} for v in values]).errors
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(trigger: dict[str, Any]) -> Any:
        return (
            spark.readStream.format("raftka")
            .options(
                **read_options(
                    bootstrap,
                    subscribe=topic,
                    startingOffsets="earliest",
                    maxOffsetsPerTrigger="40",
                )
            )
            .load()
            .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .writeStream.format("json")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "200 milliseconds"})
    wait_until(
        lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 80,
        90,
        "two micro-batches",
    )
    query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 40, f"maxOffsetsPerTrigger=40 not honoured: batch sizes {sizes}"
    # As if the process died after the sink wrote its last batch but before that batch's
    # commit: the restarted query runs the batch again and the file sink must skip it.
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    forget_commit(checkpoint, commits[-1])

    query = start({"availableNow": True})
    assert query.awaitTermination(120)
    written = [row.value for row in spark.read.json(str(output)).collect()]
    assert len(written) == len(values), f"{len(written)} rows written for {len(values)} records"
    assert sorted(written) == values


# -- writes --------------------------------------------------------------------------------


def test_batch_write_round_trip(bootstrap, new_topic, spark) -> None:
    topic, other = new_topic(partitions=3), new_topic(partitions=1)
    rows = [
        (
            f"k{i}" if i % 3 else None,
            f"value-{i}".encode() if i % 7 else None,
            i % 3,
            [("n", str(i).encode()), ("null", None)] if i % 2 else None,
        )
        for i in range(30)
    ]
    frame = spark.createDataFrame(
        rows,
        "key STRING, value BINARY, partition INT, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>",
    )
    frame.write.format("raftka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).mode("append").save()
    got = consume(bootstrap, topic, partitions=3)
    for partition in range(3):
        # Spark's tasks write concurrently: order within a partition is not the DataFrame's.
        want = [(k.encode() if k else None, v, h) for k, v, p, h in rows if p == partition]
        records = [(m.key(), m.value(), m.headers()) for m in got[partition]]
        assert sorted(records, key=repr) == sorted(want, key=repr)

    # The topic column routes each row unless the option overrides it.
    routed = spark.createDataFrame(
        [(other, "to-other"), (topic, "to-topic")], "topic STRING, value STRING"
    )
    routed.write.format("raftka").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    assert [m.value() for m in consume(bootstrap, other, partitions=1)[0]] == [b"to-other"]
    routed.write.format("raftka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", other
    ).mode("append").save()
    assert sorted(m.value() for m in consume(bootstrap, other, partitions=1)[0]) == [
        b"to-other",
        b"to-other",
        b"to-topic",
    ]


@pytest.mark.timeout(240)
def test_stream_write_round_trip(bootstrap, new_topic, spark, tmp_path) -> None:
    source, target = new_topic(partitions=3), new_topic(partitions=2)
    records = [{"key": f"u{i % 5}".encode(), "value": f"click-{i}".encode()} for i in range(60)]
    assert not produce(bootstrap, source, records).errors
    query = (
        spark.readStream.format("raftka")
        .options(**read_options(bootstrap, subscribe=source, startingOffsets="earliest"))
        .load()
        .selectExpr(
            "key",
            "upper(CAST(value AS STRING)) AS value",
            "array(named_struct('key', 'from', 'value', CAST(topic AS BINARY))) AS headers",
        )
        .writeStream.format("raftka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    got = consume(bootstrap, target, partitions=2)
    messages = got[0] + got[1]
    assert sorted(m.value() for m in messages) == sorted(r["value"].upper() for r in records)
    assert {m.headers()[0] for m in messages} == {("from", source.encode())}
    # Same key, same partition: the default partitioner keeps a user's clicks in order.
    by_key: dict[bytes, set[int]] = {}
    for m in messages:
        by_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(parts) == 1 for parts in by_key.values()), by_key


# -- lost data and errors ------------------------------------------------------------------


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(timeout=30)
    assert watermarks(bootstrap, topic, partition)[0] == offset


@pytest.mark.timeout(240)
def test_lost_range_fails_or_skips_by_fail_on_data_loss(
    bootstrap, new_topic, spark, tmp_path
) -> None:
    topic = new_topic(partitions=1)
    assert not produce(bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(30)]).errors

    # A stream reads everything; its last batch is left uncommitted (a crash) ...
    sink, checkpoint = BatchCollector(), tmp_path / "checkpoint"
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"}
    run_available_now(spark, bootstrap, checkpoint, sink, **options)
    last = max(sink.batches)
    assert sink.batches[last][0][1] == 20, sink.batches
    forget_commit(checkpoint, last)
    # ... and retention deletes the start of that batch's range before the restart.
    delete_records_before(bootstrap, topic, 0, 25)

    message = spark_error(lambda: run_available_now(spark, bootstrap, checkpoint, sink, **options))
    assert f"offsets 20 to 24 of {topic}-0" in message, message
    assert "failOnDataLoss" in message

    sink.batches.clear()
    run_available_now(spark, bootstrap, checkpoint, sink, **options, failOnDataLoss="false")
    assert [offset for _, offset, _ in sink.batches[last]] == [25, 26, 27, 28, 29]

    # Batch reads: a starting offset below the log start.
    start = json.dumps({topic: {"0": 10}})
    message = spark_error(
        lambda: batch_read(spark, bootstrap, subscribe=topic, startingOffsets=start)
    )
    assert f"offsets 10 to 24 of {topic}-0" in message, message
    rows = batch_read(
        spark, bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert [r.offset for r in rows] == list(range(25, 30))


def test_unknown_topic_unreachable_broker_and_bad_options_are_clear(
    bootstrap, new_topic, spark
) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    message = spark_error(lambda: batch_read(spark, bootstrap, subscribe=missing))
    assert f"unknown topic(s) {missing} on {bootstrap}" in message, message
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert missing not in admin.list_topics(timeout=10).topics, "the read created the topic"

    topic = new_topic(partitions=2)
    message = spark_error(lambda: batch_read(spark, bootstrap, assign=json.dumps({topic: [0, 5]})))
    assert f"topic {topic} has no partition(s) [5]" in message, message

    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    message = spark_error(
        lambda: batch_read(spark, dead, subscribe=topic, **{"fetchOffset.timeoutMs": "3000"})
    )
    elapsed = time.monotonic() - started
    assert f"no answer from the broker at {dead}" in message, message
    assert elapsed < 60, f"an unreachable broker took {elapsed:.0f} s to report"

    message = spark_error(
        lambda: batch_read(spark, bootstrap, subscribe=topic, startingOffsets="latest")
    )
    assert "starting offset can't be latest for batch queries" in message, message
    message = spark_error(
        lambda: (
            spark.readStream.format("raftka")
            .options(**read_options(bootstrap, subscribe=topic, endingOffsets="latest"))
            .load()
            .writeStream.format("console")
            .start()
            .awaitTermination(60)
        )
    )
    assert "ending offset not valid in streaming queries" in message, message
    message = spark_error(
        lambda: (
            spark.read.format("raftka")
            .schema("value STRING")
            .options(**read_options(bootstrap, subscribe=topic))
            .load()
            .collect()
        )
    )
    assert "fixed schema" in message, message

    writer = spark.createDataFrame([("x",)], "payload STRING").write.format("raftka")
    message = spark_error(
        lambda: (
            writer.option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    )
    assert "Required attribute 'value' not found" in message, message
    no_topic = spark.createDataFrame([("x",)], "value STRING").write.format("raftka")
    message = spark_error(
        lambda: no_topic.option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    )
    assert "topic option required" in message, message


def test_stream_offsets_consumer_sees_no_group_commits(
    bootstrap, new_topic, spark, tmp_path
) -> None:
    """The source never joins a group or commits offsets: the checkpoint is its only state."""
    topic = new_topic(partitions=1)
    assert not produce(bootstrap, topic, [{"value": b"x"}]).errors
    run_available_now(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        BatchCollector(),
        subscribe=topic,
        startingOffsets="earliest",
        **{"kafka.group.id": "spark-raftka-group"},
    )
    consumer = make_consumer(bootstrap, group_id="spark-raftka-group")
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert committed.offset < 0, f"the source committed offset {committed.offset}"


USER_SESSION = """
import sys, tempfile
from pyspark.sql import SparkSession
from raftka.pipeline.session import package_zip
from raftka.pipeline.source import RaftkaDataSource

bootstrap, topic, bare_python = sys.argv[1:4]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
spark.dataSource.register(RaftkaDataSource)

def read():
    return (spark.read.format("raftka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load().selectExpr("CAST(value AS STRING) AS v").collect())

print("read:", ",".join(sorted(row.v for row in read())))
# Workers on a Python without raftka's dependencies (the source itself shipped as a zip).
spark.sparkContext.pythonExec = bare_python
spark.sparkContext.addPyFile(package_zip(tempfile.mkdtemp()))
spark.dataSource.register(RaftkaDataSource)
try:
    read()
except Exception as exc:
    print("error:", next(line for line in str(exc).splitlines() if "No module named" in line))
spark.stop()
"""


@pytest.mark.timeout(300)
def test_a_users_own_session_from_the_venv_python_without_activating_it(
    broker_factory, tmp_path
) -> None:
    """`.venv/bin/python app.py` with the virtualenv not activated: Spark's Python workers
    would start `python3` from PATH, which lacks confluent_kafka; registering the source
    points them at the registering interpreter, and a worker Python that lacks it anyway
    fails naming the setting to change."""
    bootstrap = broker_factory().bootstrap
    create_topic(bootstrap, "user-session")
    produce(bootstrap, "user-session", [{"value": f"v{i}".encode()} for i in range(3)])
    # PATH's python3: the interpreter the virtualenv was made from, without its packages.
    bare_python = str(Path(sys.base_prefix) / "bin" / "python3")
    assert subprocess.run([bare_python, "-c", "import confluent_kafka"], check=False).returncode, (
        f"{bare_python} imports confluent_kafka, so it cannot stand for a bare python3"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(bare_python)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    (tmp_path / "app.py").write_text(USER_SESSION)
    result = subprocess.run(
        [sys.executable, "app.py", bootstrap, "user-session", bare_python],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "read: v0,v1,v2" in lines, result.stdout + result.stderr[-3000:]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stdout + result.stderr[-3000:]
    assert f"No module named 'confluent_kafka' in {bare_python}" in errors[0], errors[0]
    assert "set spark.pyspark.python (or PYSPARK_PYTHON)" in errors[0], errors[0]
