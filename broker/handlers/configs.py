"""DescribeConfigs for topics and this broker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.config import TOPIC_CONFIGS
from broker.handlers.common import NO_THROTTLE, response_schema
from protocol.api import build

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


def _entries(
    module: Any, request: Any, described: Any, keys: set[str] | None, synonyms_of: Any
) -> tuple[Any, ...]:
    entries = []
    for definition, value, source in described:
        if keys is not None and definition.name not in keys:
            continue
        synonyms = ()
        if getattr(request, "include_synonyms", False):
            synonyms = tuple(
                build(module.DescribeConfigsSynonym, name=n, value=v, source=int(s))
                for n, v, s in synonyms_of(definition.name, value, source)
            )
        entries.append(
            build(
                module.DescribeConfigsResourceResult,
                name=definition.name,
                value=value,
                read_only=definition.read_only,
                config_source=int(source),
                is_default=source.name == "DEFAULT_CONFIG",
                is_sensitive=False,
                synonyms=synonyms,
                config_type=int(definition.type),
                documentation=definition.doc
                if getattr(request, "include_documentation", False)
                else None,
            )
        )
    return tuple(entries)


async def handle_describe_configs(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        error, message, configs = ErrorCode.none, None, ()
        if resource.resource_type == RESOURCE_TOPIC:
            topic = broker.topics.get(resource.resource_name)
            if topic is None:
                error, message = (
                    ErrorCode.unknown_topic_or_partition,
                    f"Topic {resource.resource_name} does not exist.",
                )
            else:
                configs = _entries(
                    module,
                    request,
                    topic.config.describe(),
                    keys,
                    lambda name, _v, _s, config=topic.config: config.synonyms(name),
                )
        elif resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                error, message = (
                    ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {broker.node_id} or empty string, "
                    f"but received {resource.resource_name}",
                )
            else:
                # A static broker config's only synonym is itself.
                configs = _entries(
                    module,
                    request,
                    broker.config.describe(),
                    keys,
                    lambda name, value, source: [(name, value, source)],
                )
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"Unsupported resource type {resource.resource_type} for DescribeConfigs",
            )
        results.append(
            build(
                module.DescribeConfigsResult,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, results=tuple(results))


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _alter_topic(
    broker: Any, name: str, changes: dict[str, str | None], replace: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    topic = broker.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist."
    overrides: dict[str, str] = (
        {} if replace else {k: topic.config.render(k) for k in topic.config.overrides}
    )
    for key, value in changes.items():
        if value is None:
            overrides.pop(key, None)
        else:
            overrides[key] = value
    result = await broker.controller.execute(
        {"op": "alter_configs", "name": name, "configs": overrides, "validate_only": validate_only}
    )
    return ErrorCode(result["error_code"]), result["error_message"]


def _resource_result(module: Any, resource: Any, error: ErrorCode, message: str | None) -> Any:
    return build(
        module.AlterConfigsResourceResponse,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )


BROKER_DYNAMIC_UNSUPPORTED = (
    "Dynamic broker configs are not supported; set broker configs at start-up with "
    "--config NAME=VALUE or --config-file"
)


async def handle_incremental_alter_configs(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        if resource.resource_type == RESOURCE_TOPIC:
            changes: dict[str, str | None] = {}
            for entry in resource.configs:
                if entry.config_operation == SET:
                    changes[entry.name] = entry.value
                elif entry.config_operation == DELETE:
                    changes[entry.name] = None
                else:
                    error = ErrorCode.invalid_config
                    message = (
                        f"Config {entry.name} is not a list; APPEND and SUBTRACT apply only "
                        "to list configs"
                    )
                    break
                if entry.name not in TOPIC_CONFIGS:
                    error, message = (
                        ErrorCode.invalid_config,
                        f"Unknown topic config name: {entry.name}",
                    )
                    break
            if error == ErrorCode.none:
                error, message = await _alter_topic(
                    broker, resource.resource_name, changes, False, request.validate_only
                )
        elif resource.resource_type == RESOURCE_BROKER:
            error, message = ErrorCode.invalid_config, BROKER_DYNAMIC_UNSUPPORTED
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"Unsupported resource type {resource.resource_type} for IncrementalAlterConfigs",
            )
        results.append(_resource_result(module, resource, error, message))
    return build(entity, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_alter_configs(context: Any, request: Any) -> Any:
    """Legacy AlterConfigs: the given configs replace all of the topic's overrides."""
    broker = context.broker
    entity, module = response_schema(context)
    results = []
    for resource in request.resources:
        if resource.resource_type == RESOURCE_TOPIC:
            error, message = await _alter_topic(
                broker,
                resource.resource_name,
                {c.name: c.value for c in resource.configs},
                True,
                request.validate_only,
            )
        elif resource.resource_type == RESOURCE_BROKER:
            error, message = ErrorCode.invalid_config, BROKER_DYNAMIC_UNSUPPORTED
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"Unsupported resource type {resource.resource_type} for AlterConfigs",
            )
        results.append(_resource_result(module, resource, error, message))
    return build(entity, throttle_time=NO_THROTTLE, responses=tuple(results))
