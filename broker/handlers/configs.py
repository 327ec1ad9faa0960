"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on topics and brokers (the
BROKER resources are answered by broker_configs.py).

With an authorizer, as Kafka: describing a resource's configs needs DESCRIBE_CONFIGS and
altering them ALTER_CONFIGS, on the topic for a topic (else TOPIC_AUTHORIZATION_FAILED), on
the cluster for a broker or broker logger (else CLUSTER_AUTHORIZATION_FAILED). A denied
resource is answered so before anything else about it is looked at, and left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterConfigsCommand
from raftka.broker.config import (
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
)
from raftka.broker.config.alter_ops import apply_config_ops
from raftka.broker.handlers.broker_configs import (
    AlteredConfig,
    RequestError,
    alter_broker,
    alter_broker_incrementally,
    config_ops,
    describe_broker,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.handlers.group_configs import (
    alter_group,
    alter_group_incrementally,
    describe_group,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.services import ControllerClient, TopicsView
    from raftka.protocol.messages.requests import (
        AlterConfigsRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterConfigsResponse,
        DescribeConfigsResponse,
        IncrementalAlterConfigsResponse,
    )

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

# Config resource type -> the ACL resource its configs are checked on, and the error a
# denial is answered with.
_ACL_RESOURCE_OF: dict[int, tuple[ResourceType, ErrorCode]] = {
    RESOURCE_TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    RESOURCE_BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    RESOURCE_BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    RESOURCE_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
}


def config_denial(
    context: RequestContext, operation: AclOperation, resource_type: int, resource_name: str
) -> tuple[ErrorCode, str] | None:
    """The error and message when the principal may not do `operation` on a config
    resource's configs; None when it may (or the type is not one Kafka checks)."""
    checked = _ACL_RESOURCE_OF.get(resource_type)
    if checked is None:
        return None
    acl_type, error = checked
    name = CLUSTER_NAME if acl_type == ResourceType.CLUSTER else resource_name
    if context.authorize(operation, acl_type, name):
        return None
    return error, denied_message(context, operation, acl_type, name)


# (config, its value as text, where the value comes from), as DescribeConfigs reports it.
Described = tuple[ConfigDef, str | None, ConfigSource]
Synonym = tuple[str, str | None, ConfigSource]
SynonymsOf = Callable[[str], Iterable[Synonym]]


class ConfigResource(Protocol):
    """A resource an AlterConfigs or IncrementalAlterConfigs request names."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


class AlteredResource(ConfigResource, Protocol):
    @property
    def configs(self) -> Sequence[AlteredConfig]: ...


def _entries(
    module: ModuleType,
    request: DescribeConfigsRequest,
    described: Iterable[Described],
    keys: set[str] | None,
    synonyms_of: SynonymsOf,
) -> tuple[object, ...]:
    entries: list[object] = []
    for definition, value, source in described:
        if keys is not None and definition.name not in keys:
            continue
        synonyms = ()
        if getattr(request, "include_synonyms", False):
            secret = definition.type == ConfigType.PASSWORD
            synonyms = tuple(
                build(
                    module.DescribeConfigsSynonym,
                    name=n,
                    value=None if secret else v,  # a password's synonym is one too
                    source=int(s),
                )
                for n, v, s in synonyms_of(definition.name)
            )
        entries.append(
            build(
                module.DescribeConfigsResourceResult,
                name=definition.name,
                # Kafka never sends a password config's value back.
                value=None if definition.type == ConfigType.PASSWORD else value,
                read_only=definition.read_only,
                config_source=int(source),
                is_sensitive=definition.type == ConfigType.PASSWORD,
                synonyms=synonyms,
                config_type=int(definition.type),
                documentation=definition.doc
                if getattr(request, "include_documentation", False)
                else None,
            )
        )
    return tuple(entries)


async def handle_describe_configs(
    context: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    services = context.services
    entity: type[DescribeConfigsResponse] = response_entity(context)
    module = response_module(context)
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        configs: tuple[object, ...] = ()
        error, message = ErrorCode.none, None
        denial = config_denial(
            context, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name
        )
        if denial is not None:
            error, message = denial
        elif resource.resource_type == RESOURCE_TOPIC:
            topic = services.topics.get(resource.resource_name)
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
                    topic.config.synonyms,
                )
        elif resource.resource_type == RESOURCE_BROKER:
            try:
                described, synonyms = describe_broker(
                    services.config, resource.resource_name, services.identity.node_id
                )
            except RequestError as exc:
                error, message = ErrorCode.invalid_request, str(exc)
            else:
                configs = _entries(module, request, described, keys, synonyms.__getitem__)
        elif resource.resource_type == RESOURCE_GROUP:
            try:
                described, synonyms = describe_group(
                    services.config,
                    services.controller.image.group_configs,
                    resource.resource_name,
                )
            except RequestError as exc:
                error, message = ErrorCode.invalid_request, str(exc)
            else:
                configs = _entries(module, request, described, keys, synonyms.__getitem__)
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


async def _alter_topic(
    topics: TopicsView,
    controller: ControllerClient,
    name: str,
    changes: dict[str, str | None],
    replace: bool,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    topic = topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist."
    overrides: dict[str, str | None] = (
        {} if replace else {k: topic.config.render(k) for k in topic.config.overrides}
    )
    for key, value in changes.items():
        if value is None:
            overrides.pop(key, None)
        else:
            overrides[key] = value
    result = await controller.execute(
        AlterConfigsCommand(name=name, configs=overrides, validate_only=validate_only)
    )
    return result.error_code, result.error_message


async def _alter_topic_incrementally(
    topics: TopicsView,
    controller: ControllerClient,
    resource: AlteredResource,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """A topic's overrides after the resource's operations, through the controller."""
    topic = topics.get(resource.resource_name)
    if topic is None:
        return (
            ErrorCode.unknown_topic_or_partition,
            f"Topic {resource.resource_name} does not exist.",
        )
    current = {name: topic.config.render(name) or "" for name in topic.config.overrides}
    try:
        configs = apply_config_ops(current, config_ops(resource.configs), TOPIC_CONFIGS, "topic")
    except RequestError as exc:
        return ErrorCode.invalid_request, str(exc)
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    return await _alter_topic(
        topics, controller, resource.resource_name, dict(configs), True, validate_only
    )


def _resource_result(
    module: ModuleType, resource: ConfigResource, error: ErrorCode, message: str | None
) -> object:
    return build(
        module.AlterConfigsResourceResponse,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )


async def handle_incremental_alter_configs(
    context: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    services = context.services
    entity: type[IncrementalAlterConfigsResponse] = response_entity(context)
    module = response_module(context)
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        denial = config_denial(
            context, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if denial is not None:
            error, message = denial
        elif resource.resource_type == RESOURCE_TOPIC:
            error, message = await _alter_topic_incrementally(
                services.topics, services.controller, resource, request.validate_only
            )
        elif resource.resource_type == RESOURCE_BROKER:
            error, message = await alter_broker_incrementally(
                services.controller,
                services.identity.node_id,
                resource.resource_name,
                resource.configs,
                request.validate_only,
            )
        elif resource.resource_type == RESOURCE_GROUP:
            error, message = await alter_group_incrementally(
                services.controller,
                services.config,
                resource.resource_name,
                resource.configs,
                request.validate_only,
            )
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"Unsupported resource type {resource.resource_type} for IncrementalAlterConfigs",
            )
        results.append(_resource_result(module, resource, error, message))
    return build(entity, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_alter_configs(
    context: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    """Legacy AlterConfigs: the given configs replace all of the resource's configs (a
    topic's overrides, a broker's dynamic configs)."""
    services = context.services
    entity: type[AlterConfigsResponse] = response_entity(context)
    module = response_module(context)
    results = []
    for resource in request.resources:
        error: ErrorCode
        message: str | None
        denial = config_denial(
            context, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if denial is not None:
            error, message = denial
        elif resource.resource_type == RESOURCE_TOPIC:
            error, message = await _alter_topic(
                services.topics,
                services.controller,
                resource.resource_name,
                {c.name: c.value for c in resource.configs},
                True,
                request.validate_only,
            )
        elif resource.resource_type == RESOURCE_BROKER:
            names = [c.name for c in resource.configs]
            if len(set(names)) != len(names):
                error, message = ErrorCode.invalid_request, "Error due to duplicate config keys"
            else:
                error, message = await alter_broker(
                    services.controller,
                    services.identity.node_id,
                    resource.resource_name,
                    {c.name: c.value for c in resource.configs},
                    request.validate_only,
                )
        elif resource.resource_type == RESOURCE_GROUP:
            error, message = await alter_group(
                services.controller,
                services.config,
                resource.resource_name,
                {c.name: c.value for c in resource.configs},
                request.validate_only,
            )
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"Unsupported resource type {resource.resource_type} for AlterConfigs",
            )
        results.append(_resource_result(module, resource, error, message))
    return build(entity, throttle_time=NO_THROTTLE, responses=tuple(results))
