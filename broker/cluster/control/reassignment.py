"""Partition reassignment at the controller (Kafka's ReplicationControlManager part for
AlterPartitionReassignments): starting, cancelling and completing a move, decided from the
image without I/O. The partition's leader carries a move out (`cluster/reassign.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import CompleteReassignmentCommand, ReassignPartitionCommand
from raftka.broker.cluster.control.result import ControllerResult, errors_as_results
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import CompleteReassignment, ReassignPartition
from raftka.broker.cluster.validation import TopicError, validate_assignment


@errors_as_results
def reassign_partition(image: MetadataImage, command: ReassignPartitionCommand) -> ControllerResult:
    """Move a partition to `command.replicas`, or with None cancel its move; nothing is
    appended when the partition is already there or already moving there."""
    record = validate_reassignment(image, command.topic, command.partition, command.replicas)
    return ControllerResult(() if record is None else (record,))


def complete_reassignment(
    image: MetadataImage, command: CompleteReassignmentCommand
) -> ControllerResult:
    """The partition's leader moved its Raft voters to the target: the move is complete.
    NO_REASSIGNMENT_IN_PROGRESS when that move was cancelled or replaced meanwhile."""
    topic = image.topic(command.topic)
    move = None if topic is None else topic.reassignments.get(command.partition)
    if topic is None or move is None or move.target != command.replicas:
        # Cancelled or replaced meanwhile: the leader reads the new target and goes on.
        return ControllerResult.error(
            ErrorCode.no_reassignment_in_progress,
            f"No reassignment of {command.topic}-{command.partition} to "
            f"{list(command.replicas)} is in progress.",
        )
    return ControllerResult(
        (CompleteReassignment(topic.topic_id, command.partition, command.replicas),)
    )


def validate_reassignment(
    image: MetadataImage, name: str, index: int, target: Sequence[int] | None
) -> ReassignPartition | None:
    """The record starting (or, with a null target, cancelling) a reassignment of
    partition `index` of `name`, as Kafka's controller checks it; None when there is
    nothing to do. Raises TopicError."""
    topic = image.topics.get(name)
    if topic is None or not 0 <= index < topic.num_partitions:
        raise TopicError(
            ErrorCode.unknown_topic_or_partition,
            "This server does not host this topic-partition.",
        )
    move = topic.reassignments.get(index)
    if target is None:
        if move is None or move.target == move.original:
            raise TopicError(
                ErrorCode.no_reassignment_in_progress,
                f"No reassignment of partition {index} of topic {name} is in progress.",
            )
        return ReassignPartition(topic.topic_id, index, None)
    validate_assignment(image.brokers, target, None)
    if move is not None:
        if tuple(target) == move.target:
            return None
        raise TopicError(
            ErrorCode.reassignment_in_progress,
            f"Partition {index} of topic {name} is already moving to "
            f"{list(move.target)}; cancel that reassignment first.",
        )
    if tuple(target) == topic.replicas[index]:
        return None
    return ReassignPartition(topic.topic_id, index, tuple(target))
