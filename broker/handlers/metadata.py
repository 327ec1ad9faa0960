"""Metadata: brokers, topics, partitions, leaders; auto-creates topics when allowed."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.common import NO_THROTTLE, response_schema
from broker.topics import Topic, TopicError, validate_topic_name
from protocol.api import build

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _topic_entry(module: Any, broker: Any, topic: Topic) -> Any:
    node = broker.node_id
    partitions = tuple(
        build(
            module.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=p.index,
            leader_id=node,
            leader_epoch=p.leader_epoch,
            replica_nodes=(node,),
            isr_nodes=(node,),
            offline_replicas=(),
        )
        for p in topic.partitions
    )
    return build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _error_entry(module: Any, name: str | None, topic_id: Any, error: ErrorCode) -> Any:
    return build(
        module.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


async def handle_metadata(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    topics = broker.topics
    requested = request.topics
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if requested is None or (context.api_version == 0 and not requested):
        entries = [_topic_entry(module, broker, t) for t in list(topics.topics.values())]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config.get(
            "auto.create.topics.enable"
        )
        entries = []
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None:
                by_id = topics.topics_by_id.get(topic_id)
                if by_id is None:
                    entries.append(_error_entry(module, None, topic_id, ErrorCode.unknown_topic_id))
                else:
                    entries.append(_topic_entry(module, broker, by_id))
                continue
            topic = topics.get(name)
            if topic is None:
                try:
                    validate_topic_name(name)
                except TopicError as exc:
                    entries.append(_error_entry(module, name, None, exc.error_code))
                    continue
                if allow_create:
                    try:
                        topic = topics.create_topic(name, -1, -1, {})
                    except TopicError as exc:
                        entries.append(_error_entry(module, name, None, exc.error_code))
                        continue
                else:
                    entries.append(
                        _error_entry(module, name, None, ErrorCode.unknown_topic_or_partition)
                    )
                    continue
            assert topic is not None
            entries.append(_topic_entry(module, broker, topic))
    address = broker.advertised
    brokers = (
        build(
            module.MetadataResponseBroker,
            node_id=broker.node_id,
            host=address.host,
            port=broker.bound_port if address.port == 0 else address.port,
            rack=broker.config.get("broker.rack"),
        ),
    )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=tuple(entries),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


async def handle_describe_cluster(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    address = broker.advertised
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=(
            build(
                module.DescribeClusterBroker,
                broker_id=broker.node_id,
                host=address.host,
                port=address.port,
                rack=broker.config.get("broker.rack"),
            ),
        ),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
