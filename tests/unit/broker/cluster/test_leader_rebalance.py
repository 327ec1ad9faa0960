"""Preferred-leader election decisions: the leader's refusal rules, unclean elections, Kafka's
per-broker imbalance rule, what an ElectLeaders request is answered without an election, and
the controller's rebalance loop (gentle: only preferred replicas in sync for a whole check
interval, a few at a time, only on the controller)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.elect_leaders.v2 import response as v2
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.rebalance import (
    ELECT_RPC,
    REBALANCE_BATCH,
    Leadership,
    PreferredLeaderElections,
    imbalanced_partitions,
    preferred_election_refusal,
    unclean_election_result,
)
from raftka.broker.handlers.elect_leaders import (
    PREFERRED,
    UNCLEAN,
    election_results,
    plan_elections,
    requested_partitions,
)

# -- the leader's decision ----------------------------------------------------------------


def test_preferred_leader_already_leading_needs_no_election() -> None:
    assert preferred_election_refusal("t-0", (1, 2, 3), 1, (1, 2, 3)) == (
        ErrorCode.election_not_needed,
        None,
    )


def test_preferred_replica_out_of_sync_is_not_available() -> None:
    code, message = preferred_election_refusal("t-0", (1, 2, 3), 2, (2, 3)) or (None, None)
    assert code == ErrorCode.preferred_leader_not_available
    assert message is not None and "replica 1 of t-0" in message


def test_preferred_replica_in_sync_is_elected() -> None:
    assert preferred_election_refusal("t-0", (1, 2, 3), 2, (1, 2, 3)) is None


def test_unclean_election_is_never_performed() -> None:
    code, message = unclean_election_result("t-0", 2)
    assert code == ErrorCode.election_not_needed and message and "unclean" in message
    code, message = unclean_election_result("t-0", -1)
    assert code == ErrorCode.eligible_leaders_not_available and message and "Raft" in message


# -- Kafka's imbalance rule ---------------------------------------------------------------


def lead(
    topic: str, index: int, replicas: tuple[int, ...], leader: int, in_sync=None
) -> Leadership:
    return Leadership(topic, index, replicas, leader, replicas if in_sync is None else in_sync)


def test_a_broker_within_the_percentage_is_left_alone() -> None:
    # Broker 1 prefers 10 partitions and leads 9 of them: 10% led elsewhere is not above 10%.
    partitions = [lead("t", i, (1, 2), 1) for i in range(9)] + [lead("t", 9, (1, 2), 2)]
    assert imbalanced_partitions(partitions, 10) == []
    assert imbalanced_partitions(partitions, 9) == [partitions[9]]


def test_only_in_sync_preferred_replicas_with_a_known_leader_are_chosen() -> None:
    partitions = [
        lead("t", 0, (1, 2, 3), 2),
        lead("t", 1, (1, 2, 3), 3, in_sync=(2, 3)),  # broker 1 still catching up here
        lead("t", 2, (1, 2, 3), -1),  # no leader to hand over
        lead("t", 3, (2, 1, 3), 2),
        lead("u", 0, (3, 1, 2), 1),
    ]
    chosen = imbalanced_partitions(partitions, 10)
    assert [(p.topic, p.index) for p in chosen] == [("t", 0), ("u", 0)]


def test_balanced_cluster_needs_nothing() -> None:
    partitions = [lead("t", i, ((i % 3) + 1, ((i + 1) % 3) + 1), (i % 3) + 1) for i in range(6)]
    assert imbalanced_partitions(partitions, 0) == []


# -- ElectLeaders: what is answered without an election -----------------------------------


@dataclass
class FakeTopics:
    replicas: dict[str, list[tuple[int, ...]]]

    @property
    def topics(self) -> dict[str, Any]:
        return {n: SimpleNamespace(partitions=r) for n, r in self.replicas.items()}

    def partition(self, name: str, index: int) -> Any:
        replicas = self.replicas.get(name)
        if replicas is None or not 0 <= index < len(replicas):
            return None
        return SimpleNamespace(name=f"{name}-{index}", replicas=replicas[index], raft=None)


@dataclass
class FakeController:
    leader_hints: dict[str, tuple[int, int]] = field(default_factory=dict)
    isr_hints: dict[str, tuple[int, ...]] = field(default_factory=dict)


def request_topics(**partitions: list[int]) -> tuple[Any, ...]:
    return tuple(SimpleNamespace(topic=t, partitions=p) for t, p in partitions.items())


def test_null_partitions_mean_every_partition() -> None:
    topics = FakeTopics({"b": [(1,)], "a": [(1,), (2,)]})
    assert requested_partitions(topics, None) == [("a", 0), ("a", 1), ("b", 0)]
    asked = requested_partitions(topics, request_topics(b=[0, 0], a=[1]))
    assert asked == [("b", 0), ("a", 1)]


def test_unknown_partitions_are_answered_and_the_rest_elected() -> None:
    topics = FakeTopics({"t": [(1, 2, 3), (2, 3, 1)]})
    plan = plan_elections(topics, FakeController(), PREFERRED, [("t", 0), ("t", 5), ("x", 0)])
    assert plan.to_elect == [("t", 0)]
    assert plan.answered[("t", 5)][0] == ErrorCode.unknown_topic_or_partition
    assert plan.answered[("x", 0)][0] == ErrorCode.unknown_topic_or_partition


def test_unclean_and_unknown_election_types_elect_nothing() -> None:
    topics = FakeTopics({"t": [(1, 2, 3), (2, 3, 1)]})
    controller = FakeController(leader_hints={"t-0": (2, 4)})
    plan = plan_elections(topics, controller, UNCLEAN, [("t", 0), ("t", 1)])
    assert plan.to_elect == []
    assert plan.answered[("t", 0)][0] == ErrorCode.election_not_needed
    assert plan.answered[("t", 1)][0] == ErrorCode.eligible_leaders_not_available
    plan = plan_elections(topics, controller, 7, [("t", 0)])
    assert plan.answered[("t", 0)][0] == ErrorCode.invalid_request


def test_an_all_partitions_answer_leaves_out_those_already_preferred() -> None:
    results = {
        ("t", 0): (ErrorCode.none, None),
        ("t", 1): (ErrorCode.election_not_needed, None),
        ("u", 0): (ErrorCode.election_not_needed, None),
    }
    order = [("t", 0), ("t", 1), ("u", 0)]
    everything = election_results(v2, order, results, all_partitions=True)
    assert [(r.topic, [p.partition_id for p in r.partition_result]) for r in everything] == [
        ("t", [0]),
        ("u", []),
    ]
    named = election_results(v2, order, results, all_partitions=False)
    assert [len(r.partition_result) for r in named] == [2, 1]


# -- the controller's rebalance loop ------------------------------------------------------


class FakePartition:
    def __init__(self, topic: str, index: int, replicas: tuple[int, ...]) -> None:
        self.topic = SimpleNamespace(name=topic)
        self.index = index
        self.replicas = replicas
        self.raft = None  # led elsewhere: leadership comes from the gossip hints
        self.is_leader = False

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"


class FakeCluster:
    """What PreferredLeaderElections reads of its controller: partitions led elsewhere,
    as gossiped."""

    def __init__(self, partitions: list[FakePartition]) -> None:
        self.node_id = 1
        self.is_controller = True
        self.partitions = partitions
        self.topics = SimpleNamespace(all_partitions=lambda: iter(self.partitions))
        self.node = SimpleNamespace(transport=None)
        self.leader_hints: dict[str, tuple[int, int]] = {}
        self.isr_hints: dict[str, tuple[int, ...]] = {}
        self.rpcs: list[str] = []

    def register_rpc(self, rpc: str, handler: Any) -> None:
        self.rpcs.append(rpc)


def rebalancer(count: int) -> tuple[FakeCluster, PreferredLeaderElections, list[list[Any]]]:
    """`count` partitions preferring broker 2, all led by broker 3, broker 2 in sync."""
    partitions = [FakePartition("t", i, (2, 3, 1)) for i in range(count)]
    cluster = FakeCluster(partitions)
    for p in partitions:
        cluster.leader_hints[p.name] = (3, 1)
        cluster.isr_hints[p.name] = (1, 2, 3)
    elections = PreferredLeaderElections(cluster)  # type: ignore[arg-type]
    asked: list[list[Any]] = []

    async def elect(tps: list[Any], timeout_s: float) -> dict[Any, Any]:
        asked.append(list(tps))
        for topic, index in tps:  # the transfer happens
            cluster.leader_hints[f"{topic}-{index}"] = (2, 2)
        return {tp: (ErrorCode.none, None) for tp in tps}

    elections.elect = elect  # type: ignore[method-assign]
    return cluster, elections, asked


async def run_for(elections: PreferredLeaderElections, seconds: float) -> None:
    with trio.move_on_after(seconds):
        await elections.rebalance(interval_s=300, percentage=10)


def test_rebalance_waits_a_whole_interval_then_moves_a_few_at_a_time() -> None:
    cluster, elections, asked = rebalancer(REBALANCE_BATCH + 2)
    assert cluster.rpcs == [ELECT_RPC]
    clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(run_for, elections, 301, clock=clock)
    assert asked == []  # the first check only notes who is in sync
    trio.run(run_for, elections, 601, clock=clock)
    assert [len(batch) for batch in asked] == [REBALANCE_BATCH, 2]
    assert all(cluster.leader_hints[p.name][0] == 2 for p in cluster.partitions)


def test_rebalance_skips_a_replica_that_just_caught_up() -> None:
    cluster, elections, asked = rebalancer(3)
    cluster.isr_hints["t-0"] = (1, 3)  # broker 2 behind at the first check

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_for, elections, 901)
            await trio.sleep(450)
            cluster.isr_hints["t-0"] = (1, 2, 3)  # caught up between the checks

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert asked == [[("t", 1), ("t", 2)], [("t", 0)]]


def test_only_the_controller_rebalances() -> None:
    cluster, elections, asked = rebalancer(3)
    cluster.is_controller = False
    trio.run(run_for, elections, 1000, clock=trio.testing.MockClock(autojump_threshold=0))
    assert asked == []


@pytest.mark.parametrize("percentage", [0, 10, 100])
def test_rebalance_of_a_balanced_cluster_does_nothing(percentage: int) -> None:
    cluster, elections, asked = rebalancer(3)
    for p in cluster.partitions:
        cluster.leader_hints[p.name] = (2, 1)

    async def main() -> None:
        with trio.move_on_after(1000):
            await elections.rebalance(interval_s=300, percentage=percentage)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert asked == []


# -- the leader's side: handing leadership over ---------------------------------------------


class FakeRaft:
    """A Raft group led here whose transfer to `to` completes after `takes_s` (never: None)."""

    def __init__(self, takes_s: float | None) -> None:
        self.leader_id: int | None = 1
        self.takes_s = takes_s
        self.transfers: list[int] = []

    def transfer_leadership(self, to: int) -> None:
        self.transfers.append(to)


class LedPartition(FakePartition):
    def __init__(self, index: int, replicas: tuple[int, ...], raft: FakeRaft, isr: tuple[int, ...]):
        super().__init__("t", index, replicas)
        self.raft = raft  # type: ignore[assignment]
        self.is_leader = True
        self.isr = isr

    @property
    def leader_id(self) -> int | None:
        return self.raft.leader_id  # type: ignore[attr-defined]

    def in_sync_replicas(self) -> tuple[int, ...]:
        return self.isr


def elect_here(partitions: list[LedPartition], timeout_s: float) -> dict[Any, Any]:
    cluster = FakeCluster(partitions)  # type: ignore[arg-type]
    cluster.topics.partition = lambda name, index: next(  # type: ignore[attr-defined]
        (p for p in partitions if (p.topic.name, p.index) == (name, index)), None
    )
    elections = PreferredLeaderElections(cluster)  # type: ignore[arg-type]

    async def main() -> dict[Any, Any]:
        async with trio.open_nursery() as nursery:
            for p in partitions:
                raft = p.raft
                assert isinstance(raft, FakeRaft)
                if raft.takes_s is not None:
                    nursery.start_soon(complete, raft, raft.takes_s)
            results = await elections.elect_here(
                [(p.topic.name, p.index) for p in partitions], timeout_s
            )
            nursery.cancel_scope.cancel()
        return results

    async def complete(raft: FakeRaft, after_s: float) -> None:
        await trio.sleep(after_s)
        if raft.transfers:
            raft.leader_id = raft.transfers[-1]

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_leader_hands_over_and_answers_once_the_preferred_replica_leads() -> None:
    moved = LedPartition(0, (2, 1, 3), FakeRaft(takes_s=0.5), isr=(1, 2, 3))
    behind = LedPartition(1, (3, 1, 2), FakeRaft(takes_s=0.5), isr=(1, 2))
    already = LedPartition(2, (1, 2, 3), FakeRaft(takes_s=None), isr=(1, 2, 3))
    results = elect_here([moved, behind, already], timeout_s=5)
    assert results[("t", 0)] == (ErrorCode.none, None)
    assert results[("t", 1)][0] == ErrorCode.preferred_leader_not_available
    assert results[("t", 2)] == (ErrorCode.election_not_needed, None)
    assert [p.raft.transfers for p in (moved, behind, already)] == [[2], [], []]  # type: ignore[attr-defined]


def test_a_transfer_that_does_not_finish_in_time_is_answered_request_timed_out() -> None:
    stuck = LedPartition(0, (2, 1, 3), FakeRaft(takes_s=None), isr=(1, 2, 3))
    results = elect_here([stuck], timeout_s=2)
    code, message = results[("t", 0)]
    assert code == ErrorCode.request_timed_out and "within 2 s" in message
