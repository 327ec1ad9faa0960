"""A topic's effective configuration (TopicConfig): its overrides over the broker's values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property

from raftka.broker.config.broker_config import BrokerConfig
from raftka.broker.config.tables import TOPIC_CONFIGS
from raftka.broker.config.topic_configs import RESTORE_IN_PROGRESS, TOPIC_SYNONYMS
from raftka.broker.config.typed import _TypedConfigs
from raftka.broker.config.types import ConfigDef, ConfigSource, ConfigValue


class TopicConfig(_TypedConfigs):
    """A topic's effective configuration: its overrides over the broker's values.

    Never changed once made (a topic whose configs change, or whose broker's dynamic configs
    change, gets a new one), so the typed reads on every request's path
    (`get_int`, `get_str`, `get_bool`) are remembered after the first."""

    _definitions = TOPIC_CONFIGS

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, ConfigValue]) -> None:
        self.broker = broker
        self.overrides = dict(overrides)
        self._ints: dict[str, int] = {}
        self._strs: dict[str, str] = {}
        self._bools: dict[str, bool] = {}

    def get_int(self, name: str) -> int:
        try:
            return self._ints[name]
        except KeyError:
            value = self._ints[name] = super().get_int(name)
            return value

    def get_str(self, name: str) -> str:
        try:
            return self._strs[name]
        except KeyError:
            value = self._strs[name] = super().get_str(name)
            return value

    def get_bool(self, name: str) -> bool:
        try:
            return self._bools[name]
        except KeyError:
            value = self._bools[name] = super().get_bool(name)
            return value

    # Read by every Produce request: attributes once read, which the compiled request path
    # reads without a call.

    @cached_property
    def max_message_bytes(self) -> int:
        return self.get_int("max.message.bytes")

    @cached_property
    def min_insync_replicas(self) -> int:
        return self.get_int("min.insync.replicas")

    @cached_property
    def compression_type(self) -> str:
        return self.get_str("compression.type")

    @cached_property
    def restore_in_progress(self) -> bool:
        """`raftka.restore.in.progress=true`: the topic takes batches as stored."""
        return self.get_str(RESTORE_IN_PROGRESS) == "true"

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
        """The topic's override, else where the broker's value comes from (a dynamic
        default, a static config or the default), as Kafka reports it."""
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
            found.extend(self.broker.synonyms(synonym))
        return found
