"""ElectLeaders: move partition leadership back to preferred replicas.

PREFERRED (0): each partition's current leader hands leadership to the first replica of its
replica list when that replica is in sync (`broker.cluster.rebalance`); the answer waits up to
the request's timeout. UNCLEAN (1) is never performed: Raft only elects a replica holding
every committed record. A null partition list means every partition, and then partitions
that already have their preferred leader are left out of the answer, as Kafka does. Needs
ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.rebalance import (
    ElectionResult,
    TopicPartition,
    unclean_election_result,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    denied_message,
    duration_ms,
    response_entity,
    response_module,
)
from raftka.broker.handlers.metadata import partition_leader
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.services import ControllerClient, TopicsView
    from raftka.protocol.messages.requests import ElectLeadersRequest
    from raftka.protocol.messages.responses import ElectLeadersResponse

PREFERRED = 0
UNCLEAN = 1


@dataclass
class ElectionPlan:
    """What a request asks: the partitions in answer order, those answered already and
    those whose preferred leader is to be elected."""

    partitions: list[TopicPartition] = field(default_factory=list)
    answered: dict[TopicPartition, ElectionResult] = field(default_factory=dict)
    to_elect: list[TopicPartition] = field(default_factory=list)


class NamedPartitions(Protocol):
    """A request's topic and partition indexes (ElectLeaders' TopicPartitions)."""

    @property
    def topic(self) -> str: ...

    @property
    def partitions(self) -> Sequence[int]: ...


def requested_partitions(
    topics: TopicsView, topic_partitions: Iterable[NamedPartitions] | None
) -> list[TopicPartition]:
    """The partitions a request names (each once, in request order); every partition of
    every topic when it names none (null)."""
    if topic_partitions is None:
        return [
            (name, index)
            for name, topic in sorted(topics.topics.items())
            for index in range(len(topic.partitions))
        ]
    wanted = [(str(t.topic), int(p)) for t in topic_partitions for p in t.partitions]
    return list(dict.fromkeys(wanted))


def plan_elections(
    topics: TopicsView,
    controller: ControllerClient,
    election_type: int,
    partitions: list[TopicPartition],
) -> ElectionPlan:
    """Answer what needs no election (unknown partitions, UNCLEAN, unknown types) and list
    the partitions whose preferred replica is to be elected."""
    plan = ElectionPlan(partitions=partitions)
    for tp in partitions:
        partition = topics.partition(*tp)
        if partition is None:
            plan.answered[tp] = (
                ErrorCode.unknown_topic_or_partition,
                f"no partition {tp[1]} of topic {tp[0]!r}",
            )
        elif election_type == UNCLEAN:
            leader, _ = partition_leader(controller, partition)
            plan.answered[tp] = unclean_election_result(partition.name, leader)
        elif election_type != PREFERRED:
            plan.answered[tp] = (
                ErrorCode.invalid_request,
                f"unknown election type {election_type}: 0 (preferred) or 1 (unclean)",
            )
        else:
            plan.to_elect.append(tp)
    return plan


def election_results(
    module: ModuleType,
    partitions: list[TopicPartition],
    results: Mapping[TopicPartition, ElectionResult],
    all_partitions: bool,
) -> tuple[object, ...]:
    """ReplicaElectionResult entries per topic, in request order; with `all_partitions`,
    partitions that already have their preferred leader are left out (Kafka's rule)."""
    by_topic: dict[str, list[object]] = {}
    for tp in partitions:
        code, message = results[tp]
        if all_partitions and code == ErrorCode.election_not_needed:
            by_topic.setdefault(tp[0], [])
            continue
        by_topic.setdefault(tp[0], []).append(
            build(
                module.PartitionResult,
                partition_id=tp[1],
                error_code=code,
                error_message=message,
            )
        )
    return tuple(
        build(module.ReplicaElectionResult, topic=topic, partition_result=tuple(entries))
        for topic, entries in by_topic.items()
    )


async def handle_elect_leaders(
    context: RequestContext, request: ElectLeadersRequest
) -> ElectLeadersResponse:
    services = context.services
    entity: type[ElectLeadersResponse] = response_entity(context)
    module = response_module(context)
    election_type = int(getattr(request, "election_type", PREFERRED))
    all_partitions = request.topic_partitions is None
    if not context.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        message = denied_message(context, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        denied = (
            []
            if all_partitions
            else requested_partitions(services.topics, request.topic_partitions)
        )
        refused = {tp: (ErrorCode.cluster_authorization_failed, message) for tp in denied}
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            replica_election_results=election_results(module, denied, refused, False),
        )
    partitions = requested_partitions(services.topics, request.topic_partitions)
    plan = plan_elections(services.topics, services.controller, election_type, partitions)
    results = dict(plan.answered)
    if plan.to_elect:
        timeout_s = max(duration_ms(request.timeout), 0) / 1000
        results.update(await services.controller.elect_preferred_leaders(plan.to_elect, timeout_s))
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        replica_election_results=election_results(module, partitions, results, all_partitions),
    )
