"""Broker and topic configuration, by Kafka's names, types and defaults.

A broker config comes from (highest first) `--config k=v`, `RAFTKA_<NAME>` environment
variables (dots and dashes as underscores, e.g. RAFTKA_LOG_SEGMENT_BYTES), a properties/TOML
file, then the default. A topic config is the topic's own override, else the broker config
it is derived from (`segment.bytes` ← `log.segment.bytes`), else the default. DescribeConfigs
reports every config with its value and source exactly as Kafka's would.
"""

from __future__ import annotations

import enum
import os
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ config types."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# A parsed config value: what ConfigDef.parse returns for each ConfigType (None: no value).
ConfigValue = bool | int | float | str | None

_T = TypeVar("_T", bool, int, float, str)


def python_type(config_type: ConfigType) -> type[bool] | type[int] | type[float] | type[str]:
    """The Python type ConfigDef.parse gives a value of this config type."""
    if config_type == ConfigType.BOOLEAN:
        return bool
    if config_type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        return int
    if config_type == ConfigType.DOUBLE:
        return float
    return str


class ConfigSource(enum.IntEnum):
    """DescribeConfigs config sources."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigError(ValueError):
    """An invalid config name or value; the message names both and what is accepted."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    #: Numeric configs with an upper bound; `also` lists values accepted outside the range.
    maximum: int | None = None
    also: tuple[int, ...] = ()
    read_only: bool = False

    def parse(self, raw: ConfigValue) -> ConfigValue:
        """Parse and validate a value given as text (or already typed)."""
        if raw is None:
            if self.default is None:
                return None
            raise ConfigError(f"{self.name}: a value is required")
        try:
            if self.type == ConfigType.BOOLEAN:
                if isinstance(raw, bool):
                    value: ConfigValue = raw
                elif str(raw).strip().lower() in ("true", "false"):
                    value = str(raw).strip().lower() == "true"
                else:
                    raise ValueError
            elif self.type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
                if isinstance(raw, bool):
                    raise ValueError
                value = int(str(raw).strip())
                limit = LONG_MAX if self.type == ConfigType.LONG else INT_MAX
                if not -limit - 1 <= value <= limit:
                    raise ValueError
            elif self.type == ConfigType.DOUBLE:
                value = float(raw)
            else:
                value = str(raw).strip()
        except ValueError:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: "
                f"expected {self.type.name.lower()}"
            ) from None
        # Only numeric configs declare a minimum or maximum.
        if isinstance(value, int | float) and value not in self.also:
            if self.minimum is not None and value < self.minimum:
                raise ConfigError(
                    f"Invalid value {value} for configuration {self.name}: "
                    f"value must be at least {self.minimum}{self._also_text()}"
                )
            if self.maximum is not None and value > self.maximum:
                raise ConfigError(
                    f"Invalid value {value} for configuration {self.name}: "
                    f"value must be at most {self.maximum}{self._also_text()}"
                )
        if self.choices is not None and value not in self.choices:
            raise ConfigError(
                f"Invalid value {value!r} for configuration {self.name}: "
                f"must be one of {', '.join(self.choices)}"
            )
        return value

    def _also_text(self) -> str:
        return "".join(f" or equal to {value}" for value in self.also)

    def render(self, value: ConfigValue) -> str | None:
        """Kafka's textual form of a value, as DescribeConfigs reports it."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in items}


#: Kafka's `compression.type` values (BrokerCompressionType), broker and topic alike.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _compression_levels() -> tuple[ConfigDef, ...]:
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


B, S, INT, L = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG
DOUBLE = ConfigType.DOUBLE
#: `cleanup.policy` values: Kafka's list of `delete` and `compact`, in either order.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")
P = ConfigType.PASSWORD
DAY_MS = 24 * 3600 * 1000

BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("node.id", INT, 1, "This broker's id.", minimum=0, read_only=True),
    ConfigDef(
        "broker.id", INT, -1, "Alias of node.id (Kafka's ZooKeeper-era name).", read_only=True
    ),
    ConfigDef(
        "broker.rack", S, None, "Rack (host) of this broker, for replica placement.", read_only=True
    ),
    ConfigDef(
        "listeners",
        S,
        "PLAINTEXT://127.0.0.1:9092",
        "NAME://HOST:PORT,... the broker listens on (after --listen, if given); each name's "
        "protocol is in listener.security.protocol.map.",
        read_only=True,
    ),
    ConfigDef(
        "advertised.listeners",
        S,
        None,
        "NAME://HOST:PORT per listener given to clients in Metadata, if it differs from "
        "listeners (an entry without NAME:// is the first listener's).",
        read_only=True,
    ),
    ConfigDef(
        "listener.security.protocol.map",
        S,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "LISTENER_NAME:SECURITY_PROTOCOL pairs for named listeners.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.type",
        S,
        "PEM",
        "Only PEM keystores are supported.",
        choices=("PEM",),
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.location",
        S,
        None,
        "PEM file with the broker's private key and certificate chain.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.key.password",
        P,
        None,
        "Password of the private key, if it is encrypted.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.certificate.chain",
        P,
        None,
        "The broker's certificate chain in PEM, inline (instead of ssl.keystore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.keystore.key",
        P,
        None,
        "The broker's private key in PEM, inline (instead of ssl.keystore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.type",
        S,
        "PEM",
        "Only PEM truststores are supported.",
        choices=("PEM",),
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.location",
        S,
        None,
        "PEM file with the CA certificates client certificates are checked against.",
        read_only=True,
    ),
    ConfigDef(
        "ssl.truststore.certificates",
        P,
        None,
        "CA certificates in PEM, inline (instead of ssl.truststore.location).",
        read_only=True,
    ),
    ConfigDef(
        "ssl.client.auth",
        S,
        "none",
        "Client certificates: none, requested (checked if sent) or required (mTLS).",
        choices=("none", "requested", "required"),
        read_only=True,
    ),
    ConfigDef(
        "sasl.enabled.mechanisms",
        S,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
        read_only=True,
    ),
    ConfigDef(
        "sasl.plain.users",
        P,
        None,
        "USER:PASSWORD,... accepted by SASL/PLAIN (raftka's own; PLAIN also accepts users "
        "with SCRAM credentials).",
        read_only=True,
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        INT,
        100,
        "Delay before a failed authentication is answered; it doubles with each further "
        "failure from the same host (at most 32 times this).",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "sasl.server.max.receive.size",
        INT,
        524288,
        "Largest request frame before SASL authentication completes on a SASL listener; "
        "a larger one closes the connection without its body being read.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "authorizer.class.name",
        S,
        "",
        "Empty: no authorization. org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "(or kafka.security.authorizer.AclAuthorizer): every request is checked against "
        "the cluster's ACLs.",
        read_only=True,
    ),
    ConfigDef(
        "super.users",
        S,
        None,
        "Principals allowed everything, separated by ';' (User:admin;User:CN=ops).",
        read_only=True,
    ),
    ConfigDef(
        "allow.everyone.if.no.acl.found",
        B,
        False,
        "Whether a resource no ACL names is open to every principal.",
        read_only=True,
    ),
    ConfigDef(
        "raft.auth.secret",
        P,
        None,
        "The secret every broker of the cluster shares to authenticate Raft connections "
        "between brokers (at least 16 characters; several separated by ',' are all accepted "
        "and the first is used). Unset: Raft connections are not authenticated.",
        read_only=True,
    ),
    ConfigDef(
        "raft.security.protocol",
        S,
        "PLAINTEXT",
        "PLAINTEXT or SSL: TLS between brokers' Raft ports with the broker's keystore and "
        "truststore, both certificates checked (needs raft.auth.secret too).",
        choices=("PLAINTEXT", "SSL"),
        read_only=True,
    ),
    ConfigDef(
        "raft.auth.secret.file",
        S,
        None,
        "A file holding raft.auth.secret (one secret a line), instead of raft.auth.secret.",
        read_only=True,
    ),
    ConfigDef("log.dirs", S, "./data", "Data directory.", read_only=True),
    ConfigDef(
        "metrics.listen",
        S,
        "",
        "HOST:PORT of the HTTP endpoint for /metrics (Prometheus), /healthz and /readyz; "
        "empty: no endpoint.",
        read_only=True,
    ),
    ConfigDef("num.partitions", INT, 1, "Partitions of an auto-created topic.", minimum=1),
    ConfigDef(
        "default.replication.factor",
        INT,
        1,
        "Replication factor of auto-created topics.",
        minimum=1,
    ),
    ConfigDef(
        "auto.create.topics.enable",
        B,
        True,
        "Create a topic when a client asks for its metadata or produces to it.",
    ),
    ConfigDef("delete.topic.enable", B, True, "Allow DeleteTopics."),
    ConfigDef(
        "message.max.bytes", INT, 1048588, "Largest record batch the broker accepts.", minimum=0
    ),
    ConfigDef(
        "socket.request.max.bytes",
        INT,
        104857600,
        "Largest request frame; larger frames close the connection.",
        minimum=1,
    ),
    ConfigDef(
        "queued.max.requests",
        INT,
        500,
        "Requests a connection may have in flight before the broker stops reading it.",
        minimum=1,
    ),
    ConfigDef(
        "connections.max.idle.ms", L, 600000, "Idle connections are closed after this.", minimum=-1
    ),
    ConfigDef(
        "quota.window.num",
        INT,
        11,
        "Samples kept to measure a client's rate against its quota.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "quota.window.size.seconds",
        INT,
        1,
        "Time span of each quota sample.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "max.connections",
        INT,
        INT_MAX,
        "Client connections the broker holds at once; past it, accepting waits for one to close.",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "max.connections.per.ip",
        INT,
        INT_MAX,
        "Client connections from one address; a further one is closed at once.",
        minimum=0,
        read_only=True,
    ),
    ConfigDef(
        "max.connections.per.ip.overrides",
        S,
        "",
        "Per-address limits overriding max.connections.per.ip: HOST:COUNT,...",
        read_only=True,
    ),
    ConfigDef(
        "log.segment.bytes", INT, 1073741824, "Segment size that triggers a roll.", minimum=14
    ),
    ConfigDef(
        "log.roll.ms", L, None, "Segment age that triggers a roll (overrides hours).", minimum=1
    ),
    ConfigDef("log.roll.hours", INT, 168, "Segment age that triggers a roll, in hours.", minimum=1),
    ConfigDef(
        "log.retention.ms",
        L,
        None,
        "Delete segments older than this (-1: keep forever; overrides minutes/hours).",
        minimum=-1,
    ),
    ConfigDef(
        "log.retention.minutes", INT, None, "Retention in minutes (overrides hours).", minimum=-1
    ),
    ConfigDef("log.retention.hours", INT, 168, "Retention in hours.", minimum=-1),
    ConfigDef(
        "log.retention.bytes", L, -1, "Delete old segments beyond this partition size.", minimum=-1
    ),
    ConfigDef(
        "log.retention.check.interval.ms", L, 300000, "How often retention is enforced.", minimum=1
    ),
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
        L,
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
        S,
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
        read_only=True,
    ),
    ConfigDef(
        "log.cleaner.io.max.bytes.per.second",
        DOUBLE,
        sys.float_info.max,
        "Bytes per second the cleaner may read and write, together.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "log.cleaner.dedupe.buffer.size",
        L,
        134217728,
        "Memory for the cleaner's key map (24 bytes a key, as Kafka counts); a cleaning that "
        "cannot map its whole dirty region cleans up to where the map filled.",
        minimum=1024 * 1024,
        read_only=True,
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
    *_compression_levels(),
    ConfigDef(
        "min.insync.replicas", INT, 1, "Replicas that must hold an acks=all write.", minimum=1
    ),
    ConfigDef(
        "offsets.topic.num.partitions",
        INT,
        50,
        "Partitions of __consumer_offsets.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "offsets.topic.replication.factor",
        S,
        "3",
        "Replication factor of __consumer_offsets (capped by live brokers).",
        read_only=True,
    ),
    ConfigDef(
        "offsets.topic.segment.bytes",
        INT,
        104857600,
        "Segment size of __consumer_offsets (compaction rewrites only full segments).",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "offsets.retention.minutes",
        INT,
        10080,
        "Committed offsets of an empty group expire after this.",
        minimum=1,
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        INT,
        3000,
        "Delay of the first rebalance of a new group.",
        minimum=0,
    ),
    ConfigDef(
        "transaction.state.log.num.partitions",
        INT,
        50,
        "Partitions of __transaction_state.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "transaction.state.log.replication.factor",
        S,
        "3",
        "Replication factor of __transaction_state (capped by live brokers).",
        read_only=True,
    ),
    ConfigDef(
        "transaction.max.timeout.ms",
        INT,
        900000,
        "Largest transaction.timeout.ms a transactional producer may ask for.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        INT,
        10000,
        "How often the coordinator aborts transactions ongoing longer than their timeout.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "group.share.record.lock.duration.ms",
        INT,
        30000,
        "How long a share consumer holds the records it acquired before they are available again.",
        minimum=1,
    ),
    ConfigDef(
        "group.share.delivery.count.limit",
        INT,
        5,
        "Deliveries after which a record released or expired again is archived.",
        minimum=1,
    ),
    ConfigDef(
        "group.share.partition.max.record.locks",
        INT,
        2000,
        "Records of one share-partition in flight (past its start offset) at most.",
        minimum=1,
    ),
    ConfigDef(
        "group.share.session.timeout.ms",
        INT,
        45000,
        "A share-group member that does not heartbeat for this long leaves the group.",
        minimum=1,
    ),
    ConfigDef(
        "group.share.heartbeat.interval.ms",
        INT,
        5000,
        "How often share-group members heartbeat.",
        minimum=1,
    ),
    ConfigDef(
        "group.share.max.share.sessions",
        INT,
        2000,
        "Share sessions (one per share-group member fetching from this broker) open at most; "
        "one unused for group.share.session.timeout.ms is closed.",
        minimum=1,
    ),
    ConfigDef(
        "share.auto.offset.reset",
        S,
        "latest",
        "Where a new share-partition starts: earliest (the log start) or latest (the high "
        "watermark). Kafka has it as a group config; here it is the broker's, for every "
        "share group.",
        choices=("earliest", "latest"),
    ),
    ConfigDef(
        "share.coordinator.state.topic.num.partitions",
        INT,
        50,
        "Partitions of __share_group_state.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "share.coordinator.state.topic.replication.factor",
        S,
        "3",
        "Replication factor of __share_group_state (capped by live brokers).",
        read_only=True,
    ),
    ConfigDef(
        "share.coordinator.state.topic.segment.bytes",
        INT,
        104857600,
        "Segment size of __share_group_state.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef("group.min.session.timeout.ms", INT, 6000, "Smallest session timeout allowed."),
    ConfigDef("group.max.session.timeout.ms", INT, 1800000, "Largest session timeout allowed."),
    ConfigDef(
        "group.consumer.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval of consumer-protocol group members (KIP-848).",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "group.consumer.session.timeout.ms",
        INT,
        45000,
        "Session timeout of consumer-protocol group members (KIP-848).",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "group.consumer.max.size",
        INT,
        INT_MAX,
        "Most members a consumer-protocol group may have.",
        minimum=1,
        read_only=True,
    ),
    ConfigDef(
        "group.consumer.assignors",
        S,
        "uniform,range",
        "Server-side assignors of consumer-protocol groups; the first is the default.",
        read_only=True,
    ),
)

#: Topic config that puts Produce in restore mode (no broker synonym).
RESTORE_IN_PROGRESS = "raftka.restore.in.progress"

TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef(
        "cleanup.policy",
        S,
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
    *_compression_levels(),
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
        S,
        "",
        "Replicas, as PARTITION:BROKER pairs or * for all, whose leader sends at most "
        "leader.replication.throttled.rate to the replicas a reassignment adds.",
    ),
    ConfigDef("segment.bytes", INT, 1073741824, "Segment size that triggers a roll.", minimum=14),
    ConfigDef("segment.ms", L, 7 * DAY_MS, "Segment age that triggers a roll.", minimum=1),
    ConfigDef("segment.index.bytes", INT, 10485760, "Largest index file.", minimum=4),
    ConfigDef("index.interval.bytes", INT, 4096, "Bytes between offset index entries.", minimum=0),
    ConfigDef(
        "retention.ms", L, 7 * DAY_MS, "Delete segments older than this (-1: never).", minimum=-1
    ),
    ConfigDef(
        "retention.bytes", L, -1, "Delete old segments beyond this partition size.", minimum=-1
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

ENV_PREFIX = "RAFTKA_"


def _env_name(name: str) -> str:
    return ENV_PREFIX + name.upper().replace(".", "_").replace("-", "_")


def load_config_file(path: Path) -> dict[str, str]:
    """Read a Java-style .properties file, or TOML if the name ends in .toml."""
    text = path.read_text()
    if path.suffix == ".toml":
        flat: dict[str, str] = {}

        def walk(prefix: str, table: Mapping[str, object]) -> None:
            for key, value in table.items():
                name = f"{prefix}{key}"
                if isinstance(value, Mapping):
                    walk(name + ".", value)
                else:
                    flat[name] = (
                        "true" if value is True else "false" if value is False else str(value)
                    )

        walk("", tomllib.loads(text))
        return flat
    values: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected name=value, got {line!r}")
        values[line[:sep].strip()] = line[sep + 1 :].strip()
    return values


class _TypedConfigs:
    """Typed reads of configs by name. A getter that does not match the config's declared
    ConfigType, or a non-optional getter for a config that may have no value, raises
    TypeError naming the config: a programming error, not a bad config value."""

    _definitions: ClassVar[Mapping[str, ConfigDef]]
    # Configs without a default that `get` still always computes from others.
    _computed: ClassVar[frozenset[str]] = frozenset()

    def get(self, name: str) -> ConfigValue:
        raise NotImplementedError

    def get_bool(self, name: str) -> bool:
        return self._required(name, bool, "get_bool")

    def get_int(self, name: str) -> int:
        """An INT, SHORT or LONG config."""
        return self._required(name, int, "get_int")

    def get_str(self, name: str) -> str:
        return self._required(name, str, "get_str")

    def get_float(self, name: str) -> float:
        """A DOUBLE config."""
        return self._required(name, float, "get_float")

    def get_optional_str(self, name: str) -> str | None:
        return self._value(name, str, "get_optional_str")

    def _required(self, name: str, wanted: type[_T], getter: str) -> _T:
        definition = self._definitions[name]
        if definition.default is None and name not in self._computed:
            raise TypeError(
                f"{getter}({name!r}): {name} has no default, so it may have no value; "
                f"read it with get_optional_{wanted.__name__}"
            )
        value = self._value(name, wanted, getter)
        if value is None:
            raise TypeError(f"{getter}({name!r}): {name} has no value")
        return value

    def _value(self, name: str, wanted: type[_T], getter: str) -> _T | None:
        definition = self._definitions[name]
        declared = python_type(definition.type)
        if declared is not wanted:
            raise TypeError(
                f"{getter}({name!r}): {name} is declared {definition.type.name} "
                f"({declared.__name__}), not {wanted.__name__}"
            )
        value = self.get(name)
        if value is None:
            return None
        # A bool is an int to isinstance; parse never gives one for an integer config.
        if not isinstance(value, wanted) or isinstance(value, bool) != (wanted is bool):
            raise TypeError(f"{getter}({name!r}): {name} holds {value!r}, not {wanted.__name__}")
        return value


LISTENER_PREFIX = "listener.name."
#: Configs a listener may override with `listener.name.<listener>.<config>`.
PER_LISTENER_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "sasl.enabled.mechanisms",
        "sasl.plain.users",
    }
)


def _split_listener_config(name: str) -> tuple[str, str]:
    rest = name[len(LISTENER_PREFIX) :]
    listener, _, config_name = rest.partition(".")
    if not listener or config_name not in PER_LISTENER_CONFIGS:
        raise ConfigError(
            f"Unknown broker config {name!r}: a listener.name.<listener>.<config> override "
            f"takes one of {', '.join(sorted(PER_LISTENER_CONFIGS))}"
        )
    return listener.upper(), config_name


class BrokerConfig(_TypedConfigs):
    """Resolved broker configuration: a value and a source for every known config."""

    _definitions = BROKER_CONFIGS
    _computed = frozenset({"log.roll.ms", "log.retention.ms", "log.flush.interval.ms"})

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        file_values: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        self._static: dict[str, ConfigValue] = {}
        sources: list[Mapping[str, str]] = [file_values or {}]
        env_values = {
            name: environ[_env_name(name)] for name in BROKER_CONFIGS if _env_name(name) in environ
        }
        sources += [env_values, overrides or {}]
        #: (LISTENER NAME, config) -> value of `listener.name.<listener>.<config>` overrides.
        self._per_listener: dict[tuple[str, str], ConfigValue] = {}
        for source in sources:
            for name, raw in source.items():
                if name.startswith(LISTENER_PREFIX):
                    listener, config_name = _split_listener_config(name)
                    self._per_listener[listener, config_name] = BROKER_CONFIGS[config_name].parse(
                        raw
                    )
                    continue
                definition = BROKER_CONFIGS.get(name)
                if definition is None:
                    raise ConfigError(
                        f"Unknown broker config {name!r}; known configs: "
                        "see `raftka configs` or the README"
                    )
                self._static[name] = definition.parse(raw)

    def get(self, name: str) -> ConfigValue:
        """The config's value; the typed getters check its type as well."""
        if name in self._static:
            return self._static[name]
        if name == "log.roll.ms":
            return self.get_int("log.roll.hours") * 3600 * 1000
        if name == "log.retention.ms":
            minutes = self._static.get("log.retention.minutes")
            if isinstance(minutes, int):
                return -1 if minutes < 0 else minutes * 60 * 1000
            hours = self.get_int("log.retention.hours")
            return -1 if hours < 0 else hours * 3600 * 1000
        if name == "log.flush.interval.ms":
            return self.get_int("log.flush.scheduler.interval.ms")
        return BROKER_CONFIGS[name].default

    def listener_value(self, listener: str, name: str) -> ConfigValue:
        """`listener.name.<listener>.<name>` if set, else the broker-wide `name`."""
        key = (listener.upper(), name)
        if key in self._per_listener:
            return self._per_listener[key]
        return self.get(name)

    def is_set(self, name: str) -> bool:
        """Whether `name` was given (file, environment or override), not defaulted."""
        return name in self._static

    def source(self, name: str) -> ConfigSource:
        if name in self._static:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def describe(self) -> Iterable[tuple[ConfigDef, str | None, ConfigSource]]:
        for name, definition in BROKER_CONFIGS.items():
            yield definition, definition.render(self.get(name)), self.source(name)


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, ConfigValue]:
    """Parse a topic's config overrides; raises ConfigError naming the bad entry."""
    parsed: dict[str, ConfigValue] = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        parsed[name] = definition.parse(raw)
        if name == "leader.replication.throttled.replicas":
            throttled_replicas(str(parsed[name]))
    return parsed


