"""CreateTopics and DeleteTopics."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.common import NO_THROTTLE, response_schema
from broker.topics import TopicError
from protocol.api import build


def _created_configs(module: Any, topic: Any) -> tuple[Any, ...]:
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


async def handle_create_topics(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        fields: dict[str, Any] = {
            "name": wanted.name,
            "topic_id": None,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        try:
            if counts[wanted.name] > 1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    f"Create topics request from client contains topic {wanted.name} "
                    "more than once.",
                )
            num_partitions = wanted.num_partitions
            replication_factor = wanted.replication_factor
            if wanted.assignments:
                if num_partitions != -1 or replication_factor != -1:
                    raise TopicError(
                        ErrorCode.invalid_request,
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time.",
                    )
                indexes = sorted(a.partition_index for a in wanted.assignments)
                if indexes != list(range(len(indexes))):
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        "Partitions should be a consecutive 0-based integer sequence.",
                    )
                sizes = {len(a.broker_ids) for a in wanted.assignments}
                unknown = {
                    b for a in wanted.assignments for b in a.broker_ids if b != broker.node_id
                }
                if unknown or sizes != {1}:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"Replica assignment names unknown brokers {sorted(unknown)} "
                        f"or a replication factor other than 1; live brokers: [{broker.node_id}]",
                    )
                num_partitions, replication_factor = len(indexes), 1
            configs = {c.name: c.value for c in wanted.configs}
            topic = broker.topics.create_topic(
                wanted.name,
                num_partitions,
                replication_factor,
                configs,
                validate_only=request.validate_only,
            )
            if topic is not None:
                fields.update(
                    topic_id=topic.topic_id,
                    num_partitions=len(topic.partitions),
                    replication_factor=1,
                    configs=_created_configs(module, topic),
                )
            else:
                fields.update(
                    num_partitions=num_partitions
                    if num_partitions != -1
                    else broker.config.get("num.partitions"),
                    replication_factor=1,
                )
        except TopicError as exc:
            fields.update(error_code=exc.error_code, error_message=exc.message)
        results.append(build(module.CreatableTopicResult, **fields))
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        if name is None:
            by_id = broker.topics.topics_by_id.get(topic_id)
            name = by_id.name if by_id is not None else None
            if name is None:
                error, message = (
                    ErrorCode.unknown_topic_id,
                    "This server does not host this topic ID.",
                )
        if name is not None:
            topic = broker.topics.get(name)
            if not broker.config.get("delete.topic.enable"):
                error, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
            elif topic is not None and topic.is_internal:
                error, message = (
                    ErrorCode.invalid_topic_exception,
                    f"Cannot delete internal topic {name}.",
                )
            else:
                try:
                    deleted = broker.topics.delete_topic(name)
                    topic_id = deleted.topic_id
                except TopicError as exc:
                    error, message = exc.error_code, exc.message
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


async def handle_create_partitions(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        error, message = ErrorCode.none, None
        try:
            if counts[wanted.name] > 1:
                raise TopicError(
                    ErrorCode.invalid_request, f"Duplicate topic {wanted.name} in the request."
                )
            if wanted.assignments:
                unknown = {
                    b for a in wanted.assignments for b in a.broker_ids if b != broker.node_id
                }
                if unknown:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"Unknown broker(s) {sorted(unknown)} in the replica assignment.",
                    )
            broker.topics.add_partitions(wanted.name, wanted.count, request.validate_only)
        except TopicError as exc:
            error, message = exc.error_code, exc.message
        results.append(
            build(
                module.CreatePartitionsTopicResult,
                name=wanted.name,
                error_code=error,
                error_message=message,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_delete_records(context: Any, request: Any) -> Any:
    """Advance log start offsets; offset -1 means the high watermark."""
    broker = context.broker
    entity, module = response_schema(context)
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            partition = broker.topics.partition(wanted.name, p.partition_index)
            error, low_watermark = ErrorCode.none, -1
            if partition is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                offset = partition.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > partition.high_watermark:
                    error = ErrorCode.offset_out_of_range
                else:
                    partition.log.delete_records_before(offset)
                low_watermark = partition.log.log_start_offset
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
