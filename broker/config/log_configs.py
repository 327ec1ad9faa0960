"""Broker configs of the partition logs: segments and retention, flushing, indexes,
timestamps, cleanup and the log cleaner, compression, and the in-sync minimum."""

from __future__ import annotations

import sys

from raftka.broker.config.types import DAY_MS, DOUBLE, INT, LIST, LONG_MAX, B, ConfigDef, L, S

#: The items a `cleanup.policy` list may hold (Kafka's ValidList of `compact` and `delete`).
CLEANUP_POLICIES = ("compact", "delete")


#: Kafka's `compression.type` values (BrokerCompressionType), broker and topic alike.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def compression_levels() -> tuple[ConfigDef, ...]:
    """KIP-390's per-codec levels with Kafka's ranges; broker and topic share the names."""
    return (
        ConfigDef(
            "compression.gzip.level",
            INT,
            -1,
            "gzip level batches are recompressed with (-1: zlib's default, 6).",
            minimum=1,
            maximum=9,
            also=(-1,),
        ),
        ConfigDef(
            "compression.lz4.level",
            INT,
            9,
            "lz4 level batches are recompressed with (9: the fast compressor).",
            minimum=1,
            maximum=17,
        ),
        ConfigDef(
            "compression.zstd.level",
            INT,
            3,
            "zstd level batches are recompressed with.",
            minimum=-131072,
            maximum=22,
        ),
    )


#: Segment roll and retention (log.segment.*, log.roll.*, log.retention.*).
LOG_RETENTION_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "log.segment.bytes", INT, 1073741824, "Segment size that triggers a roll.", minimum=14
    ),
    ConfigDef(
        "log.roll.ms", L, None, "Segment age that triggers a roll (overrides hours).", minimum=1
    ),
    ConfigDef(
        "log.roll.hours",
        INT,
        168,
        "Segment age that triggers a roll, in hours.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "log.retention.ms",
        L,
        None,
        "Delete segments older than this (-1: keep forever; overrides minutes/hours).",
        minimum=-1,
    ),
    ConfigDef(
        "log.retention.minutes",
        INT,
        None,
        "Retention in minutes (overrides hours).",
        minimum=-1,
        read_only=True,
    ),
    ConfigDef("log.retention.hours", INT, 168, "Retention in hours.", minimum=-1, read_only=True),
    ConfigDef(
        "log.retention.bytes",
        L,
        -1,
        "Delete old segments beyond this partition size (negative: no limit).",
    ),
    ConfigDef(
        "log.retention.check.interval.ms",
        L,
        300000,
        "How often retention is enforced.",
        minimum=1,
        read_only=True,
    ),
)

#: Flushing, indexes, producer ids, timestamps, cleanup, the cleaner and compression.
LOG_STORAGE_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "log.flush.interval.messages",
        L,
        LONG_MAX,
        "fsync a partition after this many records.",
        minimum=1,
    ),
    ConfigDef(
        "log.flush.interval.ms",
        L,
        None,
        "fsync a partition this long after its first unflushed record.",
        minimum=0,
    ),
    ConfigDef(
        "log.flush.scheduler.interval.ms",
        L,
        LONG_MAX,
        "How often the flusher checks partitions.",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "log.index.interval.bytes", INT, 4096, "Bytes between offset index entries.", minimum=0
    ),
    ConfigDef("log.index.size.max.bytes", INT, 10485760, "Largest index file.", minimum=4),
    ConfigDef(
        "producer.id.expiration.ms",
        INT,
        86400000,
        "Forget an idempotent producer's sequence state after it has been idle this long.",
        minimum=1,
    ),
    ConfigDef(
        "log.message.timestamp.type",
        S,
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
        choices=("CreateTime", "LogAppendTime"),
    ),
    ConfigDef(
        "log.cleanup.policy",
        LIST,
        "delete",
        "delete drops old segments by retention; compact keeps the latest record per key.",
        choices=CLEANUP_POLICIES,
    ),
    ConfigDef(
        "log.cleaner.enable", B, True, "Run the log cleaner (compacted topics).", read_only=True
    ),
    ConfigDef(
        "log.cleaner.backoff.ms",
        L,
        15000,
        "How often the cleaner looks for compacted partitions to clean.",
        minimum=0,
    ),
    ConfigDef(
        "log.cleaner.io.max.bytes.per.second",
        DOUBLE,
        sys.float_info.max,
        "Bytes per second the cleaner may read and write, together.",
        minimum=1,
    ),
    ConfigDef(
        "log.cleaner.dedupe.buffer.size",
        L,
        134217728,
        "Memory for the cleaner's key map (24 bytes a key, as Kafka counts); a cleaning that "
        "cannot map its whole dirty region cleans up to where the map filled.",
        minimum=1024 * 1024,
    ),
    ConfigDef(
        "log.cleaner.delete.retention.ms",
        L,
        DAY_MS,
        "How long tombstones stay after the cleaning that first saw them.",
        minimum=0,
    ),
    ConfigDef(
        "log.cleaner.min.cleanable.ratio",
        DOUBLE,
        0.5,
        "Dirty share of the cleanable log that triggers a cleaning.",
        minimum=0,
        maximum=1,
    ),
    ConfigDef(
        "log.cleaner.min.compaction.lag.ms",
        L,
        0,
        "Records younger than this are not compacted.",
        minimum=0,
    ),
    ConfigDef(
        "log.cleaner.max.compaction.lag.ms",
        L,
        LONG_MAX,
        "Records older than this are compacted whatever the dirty ratio.",
        minimum=1,
    ),
    ConfigDef(
        "compression.type",
        S,
        "producer",
        "Codec topics store batches in by default: producer keeps the producer's; a codec "
        "(or uncompressed) recompresses batches in another one on append.",
        choices=COMPRESSION_TYPES,
    ),
    *compression_levels(),
    ConfigDef(
        "min.insync.replicas", INT, 1, "Replicas that must hold an acks=all write.", minimum=1
    ),
)
