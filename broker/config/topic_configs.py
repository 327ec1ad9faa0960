"""Topic configs (what a topic may override) and the broker config each falls back to."""

from __future__ import annotations

from raftka.broker.config.log_configs import CLEANUP_POLICIES, COMPRESSION_TYPES, compression_levels
from raftka.broker.config.types import DAY_MS, DOUBLE, INT, LIST, LONG_MAX, B, ConfigDef, L, S

#: Topic config that puts Produce in restore mode (no broker synonym).
RESTORE_IN_PROGRESS = "raftka.restore.in.progress"
#: raftka's own: the order in which share groups acquire the topic's records.
SHARE_DELIVERY_ORDER = "share.delivery.order"
#: raftka's own: the priority of a record without a `priority` header.
SHARE_DEFAULT_PRIORITY = "share.delivery.default.priority"
#: raftka's own: whether a fifo topic honours `deliver-at-ms` headers.
SHARE_DELAY_ENABLE = "share.delivery.delay.enable"
#: raftka's own: what a fair topic's records are grouped by (`key` or `header:NAME`).
SHARE_FAIR_KEY = "share.fair.key"
#: raftka's own: the records a fair topic's fairness key may take per turn of the rotation.
SHARE_FAIR_PER_TURN = "share.fair.records.per.turn"

TOPIC_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "cleanup.policy",
        LIST,
        "delete",
        "delete drops old segments by retention; compact keeps the latest record per key.",
        choices=CLEANUP_POLICIES,
    ),
    ConfigDef(
        "delete.retention.ms",
        L,
        DAY_MS,
        "How long tombstones stay after the cleaning that first saw them.",
        minimum=0,
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        DOUBLE,
        0.5,
        "Dirty share of the cleanable log that triggers a cleaning.",
        minimum=0,
        maximum=1,
    ),
    ConfigDef(
        "min.compaction.lag.ms", L, 0, "Records younger than this are not compacted.", minimum=0
    ),
    ConfigDef(
        "max.compaction.lag.ms",
        L,
        LONG_MAX,
        "Records older than this are compacted whatever the dirty ratio.",
        minimum=1,
    ),
    ConfigDef(
        "compression.type",
        S,
        "producer",
        "producer stores batches as the producer compressed them; a codec (or uncompressed) "
        "recompresses batches in another one on append.",
        choices=COMPRESSION_TYPES,
    ),
    *compression_levels(),
    ConfigDef(
        "max.message.bytes", INT, 1048588, "Largest record batch this topic accepts.", minimum=0
    ),
    ConfigDef(
        "message.timestamp.type",
        S,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        choices=("CreateTime", "LogAppendTime"),
    ),
    ConfigDef(
        "leader.replication.throttled.replicas",
        LIST,
        "",
        "Replicas, as PARTITION:BROKER pairs or * for all, whose leader sends at most "
        "leader.replication.throttled.rate to the replicas a reassignment adds.",
    ),
    ConfigDef(
        "follower.replication.throttled.replicas",
        LIST,
        "",
        "Accepted (Kafka's reassignment tool sets it) and checked; raftka throttles on the "
        "leader side only.",
    ),
    ConfigDef("segment.bytes", INT, 1073741824, "Segment size that triggers a roll.", minimum=14),
    ConfigDef("segment.ms", L, 7 * DAY_MS, "Segment age that triggers a roll.", minimum=1),
    ConfigDef("segment.index.bytes", INT, 10485760, "Largest index file.", minimum=4),
    ConfigDef("index.interval.bytes", INT, 4096, "Bytes between offset index entries.", minimum=0),
    ConfigDef(
        "retention.ms", L, 7 * DAY_MS, "Delete segments older than this (-1: never).", minimum=-1
    ),
    ConfigDef(
        "retention.bytes",
        L,
        -1,
        "Delete old segments beyond this partition size (negative: no limit).",
    ),
    ConfigDef("flush.messages", L, LONG_MAX, "fsync after this many records.", minimum=1),
    ConfigDef(
        "flush.ms", L, LONG_MAX, "fsync this long after the first unflushed record.", minimum=0
    ),
    ConfigDef(
        "min.insync.replicas", INT, 1, "Replicas that must hold an acks=all write.", minimum=1
    ),
    ConfigDef(
        RESTORE_IN_PROGRESS,
        S,
        "false",
        "While true, Produce appends each batch at its own offset, as `raftka restore` writes it.",
        choices=("true", "false"),
    ),
    ConfigDef(
        SHARE_DELIVERY_ORDER,
        S,
        "fifo",
        "raftka's own: fifo hands a share group the partition's records in offset order "
        "(Kafka's share groups); priority hands out the lowest `priority` header first (ties "
        "by offset) across the whole backlog; fair rotates across the fairness keys "
        "(share.fair.key) with records available, share.fair.records.per.turn records per "
        "key per turn, each key's records in offset order. priority and fair honour "
        "`deliver-at-ms` headers.",
        choices=("fifo", "priority", "fair"),
    ),
    ConfigDef(
        SHARE_DEFAULT_PRIORITY,
        L,
        0,
        "raftka's own: the priority of a record of a priority topic without a valid "
        "`priority` header (lower is sooner).",
    ),
    ConfigDef(
        SHARE_DELAY_ENABLE,
        B,
        False,
        "raftka's own: a fifo topic honours `deliver-at-ms` headers (its share groups then "
        "read the records' headers, as on a priority topic, which always honours them).",
    ),
    ConfigDef(
        SHARE_FAIR_KEY,
        S,
        "key",
        "raftka's own: on a fair topic, what groups records for fairness: key, the record "
        "key, or header:NAME, the value of the record header NAME; records without one "
        "(a null key, no such header) form one group of their own.",
        choices=("key",),
        named_choices=("header:",),
    ),
    ConfigDef(
        SHARE_FAIR_PER_TURN,
        INT,
        1,
        "raftka's own: on a fair topic, how many records a fairness key may take in its "
        "turn of the rotation before the next key's turn (a turn may span fetches).",
        minimum=1,
        maximum=1_000_000,
    ),
)

# Topic config → the broker config it falls back to (Kafka's "synonyms").
TOPIC_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "min.insync.replicas": "min.insync.replicas",
}
