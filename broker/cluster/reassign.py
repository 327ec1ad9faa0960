"""Replica reassignment: the partition's leader moves its Raft group to the target replicas.

The target of a partition under reassignment is in the cluster metadata (`ReassignPartition`
records, see `image.Reassignment`); every broker listed hosts a copy. Only the Raft leader can
append membership (CONFIG) entries, so on each broker `ReassignmentMover` looks at the moving
partitions it leads and takes the next single-server step (`next_step`), one committed
change at a time:

1. drop a learner that is not in the target (a cancelled move);
2. add each target replica that is not yet a member as a learner (it receives the log but
   neither votes nor counts toward commit);
3. promote each learner once it holds everything committed;
4. remove each voter not in the target; the leader itself goes last, after handing
   leadership to a caught-up target replica (Kafka also elects a new leader from the target);
5. ask the controller to complete the move (`CompleteReassignment`): the replica list becomes
   the target, brokers no longer listed drop their copy.

A leader change or restart loses nothing: the new leader reads the target from the metadata
and the current membership from its log, and goes on from there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import Command, CommandResult, CompleteReassignmentCommand
from raftka.broker.config import ConfigError, throttled_replicas
from raftka.consensus.core import ConfigChangeError, NotLeaderError

if TYPE_CHECKING:
    from raftka.broker.cluster.image import MetadataImage
    from raftka.broker.topics import Partition, TopicManager

logger = logging.getLogger("raftka.reassign")

#: How often a broker looks at the moving partitions it leads.
STEP_INTERVAL_S = 0.1


class ReassignmentHost(Protocol):
    """What the mover uses of its broker's controller (`cluster.controller.Controller`)."""

    @property
    def node_id(self) -> int: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def topics(self) -> TopicManager: ...

    async def execute(self, command: Command) -> CommandResult: ...


@dataclass(frozen=True, slots=True)
class MembershipStep:
    """What the leader does next: `action` is one of add_learner, promote, remove, transfer
    (leadership to `node`), complete, wait (nothing possible now)."""

    action: str
    node: int | None = None


def next_step(
    target: Sequence[int],
    voters: frozenset[int],
    learners: frozenset[int],
    leader: int,
    match_ends: Mapping[int, int],
    high_watermark: int,
) -> MembershipStep:
    """The next membership change moving a group led by `leader` to the voters `target`.

    A replica is caught up when it holds everything committed (`match_ends` are the
    leader's view of the followers' logs)."""

    def caught_up(node: int) -> bool:
        return node == leader or match_ends.get(node, -1) >= high_watermark

    wanted = set(target)
    members = voters | learners
    for node in sorted(learners - wanted):
        return MembershipStep("remove", node)
    for node in target:
        if node not in members:
            return MembershipStep("add_learner", node)
    waiting = False
    for node in target:
        if node in learners:
            if caught_up(node):
                return MembershipStep("promote", node)
            waiting = True
    if waiting:
        return MembershipStep("wait")
    for node in sorted(voters - wanted - {leader}):
        return MembershipStep("remove", node)
    if leader not in wanted:
        for node in target:
            if caught_up(node):
                return MembershipStep("transfer", node)
        return MembershipStep("wait")
    return MembershipStep("complete")


class ReassignmentMover:
    """Drives the reassignments of the partitions this broker leads (see the module doc)."""

    def __init__(self, controller: ReassignmentHost, interval_s: float = STEP_INTERVAL_S) -> None:
        self.controller = controller
        self.interval_s = interval_s
        # Completions sent and accepted, until the metadata shows them applied here.
        self._completed: set[tuple[str, int, tuple[int, ...]]] = set()

    async def run(self) -> None:
        while True:
            await self.step_all()
            await trio.sleep(self.interval_s)

    async def step_all(self) -> None:
        image = self.controller.image
        topics = self.controller.topics
        for topic in list(image.topics.values()):
            for index, move in list(topic.reassignments.items()):
                partition = topics.partition(topic.name, index)
                if partition is None or not partition.is_leader:
                    continue
                await self._step(partition, move.target)
        moving = {
            (topic.name, index, move.target)
            for topic in image.topics.values()
            for index, move in topic.reassignments.items()
        }
        self._completed &= moving

    async def _step(self, partition: Partition, target: tuple[int, ...]) -> None:
        raft = partition.hosted_raft
        status = raft.status()
        throttled = self._throttled(partition)
        raft.throttled_peers = status.learners if throttled else frozenset()
        if raft.config_change_pending:
            return
        step = next_step(
            target,
            status.voters,
            status.learners,
            raft.leader_id if raft.leader_id is not None else -1,
            raft.follower_match_ends(),
            status.high_watermark,
        )
        if step.action == "wait":
            return
        extra = {"partition": partition.name, "topic": partition.topic.name}
        try:
            if step.action == "complete":
                await self._complete(partition, target)
                return
            if step.action == "transfer":
                assert step.node is not None
                logger.info(
                    "%s: reassignment: leadership to %d before this replica leaves",
                    partition.name,
                    step.node,
                    extra=extra,
                )
                raft.transfer_leadership(step.node)
                return
            if step.action == "add_learner":
                assert step.node is not None
                if throttled:  # before its first append leaves
                    raft.throttled_peers = status.learners | {step.node}
                raft.propose_config_change(add_learner=step.node)
            elif step.action == "promote":
                raft.propose_config_change(promote=step.node)
            else:
                raft.propose_config_change(remove=step.node)
        except (ConfigChangeError, NotLeaderError) as exc:
            logger.debug("%s: reassignment step %s waits: %s", partition.name, step, exc)
            return
        logger.info(
            "%s: reassignment: %s %d (voters %s, learners %s before)",
            partition.name,
            step.action.replace("_", " "),
            step.node,
            sorted(status.voters),
            sorted(status.learners),
            extra=extra,
        )

    def _throttled(self, partition: Partition) -> bool:
        """Kafka's leader-side rule: appends to replicas not yet in sync (our learners) are
        throttled when the topic's leader.replication.throttled.replicas names this leader
        replica (or is *)."""
        try:
            listed = throttled_replicas(
                partition.topic.config.get_str("leader.replication.throttled.replicas")
            )
        except ConfigError:
            return False
        return listed is None or (partition.index, self.controller.node_id) in listed

    async def _complete(self, partition: Partition, target: tuple[int, ...]) -> None:
        key = (partition.topic.name, partition.index, target)
        if key in self._completed:
            return
        result = await self.controller.execute(
            CompleteReassignmentCommand(partition.topic.name, partition.index, target)
        )
        if result.error_code == ErrorCode.none:
            self._completed.add(key)
            logger.info(
                "%s: reassignment complete: replicas %s",
                partition.name,
                list(target),
                extra={"partition": partition.name, "topic": partition.topic.name},
            )
        elif result.error_code != ErrorCode.no_reassignment_in_progress:
            logger.info(
                "%s: completing the reassignment failed (%s); retrying",
                partition.name,
                result.error_message,
                extra={"partition": partition.name, "topic": partition.topic.name},
            )
