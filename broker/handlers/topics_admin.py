"""CreateTopics, DeleteTopics, CreatePartitions (through the controller) and DeleteRecords.

With an authorizer each checks Kafka's ACL before anything else about a topic: CREATE on the
cluster or the topic to create it (its configs are returned only with DESCRIBE_CONFIGS on
it), DELETE to delete it or its records, ALTER to add partitions. A denied topic is answered
TOPIC_AUTHORIZATION_FAILED and left unchanged.

The internal topics of the coordinators are never created here (INVALID_REQUEST): the broker
creates each when first needed, with its own partition count and configs.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteTopicCommand,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    denied_message,
    duration_ms,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.topics import COORDINATOR_TOPICS
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Partition, Topic
    from raftka.protocol.messages.requests import (
        CreatePartitionsRequest,
        CreateTopicsRequest,
        DeleteRecordsRequest,
        DeleteTopicsRequest,
    )
    from raftka.protocol.messages.responses import (
        CreatePartitionsResponse,
        CreateTopicsResponse,
        DeleteRecordsResponse,
        DeleteTopicsResponse,
    )


def _created_configs(module: ModuleType, topic: Topic) -> tuple[object, ...]:
    if not hasattr(module, "CreatableTopicConfigs"):  # CreateTopics v4 and older
        return ()
    return tuple(
        build(
            module.CreatableTopicConfigs,
            name=definition.name,
            value=value,
            read_only=definition.read_only,
            config_source=int(source),
            is_sensitive=False,
        )
        for definition, value, source in topic.config.describe()
    )


async def handle_create_topics(
    context: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    services = context.services
    entity: type[CreateTopicsResponse] = response_entity(context)
    module = response_module(context)
    counts = Counter(t.name for t in request.topics)
    may_create = context.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    results = []
    for wanted in request.topics:
        fields: dict[str, object] = {
            "name": wanted.name,
            "topic_id": None,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        if counts[wanted.name] > 1:
            fields.update(
                error_code=ErrorCode.invalid_request,
                error_message=f"Create topics request from client contains topic {wanted.name} "
                "more than once.",
            )
            results.append(build(module.CreatableTopicResult, **fields))
            continue
        if not may_create and not context.authorize(
            AclOperation.CREATE, ResourceType.TOPIC, wanted.name
        ):
            fields.update(
                error_code=ErrorCode.topic_authorization_failed,
                error_message=denied_message(
                    context, AclOperation.CREATE, ResourceType.TOPIC, wanted.name
                )
                + " (or CREATE on the cluster)",
            )
            results.append(build(module.CreatableTopicResult, **fields))
            continue
        if wanted.name in COORDINATOR_TOPICS and services.topics.get(wanted.name) is None:
            # Its coordinator creates it with the partition count its records are placed by.
            fields.update(
                error_code=ErrorCode.invalid_request,
                error_message=f"{wanted.name} is an internal topic: the broker creates it, "
                "with its own partition count and configs, when it is first needed.",
            )
            results.append(build(module.CreatableTopicResult, **fields))
            continue
        result = await services.controller.execute(
            CreateTopicCommand(
                name=wanted.name,
                num_partitions=wanted.num_partitions,
                replication_factor=wanted.replication_factor,
                assignments=tuple(
                    (a.partition_index, tuple(a.broker_ids)) for a in wanted.assignments
                ),
                configs={c.name: c.value for c in getattr(wanted, "configs", ())},
                validate_only=request.validate_only,
            )
        )
        fields.update(error_code=result.error_code, error_message=result.error_message)
        if result.error_code == ErrorCode.none:
            fields.update(
                num_partitions=result.num_partitions,
                replication_factor=result.replication_factor,
            )
            topic = services.topics.get(wanted.name)
            describable = context.authorize(
                AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, wanted.name
            )
            if not describable:
                # Kafka then keeps the topic's configs back, its sizes too.
                fields.update(
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=(),
                    topic_config_error_code=ErrorCode.topic_authorization_failed,
                )
                if topic is not None and not request.validate_only:
                    fields.update(topic_id=topic.topic_id)
            elif topic is not None and not request.validate_only:
                fields.update(topic_id=topic.topic_id, configs=_created_configs(module, topic))
        results.append(build(module.CreatableTopicResult, **fields))
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(
    context: RequestContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    services = context.services
    entity: type[DeleteTopicsResponse] = response_entity(context)
    module = response_module(context)
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    may_delete_all = context.authorize(AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME)
    results = []
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        by_id = name is None
        if by_id:
            topic_by_id = (
                services.topics.topics_by_id.get(topic_id) if topic_id is not None else None
            )
            name = topic_by_id.name if topic_by_id is not None else None
            if name is None:
                error = ErrorCode.unknown_topic_id
                message = "This server does not host this topic ID."
        if name is not None:
            topic = services.topics.get(name)
            describable = may_delete_all or context.authorize(
                AclOperation.DESCRIBE, ResourceType.TOPIC, name
            )
            deletable = may_delete_all or context.authorize(
                AclOperation.DELETE, ResourceType.TOPIC, name
            )
            if not services.config.get_bool("delete.topic.enable"):
                error, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
            elif not describable:
                # Neither whether it exists nor, asked for by id, its name is given away.
                error = ErrorCode.topic_authorization_failed
                message = (
                    f"{context.principal} is not authorized to DELETE this topic"
                    if by_id
                    else denied_message(context, AclOperation.DELETE, ResourceType.TOPIC, name)
                )
                if by_id:
                    name = None
                else:
                    topic_id = None
            elif not deletable:
                # One who may see a topic learns it does not exist before that it is denied.
                if topic is None:
                    error, message = (
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic {name} does not exist.",
                    )
                else:
                    error = ErrorCode.topic_authorization_failed
                    message = denied_message(context, AclOperation.DELETE, ResourceType.TOPIC, name)
            elif topic is not None and topic.is_internal:
                error, message = (
                    ErrorCode.invalid_topic_exception,
                    f"Cannot delete internal topic {name}.",
                )
            else:
                if topic is not None:
                    topic_id = topic.topic_id
                result = await services.controller.execute(DeleteTopicCommand(name=name))
                error, message = result.error_code, result.error_message
        results.append(
            build(
                module.DeletableTopicResult,
                name=name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_create_partitions(
    context: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    services = context.services
    entity: type[CreatePartitionsResponse] = response_entity(context)
    module = response_module(context)
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        if counts[wanted.name] > 1:
            error = ErrorCode.invalid_request
            message: str | None = f"Duplicate topic {wanted.name} in the request."
        elif not context.authorize(AclOperation.ALTER, ResourceType.TOPIC, wanted.name):
            error = ErrorCode.topic_authorization_failed
            message = denied_message(context, AclOperation.ALTER, ResourceType.TOPIC, wanted.name)
        else:
            result = await services.controller.execute(
                CreatePartitionsCommand(
                    name=wanted.name,
                    count=wanted.count,
                    assignments=tuple(tuple(a.broker_ids) for a in wanted.assignments)
                    if wanted.assignments
                    else None,
                    validate_only=request.validate_only,
                )
            )
            error, message = result.error_code, result.error_message
        results.append(
            build(
                module.CreatePartitionsTopicResult,
                name=wanted.name,
                error_code=error,
                error_message=message,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_delete_records(
    context: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    """Advance log start offsets (offset -1 means the high watermark) through the replica
    manager, which answers each partition once the replicas' low watermark reached it."""
    topics_view = context.services.topics
    entity: type[DeleteRecordsResponse] = response_entity(context)
    module = response_module(context)
    # (topic, partition index) -> (error, low watermark); deletions: (key, partition, offset).
    answers: dict[tuple[str, int], tuple[ErrorCode, int]] = {}
    deletions: list[tuple[tuple[str, int], Partition, int]] = []
    for wanted in request.topics:
        may_delete = context.authorize(AclOperation.DELETE, ResourceType.TOPIC, wanted.name)
        for p in wanted.partitions:
            key: tuple[str, int] = (wanted.name, p.partition_index)
            partition = topics_view.partition(wanted.name, p.partition_index)
            answers[key] = (ErrorCode.none, -1)
            if not may_delete:
                answers[key] = (ErrorCode.topic_authorization_failed, -1)
            elif partition is None:
                answers[key] = (ErrorCode.unknown_topic_or_partition, -1)
            elif partition.topic.is_internal:
                # Kafka: "Cannot delete records of internal topic" (offsets, transactions).
                answers[key] = (ErrorCode.invalid_topic_exception, -1)
            else:
                deletions.append((key, partition, p.offset))
    if deletions:
        deleted = await context.services.replica_manager.delete_records(
            [(partition, offset) for _, partition, offset in deletions],
            max(duration_ms(request.timeout), 0) / 1000,
        )
        for (key, _, _), answer in zip(deletions, deleted, strict=True):
            answers[key] = answer
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            error, low_watermark = answers[(wanted.name, p.partition_index)]
            partitions.append(
                build(
                    module.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low_watermark,
                    error_code=error,
                )
            )
        topics.append(
            build(module.DeleteRecordsTopicResult, name=wanted.name, partitions=tuple(partitions))
        )
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(topics))
