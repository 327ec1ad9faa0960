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

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    led_partition,
    response_schema,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext
    from raftka.broker.topics import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


class OffsetNotAvailable(Exception):
    """The answer would come from a high watermark the new leader has not caught up yet."""


def _lookup(partition: Partition, timestamp: int, isolation_level: int | None) -> tuple[int, int]:
    """(offset, timestamp) per Kafka's ListOffsets rules; (-1, -1) when nothing matches.
    `isolation_level` None: a replica or debugging client, answered up to the log end offset.
    Raises OffsetNotAvailable where Kafka answers a consumer OFFSET_NOT_AVAILABLE (retriable)."""
    log = partition.hosted_log
    if isolation_level is None:
        last_fetchable = log.log_end_offset
    elif isolation_level == READ_COMMITTED:
        last_fetchable = partition.last_stable_offset
    else:
        last_fetchable = partition.high_watermark
    # Only a consumer waits for a new leader to commit its epoch start (KAFKA-7703).
    behind = isolation_level is not None and partition.high_watermark_behind_epoch_start
    if timestamp == LATEST:
        if behind:
            raise OffsetNotAvailable
        return last_fetchable, -1
    if timestamp == EARLIEST:
        return log.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_and_offset()
        if found is None or found[1] >= last_fetchable:
            return -1, -1
        return found[1], found[0]
    at_timestamp = log.offset_for_timestamp(timestamp)
    if at_timestamp is None or at_timestamp[0] >= last_fetchable:
        if behind:
            raise OffsetNotAvailable
        return -1, -1
    return at_timestamp


def replica_partition(
    partition: Partition | None, current_leader_epoch: int
) -> Partition | ErrorCode:
    """`partition` when this broker holds a replica of it and may answer from that replica's
    own log at `current_leader_epoch` (Kafka fences the epoch on followers too); otherwise
    the error Kafka answers."""
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if partition.raft is None or partition.log is None:
        return ErrorCode.not_leader_or_follower
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return partition


async def handle_list_offsets(context: RequestContext, request: Any) -> Any:
    topics_view = context.services.topics
    entity, module = response_schema(context)
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
            fields: dict[str, Any] = {
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
                partition = led
                try:
                    offset, timestamp = _lookup(partition, p.timestamp, isolation)
                except OffsetNotAvailable:
                    offset, timestamp = -1, -1
                    fields["error_code"] = ErrorCode.offset_not_available
                fields.update(offset=offset, timestamp=timestamp)
                if offset >= 0:
                    # Kafka reports the epoch that wrote the offset, or -1 when none is known.
                    epoch_of_offset = partition.hosted_log.epoch_for_offset(offset)
                    fields["leader_epoch"] = -1 if epoch_of_offset is None else epoch_of_offset
            partitions.append(build(module.ListOffsetsPartitionResponse, **fields))
        topics.append(
            build(module.ListOffsetsTopicResponse, name=wanted.name, partitions=tuple(partitions))
        )
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(context: RequestContext, request: Any) -> Any:
    """KIP-101/KIP-320: the end offset of a leader epoch, for truncation detection."""
    topics_view = context.services.topics
    entity, module = response_schema(context)
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
            fields: dict[str, Any] = {
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
                epoch, end_offset = led.hosted_log.end_offset_for_epoch(p.leader_epoch)
                fields.update(leader_epoch=epoch, end_offset=end_offset)
            partitions.append(build(module.EpochEndOffset, **fields))
        topics.append(
            build(
                module.OffsetForLeaderTopicResult, topic=wanted.topic, partitions=tuple(partitions)
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, topics=tuple(topics))
