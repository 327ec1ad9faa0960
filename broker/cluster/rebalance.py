"""Preferred-leader election (ElectLeaders) and automatic leader rebalancing.

Every partition is a Raft group; its preferred leader is the first replica of its replica
list. Electing it means asking the partition's current leader to hand leadership over (Raft
leadership transfer: the leader stops accepting appends, catches the target up, then sends
it TimeoutNow). Only a leader can do that, so a request for a partition led elsewhere is
forwarded to that broker over the peer transport (`ELECT_RPC`).

Raft never elects a replica that lacks committed records, so an unclean election is never
performed: a partition that has a leader needs none (ELECTION_NOT_NEEDED, as KRaft answers),
one without a leader has no eligible replica to give it (ELIGIBLE_LEADERS_NOT_AVAILABLE).

The controller checks every `leader.imbalance.check.interval.seconds` whether some broker
leads too few of the partitions it prefers (more than `leader.imbalance.per.broker.percentage`
led elsewhere) and then elects its preferred replica for those partitions, a few at a time,
only where that replica has been in sync for a whole check interval (a broker that has just
started catches up first).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.consensus.core import NotLeaderError
from raftka.consensus.transport import ForwardError

if TYPE_CHECKING:
    from raftka.broker.topics import Partition, TopicManager
    from raftka.consensus.driver import RaftNode

logger = logging.getLogger("raftka.rebalance")

ELECT_RPC = "__elect_preferred"
#: Transfers the automatic rebalance starts at once; it waits for them before the next ones.
REBALANCE_BATCH = 4
#: How long one automatic transfer may take before the rebalance gives up on it.
REBALANCE_TRANSFER_TIMEOUT_S = 10.0
#: How often a waiting election looks whether leadership has moved.
ELECTION_POLL_S = 0.02
#: Forwarding to a leader that is away for a moment is retried at this pace.
RETRY_S = 0.25

TopicPartition = tuple[str, int]
#: Per partition: Kafka's error code and its message (None when there is nothing to say).
ElectionResult = tuple[ErrorCode, str | None]

UNCLEAN_REFUSED = (
    "raftka does not elect unclean leaders: Raft only elects a replica that holds every "
    "committed record"
)


class ElectionHost(Protocol):
    """What elections use of their broker's controller (`cluster.controller.Controller`)."""

    @property
    def node_id(self) -> int: ...

    @property
    def node(self) -> RaftNode: ...

    @property
    def topics(self) -> TopicManager: ...

    @property
    def is_controller(self) -> bool: ...

    @property
    def leader_hints(self) -> Mapping[str, tuple[int, int]]:
        """Partition name -> (leader id, leader epoch) of partitions led elsewhere."""
        ...

    @property
    def isr_hints(self) -> Mapping[str, tuple[int, ...]]:
        """Partition name -> in-sync replicas, as their leaders elsewhere report them."""
        ...

    def register_rpc(
        self, rpc: str, handler: Callable[[bytes], Awaitable[tuple[int, bytes]]]
    ) -> None:
        """Serve the peer RPC `rpc` with `handler`."""
        ...


@dataclass(frozen=True, slots=True)
class Leadership:
    """What is known of one partition's leadership: its replicas (the first is preferred),
    its leader (-1 when unknown) and the replicas its leader reports in sync."""

    topic: str
    index: int
    replicas: tuple[int, ...]
    leader: int
    in_sync: tuple[int, ...]

    @property
    def preferred(self) -> int:
        return self.replicas[0] if self.replicas else -1


def preferred_election_refusal(
    name: str, replicas: Sequence[int], leader: int, in_sync: Sequence[int]
) -> ElectionResult | None:
    """Why the leader `leader` of partition `name` need not or cannot hand leadership to its
    preferred replica; None when it should transfer it."""
    if not replicas:
        return ErrorCode.preferred_leader_not_available, f"{name} has no replicas"
    preferred = replicas[0]
    if leader == preferred:
        return ErrorCode.election_not_needed, None
    if preferred not in in_sync:
        return (
            ErrorCode.preferred_leader_not_available,
            f"the preferred replica {preferred} of {name} is not alive or not caught up "
            f"(in sync: {list(in_sync)}); retry once it has caught up",
        )
    return None


def unclean_election_result(name: str, leader: int) -> ElectionResult:
    """The answer to an UNCLEAN election of partition `name`, whose leader is `leader` (-1:
    none known): never performed (see the module docstring)."""
    if leader >= 0:
        return (
            ErrorCode.election_not_needed,
            f"{name} has a leader (broker {leader}); {UNCLEAN_REFUSED}",
        )
    return ErrorCode.eligible_leaders_not_available, f"{name} has no leader; {UNCLEAN_REFUSED}"


