"""What a config is: its Kafka type and source, and its definition (ConfigDef: name, type,
default, bounds), which parses and renders its values."""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
    GROUP_CONFIG = 8


class ConfigError(ValueError):
    """An invalid config name or value; the message names both and what is accepted."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    minimum: int | None = None
    #: The accepted values; for a LIST config, the accepted items of the list.
    choices: tuple[str, ...] | None = None
    #: Accepted beside `choices`: one of these prefixes followed by a name (`header:` for
    #: values such as `header:tenant`).
    named_choices: tuple[str, ...] = ()
    #: Numeric configs with an upper bound; `also` lists values accepted outside the range.
    maximum: int | None = None
    also: tuple[int, ...] = ()
    #: A broker config that cannot change at run time (DescribeConfigs' read_only; a
    #: broker config without it is a dynamic one). Topic configs never set it.
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
            elif self.type == ConfigType.LIST:
                return self._parse_list(str(raw))
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
                    f"Value must be at least {self.minimum}{self._also_text()}"
                )
            if self.maximum is not None and value > self.maximum:
                raise ConfigError(
                    f"Invalid value {value} for configuration {self.name}: "
                    f"Value must be no more than {self.maximum}{self._also_text()}"
                )
        if self.choices is not None and value not in self.choices and not self._named(value):
            raise ConfigError(
                f"Invalid value {value!r} for configuration {self.name}: "
                f"must be one of {', '.join(self.accepted_choices())}"
            )
        return value

    def _named(self, value: ConfigValue) -> bool:
        return isinstance(value, str) and any(
            value.startswith(prefix) and len(value) > len(prefix) for prefix in self.named_choices
        )

    def accepted_choices(self) -> tuple[str, ...]:
        """The choices as a reader is told them (a named choice as `PREFIXNAME`)."""
        return (*(self.choices or ()), *(f"{prefix}NAME" for prefix in self.named_choices))

    def _parse_list(self, raw: str) -> str:
        """A LIST value as Kafka reads it (items separated by commas, whitespace around them
        ignored, empty text: no items), each item checked, kept joined by plain commas."""
        text = raw.strip()
        items = [item.strip() for item in text.split(",")] if text else []
        if self.choices is not None:
            for item in items:
                if item not in self.choices:
                    raise ConfigError(
                        f"Invalid value {item} for configuration {self.name}: "
                        f"String must be one of: {', '.join(self.choices)}"
                    )
        return ",".join(items)

    def items(self, value: ConfigValue) -> list[str]:
        """The items of a LIST config's value (none for an empty or absent value)."""
        text = "" if value is None else str(value)
        return [item for item in text.split(",") if item]

    def _also_text(self) -> str:
        return "".join(f" or equal to {value}" for value in self.also)

    def render(self, value: ConfigValue) -> str | None:
        """Kafka's textual form of a value, as DescribeConfigs reports it."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


# Short names the definition tables use for the config types.
B, S, INT, L = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG
SHORT = ConfigType.SHORT
DOUBLE = ConfigType.DOUBLE
P = ConfigType.PASSWORD
LIST = ConfigType.LIST
DAY_MS = 24 * 3600 * 1000
