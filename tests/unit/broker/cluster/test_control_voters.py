"""The controller's voter changes of the metadata quorum, as membership steps."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import ChangeMetadataVotersCommand, CommandResult
from raftka.broker.cluster.control.voters import VoterChange, VoterStep, change_voters
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import RegisterBroker

CONTROLLER = 1


def _image() -> MetadataImage:
    image = MetadataImage()
    for node in (1, 2, 3, 4):
        image.apply(RegisterBroker(node, "h", 9092, None, f"i{node}"), node)
    return image


def _change(action: str, node: int, voters: set[int], learners: set[int]) -> VoterChange:
    command = ChangeMetadataVotersCommand(action, node)
    return change_voters(_image(), command, frozenset(voters), frozenset(learners), CONTROLLER)


def test_add_a_voter() -> None:
    assert _change("add", 4, {1, 2, 3}, {4}) == VoterChange(
        (VoterStep("catch_up", 4), VoterStep("promote", 4))
    )
    assert _change("add", 4, {1, 2, 3}, set()) == VoterChange(
        (VoterStep("add_learner", 4), VoterStep("catch_up", 4), VoterStep("promote", 4))
    )


def test_remove_a_voter() -> None:
    # One change (voter to observer), so no leader change can leave the broker between a
    # removal and its add_learner: neither voting nor receiving the metadata.
    assert _change("remove", 3, {1, 2, 3}, set()) == VoterChange((VoterStep("demote", 3),))
    assert _change("remove", CONTROLLER, {1, 2, 3}, set()) == VoterChange(
        (VoterStep("hand_off", CONTROLLER),)
    )


def test_voter_change_errors() -> None:
    assert _change("add", 9, {1}, set()) == VoterChange(
        (),
        CommandResult.error(
            ErrorCode.broker_id_not_registered,
            "Broker 9 is not registered: start it (with --join) first",
        ),
    )
    assert _change("remove", 9, {1}, set()).result.error_code == ErrorCode.broker_id_not_registered
    assert _change("add", 2, {1, 2}, set()).result == CommandResult.error(
        ErrorCode.duplicate_voter, "Broker 2 already votes in the metadata quorum"
    )
    assert _change("remove", 4, {1, 2}, {4}).result == CommandResult.error(
        ErrorCode.voter_not_found, "Broker 4 is not a voter of the metadata quorum"
    )
    last = _change("remove", 1, {1}, set())
    assert last == VoterChange(
        (),
        CommandResult.error(
            ErrorCode.invalid_request,
            "Broker 1 is the last voter of the metadata quorum: it cannot leave it",
        ),
    )
