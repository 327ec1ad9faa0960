"""Kafka's classic consumer-group protocol: the group coordinator and its durable state."""

from __future__ import annotations

from typing import Any

from broker.groups.coordinator import CoordinatorConfig, GroupCoordinator, valid_group_id
from broker.groups.group import GroupState, JoinResult, Reply, SyncResult
from broker.groups.store import (
    OFFSETS_TOPIC,
    MemoryOffsetsLog,
    NotCoordinatorError,
    TopicOffsetsLog,
)

__all__ = [
    "OFFSETS_TOPIC",
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupState",
    "JoinResult",
    "MemoryOffsetsLog",
    "NotCoordinatorError",
    "Reply",
    "SyncResult",
    "TopicOffsetsLog",
    "coordinator_for",
    "valid_group_id",
]


def coordinator_for(broker: Any, config: Any) -> GroupCoordinator:
    """The coordinator of a broker: its groups live in the cluster's `__consumer_offsets`."""
    offsets_log = TopicOffsetsLog(broker, config.get("offsets.topic.num.partitions"))
    coordinator = GroupCoordinator(offsets_log, CoordinatorConfig.from_broker_config(config))
    # It serves the groups of the offsets partitions this broker leads, as leadership moves.
    broker.topics.leadership_listeners.append(coordinator.on_partition_leadership)
    return coordinator
