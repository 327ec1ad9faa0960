"""The raftka source's and sink's options, parsed and checked the way Spark's Kafka source
checks its own (`KafkaSourceProvider`): same names, same defaults, same offset JSON.

Nothing here talks to a broker. Every function raises `OptionError` (a `ValueError`) whose
message names the option at fault, before any Spark job starts.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Offsets inside startingOffsets/endingOffsets JSON that stand for "resolve on the broker".
EARLIEST = -2
LATEST = -1

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout
DEFAULT_FETCH_OFFSET_TIMEOUT_MS = 30_000

# kafka.* options Spark's Kafka source refuses, with its reasons.
_REFUSED_CLIENT_CONFIGS = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start; a restarted "
        "query always resumes from its checkpoint."
    ),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are read as bytes. "
        "Use DataFrame operations to deserialize the keys."
    ),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are read as bytes. "
        "Use DataFrame operations to deserialize the values."
    ),
    "key.serializer": "Kafka option 'key.serializer' is not supported: keys are written as bytes.",
    "value.serializer": (
        "Kafka option 'value.serializer' is not supported: values are written as bytes."
    ),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}

OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'

TopicPartition = tuple[str, int]
"""(topic, partition): a partition of a topic, as Spark's Kafka source names it `topic-N`."""


class OptionError(ValueError):
    """An option is missing, unknown in this combination, or malformed."""


def client_settings(config: Mapping[str, str]) -> dict[str, Any]:  # Any: settings with a Logger
    """A confluent-kafka client's settings: `config` with librdkafka's log lines sent to the
    `pipeline.kafka` logger (served by the client's poll, so an unreachable broker does not
    print a connection failure every few milliseconds on stderr)."""
    return {**config, "logger": logging.getLogger("pipeline.kafka")}


