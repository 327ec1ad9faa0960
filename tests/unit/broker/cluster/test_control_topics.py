"""The controller's topic decisions: (image, command) -> records and result, without trio."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    CommandResult,
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteTopicCommand,
)
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.control.topics import create_partitions, create_topic, delete_topic
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    RegisterBroker,
)

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")
NEW = uuid.UUID("00000000-0000-0000-0000-000000000002")


def _image(*brokers: int) -> MetadataImage:
    image = MetadataImage()
    for offset, node in enumerate(brokers):
        image.apply(RegisterBroker(node, "h", 9092 + node, None, f"i{node}"), offset)
    return image


def _create(image: MetadataImage, command: CreateTopicCommand) -> ControllerResult:
    return create_topic(image, command, NEW, default_num_partitions=2, default_replication_factor=1)


def test_create_topic_places_replicas_and_answers_its_shape() -> None:
    image = _image(1, 2, 3)
    decision = _create(image, CreateTopicCommand("t", 3, 2, configs={"retention.ms": "10"}))
    assert decision.records == (
        CreateTopic("t", NEW, [[1, 2], [2, 3], [3, 1]], {"retention.ms": "10"}),
    )
    assert decision.result == CommandResult(topic_id=NEW, num_partitions=3, replication_factor=2)


def test_create_topic_defaults_and_manual_assignment() -> None:
    image = _image(1, 2)
    assert _create(image, CreateTopicCommand("t", -1, -1)).records == (
        CreateTopic("t", NEW, [[1], [2]], {}),
    )
    decision = _create(image, CreateTopicCommand("m", -1, -1, ((0, (2, 1)), (1, (1, 2)))))
    assert decision.records == (CreateTopic("m", NEW, [[2, 1], [1, 2]], {}),)
    assert (decision.result.num_partitions, decision.result.replication_factor) == (2, 2)


def test_validate_only_appends_nothing_but_answers_the_same() -> None:
    image = _image(1)
    decision = _create(image, CreateTopicCommand("t", 4, 1, validate_only=True))
    assert decision.records == ()
    assert decision.result == CommandResult(topic_id=NEW, num_partitions=4, replication_factor=1)
    assert create_partitions(image, CreatePartitionsCommand("t", 5, validate_only=True)) == (
        ControllerResult.error(
            ErrorCode.unknown_topic_or_partition,
            "This server does not host this topic-partition.",
        )
    )


def test_create_topic_errors_are_kafkas() -> None:
    image = _image(1, 2)
    image.apply(CreateTopic("taken", TID, [[1]], {}), 10)
    cases = [
        (CreateTopicCommand("taken", 1, 1), ErrorCode.topic_already_exists),
        (CreateTopicCommand("bad name!", 1, 1), ErrorCode.invalid_topic_exception),
        (CreateTopicCommand("__cluster_metadata", 1, 1), ErrorCode.invalid_request),
        (CreateTopicCommand("t", 0, 1), ErrorCode.invalid_partitions),
        (CreateTopicCommand("t", 1, 3), ErrorCode.invalid_replication_factor),
        (CreateTopicCommand("t", 1, 1, configs={"no.such": "1"}), ErrorCode.invalid_config),
        (CreateTopicCommand("t", 1, 1, configs={"retention.ms": None}), ErrorCode.invalid_config),
        (CreateTopicCommand("t", 1, -1, ((0, (1,)),)), ErrorCode.invalid_request),
        (CreateTopicCommand("t", -1, -1, ((0, (1, 9)),)), ErrorCode.invalid_replica_assignment),
    ]
    for command, code in cases:
        decision = _create(image, command)
        assert decision.records == (), command
        assert decision.result.error_code == code, command
    assert _create(image, CreateTopicCommand("t", 1, 3)).result == CommandResult.error(
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered.",
    )


def test_a_topic_created_by_the_same_command_is_answered_as_its_creation() -> None:
    """A command run again after its controller lost the role, its first run's records
    committed: the topic is there with the command's id, so it is this request's creation
    (nothing appended, its shape answered); another id is another request's topic."""
    image = _image(1, 2)
    image.apply(CreateTopic("t", NEW, [[1, 2], [2, 1], [1, 2]], {}), 10)
    again = _create(image, CreateTopicCommand("t", 3, 2, topic_id=NEW))
    assert again == ControllerResult(
        (), CommandResult(topic_id=NEW, num_partitions=3, replication_factor=2)
    )
    other = create_topic(
        image,
        CreateTopicCommand("t", 3, 2, topic_id=TID),
        TID,
        default_num_partitions=2,
        default_replication_factor=1,
    )
    assert other == ControllerResult.error(
        ErrorCode.topic_already_exists, "Topic 't' already exists."
    )
    validate = _create(image, CreateTopicCommand("t", 3, 2, validate_only=True, topic_id=NEW))
    assert validate.result.error_code == ErrorCode.topic_already_exists


def test_delete_topic() -> None:
    image = _image(1)
    image.apply(CreateTopic("t", TID, [[1]], {}), 10)
    assert delete_topic(image, DeleteTopicCommand("t")) == ControllerResult(
        (DeleteTopic(TID),), CommandResult(topic_id=TID)
    )
    assert delete_topic(image, DeleteTopicCommand("nope")) == ControllerResult.error(
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
    )


def test_create_partitions() -> None:
    image = _image(1, 2, 3)
    image.apply(CreateTopic("t", TID, [[1, 2], [2, 3]], {}), 10)
    assert create_partitions(image, CreatePartitionsCommand("t", 4)).records == (
        CreatePartitions(TID, ((3, 1), (1, 3))),
    )
    assert create_partitions(image, CreatePartitionsCommand("t", 3, ((3, 1),))) == (
        ControllerResult((CreatePartitions(TID, ((3, 1),)),))
    )
    assert create_partitions(image, CreatePartitionsCommand("t", 2)) == ControllerResult.error(
        ErrorCode.invalid_partitions, "Topic already has 2 partition(s)."
    )
    shrink = create_partitions(image, CreatePartitionsCommand("t", 1))
    assert shrink.result.error_code == ErrorCode.invalid_partitions
    short = create_partitions(image, CreatePartitionsCommand("t", 4, ((1, 2),)))
    assert short == ControllerResult.error(
        ErrorCode.invalid_replica_assignment,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
    )
    wrong_rf = create_partitions(image, CreatePartitionsCommand("t", 3, ((1,),)))
    assert wrong_rf.result.error_code == ErrorCode.invalid_replica_assignment
