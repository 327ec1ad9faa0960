"""DescribeConfigs for topics and this broker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.config import BROKER_CONFIGS
from broker.handlers.common import NO_THROTTLE, response_schema
from protocol.api import build

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


def _entries(module: Any, request: Any, described: Any, synonyms_of: Any) -> tuple[Any, ...]:
    entries = []
    for definition, value, source in described:
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
                described = [
                    d for d in topic.config.describe() if keys is None or d[0].name in keys
                ]
                configs = _entries(
                    module, request, described, lambda name, _v, _s: topic.config.synonyms(name)
                )
        elif resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                error, message = (
                    ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {broker.node_id} or empty string, "
                    f"but received {resource.resource_name}",
                )
            else:
                described = [
                    d for d in broker.config.describe() if keys is None or d[0].name in keys
                ]
                configs = _entries(
                    module,
                    request,
                    described,
                    lambda name, value, source: (
                        [(name, value, source)] if name in BROKER_CONFIGS else []
                    ),
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
