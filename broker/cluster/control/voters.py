"""Voters of the metadata quorum (Kafka's AddRaftVoter / RemoveRaftVoter at the controller):
which single-server membership changes of `__cluster_metadata` a command takes, decided
from the image and the quorum's members without I/O. The changes are Raft CONFIG entries,
not metadata records: the controller carries the steps out in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import ChangeMetadataVotersCommand, CommandResult
from raftka.broker.cluster.image import MetadataImage

#: add_learner: the broker replicates the metadata log as an observer; catch_up: wait until
#: it holds everything committed; promote: the observer votes; demote: the voter becomes an
#: observer (one change: it never stops receiving the metadata); remove: it leaves the
#: members; hand_off: the controller hands its role to another voter, which then runs the
#: command again.
VoterAction = Literal["add_learner", "catch_up", "promote", "demote", "remove", "hand_off"]


@dataclass(frozen=True)
class VoterStep:
    action: VoterAction
    node: int


@dataclass(frozen=True)
class VoterChange:
    """The steps to take, in order, and the answer once they are done (an error: none)."""

    steps: tuple[VoterStep, ...] = ()
    result: CommandResult = CommandResult()

    @classmethod
    def error(cls, error_code: ErrorCode, message: str) -> VoterChange:
        return cls((), CommandResult.error(error_code, message))


def change_voters(
    image: MetadataImage,
    command: ChangeMetadataVotersCommand,
    voters: frozenset[int],
    learners: frozenset[int],
    controller_id: int,
) -> VoterChange:
    """The steps promoting a registered broker to voter (`add`) or making a voter an
    observer (`remove`), given the quorum's `voters` and `learners` (observers) and the
    controller running the command. Errors: BROKER_ID_NOT_REGISTERED, DUPLICATE_VOTER,
    VOTER_NOT_FOUND, INVALID_REQUEST (the last voter)."""
    node = command.node_id
    if node not in image.brokers:
        return VoterChange.error(
            ErrorCode.broker_id_not_registered,
            f"Broker {node} is not registered: start it (with --join) first",
        )
    if command.action == "add":
        if node in voters:
            return VoterChange.error(
                ErrorCode.duplicate_voter, f"Broker {node} already votes in the metadata quorum"
            )
        steps = [] if node in learners else [VoterStep("add_learner", node)]
        return VoterChange((*steps, VoterStep("catch_up", node), VoterStep("promote", node)))
    if node not in voters:
        return VoterChange.error(
            ErrorCode.voter_not_found, f"Broker {node} is not a voter of the metadata quorum"
        )
    problem = voter_removal_problem(voters, node)
    if problem is not None:
        return VoterChange.error(ErrorCode.invalid_request, problem)
    if node == controller_id:
        # The controller leaves the quorum: it hands the controller role off first and
        # the new controller makes the change.
        return VoterChange((VoterStep("hand_off", node),))
    # It keeps replicating the metadata as an observer while it is registered. One change,
    # not a removal and then an add_learner: a controller that lost its role between the two
    # left a broker that neither votes nor receives the metadata, which then could never
    # register again after a restart.
    return VoterChange((VoterStep("demote", node),))


def voter_removal_problem(voters: frozenset[int], node: int) -> str | None:
    """Why `node` may not leave the metadata voters `voters` (None: it may)."""
    if voters == {node}:
        return f"Broker {node} is the last voter of the metadata quorum: it cannot leave it"
    return None


def voter_removal_warning(voters: frozenset[int], node: int) -> str | None:
    """A warning when removing `node` leaves the metadata quorum less tolerant of failures."""
    left = len(voters - {node})
    if left == len(voters):
        return None
    tolerated_before = (len(voters) - 1) // 2
    tolerated_after = (left - 1) // 2
    if left < 3 or tolerated_after < tolerated_before:
        return (
            f"the metadata quorum keeps {left} voter{'s' if left != 1 else ''}: it survives"
            f" {tolerated_after} failed voter{'s' if tolerated_after != 1 else ''} (was"
            f" {tolerated_before}); add a voter (raftka cluster add-voter) to restore that"
        )
    return None
