"""ShareGroupDescribe (KIP-932) at the share group's coordinator: members, epochs and
assignments; DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.handlers.share import _now_ms, release_departed, share_config
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import ShareGroupDescribeRequest
    from raftka.protocol.messages.responses import ShareGroupDescribeResponse


async def handle_share_group_describe(
    context: RequestContext, request: ShareGroupDescribeRequest
) -> ShareGroupDescribeResponse:
    entity: type[ShareGroupDescribeResponse] = response_entity(context)
    module = response_module(context)
    coordinator = context.services.groups
    topics = context.services.topics
    with_operations = bool(request.include_authorized_operations)
    described = []
    for group_id in request.group_ids:
        fields: dict[str, object] = {
            "group_id": group_id,
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_state": "Dead",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "simple",
            "members": (),
        }
        group = coordinator.share.groups.get(group_id)
        if not context.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            fields["error_code"] = ErrorCode.group_authorization_failed
            fields["error_message"] = denied_message(
                context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id
            )
        elif (error := coordinator.ownership.request_error(group_id)) != ErrorCode.none:
            fields["error_code"] = error
        elif group is None:
            fields["error_code"] = ErrorCode.group_id_not_found
            other = coordinator.is_classic_group(group_id)
            kind = "a classic or consumer group" if other else "unknown"
            fields["error_message"] = f"group {group_id} is {kind}, not a share group"
        else:
            coordinator.share.expire(group, _now_ms(context))
            members = []
            for m in group.members.values():
                assigned = tuple(
                    build(
                        module.TopicPartitions,
                        topic_id=topic.topic_id,
                        topic_name=name,
                        partitions=partitions,
                    )
                    for name, partitions in sorted(m.assignment.items())
                    if (topic := topics.get(name)) is not None
                )
                members.append(
                    build(
                        module.Member,
                        member_id=m.member_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=tuple(sorted(m.subscribed)),
                        assignment=build(module.Assignment, topic_partitions=assigned),
                    )
                )
            fields.update(
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                members=tuple(members),
            )
        if with_operations and fields["error_code"] == ErrorCode.none:
            fields["authorized_operations"] = context.authorized_operations(
                ResourceType.GROUP, group_id
            )
        described.append(build(module.DescribedGroup, **fields))
    await release_departed(context, share_config(context).delivery_limit)
    return build(entity, throttle_time=NO_THROTTLE, groups=tuple(described))
