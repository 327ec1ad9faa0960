"""The controller's reassignment decisions: start, cancel and complete a partition's move."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import CompleteReassignmentCommand, ReassignPartitionCommand
from raftka.broker.cluster.control.reassignment import complete_reassignment, reassign_partition
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    CompleteReassignment,
    CreateTopic,
    ReassignPartition,
    RegisterBroker,
)

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")


def _image() -> MetadataImage:
    image = MetadataImage()
    for node in (1, 2, 3, 4):
        image.apply(RegisterBroker(node, "h", 9092, None, f"i{node}"), node - 1)
    image.apply(CreateTopic("t", TID, [[1, 2, 3]], {}), 10)
    return image


def test_start_a_move_then_the_same_target_again_appends_nothing() -> None:
    image = _image()
    move = ReassignPartitionCommand("t", 0, (2, 3, 4))
    assert reassign_partition(image, move) == ControllerResult(
        (ReassignPartition(TID, 0, (2, 3, 4)),)
    )
    assert reassign_partition(image, ReassignPartitionCommand("t", 0, (1, 2, 3))) == (
        ControllerResult()
    ), "already there"
    image.apply(ReassignPartition(TID, 0, (2, 3, 4)), 11)
    assert reassign_partition(image, move) == ControllerResult(), "already moving there"
    assert reassign_partition(image, ReassignPartitionCommand("t", 0, None)) == ControllerResult(
        (ReassignPartition(TID, 0, None),)
    )


def test_reassignment_errors() -> None:
    image = _image()
    unknown = ControllerResult.error(
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
    )
    assert reassign_partition(image, ReassignPartitionCommand("nope", 0, (1,))) == unknown
    assert reassign_partition(image, ReassignPartitionCommand("t", 1, (1,))) == unknown
    assert reassign_partition(image, ReassignPartitionCommand("t", 0, None)) == (
        ControllerResult.error(
            ErrorCode.no_reassignment_in_progress,
            "No reassignment of partition 0 of topic t is in progress.",
        )
    )
    unregistered = reassign_partition(image, ReassignPartitionCommand("t", 0, (1, 9)))
    assert unregistered.result.error_code == ErrorCode.invalid_replica_assignment
    twice = reassign_partition(image, ReassignPartitionCommand("t", 0, (1, 1)))
    assert twice.result.error_code == ErrorCode.invalid_replica_assignment
    image.apply(ReassignPartition(TID, 0, (2, 3, 4)), 11)
    assert reassign_partition(image, ReassignPartitionCommand("t", 0, (1, 4))) == (
        ControllerResult.error(
            ErrorCode.reassignment_in_progress,
            "Partition 0 of topic t is already moving to [2, 3, 4]; cancel that reassignment"
            " first.",
        )
    )


def test_complete_only_the_move_in_progress() -> None:
    image = _image()
    done = CompleteReassignmentCommand("t", 0, (2, 3, 4))
    not_moving = ControllerResult.error(
        ErrorCode.no_reassignment_in_progress,
        "No reassignment of t-0 to [2, 3, 4] is in progress.",
    )
    assert complete_reassignment(image, done) == not_moving
    image.apply(ReassignPartition(TID, 0, (2, 3, 4)), 11)
    assert complete_reassignment(image, done) == ControllerResult(
        (CompleteReassignment(TID, 0, (2, 3, 4)),)
    )
    other = complete_reassignment(image, CompleteReassignmentCommand("t", 0, (1, 2, 4)))
    assert other.result.error_code == ErrorCode.no_reassignment_in_progress
    assert complete_reassignment(image, CompleteReassignmentCommand("x", 0, (1,))).records == ()
