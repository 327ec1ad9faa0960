"""`format("raftka")`: a PySpark data source reading and writing topics over the Kafka
protocol with confluent-kafka, with the options, schema and checkpointed offsets of Spark's
own Kafka source, so no JVM connector jar is needed.

Register it once per session with `spark.dataSource.register(RaftkaDataSource)`.

Where each part runs: `DataSource.reader()`/`streamReader()` and the readers' planning
methods run in Python workers on the driver; `read()` and the writers' `write()` run in
executor tasks. Readers and writers are pickled between them, so none keeps a client on
itself past the call that made it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from raftka.pipeline.errors import SourceError, report_data_loss
from raftka.pipeline.offset_reader import OffsetReader
from raftka.pipeline.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
    rate_limit,
)
from raftka.pipeline.range_reader import KafkaRow, OffsetRange, read_range
from raftka.pipeline.sink import SinkColumns, WrittenRecords, check_sink_schema, write_rows

if TYPE_CHECKING:
    from pyspark.sql import Row

LOG = logging.getLogger("pipeline.source")

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, `headers` last when asked for."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class RangePartition(InputPartition):
    """One Spark task: one topic partition's [start, end)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[KafkaRow]:
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's stand-in partition for a read with no ranges
    return read_range(
        options.consumer_config(),
        partition.offset_range,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_s=options.poll_timeout_ms / 1000,
    )


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = kafka_schema(options.include_headers)
    if schema != expected:
        raise OptionError(
            "the raftka source has a fixed schema and cannot be set with a custom one: "
            f"expected {expected.simpleString()}, got {schema.simpleString()}"
        )


def _ranges(
    start: dict[TopicPartition, int], end: dict[TopicPartition, int]
) -> list[RangePartition]:
    return [
        RangePartition(OffsetRange(topic, partition, start[(topic, partition)], stop))
        for (topic, partition), stop in sorted(end.items())
        if stop > start[(topic, partition)]
    ]


# -- batch -----------------------------------------------------------------------------------


class RaftkaBatchReader(DataSourceReader):
    """`spark.read.format("raftka")`: [startingOffsets, endingOffsets) of every partition,
    resolved once when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        offset_reader = OffsetReader(self.options)
        try:
            tps = offset_reader.topic_partitions()
            start = offset_reader.resolve(self.options.starting, tps, "startingOffsets")
            end = offset_reader.resolve(self.options.ending, tps, "endingOffsets")
            earliest = offset_reader.earliest(tps)
        finally:
            offset_reader.close()
        for tp in tps:
            if start[tp] > end[tp]:
                raise SourceError(
                    f"{tp[0]}-{tp[1]}: start offset {start[tp]} is after end offset {end[tp]}"
                )
            if start[tp] < earliest[tp]:
                report_data_loss(
                    f"offsets {start[tp]} to {min(earliest[tp], end[tp]) - 1} of "
                    f"{tp[0]}-{tp[1]} are gone: the log now starts at {earliest[tp]}",
                    self.options.fail_on_data_loss,
                    LOG,
                )
                start[tp] = min(earliest[tp], end[tp])
        return _ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[KafkaRow]:
        return _read_partition(self.options, partition)


# -- streaming -------------------------------------------------------------------------------


class RaftkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("raftka")`: micro-batches of offset ranges.

    Offsets are checkpointed as Spark's Kafka source writes them, `{"topic": {"0": 42}}`
    (the next offset to read per partition). A batch's end is the high watermark, capped by
    `maxOffsetsPerTrigger` and, under `Trigger.AvailableNow`, by the high watermarks when the
    query started. Partitions that appear later are read from their log start. Nothing is
    committed to the broker: the checkpoint is the only record of progress.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._offset_reader: OffsetReader | None = None
        self._available_now_end: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict[str, object]:
        # Executors get the options only; the driver's client stays on the driver.
        return {"options": self.options, "_offset_reader": None, "_available_now_end": None}

    def _reader(self) -> OffsetReader:
        if self._offset_reader is None:
            self._offset_reader = OffsetReader(self.options)
        return self._offset_reader

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - PySpark's name
        reader = self._reader()
        tps = reader.topic_partitions()
        return offsets_to_json(reader.resolve(self.options.starting, tps, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        reader = self._reader()
        self._available_now_end = reader.latest(reader.topic_partitions())

    def latestOffset(  # noqa: N802 - PySpark's name
        self, start: dict[str, dict[str, int]] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, dict[str, int]]:
        reader = self._reader()
        if self._available_now_end is not None:
            latest = dict(self._available_now_end)
        else:
            latest = reader.latest(reader.topic_partitions())
        if start is None:
            return offsets_to_json(latest)
        begin = offsets_from_json(start)
        for tp in sorted(set(begin) - set(latest)):
            report_data_loss(
                f"partition {tp[0]}-{tp[1]} is gone (topic deleted?) with offsets from "
                f"{begin[tp]} not read",
                self.options.fail_on_data_loss,
                LOG,
            )
        new = sorted(set(latest) - set(begin))
        begin.update(reader.earliest(new))
        for tp, end in latest.items():
            if end < begin[tp]:
                report_data_loss(
                    f"{tp[0]}-{tp[1]}: the high watermark {end} is below offset {begin[tp]} "
                    f"the query already read to (records were truncated)",
                    self.options.fail_on_data_loss,
                    LOG,
                )
                latest[tp] = begin[tp]  # go on once the partition grows past it again
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self._reader().earliest(new))
        return _ranges(begin, stop)

    def read(self, partition: InputPartition) -> Iterator[KafkaRow]:
        return _read_partition(self.options, partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        pass  # progress lives in Spark's checkpoint, as with Spark's Kafka source

    def stop(self) -> None:
        if self._offset_reader is not None:
            self._offset_reader.close()
            self._offset_reader = None


# -- writing ---------------------------------------------------------------------------------


class RaftkaWriter(DataSourceWriter):
    """`df.write.format("raftka")`: every row a record (at least once on task retries)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(iterator, self.options, self.columns)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # records are visible once acknowledged; there is nothing to roll back


