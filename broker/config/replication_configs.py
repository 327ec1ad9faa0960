"""Broker configs of replication and the cluster metadata log: leader balancing,
replication throttles, and the metadata log's segments and snapshots."""

from __future__ import annotations

from raftka.broker.config.types import INT, LONG_MAX, B, ConfigDef, L

REPLICATION_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "auto.leader.rebalance.enable",
        B,
        True,
        "Move partition leadership back to preferred replicas (the first of each replica "
        "list) when leaders drift, checked by the controller every "
        "leader.imbalance.check.interval.seconds.",
        read_only=True,
    ),
    ConfigDef(
        "leader.replication.throttled.rate",
        L,
        LONG_MAX,
        "Bytes per second a leader sends to the replicas a reassignment adds, over all "
        "partitions whose leader.replication.throttled.replicas names the leader.",
        minimum=1,
    ),
    ConfigDef(
        "follower.replication.throttled.rate",
        L,
        LONG_MAX,
        "Accepted (Kafka's reassignment tool sets it) and stored; raftka throttles on the "
        "leader side only.",
        minimum=1,
    ),
    ConfigDef(
        "leader.imbalance.check.interval.seconds",
        L,
        300,
        "How often the controller checks whether partition leadership is imbalanced.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "metadata.log.segment.bytes",
        INT,
        1 << 30,
        "Segment size of the __cluster_metadata log; whole segments below the latest "
        "retained metadata snapshot are deleted.",
        minimum=1024,
        read_only=True,
    ),
    ConfigDef(
        "metadata.log.max.record.bytes.between.snapshots",
        L,
        20 * 1024 * 1024,
        "Metadata log bytes applied since the last retained metadata snapshot after which a "
        "new one is taken and the log truncated behind it.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "metadata.log.max.snapshot.interval.ms",
        L,
        3600000,
        "Longest time between retained metadata snapshots while the metadata changes "
        "(0: by size only).",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "leader.imbalance.per.broker.percentage",
        INT,
        10,
        "Share (percent) of a broker's preferred partitions that may be led elsewhere before "
        "leadership is moved back to it.",
        minimum=0,
        read_only=True,
    ),
)
