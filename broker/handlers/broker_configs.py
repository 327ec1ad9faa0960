"""The BROKER resources of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: this
broker's configs (resource name: its id) and the cluster-wide default dynamic configs
(the empty name), as Kafka's ConfigHelper and ConfigAdminManager answer them.

A resource naming a broker is sent by clients to that broker, so a broker answers only for
itself and the empty name. The change itself is decided by the controller (which configs are
dynamic, their values) and stored in the cluster metadata, which every broker applies."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterBrokerConfigsCommand
from raftka.broker.config import BROKER_CONFIGS, BrokerConfig, ConfigDef, ConfigError, ConfigSource
from raftka.broker.config.alter_ops import AlterConfigOp, apply_config_ops

if TYPE_CHECKING:
    from raftka.broker.services import ControllerClient

# (config, its value as text, where the value comes from), as DescribeConfigs reports it.
Described = tuple[ConfigDef, str | None, ConfigSource]
Synonym = tuple[str, str | None, ConfigSource]


class RequestError(Exception):
    """A resource of a request that Kafka answers with INVALID_REQUEST."""


class AlteredConfig(Protocol):
    """One config change of an IncrementalAlterConfigs request."""

    @property
    def name(self) -> str: ...

    @property
    def config_operation(self) -> int: ...

    @property
    def value(self) -> str | None: ...


def config_ops(configs: Sequence[AlteredConfig]) -> list[tuple[str, AlterConfigOp, str | None]]:
    """An IncrementalAlterConfigs resource's operations, checked as Kafka checks them before
    looking at the configs; RequestError otherwise."""
    names = [entry.name for entry in configs]
    if len(set(names)) != len(names):
        raise RequestError("Error due to duplicate config keys")
    ops = []
    nulls = []
    for entry in configs:
        if entry.config_operation not in set(AlterConfigOp):
            raise RequestError(f"Unknown operations type {entry.config_operation}")
        op = AlterConfigOp(entry.config_operation)
        if op != AlterConfigOp.DELETE and entry.value is None:
            nulls.append(entry.name)
        ops.append((entry.name, op, entry.value))
    if nulls:
        raise RequestError(f"Null value not supported for : {', '.join(nulls)}")
    return ops


def check_broker_name(resource_name: str, node_id: int) -> None:
    """RequestError unless the resource is the cluster default ("") or this broker."""
    if resource_name == "":
        return
    if not resource_name.lstrip("-").isdigit():
        raise RequestError(f"Node id must be an integer, but it is: {resource_name}")
    if int(resource_name) != node_id:
        raise RequestError(
            f"Unexpected broker id, expected {node_id}, but received {resource_name}"
        )


def describe_broker(
    config: BrokerConfig, resource_name: str, node_id: int
) -> tuple[Iterable[Described], dict[str, list[Synonym]]]:
    """The configs DescribeConfigs lists for a BROKER resource and each one's synonyms:
    every config of this broker for its id, the cluster-wide dynamic defaults alone (with
    only their dynamic-default synonyms) for the empty name. RequestError for another id."""
    if resource_name == "":
        described = list(config.describe_dynamic_default())
        synonyms = {
            definition.name: [
                synonym
                for synonym in config.synonyms(definition.name)
                if synonym[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            ]
            for definition, _value, _source in described
        }
        return described, synonyms
    if resource_name != str(node_id):
        raise RequestError(
            f"Unexpected broker id, expected {node_id} or empty string, "
            f"but received {resource_name}"
        )
    described = list(config.describe())
    return described, {d.name: config.synonyms(d.name) for d, _value, _source in described}


async def _alter(
    controller: ControllerClient,
    resource_name: str,
    current: Mapping[str, str],
    configs: Mapping[str, str],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """Store `configs` as the resource's complete set of dynamic configs."""
    changes: dict[str, str | None] = {
        name: value for name, value in configs.items() if current.get(name) != value
    }
    changes.update({name: None for name in current if name not in configs})
    result = await controller.execute(
        AlterBrokerConfigsCommand(resource_name, changes, validate_only)
    )
    return result.error_code, result.error_message


async def alter_broker_incrementally(
    controller: ControllerClient,
    node_id: int,
    resource_name: str,
    configs: Sequence[AlteredConfig],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs on a BROKER resource."""
    current = controller.image.broker_configs.get(resource_name, {})
    try:
        check_broker_name(resource_name, node_id)
        altered = apply_config_ops(current, config_ops(configs), BROKER_CONFIGS, "broker")
    except RequestError as exc:
        return ErrorCode.invalid_request, str(exc)
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    return await _alter(controller, resource_name, current, altered, validate_only)


async def alter_broker(
    controller: ControllerClient,
    node_id: int,
    resource_name: str,
    configs: Mapping[str, str | None],
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """Legacy AlterConfigs on a BROKER resource: the given configs replace all of its
    dynamic configs."""
    current = controller.image.broker_configs.get(resource_name, {})
    try:
        check_broker_name(resource_name, node_id)
        nulls = [name for name, value in configs.items() if value is None]
        if nulls:
            raise RequestError(f"Null value not supported for : {', '.join(nulls)}")
    except RequestError as exc:
        return ErrorCode.invalid_request, str(exc)
    given = {name: value for name, value in configs.items() if value is not None}
    return await _alter(controller, resource_name, current, given, validate_only)
