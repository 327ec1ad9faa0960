"""Deterministic Raft core: one group per partition, the Raft log is the Kafka log.

- `RaftCore(config, log, hard_state, high_watermark=None)`: inputs `step(message)`,
  `tick()`, `propose(record_count, payload)`, `propose_config_change(add=|remove=)`,
  `transfer_leadership(to)`, `campaign()`; output `ready()` -> `Ready`, then `advance(rd)`.
  The ordering rule (persist, send, apply, advance) is in `consensus.core`.
- `RaftLog`: the read-only view of the durable partition log the core needs;
  `MemoryRaftLog` implements it (plus the driver's writes) for tests.
- `Message`: plain dataclass carrying its Raft group id (`group`, the partition's name), so
  one broker-to-broker connection can carry every group's traffic.
- Snapshots: a follower that needs offsets below its leader's log start is sent a SNAPSHOT
  (InstallSnapshot) message; its core hands the `Snapshot` to the driver in `Ready.snapshot`
  (empty the log, restart it at the snapshot's end, install the driver's data).
- `RaftInvariantError`: a broken invariant (a bug); it propagates and stops the driver.
- `status()`: role, leader, term (= leader epoch), high watermark, in-sync replicas.
- `consensus.sim`: seeded fault-injection simulation (`python -m raftka.consensus.sim --seed N`).
"""

from raftka.consensus.core import (
    ConfigChangeError,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Ready,
    SoftState,
    Status,
)
from raftka.consensus.errors import RaftInvariantError, SyncFailedError
from raftka.consensus.storage import MemoryRaftLog, RaftLog
from raftka.consensus.types import Entry, EntryKind, HardState, Message, MessageType, NodeId, Role

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
    "RaftInvariantError",
    "SyncFailedError",
    "RaftLog",
    "Ready",
    "Role",
    "SoftState",
    "Status",
]
