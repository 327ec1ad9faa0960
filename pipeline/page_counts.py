"""`scripts/pipeline run`: views per page in one-minute event-time windows.

A Structured Streaming query reads click events from `events`, counts views per page in
tumbling one-minute windows of the events' `ts` with a 30 s watermark, and in append mode
writes each finished window once to `page-counts` as a JSON record keyed by window and page,
printing it too. Its progress lives in the checkpoint: stopped (Ctrl-C, `--duration`) or
killed, a run started again with the same checkpoint goes on where it stopped; a window may
then be written again, always with the same key and value.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's usual name
from pyspark.sql.streaming import StreamingQuery

from raftka.pipeline.clicks import EVENTS_PARTITIONS, EVENTS_TOPIC, ensure_topic
from raftka.pipeline.run_log import first_line

LOG = logging.getLogger(__name__)

COUNTS_TOPIC = "page-counts"
WINDOW = "1 minute"
WATERMARK = "30 seconds"
EVENT_SCHEMA = "user STRING, page STRING, ts TIMESTAMP"
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ssXXX"}
DEFAULT_TRIGGER_INTERVAL = "5 seconds"
SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class PipelineError(RuntimeError):
    """The job cannot run as asked (for instance Spark's Kafka connector is missing)."""


def kafka_package(spark_version: str) -> str:
    """Maven coordinates of Spark's Kafka connector for this Spark version."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}"


def window_counts(events: DataFrame) -> DataFrame:
    """Records of finished windows from a stream in the Kafka schema: `key` is
    `{"window_start", "window_end", "page"}`, `value` adds `views`, both JSON strings."""
    clicks = (
        events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("event"))
        .select("event.*")
        .where(F.col("ts").isNotNull() & F.col("page").isNotNull())
    )
    counts = (
        clicks.withWatermark("ts", WATERMARK)
        .groupBy(F.window("ts", WINDOW), F.col("page"))
        .agg(F.count(F.lit(1)).alias("views"))
    )
    start = F.col("window.start").alias("window_start")
    end = F.col("window.end").alias("window_end")
    return counts.select(
        F.to_json(F.struct(start, end, F.col("page")), JSON_OPTIONS).alias("key"),
        F.to_json(F.struct(start, end, F.col("page"), F.col("views")), JSON_OPTIONS).alias("value"),
    )


def describe_window(value: str) -> str:
    """A written record's value as one console line."""
    record = json.loads(value)
    start = record["window_start"].replace("T", " ").removesuffix("Z")
    end = record["window_end"].split("T")[1].removesuffix("Z")
    return f"  {start} - {end}  {record['page']:<10} {record['views']:>6} views"


@dataclass
class RunResult:
    """What a run did: micro-batches finished, events read, window records written."""

    batches: int = 0
    events: int = 0
    windows: int = 0
    windows_by_batch: dict[int, int] = field(default_factory=dict)


class PageCountsJob:
    """The streaming query over `events` on `bootstrap`, checkpointed in `checkpoint`.

    `source` is "raftka" (this package's data source) or "kafka" (Spark's own connector,
    whose jar must be on Spark's classpath); the same format writes `page-counts`.
    """

    def __init__(
        self,
        spark: SparkSession,
        bootstrap: str,
        checkpoint: str,
        *,
        source: str = "raftka",
        out: TextIO = sys.stdout,
    ) -> None:
        if source not in ("raftka", "kafka"):
            raise PipelineError(f"unknown source {source!r}: use raftka or kafka")
        self.spark = spark
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.source = source
        self.out = out
        self.result = RunResult()

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def _missing_connector(self) -> PipelineError:
        return PipelineError(
            "--source kafka needs Spark's Kafka connector, which is not on Spark's classpath "
            f"({SPARK_KAFKA_PROVIDER}). Add it with --packages "
            f"{kafka_package(self.spark.version)} (downloaded from Maven Central), or --jars "
            "with the connector jar and its kafka-clients jar, or use --source raftka."
        )

    def _emit(self, batch: DataFrame, batch_id: int) -> None:
        # A handful of windows per batch: collecting them once beats computing the
        # stateful batch twice (once to write, once to print).
        rows = batch.collect()
        self.result.windows_by_batch[batch_id] = len(rows)
        if not rows:
            return
        (
            self.spark.createDataFrame(rows, "key STRING, value STRING")
            .write.format(self.source)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", COUNTS_TOPIC)
            .mode("append")
            .save()
        )
        self._say(f"batch {batch_id}: {len(rows)} finished window(s) -> {COUNTS_TOPIC}")
        for value in sorted(row["value"] for row in rows):
            self._say(describe_window(value))

    def start(
        self, *, available_now: bool, interval: str = DEFAULT_TRIGGER_INTERVAL
    ) -> StreamingQuery:
        """Start the query (topics are created first if missing)."""
        ensure_topic(self.bootstrap, EVENTS_TOPIC, EVENTS_PARTITIONS)
        ensure_topic(self.bootstrap, COUNTS_TOPIC, 1)
        try:
            events = (
                self.spark.readStream.format(self.source)
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("subscribe", EVENTS_TOPIC)
                .option("startingOffsets", "earliest")
                .load()
            )
        except AnalysisException as exc:
            # Spark's own lookup of the format is the one that counts: the connector may come
            # from --packages, --jars or a jar in Spark's own folder.
            if self.source == "kafka" and "data source: kafka" in str(exc).lower():
                raise self._missing_connector() from None
            raise PipelineError(
                f"cannot read {EVENTS_TOPIC} with format {self.source}: {exc}"
            ) from None
        writer = (
            window_counts(events)
            .writeStream.queryName("page_counts")
            .outputMode("append")
            .option("checkpointLocation", self.checkpoint)
            .foreachBatch(self._emit)
        )
        writer = (
            writer.trigger(availableNow=True)
            if available_now
            else writer.trigger(processingTime=interval)
        )
        return writer.start()

    def _report(self, query: StreamingQuery, printed: set[int]) -> None:
        for progress in query.recentProgress:
            batch_id = progress["batchId"]
            if batch_id in printed:
                continue
            printed.add(batch_id)
            rows = int(progress.get("numInputRows", 0))
            self.result.batches += 1
            self.result.events += rows
            self.result.windows += self.result.windows_by_batch.get(batch_id, 0)
            if rows == 0 and not self.result.windows_by_batch.get(batch_id):
                continue
            watermark = progress.get("eventTime", {}).get("watermark", "-")
            self._say(
                f"batch {batch_id} done: {rows} events read "
                f"({progress.get('processedRowsPerSecond', 0):,.0f}/s), watermark {watermark}"
            )

    def _source_offsets(self, batch_id: int) -> int | None:
        """The sum of every partition's end offset in batch `batch_id`'s entry of the
        checkpoint's offset log (its last line: `{"topic": {"partition": offset}}`, the same for
        this package's source and Spark's), or None without a readable entry."""
        try:
            lines = (Path(self.checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
            ends = json.loads(lines[-1])
            return sum(int(offset) for topic in ends.values() for offset in topic.values())
        except (OSError, ValueError, IndexError, AttributeError, TypeError):
            return None

    def _count_committed_unreported(self, printed: set[int]) -> None:
        """Count the batches Spark committed whose progress the stop cut off.

        Spark writes a batch's entry in the checkpoint's commit log at the end of the batch and
        only then reports its progress, so a stop between the two leaves a batch that a later
        run will not repeat but that `recentProgress` never showed: its windows were written.
        Its events are the difference of its offsets and the previous batch's (not known for a
        first batch, whose start is not in the log)."""
        for batch_id, windows in sorted(self.result.windows_by_batch.items()):
            if batch_id in printed:
                continue
            if not (Path(self.checkpoint) / "commits" / str(batch_id)).exists():
                continue
            printed.add(batch_id)
            self.result.batches += 1
            self.result.windows += windows
            end, start = self._source_offsets(batch_id), self._source_offsets(batch_id - 1)
            if end is not None and start is not None:
                self.result.events += max(0, end - start)

    def run(
        self,
        *,
        available_now: bool = False,
        duration_s: float | None = None,
        interval: str = DEFAULT_TRIGGER_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> RunResult:
        """Run until all events present at the start are processed (`available_now`), for
        `duration_s` counted from the end of the first micro-batch (so a run does some work
        however long Spark takes to start), or until interrupted; the query is stopped on
        the way out."""
        query = self.start(available_now=available_now, interval=interval)
        mode = "available events" if available_now else f"trigger every {interval}"
        self._say(
            f"run: reading {EVENTS_TOPIC} on {self.bootstrap} with format {self.source} "
            f"({mode}), checkpoint {self.checkpoint}"
        )
        deadline: float | None = None
        printed: set[int] = set()
        stop = threading.Event()
        # PySpark's own SIGINT handler calls into the JVM from inside the signal handler,
        # which breaks the py4j call the main thread is in; a flag stops the query cleanly.
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, lambda *_: stop.set())
        reason = "all available events processed" if available_now else "the query ended"
        try:
            while query.isActive and not stop.is_set():
                query.awaitTermination(1)
                self._report(query, printed)
                if duration_s is not None and deadline is None and printed:
                    deadline = clock() + duration_s
                if deadline is not None and clock() >= deadline:
                    reason = f"--duration {duration_s:g} s reached"
                    break
            if stop.is_set():
                reason = "interrupted"
            failure = query.exception()
            if failure is not None:
                LOG.error("the query failed: %s", failure)
                raise PipelineError(f"the query failed: {first_line(str(failure))}")
        finally:
            try:
                query.stop()
            except Exception:
                # Stopping interrupts a batch in flight; Spark and py4j then complain about
                # the interruption, which is no news to the user who asked for the stop.
                LOG.warning("while stopping the query", exc_info=True)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            self._report(query, printed)
            self._count_committed_unreported(printed)
        self._say(
            f"run: stopped ({reason}) after {self.result.batches} batch(es), "
            f"{self.result.events} events read, {self.result.windows} window(s) written; run "
            f"again with --checkpoint {self.checkpoint} to resume"
        )
        return self.result
