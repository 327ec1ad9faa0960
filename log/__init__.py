"""Kafka's on-disk partition log: segments, offset and time indexes, recovery, retention."""

from .config import LogConfig
from .epochs import LeaderEpochCache
from .partition import AppendInfo, NonContiguousAppend, OffsetOutOfRange, PartitionLog
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "LeaderEpochCache",
    "LogConfig",
    "LogSegment",
    "NonContiguousAppend",
    "OffsetOutOfRange",
    "PartitionLog",
]
