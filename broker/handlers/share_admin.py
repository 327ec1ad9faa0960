"""Share-group administration (KIP-932) at the group's coordinator: DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, and the share side of DeleteGroups.

The offsets are the share-partitions' start offsets as persisted in `__share_group_state`.
Altering or deleting them needs a group without members (NON_EMPTY_GROUP otherwise); the
coordinator writes the state (a new state epoch, which fences a former writer) or its
tombstone, then tells every broker to drop its copy of the group's share-partitions, so the
next fetch reloads what was written (a deleted one starts per `share.auto.offset.reset`).

ACLs: DESCRIBE on the group and on each topic to describe; READ on the group and on each
topic to alter; DELETE on the group and READ on each topic to delete offsets; DELETE on the
group for DeleteGroups.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    R,
    TopicAccess,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.share.manager import Notice, PersistedState, ShareKey
from raftka.broker.share.partition import RecordState
from raftka.broker.topics import PartitionNotHostedError
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Topic
    from raftka.protocol.messages.requests import (
        AlterShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsResponse,
    )


SHARE_OFFSETS_DESCRIBE_MAX_VERSION = 1


def _group_error(
    context: RequestContext, group_id: str, operation: AclOperation, *, empty_only: bool
) -> tuple[ErrorCode, str | None]:
    """What refuses the request as a whole: ACL, coordination, a non-share group id, or
    (with `empty_only`) members in the group."""
    coordinator = context.services.groups
    if not context.authorize(operation, ResourceType.GROUP, group_id):
        return (
            ErrorCode.group_authorization_failed,
            denied_message(context, operation, ResourceType.GROUP, group_id),
        )
    error = coordinator.ownership.request_error(group_id)
    if error != ErrorCode.none:
        return error, None
    if coordinator.is_classic_group(group_id):
        return (
            ErrorCode.group_id_not_found,
            f"group {group_id} is a classic or consumer group, not a share group",
        )
    group = coordinator.share.groups.get(group_id)
    if empty_only and group is not None:
        coordinator.share.expire(group, context.services.clock.now_s() * 1000)
        if group.members:
            return (
                ErrorCode.non_empty_group,
                f"share group {group_id} has {len(group.members)} members: stop them first",
            )
    return ErrorCode.none, None


def _lag(topic: Topic, index: int, state: PersistedState) -> int:
    """Records past the start offset not yet acknowledged or archived, when this broker
    hosts the partition; -1 otherwise."""
    partition = topic.partitions[index]
    try:
        end = partition.high_watermark
    except PartitionNotHostedError:
        return -1
    done = sum(
        b.last - b.first + 1
        for b in state.batches
        if b.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
    )
    return max(0, end - state.start_offset - done)


async def handle_describe_share_group_offsets(
    context: RequestContext, request: DescribeShareGroupOffsetsRequest
) -> DescribeShareGroupOffsetsResponse:
    entity: type[DescribeShareGroupOffsetsResponse] = response_entity(context)
    module = response_module(context)
    topics = context.services.topics
    store = context.services.groups.share_partitions.store
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)
    with_lag = context.header.request_api_version >= 1
    groups = []
    for g in request.groups:
        error, message = _group_error(context, g.group_id, AclOperation.DESCRIBE, empty_only=False)
        if error != ErrorCode.none:
            groups.append(
                build(
                    module.DescribeShareGroupOffsetsResponseGroup,
                    group_id=g.group_id,
                    topics=(),
                    error_code=error,
                    error_message=message,
                )
            )
            continue
        if g.topics is None:
            # Every partition with persisted state (each is one lookup at its state leader).
            wanted: list[tuple[str, tuple[int, ...] | None]] = [
                (t.name, None)
                for t in sorted(topics.topics.values(), key=lambda t: t.name)
                if not t.is_internal and may_describe(t.name)
            ]
        else:
            wanted = [(t.topic_name, tuple(t.partitions)) for t in g.topics]
        described = []
        for name, indexes in wanted:
            topic = topics.get(name)
            partitions = []
            for index in (
                indexes if indexes is not None else range(len(topic.partitions) if topic else 0)
            ):
                fields: dict[str, object] = {
                    "partition_index": index,
                    "start_offset": -1,
                    "leader_epoch": -1,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                }
                if not may_describe(name):
                    fields["error_code"] = ErrorCode.topic_authorization_failed
                elif topic is None or not 0 <= index < len(topic.partitions):
                    fields["error_code"] = ErrorCode.unknown_topic_or_partition
                    fields["error_message"] = f"{name}-{index} does not exist"
                else:
                    try:
                        state = await store.read((g.group_id, topic.topic_id, index))
                    except OSError as exc:
                        fields["error_code"] = ErrorCode.coordinator_not_available
                        fields["error_message"] = f"share state not readable now: {exc}"
                    else:
                        if state is None and indexes is None:
                            continue
                        if state is not None:
                            fields["start_offset"] = state.start_offset
                            fields["leader_epoch"] = topic.partitions[index].leader_epoch
                            if with_lag:
                                fields["lag"] = _lag(topic, index, state)
                partitions.append(
                    build(module.DescribeShareGroupOffsetsResponsePartition, **fields)
                )
            if partitions or indexes is not None:
                described.append(
                    build(
                        module.DescribeShareGroupOffsetsResponseTopic,
                        topic_name=name,
                        topic_id=topic.topic_id if topic is not None else uuid.UUID(int=0),
                        partitions=tuple(partitions),
                    )
                )
        groups.append(
            build(
                module.DescribeShareGroupOffsetsResponseGroup,
                group_id=g.group_id,
                topics=tuple(described),
                error_code=ErrorCode.none,
                error_message=None,
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _offsets_response(
    entity: type[R], error: ErrorCode, message: str | None, responses: tuple[object, ...]
) -> R:
    """An Alter- or DeleteShareGroupOffsets response."""
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        responses=responses,
    )


async def handle_alter_share_group_offsets(
    context: RequestContext, request: AlterShareGroupOffsetsRequest
) -> AlterShareGroupOffsetsResponse:
    entity: type[AlterShareGroupOffsetsResponse] = response_entity(context)
    module = response_module(context)
    group_id = request.group_id
    error, message = _group_error(context, group_id, AclOperation.READ, empty_only=True)
    if error != ErrorCode.none:
        return _offsets_response(entity, error, message, ())
    topics = context.services.topics
    store = context.services.groups.share_partitions.store
    may_read = TopicAccess(context, AclOperation.READ)
    altered: set[str] = set()
    responses = []
    for t in request.topics:
        topic = topics.get(t.topic_name)
        answers = []
        for p in t.partitions:
            perror, pmessage = ErrorCode.none, None
            if not may_read(t.topic_name):
                perror = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                perror = ErrorCode.unknown_topic_or_partition
                pmessage = f"{t.topic_name}-{p.partition_index} does not exist"
            elif p.start_offset < 0:
                perror = ErrorCode.invalid_request
                pmessage = f"start offset {p.start_offset} is negative"
            else:
                key: ShareKey = (group_id, topic.topic_id, p.partition_index)
                try:
                    old = await store.read(key)
                    epoch = 0 if old is None else old.state_epoch + 1
                    await store.write(key, PersistedState(epoch, p.start_offset, ()))
                    altered.add(str(topic.topic_id))
                except OSError as exc:
                    perror = ErrorCode.coordinator_not_available
                    pmessage = f"share state not written: {exc}"
            answers.append(
                build(
                    module.AlterShareGroupOffsetsResponsePartition,
                    partition_index=p.partition_index,
                    error_code=perror,
                    error_message=pmessage,
                )
            )
        responses.append(
            build(
                module.AlterShareGroupOffsetsResponseTopic,
                topic_name=t.topic_name,
                topic_id=topic.topic_id if topic is not None else uuid.UUID(int=0),
                partitions=tuple(answers),
            )
        )
    if altered:
        await context.services.groups.share_partitions.store.tell_brokers(
            Notice(group_id, topic_ids=tuple(sorted(altered)))
        )
    return _offsets_response(entity, ErrorCode.none, None, tuple(responses))


async def _delete_state(context: RequestContext, group_id: str, topic: Topic) -> None:
    """Tombstone the group's state of every partition of `topic` that has some; OSError
    when the store cannot answer now."""
    store = context.services.groups.share_partitions.store
    for index in range(len(topic.partitions)):
        key: ShareKey = (group_id, topic.topic_id, index)
        if await store.read(key) is not None:
            await store.delete(key)


async def handle_delete_share_group_offsets(
    context: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> DeleteShareGroupOffsetsResponse:
    entity: type[DeleteShareGroupOffsetsResponse] = response_entity(context)
    module = response_module(context)
    group_id = request.group_id
    error, message = _group_error(context, group_id, AclOperation.DELETE, empty_only=True)
    if error != ErrorCode.none:
        return _offsets_response(entity, error, message, ())
    topics = context.services.topics
    may_read = TopicAccess(context, AclOperation.READ)
    deleted: list[str] = []
    responses = []
    for t in request.topics:
        topic = topics.get(t.topic_name)
        terror, tmessage = ErrorCode.none, None
        if not may_read(t.topic_name):
            terror = ErrorCode.topic_authorization_failed
        elif topic is None:
            terror = ErrorCode.unknown_topic_or_partition
            tmessage = f"topic {t.topic_name} does not exist"
        else:
            try:
                await _delete_state(context, group_id, topic)
                deleted.append(str(topic.topic_id))
            except OSError as exc:
                terror = ErrorCode.coordinator_not_available
                tmessage = f"share state not deleted: {exc}"
        responses.append(
            build(
                module.DeleteShareGroupOffsetsResponseTopic,
                topic_name=t.topic_name,
                topic_id=topic.topic_id if topic is not None else uuid.UUID(int=0),
                error_code=terror,
                error_message=tmessage,
            )
        )
    if deleted:
        await context.services.groups.share_partitions.store.tell_brokers(
            Notice(group_id, topic_ids=tuple(deleted))
        )
    return _offsets_response(entity, ErrorCode.none, None, tuple(responses))


async def delete_share_groups(
    context: RequestContext, group_ids: list[str]
) -> dict[str, ErrorCode]:
    """DeleteGroups for the ids of share groups this broker coordinates: an empty group goes
    with its persisted share-partition state (NON_EMPTY_GROUP while members remain)."""
    coordinator = context.services.groups
    results: dict[str, ErrorCode] = {}
    for group_id in group_ids:
        group = coordinator.share.groups.get(group_id)
        if group is None or coordinator.ownership.request_error(group_id) != ErrorCode.none:
            continue
        coordinator.share.expire(group, context.services.clock.now_s() * 1000)
        error = coordinator.share.delete(group_id)
        if error == ErrorCode.none:
            try:
                for topic in list(context.services.topics.topics.values()):
                    if not topic.is_internal:
                        await _delete_state(context, group_id, topic)
            except OSError:
                error = ErrorCode.coordinator_not_available
            await coordinator.share_partitions.store.tell_brokers(Notice(group_id))
        results[group_id] = error
    return results
