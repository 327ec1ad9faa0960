"""IncrementalAlterConfigs' operations on a resource's configs (Kafka's AlterConfigOp: SET,
DELETE, and APPEND and SUBTRACT on LIST configs), computed without I/O."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from raftka.broker.config.types import ConfigDef, ConfigError, ConfigType


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation values."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_config_ops(
    current: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
    definitions: Mapping[str, ConfigDef],
    kind: str,
) -> dict[str, str]:
    """The configs set on a resource after `ops` (name, operation, value), in order, on its
    `current` ones. APPEND adds the items not yet in the list and SUBTRACT removes the
    given ones, starting from the config's default when the resource does not set it, as
    Kafka's controller does. ConfigError names an unknown config (`kind`: "topic",
    "broker", "group") or APPEND/SUBTRACT on a config that is not a LIST; values are
    checked by whoever stores the result."""
    configs = dict(current)
    for name, op, value in ops:
        definition = definitions.get(name)
        if definition is None:
            raise ConfigError(f"Unknown {kind} config name: {name}")
        if op == AlterConfigOp.SET:
            configs[name] = "" if value is None else value
        elif op == AlterConfigOp.DELETE:
            configs.pop(name, None)
        else:
            if definition.type != ConfigType.LIST:
                raise ConfigError(f"Can't {op.name} to key {name} because its type is not LIST.")
            base = configs[name] if name in configs else definition.render(definition.default)
            items = definition.items(base)
            given = [item for item in (value or "").split(",")]
            if op == AlterConfigOp.APPEND:
                items += [item for item in given if item not in items]
            else:
                for item in given:
                    if item in items:
                        items.remove(item)
            configs[name] = ",".join(items)
    return configs
