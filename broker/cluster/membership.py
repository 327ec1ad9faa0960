"""Membership changes of the metadata Raft group, made by its leader (the controller): one
single-server change at a time, each committed before the next, as the steps of
`control.voters` and broker (un)registration ask for them."""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.clock import Clock
from raftka.broker.cluster.control.voters import VoterStep
from raftka.broker.cluster.validation import TopicError
from raftka.consensus.core import ConfigChangeError, NotLeaderError
from raftka.consensus.driver import RaftGroup
from raftka.consensus.types import Role

#: How long one change may take to commit (and a new voter to catch up) before the
#: command fails with REQUEST_TIMED_OUT.
CHANGE_TIMEOUT_S = 10.0
#: How often a waiting change looks again.
POLL_S = 0.05


class MetadataMembership:
    """The metadata Raft group `raft` on broker `node_id`, as its members change. Failures
    raise TopicError with the error code the command is answered with."""

    def __init__(self, raft: RaftGroup, node_id: int, clock: Clock) -> None:
        self.raft = raft
        self.node_id = node_id
        self.clock = clock

    async def take(self, step: VoterStep) -> None:
        """One step other than hand_off (see `hand_off`)."""
        if step.action == "catch_up":
            await self.wait_caught_up(step.node)
        elif step.action == "add_learner":
            await self.change(add_learner=step.node)
        elif step.action == "promote":
            await self.change(promote=step.node)
        elif step.action == "remove":
            await self.change(remove=step.node)
        elif step.action == "demote":
            await self.change(demote=step.node)
        else:
            raise ValueError(f"{step} is not a membership change")

    async def wait_caught_up(self, node: int) -> None:
        """Until `node` holds everything committed (it may be promoted then)."""
        deadline = self.clock.now_s() + CHANGE_TIMEOUT_S
        while self.raft.follower_match_ends().get(node, -1) < self.raft.high_watermark:
            if self.clock.now_s() >= deadline:
                raise TopicError(
                    ErrorCode.request_timed_out,
                    f"Broker {node} has not caught up with the metadata log; check that it"
                    " runs and retry",
                )
            await trio.sleep(POLL_S)

    async def hand_off(self) -> None:
        """Hand leadership (the controller role) to the voter that is furthest along, and
        wait until this broker no longer leads."""
        status = self.raft.status()
        others = sorted(status.voters - {self.node_id})
        matches = self.raft.follower_match_ends()
        target = max(others, key=lambda n: matches.get(n, -1))
        self.raft.transfer_leadership(target)
        with trio.move_on_after(CHANGE_TIMEOUT_S):
            while self.raft.role is Role.LEADER:
                await trio.sleep(POLL_S)
        if self.raft.role is Role.LEADER:
            raise TopicError(
                ErrorCode.request_timed_out,
                f"The controller role did not move to broker {target} in time; retry",
            )

    async def change(
        self,
        add_learner: int | None = None,
        promote: int | None = None,
        remove: int | None = None,
        demote: int | None = None,
    ) -> None:
        """One single-server change of the metadata Raft group's members, committed."""
        deadline = self.clock.now_s() + CHANGE_TIMEOUT_S
        change = {"add_learner": add_learner, "promote": promote, "remove": remove}
        if demote is not None:
            change = {"demote": demote}
        while True:
            try:
                entry = self.raft.propose_config_change(**change)
                break
            except ConfigChangeError as exc:
                if self.clock.now_s() >= deadline:
                    raise TopicError(
                        ErrorCode.request_timed_out,
                        f"The metadata quorum's membership cannot change now: {exc}; retry",
                    ) from None
                await trio.sleep(POLL_S)
            except NotLeaderError:
                raise TopicError(
                    ErrorCode.not_controller, "This broker stopped being the controller; retry"
                ) from None
        if not await self.raft.wait_committed(entry.end_offset, CHANGE_TIMEOUT_S, entry.epoch):
            raise TopicError(
                ErrorCode.request_timed_out,
                "The metadata quorum's membership change did not commit in time; a majority of"
                " its voters may be down",
            )