# -- offsets JSON (Spark's JsonUtils) -------------------------------------------------------


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """`{(t, p): n}` as Spark's Kafka source checkpoints it: `{"t": {"p": n}}`, partitions in
    ascending order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of `offsets_to_json`."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in value.items()
        for partition, offset in partitions.items()
    }


def _parse_partition_map(option: str, text: str, example: str) -> dict[TopicPartition, int]:
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict) or not all(
            isinstance(parts, dict)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in parts.values())
            for parts in parsed.values()
        ):
            raise ValueError("not a map of topic to map of partition to number")
        return offsets_from_json(parsed)
    except ValueError as exc:
        raise OptionError(
            f"option '{option}': expected e.g. {example}, got {text!r} ({exc})"
        ) from None


def parse_assign(text: str) -> dict[str, list[int]]:
    """`assign` JSON `{"t": [0, 1]}` as `{topic: sorted partitions}`."""
    if not text.strip().startswith("{"):
        raise OptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is {text!r}"
        )
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict) or not all(
            isinstance(parts, list)
            and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            for parts in parsed.values()
        ):
            raise ValueError("not a map of topic to a list of partition numbers")
    except ValueError as exc:
        raise OptionError(
            f'option \'assign\': expected e.g. {{"topicA":[0,1],"topicB":[2,4]}}, '
            f"got {text!r} ({exc})"
        ) from None
    return {topic: sorted(set(parts)) for topic, parts in parsed.items()}


# -- what to read ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: exactly one of Spark's three strategies."""

    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern
    assigned: Mapping[str, list[int]] | None = None  # assign

    def describe(self) -> str:
        if self.assigned is not None:
            return f"assign={json.dumps(dict(self.assigned), separators=(',', ':'))}"
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return f"subscribe={','.join(self.topics)}"

    def matches(self, topic: str) -> bool:
        """Whether `topic` is one this subscription reads (internal topics never match a
        pattern, as with the Java client's default `exclude.internal.topics`)."""
        if self.assigned is not None:
            return topic in self.assigned
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends, before it is resolved on the broker.

    `kind` is "earliest", "latest", "offsets" (`offsets`: -2/-1 allowed per partition),
    "timestamps" (`timestamps` per partition) or "timestamp" (one `timestamp` for every
    partition). `no_match_latest`: a timestamp matching no record resolves to the latest
    offset instead of failing (Spark's startingOffsetsByTimestampStrategy=latest).
    """

    kind: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    no_match_latest: bool = False


def _parse_offset_spec(
    options: Mapping[str, str],
    offsets_key: str,
    by_timestamp_key: str,
    timestamp_key: str,
    default: str,
) -> OffsetSpec:
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    no_match_latest = strategy == "latest"
    # Spark's order of preference: one timestamp, timestamps per partition, offsets.
    if timestamp_key in options:
        text = options[timestamp_key].strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(text), no_match_latest=no_match_latest)
        except ValueError:
            raise OptionError(
                f"option '{timestamp_key}': expected a single long value, got {text!r}"
            ) from None
    if by_timestamp_key in options:
        timestamps = _parse_partition_map(
            by_timestamp_key, options[by_timestamp_key], TIMESTAMPS_EXAMPLE
        )
        return OffsetSpec("timestamps", timestamps=timestamps, no_match_latest=no_match_latest)
    text = options.get(offsets_key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    offsets = _parse_partition_map(offsets_key, text, OFFSETS_EXAMPLE)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"option '{offsets_key}': offset {offset} for {topic}-{partition} is neither "
                f"an offset nor -2 (earliest) or -1 (latest)"
            )
    return OffsetSpec("offsets", offsets=offsets)


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source needs, checked. Picklable: it travels to executors."""

    bootstrap_servers: str
    client_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    poll_timeout_ms: int
    fetch_offset_timeout_ms: int

    def consumer_config(self) -> dict[str, str]:
        """confluent-kafka Consumer settings for reading exact ranges: no group management,
        no commits, an out-of-range fetch reported instead of silently reset."""
        config = {
            # The Java client's default, which Spark's source uses; raftka has no
            # transactions, so read_committed would read the same records.
            "isolation.level": "read_uncommitted",
            **self.client_config,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
        }
        # The Python binding wants a group id although nothing joins or commits with it.
        config.setdefault("group.id", f"spark-raftka-{uuid.uuid4().hex[:12]}")
        return config


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    config = {}
    for key, value in options.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _REFUSED_CLIENT_CONFIGS:
            raise OptionError(_REFUSED_CLIENT_CONFIGS[name])
        config[name] = value
    if "bootstrap.servers" not in config or not config["bootstrap.servers"].strip():
        raise OptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring the Kafka "
            'client, e.g. .option("kafka.bootstrap.servers", "127.0.0.1:9092")'
        )
    return config


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    if not given:
        raise OptionError(
            "One of the following options must be specified for the raftka source: "
            "subscribe, subscribePattern, assign."
        )
    if len(given) > 1:
        raise OptionError(
            "Only one of the following options can be specified for the raftka source: "
            "subscribe, subscribePattern, assign."
        )
    (key,) = given
    value = options[key]
    if key == "assign":
        return Subscription(assigned=parse_assign(value))
    if key == "subscribepattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(
                f"Pattern to subscribe is empty as specified value for option "
                f"'subscribePattern' is {value!r}"
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"option 'subscribePattern': bad pattern {pattern!r}: {exc}"
            ) from None
        return Subscription(pattern=pattern)
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise OptionError(
            f"No topics to subscribe to as specified value for option 'subscribe' is {value!r}"
        )
    return Subscription(topics=topics)


