"""Per-partition log settings, named after Kafka's topic configs."""

from __future__ import annotations

from dataclasses import dataclass

_INT64_MAX = 2**63 - 1
_WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Values in the units their names say; -1 means unlimited where Kafka allows it."""

    segment_bytes: int = 1 << 30  # segment.bytes / log.segment.bytes
    segment_ms: int = _WEEK_MS  # segment.ms / log.roll.ms
    retention_ms: int = _WEEK_MS  # retention.ms / log.retention.ms (-1 = unlimited)
    retention_bytes: int = -1  # retention.bytes / log.retention.bytes (-1 = unlimited)
    flush_messages: int = _INT64_MAX  # flush.messages / log.flush.interval.messages
    flush_ms: int = _INT64_MAX  # flush.ms / log.flush.interval.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    message_timestamp_type_log_append: bool = False  # message.timestamp.type=LogAppendTime
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms (broker config)
    compact: bool = False  # cleanup.policy includes compact
    delete: bool = True  # cleanup.policy includes delete: retention.ms/.bytes apply

    def __post_init__(self) -> None:
        # Segment positions are stored as int32 in the offset index, as in Kafka.
        if not 14 <= self.segment_bytes <= 2**31 - 1:
            raise ValueError(f"segment_bytes {self.segment_bytes} out of range")
        if self.segment_ms < 1 or self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("segment_ms and flush_messages must be >= 1, flush_ms >= 0")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.segment_index_bytes < 12:
            raise ValueError("segment_index_bytes must hold at least one entry")