class RaftkaStreamWriter(DataSourceStreamWriter):
    """`df.writeStream.format("raftka")`: at least once, like Spark's Kafka sink (a batch
    replayed after a failure writes its records again)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_rows(iterator, self.options, self.columns)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass


def choose_worker_python() -> str | None:
    """Point the active SparkContext's Python workers at an interpreter that has raftka's
    dependencies, unless the user chose one: `spark.pyspark.python` if set (Spark itself
    reads it only through spark-submit), else the interpreter registering the source.
    Without this, a session started from `.venv/bin/python` without activating the
    virtualenv runs `python3` from PATH, which cannot import confluent_kafka. Returns the
    interpreter chosen, or None when there is nothing to choose (PYSPARK_PYTHON set, or not
    on a driver)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or "PYSPARK_PYTHON" in os.environ or sc.pythonExec != "python3":
        return None
    sc.pythonExec = sc.getConf().get("spark.pyspark.python") or sys.executable
    LOG.info(
        "Spark's Python workers run %s (spark.pyspark.python or PYSPARK_PYTHON chooses)",
        sc.pythonExec,
    )
    return sc.pythonExec


class RaftkaDataSource(DataSource):
    """The `raftka` format. Options are those of Spark's Kafka source (see
    docs/spark.md); the schema is Spark's Kafka schema."""

    @classmethod
    def name(cls) -> str:
        # `spark.dataSource.register` asks for the name on the driver just before it
        # captures the session's worker Python with the source: the moment to choose it.
        choose_worker_python()
        return "raftka"

    def schema(self) -> StructType:
        include_headers = self.options.get("includeHeaders", "false").strip().lower() == "true"
        return kafka_schema(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(dict(self.options), streaming=False)
        _check_schema(schema, options)
        if options.max_offsets_per_trigger is not None:
            LOG.warning("maxOffsetsPerTrigger option ignored in batch queries")
        return RaftkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        options = parse_source_options(dict(self.options), streaming=True)
        _check_schema(schema, options)
        return RaftkaStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = _sink_options(dict(self.options), overwrite)
        return RaftkaWriter(options, check_sink_schema(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        options = _sink_options(dict(self.options), overwrite)
        return RaftkaStreamWriter(options, check_sink_schema(schema, options))


def _sink_options(options: dict[str, str], overwrite: bool) -> SinkOptions:
    if overwrite:
        raise OptionError(
            "save mode Overwrite is not allowed for the raftka sink (records are only ever "
            'appended to a topic); use mode("append")'
        )
    return parse_sink_options(options)


__all__ = [
    "RaftkaDataSource",
    "WrittenRecords",
    "kafka_schema",
]