def _bool(options: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    text = options.get(key, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {text!r}")
    return text == "true"


def _positive_int(options: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in options:
        return None
    text = options[key].strip()
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {value}")
    return value


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and parse a read's options (keys case-insensitive, as Spark passes them).

    Defaults follow Spark's Kafka source: a batch read covers [earliest, latest), a stream
    starts at latest; `failOnDataLoss` is true and `includeHeaders` false.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    client_config = _client_config(lowered)
    subscription = _subscription(lowered)
    starting = _parse_offset_spec(
        lowered,
        "startingoffsets",
        "startingoffsetsbytimestamp",
        "startingtimestamp",
        "latest" if streaming else "earliest",
    )
    ending = _parse_offset_spec(
        lowered, "endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp", "latest"
    )
    if streaming:
        for key, name in (
            ("endingoffsets", "endingOffsets"),
            ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"),
            ("endingtimestamp", "endingTimestamp"),
        ):
            if key in lowered:
                raise OptionError(f"option '{name}': ending offset not valid in streaming queries")
    else:
        if starting.kind == "latest":
            raise OptionError("starting offset can't be latest for batch queries")
        for (topic, partition), offset in starting.offsets.items():
            if offset == LATEST:
                raise OptionError(
                    f"startingOffsets for {topic}-{partition} can't be latest for batch queries"
                )
        if ending.kind == "earliest":
            raise OptionError("ending offset can't be earliest for batch queries")
        for (topic, partition), offset in ending.offsets.items():
            if offset == EARLIEST:
                raise OptionError(
                    f"ending offset for {topic}-{partition} can't be earliest for batch queries"
                )
        if starting.kind == "offsets" and ending.kind == "offsets":
            if set(starting.offsets) != set(ending.offsets):
                raise OptionError(
                    "startingOffsets and endingOffsets must name the same partitions: "
                    f"{sorted(starting.offsets)} vs {sorted(ending.offsets)}"
                )
            for tp, start in starting.offsets.items():
                end = ending.offsets[tp]
                if start >= 0 and end >= 0 and start > end:
                    raise OptionError(
                        f"startingOffsets {start} is after endingOffsets {end} for {tp[0]}-{tp[1]}"
                    )
    if subscription.assigned is not None and starting.kind == "offsets":
        assigned = {(t, p) for t, parts in subscription.assigned.items() for p in parts}
        if set(starting.offsets) != assigned:
            raise OptionError(
                "If startingOffsets contains specific offsets, you must specify all "
                f"TopicPartitions. Use -1 for latest, -2 for earliest. Specified: "
                f"{sorted(starting.offsets)} Assigned: {sorted(assigned)}"
            )
    poll_timeout_ms = _positive_int(
        lowered, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs"
    )
    fetch_timeout_ms = _positive_int(lowered, "fetchoffset.timeoutms", "fetchOffset.timeoutMs")
    return SourceOptions(
        bootstrap_servers=client_config["bootstrap.servers"],
        client_config=client_config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(lowered, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(lowered, "includeheaders", "includeHeaders", False),
        max_offsets_per_trigger=_positive_int(
            lowered, "maxoffsetspertrigger", "maxOffsetsPerTrigger"
        ),
        poll_timeout_ms=poll_timeout_ms or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_timeout_ms=fetch_timeout_ms or DEFAULT_FETCH_OFFSET_TIMEOUT_MS,
    )


@dataclass(frozen=True)
class SinkOptions:
    """A write's options: the client config, and a `topic` that overrides the column."""

    bootstrap_servers: str
    client_config: Mapping[str, str]
    topic: str | None

    def producer_config(self) -> dict[str, str]:
        """confluent-kafka Producer settings: the Java client's defaults, which Spark's sink
        uses (idempotent, acks=all), unless kafka.* options say otherwise."""
        return {"enable.idempotence": "true", "acks": "all", **self.client_config}


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check and parse a write's options (keys case-insensitive)."""
    lowered = {k.lower(): v for k, v in options.items()}
    client_config = _client_config(lowered)
    topic = lowered.get("topic")
    topic = topic.strip() if topic is not None else None
    if topic == "":
        raise OptionError("option 'topic' is empty")
    return SinkOptions(client_config["bootstrap.servers"], client_config, topic)


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """End offsets reading at most about `limit` offsets in total from `start` toward
    `latest`, shared among partitions in proportion to what each has waiting (Spark's
    `maxOffsetsPerTrigger` rule: a partition with anything waiting gets at least one)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * sizes[tp] / total
        step = 1 if share < 1 else int(share)
        out[tp] = min(end, start[tp] + step)
    return out
