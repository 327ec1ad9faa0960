"""Config overrides (Kafka's ConfigurationControlManager): a topic's overrides and the dynamic
broker configs, decided from the image without I/O."""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    AlterBrokerConfigsCommand,
    AlterConfigsCommand,
    AlterGroupConfigsCommand,
)
from raftka.broker.cluster.control.result import ControllerResult, errors_as_results
from raftka.broker.cluster.control.topics import existing_topic, render_configs
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import AlterBrokerConfigs, AlterGroupConfigs, AlterTopicConfigs
from raftka.broker.cluster.validation import (
    TopicError,
    check_no_null_configs,
    validate_topic_config_values,
)
from raftka.broker.config import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, GROUP_CONFIGS, ConfigError


@errors_as_results
def alter_topic_configs(image: MetadataImage, command: AlterConfigsCommand) -> ControllerResult:
    """AlterConfigs on a topic: its overrides become `command.configs`."""
    record = validate_alter_configs(image, command.name, command.configs)
    return ControllerResult(() if command.validate_only else (record,))


@errors_as_results
def alter_broker_configs(
    image: MetadataImage, command: AlterBrokerConfigsCommand
) -> ControllerResult:
    """IncrementalAlterConfigs on a BROKER resource (an id, or "" for the cluster default)."""
    record = validate_alter_broker_configs(image, command.resource, command.changes)
    return ControllerResult(() if command.validate_only else (record,))


@errors_as_results
def alter_group_configs(
    image: MetadataImage, command: AlterGroupConfigsCommand
) -> ControllerResult:
    """A GROUP resource's configs become `command.configs`: known names and values of their
    types (the bounds from broker configs were checked by the broker that took the request);
    INVALID_CONFIG otherwise. Kafka keeps configs of a group that does not exist yet."""
    if not command.group:
        raise TopicError(ErrorCode.invalid_request, "Group name must not be empty")
    configs: dict[str, str] = {}
    for name, value in command.configs.items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise TopicError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
        if value is None:
            raise TopicError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        try:
            configs[name] = definition.render(definition.parse(value)) or ""
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    record = AlterGroupConfigs(command.group, configs)
    return ControllerResult(() if command.validate_only else (record,))


def validate_alter_configs(
    image: MetadataImage, name: str, configs: Mapping[str, str | None]
) -> AlterTopicConfigs:
    """The record replacing `name`'s overrides with `configs`; INVALID_CONFIG if bad."""
    topic = existing_topic(image, name)
    check_no_null_configs(configs)
    validate_topic_config_values(configs)
    return AlterTopicConfigs(topic.topic_id, render_configs(configs))


def validate_alter_broker_configs(
    image: MetadataImage, resource: str, changes: Mapping[str, str | None]
) -> AlterBrokerConfigs:
    """The record giving broker `resource` ("" for all) `changes` (None: back to the
    static value), each value stored as Kafka renders it; INVALID_CONFIG for an unknown
    config, INVALID_REQUEST (as Kafka) for one that is not dynamic or a bad value."""
    if resource != "" and not (resource.isdigit() and int(resource) in image.brokers):
        raise TopicError(
            ErrorCode.invalid_request,
            f"Broker {resource!r} is not registered; name a broker id, or the empty name "
            "for the cluster-wide default.",
        )
    configs = dict(image.broker_configs.get(resource, {}))
    unknown = sorted(name for name in changes if name not in BROKER_CONFIGS)
    if unknown:
        raise TopicError(ErrorCode.invalid_config, f"Unknown broker config name: {unknown[0]}")
    # Kafka answers a broker config it cannot take with INVALID_REQUEST (KAFKA-13609).
    static = sorted(
        name
        for name, value in changes.items()
        if value is not None and name not in DYNAMIC_BROKER_CONFIGS
    )
    if static:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: Set({', '.join(static)}); the "
            f"dynamic broker configs are {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))}. Set "
            "the others at start-up with --config NAME=VALUE or --config-file.",
        )
    for name, value in changes.items():
        if value is None:
            configs.pop(name, None)
            continue
        try:
            configs[name] = BROKER_CONFIGS[name].render(BROKER_CONFIGS[name].parse(value)) or ""
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_request, str(exc)) from None
    return AlterBrokerConfigs(resource, configs)
