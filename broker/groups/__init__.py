"""Kafka's classic consumer-group protocol: the group coordinator and its durable state."""

from __future__ import annotations

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
    from raftka.broker.config import BrokerConfig
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


def coordinator_for(
    topics: TopicManager, controller: ControllerClient, config: BrokerConfig
) -> GroupCoordinator:
    """The coordinator of a broker: its groups live in the cluster's `__consumer_offsets`."""
    offsets_log = TopicOffsetsLog(topics, controller, config)
    coordinator = GroupCoordinator(offsets_log, CoordinatorConfig.from_broker_config(config))
    coordinator.share.partition_counts = lambda: {
        name: len(topic.partitions) for name, topic in topics.topics.items()
    }
    # It serves the groups of the offsets partitions this broker leads, as leadership moves.
    topics.leadership_listeners.append(coordinator.on_partition_leadership)
    return coordinator
