"""The GROUP resources of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (Kafka
4's group configs, `kafka-configs --entity-type groups`): what one consumer or share group
sets for itself in place of the broker's values.

The broker that takes a change checks it against its bounds (`group.share.min.*`, ...) as
Kafka's GroupConfig.validate does; the controller stores it in the cluster metadata, so the
coordinator and every partition leader of the group read the same values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterGroupConfigsCommand
from raftka.broker.config import (
    GROUP_CONFIGS,
    BrokerConfig,
    ConfigDef,
    ConfigError,
    ConfigSource,
    GroupConfig,
    validate_group_configs,
)
from raftka.broker.config.alter_ops import apply_config_ops
from raftka.broker.handlers.broker_configs import AlteredConfig, RequestError, config_ops

if TYPE_CHECKING:
    from raftka.broker.services import ControllerClient

Described = tuple[ConfigDef, str | None, ConfigSource]
Synonym = tuple[str, str | None, ConfigSource]


def group_config(
    broker: BrokerConfig, group_configs: Mapping[str, Mapping[str, str]], group: str
) -> GroupConfig:
    """The group's effective configuration: its own configs over the broker's values (a
    stored value that no longer parses is left out: the broker's applies)."""
    overrides = {}
    for name, raw in group_configs.get(group, {}).items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            continue
        try:
            overrides[name] = definition.parse(raw)
        except ConfigError:
            continue
    return GroupConfig(broker, overrides)


def describe_group(
    broker: BrokerConfig, group_configs: Mapping[str, Mapping[str, str]], group: str
) -> tuple[Iterable[Described], dict[str, list[Synonym]]]:
    """Every group config of the group with its value, source and synonyms."""
    if not group:
        raise RequestError("Group name must not be empty")
    config = group_config(broker, group_configs, group)
    return list(config.describe()), {name: config.synonyms(name) for name in GROUP_CONFIGS}


async def _store(
    controller: ControllerClient,
    broker: BrokerConfig,
    group: str,
    configs: Mapping[str, str],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    try:
        validate_group_configs(configs, broker)
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    result = await controller.execute(AlterGroupConfigsCommand(group, configs, validate_only))
    return result.error_code, result.error_message


async def alter_group_incrementally(
    controller: ControllerClient,
    broker: BrokerConfig,
    group: str,
    configs: Sequence[AlteredConfig],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs on a GROUP resource."""
    current = controller.image.group_configs.get(group, {})
    try:
        if not group:
            raise RequestError("Group name must not be empty")
        altered = apply_config_ops(current, config_ops(configs), GROUP_CONFIGS, "group")
    except RequestError as exc:
        return ErrorCode.invalid_request, str(exc)
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    return await _store(controller, broker, group, altered, validate_only)


async def alter_group(
    controller: ControllerClient,
    broker: BrokerConfig,
    group: str,
    configs: Mapping[str, str | None],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """Legacy AlterConfigs on a GROUP resource: the given configs replace the group's."""
    nulls = [name for name, value in configs.items() if value is None]
    if not group:
        return ErrorCode.invalid_request, "Group name must not be empty"
    if nulls:
        return ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
    given = {name: value for name, value in configs.items() if value is not None}
    return await _store(controller, broker, group, given, validate_only)
