"""Kafka's consumer groups, classic and KIP-848: the group coordinator and its durable state."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from raftka.broker.groups.config import CoordinatorConfig
from raftka.broker.groups.coordinator import GroupCoordinator, Reply
from raftka.broker.groups.group import (
    ConsumerGroup,
    GroupState,
    JoinResult,
    SyncResult,
    valid_group_id,
)
from raftka.broker.groups.store import (
    OFFSETS_TOPIC,
    MemoryOffsetsLog,
    NotCoordinatorError,
    OffsetsLog,
    TopicOffsetsLog,
)

if TYPE_CHECKING:
    from raftka.broker.clock import Clock
    from raftka.broker.config import BrokerConfig
    from raftka.broker.replica import ReplicaManager
    from raftka.broker.services import ControllerClient
    from raftka.broker.topics import TopicManager

__all__ = [
    "OFFSETS_TOPIC",
    "ConsumerGroup",
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupState",
    "JoinResult",
    "MemoryOffsetsLog",
    "NotCoordinatorError",
    "OffsetsLog",
    "Reply",
    "SyncResult",
    "TopicOffsetsLog",
    "coordinator_for",
    "valid_group_id",
]


class ClusterTopics:
    """The broker's topics as the consumer group protocol sees them (a `TopicImage`)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        topic = self._topics.get(name)
        return None if topic is None else (topic.topic_id, len(topic.partitions))

    def names(self) -> Iterable[str]:
        return list(self._topics.topics)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        topic = self._topics.topics_by_id.get(topic_id)
        return None if topic is None else topic.name


def coordinator_for(
    topics: TopicManager,
    controller: ControllerClient,
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    clock: Clock,
) -> GroupCoordinator:
    """The coordinator of a broker: its groups live in the cluster's `__consumer_offsets`,
    appended to and read through the broker's replica manager."""
    offsets_log = TopicOffsetsLog(topics, controller, config, replica_manager=replica_manager)
    coordinator = GroupCoordinator(
        offsets_log,
        CoordinatorConfig.from_broker_config(config),
        clock=clock,
        topics=ClusterTopics(topics),
    )
    coordinator.consumer.group_configs = lambda group_id: controller.image.group_configs.get(
        group_id, {}
    )
    coordinator.share.partition_counts = lambda: {
        name: len(topic.partitions) for name, topic in topics.topics.items()
    }
    # It serves the groups of the offsets partitions this broker leads, as leadership moves.
    topics.leadership_listeners.append(coordinator.on_partition_leadership)
    return coordinator
