"""The broker's resolved configuration (BrokerConfig): the dynamic configs of the cluster
metadata (this broker's own, then the cluster-wide default) over the static ones, and which
configs may change at run time."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from raftka.broker.config.parsing import (
    LISTENER_PREFIX,
    env_name,
    listener_config_definition,
    split_listener_config,
)
from raftka.broker.config.tables import BROKER_CONFIGS
from raftka.broker.config.typed import _TypedConfigs
from raftka.broker.config.types import ConfigDef, ConfigError, ConfigSource, ConfigValue

logger = logging.getLogger("raftka.config")

#: Broker configs that IncrementalAlterConfigs/AlterConfigs may change at run time, per broker
#: or as the cluster-wide default (resource name ""): Kafka's dynamic broker configs that
#: raftka has, every one of them not declared read-only.
DYNAMIC_BROKER_CONFIGS = frozenset(
    name for name, definition in BROKER_CONFIGS.items() if not definition.read_only
)

#: Broker configs that set one value under several names, highest precedence first
#: (Kafka's DynamicBrokerConfig.brokerConfigSynonyms).
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonym_names(name: str) -> tuple[str, ...]:
    """The names that set `name`'s value, highest precedence first (`name` alone for most)."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            # log.flush.scheduler.interval.ms stands for itself alone, as in Kafka.
            return group if name != "log.flush.scheduler.interval.ms" else (name,)
    return (name,)


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
        #: Dynamic configs from the cluster metadata: this broker's own, and the default.
        self._dynamic: dict[str, ConfigValue] = {}
        self._dynamic_default: dict[str, ConfigValue] = {}
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
                        "see `raftka configs` or docs/reference/configuration.md"
                    )
                self._static[name] = definition.parse(raw)

    def set_dynamic(self, own: Mapping[str, str], default: Mapping[str, str]) -> None:
        """The dynamic configs as the cluster metadata now holds them: this broker's own and
        the cluster-wide default, as text. A value that no longer parses (stored by another
        version) is skipped with a warning; the static value applies."""
        self._dynamic = self._parse_dynamic(own, "this broker's")
        self._dynamic_default = self._parse_dynamic(default, "the cluster-wide default")

    @staticmethod
    def _parse_dynamic(values: Mapping[str, str], whose: str) -> dict[str, ConfigValue]:
        parsed: dict[str, ConfigValue] = {}
        for name, raw in values.items():
            definition = BROKER_CONFIGS.get(name)
            try:
                if definition is None:
                    raise ConfigError(f"unknown broker config {name!r}")
                parsed[name] = definition.parse(raw)
            except ConfigError as exc:
                logger.warning("ignoring %s dynamic config %s=%r: %s", whose, name, raw, exc)
        return parsed

    def get(self, name: str) -> ConfigValue:
        """The config's value; the typed getters check its type as well."""
        if name in self._dynamic:
            return self._dynamic[name]
        if name in self._dynamic_default:
            return self._dynamic_default[name]
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
        """Where the value comes from, as Kafka reports it: the first of its synonyms."""
        synonyms = self.synonyms(name)
        return synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's synonym list for DescribeConfigs: each name that sets this config with
        its value, this broker's dynamic configs first, then the cluster-wide default, the
        static configs and the defaults, from the first entry of `name` itself on."""
        layers = (
            (self._dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self._dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self._static, ConfigSource.STATIC_BROKER_CONFIG),
            (_DEFAULTS, ConfigSource.DEFAULT_CONFIG),
        )
        found: list[tuple[str, str | None, ConfigSource]] = []
        names = broker_synonym_names(name)
        for values, source in layers:
            for synonym in names:
                if synonym in values:
                    definition = BROKER_CONFIGS[synonym]
                    found.append((synonym, definition.render(values[synonym]), source))
        while found and found[0][0] != name:
            found.pop(0)
        return found

    def describe(self) -> Iterable[tuple[ConfigDef, str | None, ConfigSource]]:
        """Every config with its value and source. A computed config (log.roll.ms, ...)
        not set under its own name has no value, as Kafka describes it (its value then
        comes from the synonym that is set: log.roll.hours, ...)."""
        for name, definition in BROKER_CONFIGS.items():
            value = (
                None if name in self._computed and not self._set_itself(name) else self.get(name)
            )
            yield definition, definition.render(value), self.source(name)

    def _set_itself(self, name: str) -> bool:
        return name in self._dynamic or name in self._dynamic_default or name in self._static

    def describe_dynamic_default(self) -> Iterable[tuple[ConfigDef, str | None, ConfigSource]]:
        """The cluster-wide default dynamic configs alone (DescribeConfigs on the BROKER
        resource with the empty name)."""
        for name, value in self._dynamic_default.items():
            definition = BROKER_CONFIGS[name]
            yield definition, definition.render(value), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


#: Every broker config that has a default, with it (never changed).
_DEFAULTS: Mapping[str, ConfigValue] = MappingProxyType(
    {name: d.default for name, d in BROKER_CONFIGS.items() if d.default is not None}
)
