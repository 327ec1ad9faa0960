"""Kafka's on-disk partition log: segments, offset and time indexes, recovery, retention."""

from .config import LogConfig
from .epochs import LeaderEpochCache, checked_fsync, fsync_directory
from .errors import LogInvariantError, NonContiguousAppend, OffsetOutOfRange
from .partition import AppendInfo, PartitionLog
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "LeaderEpochCache",
    "LogConfig",
    "LogInvariantError",
    "LogSegment",
    "NonContiguousAppend",
    "OffsetOutOfRange",
    "PartitionLog",
    "checked_fsync",
    "fsync_directory",
]
