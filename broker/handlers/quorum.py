"""The metadata quorum and broker membership: DescribeQuorum (55), UnregisterBroker (64),
AddRaftVoter (80) and RemoveRaftVoter (81).

The quorum is the `__cluster_metadata` Raft group: its voters, and its observers (brokers
that joined a running cluster, or left the voters, and replicate the metadata without
voting). Voter changes are single-server changes made by the controller (forwarded to it);
an added voter must be a registered broker, and it is caught up with the metadata log before
it votes. UnregisterBroker is refused while the broker hosts replicas or votes. Describe needs
DESCRIBE on the cluster, the changes ALTER (CLUSTER_AUTHORIZATION_FAILED otherwise).
DescribeQuorum answers the controller's view (every replica's log end), asked of it by a
broker that is not the controller, as Kafka's brokers forward it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import ChangeMetadataVotersCommand, UnregisterBrokerCommand
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    R,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.topics import METADATA_TOPIC
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        AddRaftVoterRequest,
        DescribeQuorumRequest,
        RemoveRaftVoterRequest,
        UnregisterBrokerRequest,
    )
    from raftka.protocol.messages.responses import (
        AddRaftVoterResponse,
        DescribeQuorumResponse,
        RemoveRaftVoterResponse,
        UnregisterBrokerResponse,
    )

# Replica directories are not tracked: every replica reports this one.
NO_DIRECTORY = uuid.UUID(int=0)


def _denied(context: RequestContext, operation: AclOperation) -> str | None:
    if context.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return denied_message(context, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def handle_describe_quorum(
    context: RequestContext, request: DescribeQuorumRequest
) -> DescribeQuorumResponse:
    entity: type[DescribeQuorumResponse] = response_entity(context)
    module = response_module(context)
    denied = _denied(context, AclOperation.DESCRIBE)
    if denied is not None:
        return build(
            entity,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=denied,
            topics=(),
            nodes=(),
        )
    controller = context.services.controller
    quorum = await controller.controller_quorum()
    image = controller.image

    def replica(node: int) -> object:
        end = quorum.log_end_offsets.get(node, -1)
        last_fetch_ms, last_caught_up_ms = quorum.contact_ms.get(node, (-1, -1))
        return build(
            module.ReplicaState,
            replica_id=node,
            replica_directory_id=NO_DIRECTORY,
            log_end_offset=end,
            last_fetch_timestamp=last_fetch_ms,
            last_caught_up_timestamp=last_caught_up_ms,
        )

    topics = []
    for topic in request.topics:
        partitions = []
        for item in topic.partitions:
            if str(topic.topic_name) != METADATA_TOPIC or int(item.partition_index) != 0:
                partitions.append(
                    build(
                        module.PartitionData,
                        partition_index=item.partition_index,
                        error_code=ErrorCode.unknown_topic_or_partition,
                        error_message=f"the metadata quorum is {METADATA_TOPIC} partition 0",
                        leader_id=-1,
                        leader_epoch=-1,
                        high_watermark=-1,
                        current_voters=(),
                        observers=(),
                    )
                )
                continue
            partitions.append(
                build(
                    module.PartitionData,
                    partition_index=0,
                    error_code=ErrorCode.none,
                    error_message=None,
                    leader_id=quorum.leader_id,
                    leader_epoch=quorum.epoch,
                    high_watermark=quorum.high_watermark,
                    current_voters=tuple(replica(n) for n in sorted(quorum.voters)),
                    observers=tuple(replica(n) for n in sorted(quorum.observers)),
                )
            )
        topics.append(
            build(module.TopicData, topic_name=topic.topic_name, partitions=tuple(partitions))
        )
    nodes = []
    if hasattr(module, "Node"):
        for node in sorted(quorum.voters):
            broker = image.brokers.get(node)
            if broker is None:
                continue
            listeners = tuple(
                build(module.Listener, name=name, host=host, port=port)
                for name, (host, port) in sorted(broker.listeners.items())
            ) or (build(module.Listener, name="PLAINTEXT", host=broker.host, port=broker.port),)
            nodes.append(build(module.Node, node_id=node, listeners=listeners))
    return build(
        entity,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(topics),
        nodes=tuple(nodes),
    )


def _wrong_cluster(context: RequestContext, request: object) -> str | None:
    wanted = getattr(request, "cluster_id", None)
    if wanted is None or wanted == context.services.identity.cluster_id:
        return None
    return (
        f"the request is for cluster {wanted}, this is cluster "
        f"{context.services.identity.cluster_id}"
    )


def _answer(entity: type[R], error_code: ErrorCode, error_message: str | None) -> R:
    return build(
        entity, throttle_time=NO_THROTTLE, error_code=error_code, error_message=error_message
    )


async def _voter_change(
    context: RequestContext,
    entity: type[R],
    request: AddRaftVoterRequest | RemoveRaftVoterRequest,
    action: str,
) -> R:
    denied = _denied(context, AclOperation.ALTER)
    if denied is not None:
        return _answer(entity, ErrorCode.cluster_authorization_failed, denied)
    wrong = _wrong_cluster(context, request)
    if wrong is not None:
        return _answer(entity, ErrorCode.inconsistent_cluster_id, wrong)
    result = await context.services.controller.execute(
        ChangeMetadataVotersCommand(action, int(request.voter_id))
    )
    return _answer(entity, result.error_code, result.error_message)


async def handle_add_raft_voter(
    context: RequestContext, request: AddRaftVoterRequest
) -> AddRaftVoterResponse:
    entity: type[AddRaftVoterResponse] = response_entity(context)
    return await _voter_change(context, entity, request, "add")


async def handle_remove_raft_voter(
    context: RequestContext, request: RemoveRaftVoterRequest
) -> RemoveRaftVoterResponse:
    entity: type[RemoveRaftVoterResponse] = response_entity(context)
    return await _voter_change(context, entity, request, "remove")


async def handle_unregister_broker(
    context: RequestContext, request: UnregisterBrokerRequest
) -> UnregisterBrokerResponse:
    entity: type[UnregisterBrokerResponse] = response_entity(context)
    denied = _denied(context, AclOperation.ALTER)
    if denied is not None:
        return _answer(entity, ErrorCode.cluster_authorization_failed, denied)
    result = await context.services.controller.execute(
        UnregisterBrokerCommand(int(request.broker_id))
    )
    return _answer(entity, result.error_code, result.error_message)
