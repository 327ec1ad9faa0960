"""Deterministic Raft core: one group per partition, the Raft log is the Kafka log."""

from consensus.core import (
    ConfigChangeError,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Ready,
    SoftState,
    Status,
)
from consensus.storage import MemoryRaftLog, RaftLog
from consensus.types import Entry, EntryKind, HardState, Message, MessageType, NodeId, Role

__all__ = [
    "ConfigChangeError",
    "Entry",
    "EntryKind",
    "HardState",
    "MemoryRaftLog",
    "Message",
    "MessageType",
    "NodeId",
    "NotLeaderError",
    "RaftConfig",
    "RaftCore",
    "RaftLog",
    "Ready",
    "Role",
    "SoftState",
    "Status",
]