def imbalanced_partitions(partitions: Iterable[Leadership], percentage: int) -> list[Leadership]:
    """The partitions whose preferred replica should take leadership back: those of each
    broker whose share of preferred-but-led-elsewhere partitions exceeds `percentage`
    percent, where the preferred replica is in sync and a leader is known (the transfer
    needs one). Ordered by broker, then topic and partition."""
    preferred_count: dict[int, int] = {}
    led_elsewhere: dict[int, list[Leadership]] = {}
    for p in partitions:
        if not p.replicas:
            continue
        preferred_count[p.preferred] = preferred_count.get(p.preferred, 0) + 1
        if p.leader != p.preferred:
            led_elsewhere.setdefault(p.preferred, []).append(p)
    chosen: list[Leadership] = []
    for broker in sorted(led_elsewhere):
        moved = led_elsewhere[broker]
        if len(moved) * 100 <= percentage * preferred_count[broker]:
            continue
        chosen += sorted(
            (p for p in moved if p.leader >= 0 and p.preferred in p.in_sync),
            key=lambda p: (p.topic, p.index),
        )
    return chosen


class PreferredLeaderElections:
    """Preferred-leader elections on this broker: asked here (ElectLeaders, the rebalance),
    carried out by each partition's leader; and the controller's rebalance loop."""

    def __init__(self, controller: ElectionHost) -> None:
        self.controller = controller
        self.node_id = controller.node_id
        self.topics = controller.topics
        self.transport = controller.node.transport
        controller.register_rpc(ELECT_RPC, self._serve)

    # -- asking for elections -------------------------------------------------------------

    def leader_of(self, partition: Partition) -> int:
        """The partition's leader as this broker knows it; -1 while unknown."""
        if partition.raft is not None:
            leader = partition.leader_id
            return -1 if leader is None else leader
        return self.controller.leader_hints.get(partition.name, (-1, -1))[0]

    async def elect(
        self, partitions: Sequence[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, ElectionResult]:
        """Elect the preferred replica of each partition, each by its current leader, and
        wait up to `timeout_s` for the results. A partition whose leader moves or is not
        known yet is asked again (at its new leader) until the time is up."""
        results: dict[TopicPartition, ElectionResult] = {}
        pending = list(dict.fromkeys(partitions))
        with trio.move_on_after(timeout_s) as scope:
            while pending:
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in pending:
                    partition = self.topics.partition(*tp)
                    if partition is None:
                        results[tp] = (
                            ErrorCode.unknown_topic_or_partition,
                            f"no partition {tp[1]} of topic {tp[0]!r}",
                        )
                        continue
                    leader = self.leader_of(partition)
                    if leader < 0:
                        results[tp] = (
                            ErrorCode.leader_not_available,
                            f"no leader known for {partition.name} yet",
                        )
                        continue
                    by_leader.setdefault(leader, []).append(tp)
                # The cancel scope's deadline is on trio's clock, so it is read on that clock.
                remaining_s = max(scope.deadline - trio.current_time(), 0.0)
                async with trio.open_nursery() as nursery:
                    for leader, tps in by_leader.items():
                        nursery.start_soon(self._elect_at, leader, tps, remaining_s, results)
                pending = [
                    tp
                    for tp in pending
                    if results[tp][0]
                    in (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available)
                ]
                if pending:
                    await trio.sleep(RETRY_S)
        for tp in partitions:
            results.setdefault(
                tp,
                (
                    ErrorCode.request_timed_out,
                    f"the election of {tp[0]}-{tp[1]} did not finish within {timeout_s:g} s",
                ),
            )
        return results

    async def _elect_at(
        self,
        leader: int,
        tps: list[TopicPartition],
        timeout_s: float,
        results: dict[TopicPartition, ElectionResult],
    ) -> None:
        if leader == self.node_id:
            results.update(await self.elect_here(tps, timeout_s))
            return
        payload = json.dumps({"partitions": [list(tp) for tp in tps], "timeout_s": timeout_s})
        try:
            raw = await self.transport.forward(leader, ELECT_RPC, payload.encode(), timeout_s + 1)
            for topic, index, code, message in json.loads(raw):
                results[(topic, index)] = (ErrorCode(code), message)
        except (ForwardError, ValueError, TypeError) as exc:
            for tp in tps:
                results[tp] = (
                    ErrorCode.not_leader_or_follower,
                    f"cannot reach broker {leader}, the leader of {tp[0]}-{tp[1]}: {exc}",
                )

    # -- carrying them out, as leader -----------------------------------------------------

    async def elect_here(
        self, tps: Sequence[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, ElectionResult]:
        """Hand leadership of each partition this broker leads to its preferred replica and
        wait up to `timeout_s` until that replica leads."""
        results: dict[TopicPartition, ElectionResult] = {}
        async with trio.open_nursery() as nursery:
            for tp in tps:
                nursery.start_soon(self._transfer, tp, timeout_s, results)
        return results

    async def _transfer(
        self, tp: TopicPartition, timeout_s: float, results: dict[TopicPartition, ElectionResult]
    ) -> None:
        partition = self.topics.partition(*tp)
        if partition is None:
            results[tp] = (
                ErrorCode.unknown_topic_or_partition,
                f"no partition {tp[1]} of {tp[0]!r}",
            )
            return
        raft = partition.raft
        if raft is None or not partition.is_leader:
            results[tp] = (
                ErrorCode.not_leader_or_follower,
                f"broker {self.node_id} does not lead {partition.name}",
            )
            return
        refusal = preferred_election_refusal(
            partition.name, partition.replicas, self.node_id, partition.in_sync_replicas()
        )
        if refusal is not None:
            results[tp] = refusal
            return
        preferred = partition.replicas[0]
        try:
            raft.transfer_leadership(preferred)
        except NotLeaderError:
            results[tp] = (
                ErrorCode.not_leader_or_follower,
                f"broker {self.node_id} no longer leads {partition.name}",
            )
            return
        except ValueError as exc:
            results[tp] = (ErrorCode.preferred_leader_not_available, f"{partition.name}: {exc}")
            return
        logger.info(
            "%s: handing leadership to its preferred replica %d",
            partition.name,
            preferred,
            extra={"partition": partition.name},
        )
        with trio.move_on_after(timeout_s):
            while partition.raft is raft and raft.leader_id != preferred:
                await trio.sleep(ELECTION_POLL_S)
            if raft.leader_id == preferred:
                results[tp] = (ErrorCode.none, None)
                return
        results[tp] = (
            ErrorCode.request_timed_out,
            f"leadership of {partition.name} did not reach replica {preferred} within "
            f"{timeout_s:g} s; it stays with its current leader",
        )

    async def _serve(self, payload: bytes) -> tuple[int, bytes]:
        """ELECT_RPC: [[topic, partition, error code, message]...] for the partitions asked."""
        try:
            # A peer's JSON object; each field is converted as read, and a bad one refused.
            request: dict[str, Any] = json.loads(payload)
            tps = [(str(t), int(p)) for t, p in request["partitions"]]
            timeout_s = float(request["timeout_s"])
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad election request: {exc}".encode()
        results = await self.elect_here(tps, timeout_s)
        answer = [[t, p, int(code), message] for (t, p), (code, message) in results.items()]
        return 0, json.dumps(answer).encode()

    # -- the controller's automatic rebalance ---------------------------------------------

    def leadership(self) -> list[Leadership]:
        """Every partition's leadership as this broker knows it (its own and the gossip)."""
        found = []
        for p in self.topics.all_partitions():
            if p.is_leader:
                in_sync = p.in_sync_replicas()
            else:
                in_sync = self.controller.isr_hints.get(p.name, ())
            found.append(Leadership(p.topic.name, p.index, p.replicas, self.leader_of(p), in_sync))
        return found

    async def rebalance(self, interval_s: float, percentage: int) -> None:
        """Every `interval_s`, while this broker is the controller, move leadership back to
        preferred replicas that have been in sync since the previous check, REBALANCE_BATCH
        partitions at a time."""
        seen_in_sync: set[tuple[str, int, int]] = set()
        while True:
            await trio.sleep(interval_s)
            if not self.controller.is_controller:
                seen_in_sync = set()
                continue
            leadership = self.leadership()
            settled = seen_in_sync
            seen_in_sync = {(p.topic, p.index, r) for p in leadership for r in p.in_sync}
            due = [
                p
                for p in imbalanced_partitions(leadership, percentage)
                if (p.topic, p.index, p.preferred) in settled
            ]
            if due:
                await self.rebalance_once(due)

    async def rebalance_once(self, due: Sequence[Leadership]) -> None:
        logger.info(
            "leadership imbalanced: electing the preferred leader of %d partitions", len(due)
        )
        for start in range(0, len(due), REBALANCE_BATCH):
            batch = [(p.topic, p.index) for p in due[start : start + REBALANCE_BATCH]]
            results = await self.elect(batch, REBALANCE_TRANSFER_TIMEOUT_S)
            for (topic, index), (code, message) in sorted(results.items()):
                if code not in (ErrorCode.none, ErrorCode.election_not_needed):
                    logger.info(
                        "preferred leader of %s-%d not elected: %s %s",
                        topic,
                        index,
                        code.name,
                        message or "",
                    )
