"""Metadata: brokers, topics, partitions, leaders; auto-creates topics when allowed.

An internal topic named for auto-creation is created as its coordinator creates it (its own
partition count, replication factor and configs), as Kafka's AutoTopicCreationManager does;
`__cluster_metadata` never is.

With an authorizer, as Kafka: a topic the principal may not DESCRIBE is left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (whether or not it
exists); auto-creation needs CREATE on the cluster or on the topic.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.cluster.validation import TopicError, check_not_reserved, validate_topic_name
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.topics import (
    COORDINATOR_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    Topic,
)
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import BrokerServices, RequestContext
    from raftka.broker.services import ControllerClient
    from raftka.broker.topics import Partition
    from raftka.protocol.messages.requests import DescribeClusterRequest, MetadataRequest
    from raftka.protocol.messages.responses import DescribeClusterResponse, MetadataResponse

logger = logging.getLogger("raftka.metadata")

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def partition_leader(controller: ControllerClient, partition: Partition) -> tuple[int, int]:
    """(leader id, leader epoch) as this broker knows it: the newest leader it knows of,
    from the partition's Raft group when hosted here, else from what the leaders gossip.

    A replica that has lost sight of its leader without a newer epoch beginning (an election
    it could not start) still names that leader: only a newer epoch or the leader stepping
    down ends it, as a Kafka broker names a leader until the controller's next record. With
    no leader known, a replica gives its last leader's epoch (0 while the partition has had
    none: it is being created) and another broker what the gossip says (-1, -1 before it
    heard of one). Clients keep the answer with the newest epoch (KIP-320) and librdkafka's
    admin client takes a cached leader -1 as final, so a leader is never dropped early."""
    hint = controller.leader_hints.get(partition.name)
    raft = partition.raft
    if raft is None:
        return hint if hint is not None else (-1, -1)
    if raft.leader_id is not None:
        return raft.leader_id, raft.term
    if hint is not None and hint[0] >= 0 and hint[1] >= raft.term:
        return hint
    if partition.last_leader_id is not None and partition.last_leader_epoch == raft.term:
        return partition.last_leader_id, raft.term
    return -1, partition.last_leader_epoch


def in_sync_replicas(controller: ControllerClient, partition: Partition) -> tuple[int, ...]:
    """The partition's in-sync replicas as its leader knows them: this broker's own view when
    it leads, else what the leader last gossiped; the whole replica set while unknown."""
    if partition.is_leader:
        return partition.in_sync_replicas()
    return controller.isr_hints.get(partition.name, partition.replicas)


async def learn_unknown_leaders(controller: ControllerClient, topics: Iterable[Topic]) -> None:
    """Ask the replicas of partitions hosted elsewhere whose leader this broker has not
    heard of (a new topic, before the gossip's next round) which of them leads, so the
    answer names the leader the leader already knows."""
    replicas: set[int] = set()
    for topic in topics:
        for p in topic.partitions:
            if p.raft is None and p.name not in controller.leader_hints:
                replicas.update(p.replicas)
    if replicas:
        await controller.learn_leaders(replicas)


class TopicEntry(Entity, Protocol):
    """A topic of a Metadata response (kio's MetadataResponseTopic of the request's version)."""

    @property
    def name(self) -> str | None: ...


def _topic_entry(module: ModuleType, controller: ControllerClient, topic: Topic) -> TopicEntry:
    partitions = []
    for p in topic.partitions:
        leader, epoch = partition_leader(controller, p)
        partitions.append(
            build(
                module.MetadataResponsePartition,
                error_code=ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
                partition_index=p.index,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=p.replicas,
                isr_nodes=in_sync_replicas(controller, p),
                offline_replicas=(),
            )
        )
    entry: TopicEntry = build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=tuple(partitions),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    return entry


def _error_entry(
    module: ModuleType, name: str | None, topic_id: uuid.UUID | None, error: ErrorCode
) -> TopicEntry:
    entry: TopicEntry = build(
        module.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    return entry


async def _auto_create(controller: ControllerClient, name: str) -> ErrorCode:
    result = await controller.execute(
        CreateTopicCommand(name=name, num_partitions=-1, replication_factor=-1)
    )
    code = result.error_code
    if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
        logger.info(
            "auto-creating topic %s failed: %s", name, result.error_message, extra={"topic": name}
        )
    return code


async def create_internal_topic(context: RequestContext, name: str) -> None:
    """Have the coordinator that owns internal topic `name` create it as it creates it on
    first use; logged there when it cannot be."""
    services = context.services
    if name == OFFSETS_TOPIC:
        await services.groups.ensure_offsets_topic()
    elif name == TRANSACTION_STATE_TOPIC:
        await services.transactions.log.ensure_created()
    elif name == SHARE_STATE_TOPIC:
        await services.groups.share_partitions.store.ensure_created()


def brokers_of(
    services: BrokerServices, listener: str | None = None
) -> list[tuple[int, str, int, str | None]]:
    """Registered brokers (node id, host, port, rack); this one even before registration.
    With `listener` (the one the client connected to), each broker is given at its
    address on that listener, where it registered one (Kafka answers so), else at its
    first listener's."""
    registered = {}
    for b in services.controller.image.brokers.values():
        host, port = (b.host, b.port)
        if listener is not None:
            host, port = b.listeners.get(listener, (host, port))
        registered[b.node_id] = (b.node_id, host, port, b.rack)
    me = services.identity
    if me.node_id not in registered or listener is not None:
        host, port = (
            (me.advertised_host, me.advertised_port)
            if listener is None
            else me.advertised_for(listener)
        )
        registered[me.node_id] = (me.node_id, host, port, me.rack)
    return [registered[n] for n in sorted(registered)]


def client_listener(context: RequestContext) -> str | None:
    return None if context.session is None else context.session.listener.name


def may_auto_create(context: RequestContext, name: str) -> bool:
    """CREATE on the cluster or on the topic, as Kafka requires to auto-create it."""
    return context.authorize(
        AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or context.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)


def cluster_authorized_operations(context: RequestContext, request: object) -> int:
    """The cluster bit field when asked for: 0 without DESCRIBE on the cluster (Kafka)."""
    if not getattr(request, "include_cluster_authorized_operations", False):
        return AUTHORIZED_OPERATIONS_OMITTED
    if not context.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return context.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


async def _named_entry(
    context: RequestContext, module: ModuleType, name: str, allow_create: bool
) -> tuple[TopicEntry, bool]:
    """The entry for a topic asked for by name, and whether it is one the principal may
    DESCRIBE (which gets its authorized operations when asked for)."""
    services = context.services
    controller = services.controller
    topics = services.topics
    # Before existence: an answer must not tell a topic one may not see exists.
    if not context.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return _error_entry(module, name, None, ErrorCode.topic_authorization_failed), False
    topic = topics.get(name)
    if topic is None:
        if allow_create and not may_auto_create(context, name):
            return _error_entry(module, name, None, ErrorCode.topic_authorization_failed), False
        try:
            validate_topic_name(name)
            if allow_create:
                check_not_reserved(name)
        except TopicError as exc:
            return _error_entry(module, name, None, exc.error_code), True
        if not allow_create:
            return _error_entry(module, name, None, ErrorCode.unknown_topic_or_partition), True
        if name in COORDINATOR_TOPICS:
            # As Kafka: the coordinator's own partition count, replication factor and configs.
            await create_internal_topic(context, name)
            code = ErrorCode.none
        else:
            code = await _auto_create(controller, name)
        topic = topics.get(name)
        if topic is None:
            # Kafka answers LEADER_NOT_AVAILABLE while a new topic is being created.
            if code in (ErrorCode.none, ErrorCode.topic_already_exists):
                code = ErrorCode.leader_not_available
            return _error_entry(module, name, None, code), True
    await learn_unknown_leaders(controller, [topic])
    return _topic_entry(module, controller, topic), True


async def handle_metadata(context: RequestContext, request: MetadataRequest) -> MetadataResponse:
    services = context.services
    controller = services.controller
    entity: type[MetadataResponse] = response_entity(context)
    module = response_module(context)
    topics = services.topics
    requested = request.topics
    # (entry, whether it gets the topic's authorized operations when asked for)
    entries: list[tuple[TopicEntry, bool]] = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if requested is None or (context.api_version == 0 and not requested):
        described = [
            topic
            for topic in list(topics.topics.values())
            if context.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        ]
        await learn_unknown_leaders(controller, described)
        entries.extend((_topic_entry(module, controller, topic), True) for topic in described)
    else:
        auto_create = services.config.get_bool("auto.create.topics.enable")
        allow_create = getattr(request, "allow_auto_topic_creation", True) and auto_create
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None:
                by_id = None if topic_id is None else topics.topics_by_id.get(topic_id)
                if by_id is None:
                    error = _error_entry(module, None, topic_id, ErrorCode.unknown_topic_id)
                    entries.append((error, False))
                elif not context.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, by_id.name):
                    # Kafka does not count a topic id as secret, but keeps the name back.
                    error = _error_entry(
                        module, None, topic_id, ErrorCode.topic_authorization_failed
                    )
                    entries.append((error, False))
                else:
                    await learn_unknown_leaders(controller, [by_id])
                    entries.append((_topic_entry(module, controller, by_id), True))
                continue
            entries.append(await _named_entry(context, module, name, allow_create))
    if getattr(request, "include_topic_authorized_operations", False):
        entries = [
            (
                dataclasses.replace(
                    entry,
                    # a describable entry is one found by name or id: it has its name
                    topic_authorized_operations=context.authorized_operations(
                        ResourceType.TOPIC, entry.name or ""
                    ),
                )
                if describable
                else entry,
                describable,
            )
            for entry, describable in entries
        ]
    brokers = tuple(
        build(module.MetadataResponseBroker, node_id=node_id, host=host, port=port, rack=rack)
        for node_id, host, port, rack in brokers_of(services, client_listener(context))
    )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=services.identity.cluster_id,
        controller_id=controller.advertised_controller_id,
        topics=tuple(entry for entry, _ in entries),
        cluster_authorized_operations=cluster_authorized_operations(context, request),
    )


async def handle_describe_cluster(
    context: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    services = context.services
    entity: type[DescribeClusterResponse] = response_entity(context)
    module = response_module(context)
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=services.identity.cluster_id,
        controller_id=services.controller.advertised_controller_id,
        brokers=tuple(
            build(module.DescribeClusterBroker, broker_id=n, host=h, port=p, rack=r)
            for n, h, p, r in brokers_of(services, client_listener(context))
        ),
        cluster_authorized_operations=cluster_authorized_operations(context, request),
    )
