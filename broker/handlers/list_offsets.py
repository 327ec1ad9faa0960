"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups.

As in Kafka, who asks decides what is answered: a consumer (replica id -1) is answered by
the leader up to its high watermark (or last stable offset); a broker (replica id >= 0) by
the leader up to its log end; a debugging client (replica id -2, what `raftka cluster
status` sends to measure replica lag) by any replica, from its own log, up to its log end.

With an authorizer, both ListOffsets and OffsetForLeaderEpoch need DESCRIBE on each topic
(TOPIC_AUTHORIZATION_FAILED otherwise); OffsetForLeaderEpoch also serves any topic to a
principal with CLUSTER_ACTION on the cluster, as Kafka does for its brokers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    led_partition,
    response_entity,
    response_module,
)
from raftka.broker.replica import OffsetNotAvailable, replica_partition
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Partition
    from raftka.protocol.messages.requests import ListOffsetsRequest, OffsetForLeaderEpochRequest
    from raftka.protocol.messages.responses import (
        ListOffsetsResponse,
        OffsetForLeaderEpochResponse,
    )

READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


async def handle_list_offsets(
    context: RequestContext, request: ListOffsetsRequest
) -> ListOffsetsResponse:
    topics_view = context.services.topics
    replicas = context.services.replica_manager
    entity: type[ListOffsetsResponse] = response_entity(context)
    module = response_module(context)
    replica_id = request.replica_id
    # Kafka applies an isolation level to consumers only; replicas read to the log end.
    isolation = (
        getattr(request, "isolation_level", 0) if replica_id == CONSUMER_REPLICA_ID else None
    )
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            partition = topics_view.partition(wanted.name, p.partition_index)
            fields: dict[str, object] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            current_leader_epoch = getattr(p, "current_leader_epoch", -1)
            led: Partition | ErrorCode
            if not may_describe(wanted.name):
                led = ErrorCode.topic_authorization_failed
            elif replica_id == DEBUGGING_REPLICA_ID:
                led = replica_partition(partition, current_leader_epoch)
            else:
                led = led_partition(partition, current_leader_epoch)
            if isinstance(led, ErrorCode):
                fields["error_code"] = led
            else:
                try:
                    offset, timestamp, epoch = replicas.list_offset(led, p.timestamp, isolation)
                except OffsetNotAvailable:
                    offset, timestamp, epoch = -1, -1, -1
                    fields["error_code"] = ErrorCode.offset_not_available
                fields.update(offset=offset, timestamp=timestamp, leader_epoch=epoch)
            partitions.append(build(module.ListOffsetsPartitionResponse, **fields))
        topics.append(
            build(module.ListOffsetsTopicResponse, name=wanted.name, partitions=tuple(partitions))
        )
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(
    context: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    """KIP-101/KIP-320: the end offset of a leader epoch, for truncation detection."""
    topics_view = context.services.topics
    entity: type[OffsetForLeaderEpochResponse] = response_entity(context)
    module = response_module(context)
    # Brokers may ask about every topic (CLUSTER_ACTION); consumers (KIP-320) need DESCRIBE.
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)
    if may_describe.enabled and context.authorize(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        may_describe.enabled = False
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            partition = topics_view.partition(wanted.topic, p.partition)
            fields: dict[str, object] = {
                "error_code": ErrorCode.none,
                "partition": p.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            led = led_partition(partition, getattr(p, "current_leader_epoch", -1))
            if not may_describe(wanted.topic):
                fields["error_code"] = ErrorCode.topic_authorization_failed
            elif isinstance(led, ErrorCode):
                fields["error_code"] = led
            else:
                epoch, end_offset = context.services.replica_manager.end_offset_for_epoch(
                    led, p.leader_epoch
                )
                fields.update(leader_epoch=epoch, end_offset=end_offset)
            partitions.append(build(module.EpochEndOffset, **fields))
        topics.append(
            build(
                module.OffsetForLeaderTopicResult, topic=wanted.topic, partitions=tuple(partitions)
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(topics))
