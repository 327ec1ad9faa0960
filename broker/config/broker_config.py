"""The broker's resolved configuration (BrokerConfig) and which of its configs may change at
run time."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from raftka.broker.config.parsing import (
    LISTENER_PREFIX,
    env_name,
    listener_config_definition,
    split_listener_config,
)
from raftka.broker.config.tables import BROKER_CONFIGS
from raftka.broker.config.typed import _TypedConfigs
from raftka.broker.config.types import ConfigDef, ConfigError, ConfigSource, ConfigValue

#: Broker configs that IncrementalAlterConfigs may change at run time, per broker or as the
#: cluster-wide default (resource name "").
DYNAMIC_BROKER_CONFIGS = frozenset(
    {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
)


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
            name: environ[env_name(name)] for name in BROKER_CONFIGS if env_name(name) in environ
        }
        sources += [env_values, overrides or {}]
        #: (LISTENER NAME, config) -> value of `listener.name.<listener>.<config>` overrides.
        self._per_listener: dict[tuple[str, str], ConfigValue] = {}
        for source in sources:
            for name, raw in source.items():
                if name.startswith(LISTENER_PREFIX):
                    listener, config_name = split_listener_config(name)
                    typed_as = BROKER_CONFIGS[listener_config_definition(config_name)]
                    self._per_listener[listener, config_name] = typed_as.parse(raw)
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
        return self.get(listener_config_definition(name))

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
