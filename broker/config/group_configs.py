"""Group configs (Kafka 4's GroupConfig): what one consumer or share group may set for
itself, the broker config each falls back to, and the broker's bounds they are checked
against; GroupConfig is a group's effective configuration."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from raftka.broker.config.broker_config import BrokerConfig
from raftka.broker.config.typed import _TypedConfigs
from raftka.broker.config.types import (
    INT,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigValue,
    S,
)

GROUP_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "consumer.session.timeout.ms",
        INT,
        45000,
        "Session timeout of this consumer-protocol group's members.",
        minimum=1,
    ),
    ConfigDef(
        "consumer.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval of this consumer-protocol group's members.",
        minimum=1,
    ),
    ConfigDef(
        "share.session.timeout.ms",
        INT,
        45000,
        "A member of this share group that does not heartbeat for this long leaves it.",
        minimum=1,
    ),
    ConfigDef(
        "share.heartbeat.interval.ms",
        INT,
        5000,
        "How often this share group's members heartbeat.",
        minimum=1,
    ),
    ConfigDef(
        "share.record.lock.duration.ms",
        INT,
        30000,
        "How long a member of this share group holds the records it acquired.",
        minimum=1000,
    ),
    ConfigDef(
        "share.auto.offset.reset",
        S,
        "latest",
        "Where this share group starts on a partition it has no state for: earliest (the "
        "log start) or latest (the high watermark).",
        choices=("earliest", "latest"),
    ),
)

GROUP_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in GROUP_CONFIG_DEFS}

#: Group config -> the broker config it falls back to.
GROUP_SYNONYMS: dict[str, str] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.auto.offset.reset": "share.auto.offset.reset",
}

#: Group config -> the broker configs bounding it (minimum, maximum), as Kafka checks them.
GROUP_BOUNDS: dict[str, tuple[str, str]] = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    "share.session.timeout.ms": (
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    ),
    "share.heartbeat.interval.ms": (
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    "share.record.lock.duration.ms": (
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
}

#: (session timeout, heartbeat interval): the first must exceed the second.
_SESSION_OVER_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)


class GroupConfig(_TypedConfigs):
    """A group's effective configuration: its own configs over the broker's values. Made
    afresh when asked for (it reads the broker's current values)."""

    _definitions = GROUP_CONFIGS

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, ConfigValue]) -> None:
        self.broker = broker
        self.overrides = dict(overrides)

    def get(self, name: str) -> ConfigValue:
        if name in self.overrides:
            return self.overrides[name]
        return self.broker.get(GROUP_SYNONYMS[name])

    def source(self, name: str) -> ConfigSource:
        """GROUP_CONFIG for the group's own value; DEFAULT_CONFIG for the broker's, as
        Kafka reports a group config it falls back for."""
        if name in self.overrides:
            return ConfigSource.GROUP_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's synonym list: the config itself, with its value and source."""
        return [(name, GROUP_CONFIGS[name].render(self.get(name)), self.source(name))]

    def describe(self) -> Iterable[tuple[ConfigDef, str | None, ConfigSource]]:
        for name, definition in GROUP_CONFIGS.items():
            yield definition, definition.render(self.get(name)), self.source(name)


def validate_group_configs(
    configs: Mapping[str, str], broker: BrokerConfig
) -> dict[str, ConfigValue]:
    """A group's configs parsed and checked as Kafka's GroupConfig.validate checks them:
    known names, each value of its type, within the broker's bounds, and each session
    timeout above its heartbeat interval. ConfigError names what is wrong."""
    parsed: dict[str, ConfigValue] = {}
    for name, raw in configs.items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown group config name: {name}")
        parsed[name] = definition.parse(raw)
    effective = GroupConfig(broker, parsed)
    # Bounds apply to what the group sets; the broker's own values are its operator's.
    for name in parsed:
        if name not in GROUP_BOUNDS:
            continue
        low, high = GROUP_BOUNDS[name]
        value = effective.get_int(name)
        if value < broker.get_int(low):
            raise ConfigError(f"{name} must be greater than or equal to {low}")
        if value > broker.get_int(high):
            raise ConfigError(f"{name} must be less than or equal to {high}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if (session in parsed or heartbeat in parsed) and effective.get_int(
            session
        ) <= effective.get_int(heartbeat):
            raise ConfigError(f"{session} must be greater than {heartbeat}")
    return parsed
