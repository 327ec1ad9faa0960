"""Topics and their partitions (Kafka's ReplicationControlManager): CreateTopics,
DeleteTopics and CreatePartitions, decided from the image without I/O.

The `validate_*` and `plan_*` functions check one request as Kafka's KRaft controller does
and return the record to propose, raising TopicError with Kafka's error code and message;
the command functions wrap them into a ControllerResult.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    CommandResult,
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteTopicCommand,
)
from raftka.broker.cluster.control.result import ControllerResult, errors_as_results
from raftka.broker.cluster.image import MetadataImage, TopicImage
from raftka.broker.cluster.placement import place_replicas
from raftka.broker.cluster.records import CreatePartitions, CreateTopic, DeleteTopic
from raftka.broker.cluster.validation import (
    MAX_PARTITIONS,
    TopicError,
    check_no_null_configs,
    check_not_reserved,
    validate_assignment,
    validate_topic_config_values,
    validate_topic_name,
)

#: One (partition index, broker ids) manual assignment, as CreateTopics carries them.
Assignment = tuple[int, Sequence[int]]


@errors_as_results
def create_topic(
    image: MetadataImage,
    command: CreateTopicCommand,
    topic_id: uuid.UUID,
    *,
    default_num_partitions: int,
    default_replication_factor: int,
) -> ControllerResult:
    """CreateTopics for one topic, to be created with id `topic_id`; -1 partitions or
    replication factor take the defaults. A validate-only command appends nothing but
    answers as the creation would. A topic of that name that already has that id was
    created by this same command (run again after its controller lost the role once its
    records were appended): answered as that creation was, with nothing appended."""
    existing = image.topics.get(command.name)
    if existing is not None and existing.topic_id == topic_id and not command.validate_only:
        return ControllerResult(
            (),
            CommandResult(
                topic_id=existing.topic_id,
                num_partitions=existing.num_partitions,
                replication_factor=existing.replication_factor,
            ),
        )
    record = plan_create_topic(
        image,
        command.name,
        topic_id,
        command.num_partitions,
        command.replication_factor,
        command.assignments or None,
        command.configs,
        default_num_partitions=default_num_partitions,
        default_replication_factor=default_replication_factor,
    )
    return ControllerResult(
        () if command.validate_only else (record,),
        CommandResult(
            topic_id=record.topic_id,
            num_partitions=len(record.replicas),
            replication_factor=len(record.replicas[0]),
        ),
    )


@errors_as_results
def delete_topic(image: MetadataImage, command: DeleteTopicCommand) -> ControllerResult:
    """DeleteTopics for one topic; the result carries its id."""
    record = validate_delete_topic(image, command.name)
    return ControllerResult((record,), CommandResult(topic_id=record.topic_id))


@errors_as_results
def create_partitions(image: MetadataImage, command: CreatePartitionsCommand) -> ControllerResult:
    """CreatePartitions for one topic (placed on the registered brokers unless assigned)."""
    record = validate_create_partitions(image, command.name, command.count, command.assignments)
    return ControllerResult(() if command.validate_only else (record,))


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def _unable_to_replicate(replication_factor: int, brokers: int) -> TopicError:
    return TopicError(
        ErrorCode.invalid_replication_factor,
        f"Unable to replicate the partition {replication_factor} time(s): The target "
        f"replication factor of {replication_factor} cannot be reached because only "
        f"{brokers} broker(s) are registered.",
    )


def _live(image: MetadataImage, live_brokers: Collection[int] | None) -> list[int]:
    if live_brokers is None:
        return sorted(image.brokers)
    return sorted(b for b in live_brokers if b in image.brokers)


def _place(
    image: MetadataImage,
    count: int,
    replication_factor: int,
    live: Sequence[int],
    first_partition: int = 0,
) -> list[list[int]]:
    if replication_factor > len(live):
        raise _unable_to_replicate(replication_factor, len(live))
    brokers = [(node_id, image.brokers[node_id].rack) for node_id in live]
    return place_replicas(
        count,
        replication_factor,
        brokers,
        image.leader_counts(),
        first_partition=first_partition,
    )


def validate_create_topic(
    image: MetadataImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignments: Sequence[Assignment] | None = None,
    configs: Mapping[str, str | None] | None = None,
    live_brokers: Collection[int] | None = None,
    *,
    default_num_partitions: int = 1,
    default_replication_factor: int = 1,
) -> list[list[int]]:
    """Check a CreateTopics entry as Kafka's KRaft controller does and return the replica
    list of each partition (the manual assignment, or placed on `live_brokers`).

    Raises TopicError(error code, Kafka's message). -1 for num_partitions or
    replication_factor means the default (KIP-464). `live_brokers` defaults to every
    registered broker. Checks in Kafka's order: name, existence, configs, then the
    assignment or partition count and replication factor.
    """
    validate_topic_name(name)
    check_not_reserved(name)
    key = _collision_key(name)
    for existing in image.topics:
        if existing != name and _collision_key(existing) == key:
            raise TopicError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{name}' collides with existing topic: {existing}",
            )
    configs = configs or {}
    check_no_null_configs(configs)
    if name in image.topics:
        raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    validate_topic_config_values(configs)
    live = _live(image, live_brokers)
    if assignments:
        if replication_factor != -1:
            raise TopicError(
                ErrorCode.invalid_request,
                "A manual partition assignment was specified, but replication factor was "
                "not set to -1.",
            )
        if num_partitions != -1:
            raise TopicError(
                ErrorCode.invalid_request,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        by_index: dict[int, list[int]] = {}
        rf: int | None = None
        for index, replicas in assignments:
            if index in by_index:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition {index}",
                )
            validate_assignment(image.brokers, replicas, rf)
            rf = len(replicas)
            if not any(node_id in live for node_id in replicas):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment for "
                    f"partition {index} are fenced or in controlled shutdown.",
                )
            by_index[index] = list(replicas)
        if sorted(by_index) != list(range(len(by_index))):
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "partitions should be a consecutive 0-based integer sequence",
            )
        if len(by_index) > MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Number of partitions {len(by_index)} is above the limit of {MAX_PARTITIONS}.",
            )
        return [by_index[i] for i in range(len(by_index))]
    if replication_factor < -1 or replication_factor == 0:
        raise TopicError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if num_partitions < -1 or num_partitions == 0:
        raise TopicError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if num_partitions == -1:
        num_partitions = default_num_partitions
    if replication_factor == -1:
        replication_factor = default_replication_factor
    if num_partitions > MAX_PARTITIONS:
        raise TopicError(
            ErrorCode.invalid_partitions,
            f"Number of partitions {num_partitions} is above the limit of {MAX_PARTITIONS}.",
        )
    return _place(image, num_partitions, replication_factor, live)


def plan_create_topic(
    image: MetadataImage,
    name: str,
    topic_id: uuid.UUID,
    num_partitions: int,
    replication_factor: int,
    assignments: Sequence[Assignment] | None = None,
    configs: Mapping[str, str | None] | None = None,
    live_brokers: Collection[int] | None = None,
    *,
    default_num_partitions: int = 1,
    default_replication_factor: int = 1,
) -> CreateTopic:
    """validate_create_topic, then the record to propose (configs in Kafka's string form)."""
    replicas = validate_create_topic(
        image,
        name,
        num_partitions,
        replication_factor,
        assignments,
        configs,
        live_brokers,
        default_num_partitions=default_num_partitions,
        default_replication_factor=default_replication_factor,
    )
    return CreateTopic(name, topic_id, tuple(map(tuple, replicas)), render_configs(configs or {}))


def existing_topic(image: MetadataImage, name: str) -> TopicImage:
    """The topic named `name`; UNKNOWN_TOPIC_OR_PARTITION if there is none."""
    topic = image.topics.get(name)
    if topic is None:
        raise TopicError(
            ErrorCode.unknown_topic_or_partition,
            "This server does not host this topic-partition.",
        )
    return topic


def validate_create_partitions(
    image: MetadataImage,
    name: str,
    count: int,
    assignments: Sequence[Sequence[int]] | None = None,
    live_brokers: Collection[int] | None = None,
) -> CreatePartitions:
    """Check a CreatePartitions entry (grow `name` to `count` partitions) as Kafka's
    controller does; returns the record to propose. Raises TopicError."""
    topic = existing_topic(image, name)
    current = topic.num_partitions
    if count == current:
        raise TopicError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if count < current:
        raise TopicError(
            ErrorCode.invalid_partitions,
            f"The topic {name} currently has {current} partition(s); {count} would not be "
            "an increase.",
        )
    if count > MAX_PARTITIONS:
        raise TopicError(
            ErrorCode.invalid_partitions,
            f"Number of partitions {count} is above the limit of {MAX_PARTITIONS}.",
        )
    additional = count - current
    live = _live(image, live_brokers)
    if assignments is not None:
        if len(assignments) != additional:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(assignments)} assignment(s) were specified.",
            )
        for i, replicas in enumerate(assignments):
            validate_assignment(image.brokers, replicas, topic.replication_factor)
            if not any(node_id in live for node_id in replicas):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment for "
                    f"partition {current + i} are fenced or in controlled shutdown.",
                )
        new_replicas = [list(r) for r in assignments]
    else:
        new_replicas = _place(image, additional, topic.replication_factor, live, current)
    return CreatePartitions(topic.topic_id, tuple(map(tuple, new_replicas)))


def validate_delete_topic(image: MetadataImage, name: str) -> DeleteTopic:
    """The record deleting `name`; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
    return DeleteTopic(existing_topic(image, name).topic_id)


def render_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Config overrides as a record carries them: null values left out."""
    return {name: value for name, value in configs.items() if value is not None}