#: Broker configs that IncrementalAlterConfigs may change at run time, per broker or as the
#: cluster-wide default (resource name "").
DYNAMIC_BROKER_CONFIGS = frozenset(
    {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
)


def throttled_replicas(value: str) -> frozenset[tuple[int, int]] | None:
    """Kafka's throttled-replicas format: None for "*" (all), else the (partition, broker)
    pairs of "P:B,P:B" (empty: none). Raises ConfigError for anything else."""
    text = value.strip()
    if text == "*":
        return None
    pairs = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        partition, sep, broker = item.partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            raise ConfigError(
                f"Invalid leader.replication.throttled.replicas entry {item!r}: expected "
                "PARTITION:BROKER pairs separated by commas, or *"
            )
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


class TopicConfig(_TypedConfigs):
    """A topic's effective configuration: its overrides over the broker's values."""

    _definitions = TOPIC_CONFIGS

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, ConfigValue]) -> None:
        self.broker = broker
        self.overrides = dict(overrides)

    def get(self, name: str) -> ConfigValue:
        """The config's value; the typed getters check its type as well."""
        if name in self.overrides:
            return self.overrides[name]
        synonym = TOPIC_SYNONYMS.get(name)
        if synonym is not None:
            return self.broker.get(synonym)
        return TOPIC_CONFIGS[name].default

    def render(self, name: str) -> str | None:
        return TOPIC_CONFIGS[name].render(self.get(name))

    def source(self, name: str) -> ConfigSource:
        if name in self.overrides:
            return ConfigSource.DYNAMIC_TOPIC_CONFIG
        synonym = TOPIC_SYNONYMS.get(name)
        if synonym is not None:
            return self.broker.source(synonym)
        return ConfigSource.DEFAULT_CONFIG

    def describe(self) -> Iterable[tuple[ConfigDef, str | None, ConfigSource]]:
        for name, definition in TOPIC_CONFIGS.items():
            yield definition, definition.render(self.get(name)), self.source(name)

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's synonym list for DescribeConfigs: the topic value, then the broker's."""
        found: list[tuple[str, str | None, ConfigSource]] = []
        definition = TOPIC_CONFIGS[name]
        if name in self.overrides:
            found.append(
                (name, definition.render(self.overrides[name]), ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        synonym = TOPIC_SYNONYMS.get(name)
        if synonym is not None:
            broker_def = BROKER_CONFIGS[synonym]
            value = broker_def.render(self.broker.get(synonym))
            found.append((synonym, value, self.broker.source(synonym)))
        return found


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """`name=value` command-line items as a dict; raises ConfigError on a malformed item."""
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"expected name=value, got {item!r}")
        result[name.strip()] = value.strip()
    return result
