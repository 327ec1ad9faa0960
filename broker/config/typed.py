"""Typed reads of configs by name, shared by the broker's and a topic's configuration."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import ClassVar, TypeVar

from raftka.broker.config.types import ConfigDef, ConfigType, ConfigValue, python_type

_T = TypeVar("_T", bool, int, float, str)


@cache
def _check_declared(name: str, config_type: ConfigType, wanted: str, getter: str) -> None:
    """TypeError unless the config is declared of the type the getter reads (asked once per
    config and getter: the reads are on every request's path)."""
    declared = python_type(config_type)
    if declared.__name__ != wanted:
        raise TypeError(
            f"{getter}({name!r}): {name} is declared {config_type.name} "
            f"({declared.__name__}), not {wanted}"
        )


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
        _check_declared(name, self._definitions[name].type, wanted.__name__, getter)
        value = self.get(name)
        if value is None:
            return None
        # A bool is an int to isinstance; parse never gives one for an integer config.
        if not isinstance(value, wanted) or isinstance(value, bool) != (wanted is bool):
            raise TypeError(f"{getter}({name!r}): {name} holds {value!r}, not {wanted.__name__}")
        return value
