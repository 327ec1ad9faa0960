"""The group coordinator's settings, taken from the broker configuration (Kafka's names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig

OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # Kafka's offsets.retention.check.interval.ms


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS
    # The consumer group protocol (KIP-848): Kafka's group.consumer.* configs.
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = field(default=("uniform", "range"))

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
            consumer_heartbeat_interval_ms=config.get_int("group.consumer.heartbeat.interval.ms"),
            consumer_session_timeout_ms=config.get_int("group.consumer.session.timeout.ms"),
            consumer_max_size=config.get_int("group.consumer.max.size"),
            consumer_assignors=tuple(
                name.strip()
                for name in config.get_str("group.consumer.assignors").split(",")
                if name.strip()
            ),
        )
