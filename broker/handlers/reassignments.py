"""AlterPartitionReassignments (45) and ListPartitionReassignments (46).

Alter sends one controller command per partition (forwarded to the controller when this
broker is not it); the controller records the target in the cluster metadata and the
partition's leader moves the Raft group there (`broker.cluster.reassign`). A null replica
list cancels a reassignment in progress (NO_REASSIGNMENT_IN_PROGRESS when there is none).
List answers from this broker's metadata image: the partitions still moving, with Kafka's
replicas (target first, then those being removed), adding and removing replicas; a
cancelled move that is still being undone is not listed, as in Kafka. Alter needs ALTER and
List DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import ReassignPartitionCommand
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    R,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        AlterPartitionReassignmentsRequest,
        ListPartitionReassignmentsRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterPartitionReassignmentsResponse,
        ListPartitionReassignmentsResponse,
    )


def _cluster_denied(
    context: RequestContext, entity: type[R], operation: AclOperation, **fields: object
) -> R:
    """The whole-request answer when `operation` on the cluster is not allowed."""
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.cluster_authorization_failed,
        error_message=denied_message(context, operation, ResourceType.CLUSTER, CLUSTER_NAME),
        **fields,
    )


async def handle_alter_partition_reassignments(
    context: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    entity: type[AlterPartitionReassignmentsResponse] = response_entity(context)
    module = response_module(context)
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    extra = {"allow_replication_factor_change": allow_rf_change} if context.api_version else {}
    if not context.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _cluster_denied(context, entity, AclOperation.ALTER, responses=(), **extra)
    image = context.services.controller.image
    responses = []
    for topic in request.topics:
        name = str(topic.name)
        partitions = []
        for item in topic.partitions:
            index = int(item.partition_index)
            target = None if item.replicas is None else tuple(int(n) for n in item.replicas)
            code, message = ErrorCode.none, None
            current = image.topics.get(name)
            if (
                target is not None
                and not allow_rf_change
                and current is not None
                and 0 <= index < current.num_partitions
                and len(target) != len(current.raft_voters(index))
            ):
                code = ErrorCode.invalid_replication_factor
                message = (
                    f"The replication factor of {name}-{index} would change from "
                    f"{len(current.raft_voters(index))} to {len(target)}, and the request "
                    "does not allow replication factor changes."
                )
            else:
                result = await context.services.controller.execute(
                    ReassignPartitionCommand(name, index, target)
                )
                code, message = result.error_code, result.error_message
            partitions.append(
                build(
                    module.ReassignablePartitionResponse,
                    partition_index=index,
                    error_code=code,
                    error_message=message,
                )
            )
        responses.append(
            build(module.ReassignableTopicResponse, name=name, partitions=tuple(partitions))
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(responses),
        **extra,
    )


async def handle_list_partition_reassignments(
    context: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    entity: type[ListPartitionReassignmentsResponse] = response_entity(context)
    module = response_module(context)
    if not context.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _cluster_denied(context, entity, AclOperation.DESCRIBE, topics=())
    image = context.services.controller.image
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = {name: None for name in sorted(image.topics)}
    else:
        wanted = {str(t.name): {int(i) for i in t.partition_indexes} for t in request.topics}
    topics = []
    for name, indexes in wanted.items():
        topic = image.topics.get(name)
        if topic is None:
            continue
        ongoing = []
        for index, move in sorted(topic.reassignments.items()):
            if (indexes is not None and index not in indexes) or move.target == move.original:
                continue
            replicas = topic.replicas[index]
            ongoing.append(
                build(
                    module.OngoingPartitionReassignment,
                    partition_index=index,
                    replicas=replicas,
                    adding_replicas=move.adding(),
                    removing_replicas=move.removing(replicas),
                )
            )
        if ongoing:
            topics.append(
                build(module.OngoingTopicReassignment, name=name, partitions=tuple(ongoing))
            )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(topics),
    )
