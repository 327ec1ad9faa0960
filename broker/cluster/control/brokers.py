"""Broker registration (Kafka's ClusterControlManager): registering and unregistering
brokers, decided from the image without I/O. Joining the metadata quorum as an observer,
which follows a new broker's registration, is the controller's (a Raft membership change)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import RegisterBrokerCommand, UnregisterBrokerCommand
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import RegisterBroker, UnregisterBroker


def register_broker(image: MetadataImage, command: RegisterBrokerCommand) -> ControllerResult:
    """A broker's addresses under a new incarnation; nothing is appended when the image
    holds exactly this registration already (a retried request)."""
    record = RegisterBroker(
        command.node_id,
        command.host,
        command.port,
        command.rack,
        command.incarnation_id,
        dict(command.listeners),
        command.raft_address,
    )
    current = image.brokers.get(record.node_id)
    if current is not None and (
        current.host,
        current.port,
        current.rack,
        current.listeners,
        current.incarnation_id,
        current.raft_address,
    ) == (
        record.host,
        record.port,
        record.rack,
        record.listeners,
        record.incarnation_id,
        record.raft_address,
    ):
        return ControllerResult()
    return ControllerResult((record,))


def unregister_broker(
    image: MetadataImage, command: UnregisterBrokerCommand, voters: frozenset[int]
) -> ControllerResult:
    """A broker leaves the cluster: refused (INVALID_REQUEST) while it hosts a replica or
    is one of the metadata quorum's `voters`; BROKER_ID_NOT_REGISTERED if it is unknown."""
    node = command.node_id
    if node not in image.brokers:
        return ControllerResult.error(
            ErrorCode.broker_id_not_registered, f"Broker {node} is not registered"
        )
    hosted = [f"{name}-{index}" for name, index in image.partitions_of(node)]
    if hosted:
        names = ", ".join(hosted[:5]) + (" ..." if len(hosted) > 5 else "")
        return ControllerResult.error(
            ErrorCode.invalid_request,
            f"Broker {node} still hosts {len(hosted)} partition replicas ({names}): move"
            f" them off first (raftka cluster decommission {node})",
        )
    if node in voters:
        return ControllerResult.error(
            ErrorCode.invalid_request,
            f"Broker {node} votes in the metadata quorum: remove it first (raftka cluster"
            f" remove-voter {node})",
        )
    return ControllerResult((UnregisterBroker(node),))
