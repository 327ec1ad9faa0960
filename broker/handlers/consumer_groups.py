"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe. Offsets go through OffsetCommit / OffsetFetch (groups.py).

As in Kafka, a heartbeat needs READ on the group and DESCRIBE on every topic it subscribes
to by name; describing needs DESCRIBE on the group and on the topics its members are
subscribed to or assigned.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, cast

from kio.schema.errors import ErrorCode

from raftka.broker.groups import GroupCoordinator
from raftka.broker.groups.assignors import Assignment
from raftka.broker.groups.consumer_group import ConsumerMember, HeartbeatRequest
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    denied_message,
    duration_ms,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupHeartbeatRequest,
    )
    from raftka.protocol.messages.responses import (
        ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeatResponse,
    )


NO_AUTHORIZED_OPERATIONS = -(2**31)
MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1: the member uses the consumer protocol


def _coordinator(context: RequestContext) -> GroupCoordinator:
    return context.services.groups


async def handle_consumer_group_heartbeat(
    context: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:

    entity: type[ConsumerGroupHeartbeatResponse] = response_entity(context)
    module = response_module(context)

    def refused(error: ErrorCode, message: str) -> ConsumerGroupHeartbeatResponse:
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=NO_THROTTLE,
            assignment=None,
        )

    if not context.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refused(
            ErrorCode.group_authorization_failed,
            denied_message(context, AclOperation.READ, ResourceType.GROUP, request.group_id),
        )
    names = request.subscribed_topic_names
    if names is not None:
        may_describe = TopicAccess(context, AclOperation.DESCRIBE)
        denied = sorted({n for n in names if not may_describe(n)})
        if denied:
            return refused(
                ErrorCode.topic_authorization_failed,
                f"{context.principal} is not authorized to DESCRIBE the subscribed topics "
                f"{', '.join(denied)}; ACLs allowing it are needed",
            )
    owned = (
        None
        if request.topic_partitions is None
        # kio types every uuid field as nullable; a member names its partitions' topic ids
        else cast(
            "dict[uuid.UUID, list[int]]",
            {tp.topic_id: list(tp.partitions) for tp in request.topic_partitions},
        )
    )
    result = await _coordinator(context).consumer_group_heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=context.header.client_id or "",
            client_host=f"/{context.client_host}",
        ),
        context.api_version,
    )
    assignment = None
    if result.assignment is not None:
        assignment = build(
            module.Assignment, topic_partitions=_topic_partitions(module, result.assignment)
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


def _topic_partitions(module: ModuleType, assignment: Assignment) -> tuple[object, ...]:
    return tuple(
        build(module.TopicPartitions, topic_id=topic_id, partitions=tuple(sorted(partitions)))
        for topic_id, partitions in sorted(assignment.items())
    )


async def handle_consumer_group_describe(
    context: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    entity: type[ConsumerGroupDescribeResponse] = response_entity(context)
    module = response_module(context)
    coordinator = _coordinator(context)
    names_of = coordinator.consumer.topics
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)

    def described_assignment(assignment: Assignment) -> object:
        return build(
            module.Assignment,
            topic_partitions=tuple(
                build(
                    module.TopicPartitions,
                    topic_id=topic_id,
                    topic_name=names_of.name_of(topic_id) or "",
                    partitions=tuple(sorted(partitions)),
                )
                for topic_id, partitions in sorted(assignment.items())
            ),
        )

    def described_member(member: ConsumerMember, target: Assignment) -> object:
        return build(
            module.Member,
            member_id=member.member_id,
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            member_epoch=member.member_epoch,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=member.subscribed_topic_names,
            subscribed_topic_regex=member.subscribed_topic_regex,
            assignment=described_assignment(member.assigned),
            target_assignment=described_assignment(target),
            member_type=MEMBER_TYPE_CONSUMER,
        )

    def group_answer(group_id: str) -> object:
        error, state, message = ErrorCode.none, None, None
        if not context.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
            message = denied_message(context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
        else:
            error, state = coordinator.consumer_group(group_id)
            if error == ErrorCode.group_id_not_found:
                message = f"Group {group_id} is not a consumer group (or does not exist)."
        if state is not None:
            topics: set[str] = set()
            for member in state.members.values():
                topics.update(member.subscribed_topic_names)
                topics.update(_names(names_of.name_of, member.assigned))
            denied = sorted(t for t in topics if not may_describe(t))
            if denied:
                error, state = ErrorCode.topic_authorization_failed, None
                message = (
                    f"{context.principal} is not authorized to DESCRIBE topics "
                    f"{', '.join(denied)} of group {group_id}"
                )
        if state is None:
            return build(
                module.DescribedGroup,
                error_code=error,
                error_message=message or (error.name.upper() if error else None),
                group_id=group_id,
                group_state="Dead" if error == ErrorCode.group_id_not_found else "",
                group_epoch=-1,
                assignment_epoch=-1,
                assignor_name="",
                members=(),
                authorized_operations=NO_AUTHORIZED_OPERATIONS,
            )
        return build(
            module.DescribedGroup,
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group_id,
            group_state=state.state().value,
            group_epoch=state.group_epoch,
            assignment_epoch=state.assignment_epoch,
            assignor_name=state.assignor_name,
            members=tuple(
                described_member(m, state.target.get(m.member_id, {}))
                for m in state.members.values()
            ),
            authorized_operations=(
                context.authorized_operations(ResourceType.GROUP, group_id)
                if request.include_authorized_operations
                else NO_AUTHORIZED_OPERATIONS
            ),
        )

    return build(
        entity,
        throttle_time=NO_THROTTLE,
        groups=tuple(group_answer(group_id) for group_id in request.group_ids),
    )


def _names(name_of: Callable[[uuid.UUID], str | None], assignment: Assignment) -> Iterable[str]:
    for topic_id in assignment:
        name = name_of(topic_id)
        if name is not None:
            yield name
