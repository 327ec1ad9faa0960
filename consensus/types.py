"""Plain value types shared by the Raft core, its storage and a later transport.

Everything here is a dataclass of `Final` fields or an enum so a transport can encode it field
by field; nothing holds a reference to a core, a clock or a socket. The values are immutable
as far as the type checker sees (`Final`: mypy refuses an assignment after `__init__`) and
hashable, but not frozen at run time: a frozen dataclass's constructor is Python code that
calls `object.__setattr__` per field, where a plain `__init__` is compiled with the rest of
the request path (broker/compiled.py) and costs a fifth as much. These values are made for
every batch proposed and every message sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

NodeId = int


class EntryKind(enum.IntEnum):
    """What a log entry (a Kafka record batch) carries, as far as Raft cares."""

    DATA = 0  # ordinary record batch produced by a client
    NOOP = 1  # control batch a new leader appends so it can commit earlier terms
    CONFIG = 2  # control batch carrying the full voter set after a membership change


@dataclass(slots=True, init=False, unsafe_hash=True)
class Entry:
    """One Raft entry = one Kafka record batch covering offsets [base_offset, last_offset].

    `epoch` is the Raft term of the leader that created the batch (Kafka's
    partitionLeaderEpoch). Within one epoch batch boundaries are fixed by that epoch's leader,
    so two logs holding an entry with the same base offset and epoch hold the same entry.
    """

    base_offset: Final[int]
    last_offset: Final[int]
    epoch: Final[int]
    payload: Final[bytes]
    kind: Final[EntryKind]

    def __init__(
        self,
        base_offset: int,
        last_offset: int,
        epoch: int,
        payload: bytes,
        kind: EntryKind = EntryKind.DATA,
    ) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.epoch = epoch
        self.payload = payload
        self.kind = kind

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1

    @property
    def end_offset(self) -> int:
        """Offset just past this batch (exclusive end, Kafka style)."""
        return self.last_offset + 1

    @property
    def size_bytes(self) -> int:
        """Approximate wire size used for the per-append byte budget."""
        return len(self.payload) + 61  # 61 = Kafka record batch header overhead


def encode_voters(voters: frozenset[NodeId]) -> bytes:
    """Payload of a CONFIG entry: the full voter set, ascending, comma separated."""
    return ",".join(str(v) for v in sorted(voters)).encode("ascii")


def decode_voters(payload: bytes) -> frozenset[NodeId]:
    """The voters of a CONFIG payload (its learners, if any, are left out)."""
    return decode_config(payload)[0]


def _node_set(text: str) -> frozenset[NodeId]:
    return frozenset(int(part) for part in text.split(",")) if text else frozenset()


def encode_config(voters: frozenset[NodeId], learners: frozenset[NodeId]) -> bytes:
    """Payload of a CONFIG entry: "voters" or, with learners, "voters;learners" (each set
    ascending, comma separated), so an entry without learners reads as before."""
    if not learners:
        return encode_voters(voters)
    learner_text = ",".join(str(n) for n in sorted(learners))
    return encode_voters(voters) + b";" + learner_text.encode("ascii")


def decode_config(payload: bytes) -> tuple[frozenset[NodeId], frozenset[NodeId]]:
    """(voters, learners) of a CONFIG payload; an old "1,2,3" payload has no learners."""
    voters_text, _, learners_text = payload.decode("ascii").partition(";")
    return _node_set(voters_text), _node_set(learners_text)


@dataclass(slots=True, init=False, unsafe_hash=True)
class HardState:
    """What must be on disk before any message of the same Ready is sent."""

    term: Final[int]
    voted_for: Final[NodeId | None]

    def __init__(self, term: int = 0, voted_for: NodeId | None = None) -> None:
        self.term = term
        self.voted_for = voted_for


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MessageType(enum.IntEnum):
    APPEND = 1
    APPEND_RESPONSE = 2
    HEARTBEAT = 3
    HEARTBEAT_RESPONSE = 4
    PRE_VOTE = 5
    PRE_VOTE_RESPONSE = 6
    VOTE = 7
    VOTE_RESPONSE = 8
    TIMEOUT_NOW = 9
    SNAPSHOT = 10


@dataclass(slots=True, init=False, unsafe_hash=True)
class Message:
    """A Raft message for one group; many groups share one broker-to-broker connection.

    `group` is the Raft group id (the broker's partition name, "<topic>-<partition>"), never
    a consumer group. Field use by type:
    - APPEND: prev_offset/prev_epoch (last offset and epoch of the batch before `entries`;
      log_start_offset - 1 and epoch 0 when there is none), entries, high_watermark;
      `at_leader_end` when `entries` reach the leader's log end as it was when sent (the
      follower then drops any suffix of older epochs beyond them: the leader never had it).
    - APPEND_RESPONSE: reject; on success match_end (follower log end known to match the
      leader); on reject prev_offset echoes the rejected probe and hint_offset/hint_epoch
      point at the follower's last batch that may match (fast backoff).
    - HEARTBEAT: high_watermark (already capped at what the follower is known to hold).
    - HEARTBEAT_RESPONSE: nothing beyond the header.
    - APPEND, HEARTBEAT and their responses: log_start_offset, the sender's partition log
      start offset (Kafka's logStartOffset, which DeleteRecords may leave inside a batch;
      -1: not told): a follower raises its own log start to the leader's (bounded by its
      high watermark), the leader learns the followers' (DeleteRecords' low watermark).
    - PRE_VOTE / VOTE: last_offset/last_epoch of the candidate's log; `force` is set by a
      leadership transfer so voters ignore their leader lease. PRE_VOTE carries the term the
      candidate would campaign in.
    - PRE_VOTE_RESPONSE / VOTE_RESPONSE: reject.
    - TIMEOUT_NOW: nothing beyond the header.
    - SNAPSHOT (InstallSnapshot, sent instead of an append when the follower needs offsets
      below the leader's log start): prev_offset/prev_epoch name the last offset the
      snapshot covers (the leader's log start - 1) and its epoch, high_watermark,
      snapshot_voters and snapshot_learners the configuration in force there (empty voters:
      the group's configured voters), snapshot_data the state-machine payload
      (filled in by the sending driver; the core leaves it empty). Answered with an
      APPEND_RESPONSE whose match_end is at least the snapshot's end.
    """

    group: Final[str]
    type: Final[MessageType]
    from_id: Final[NodeId]
    to: Final[NodeId]
    term: Final[int]
    prev_offset: Final[int]
    prev_epoch: Final[int]
    entries: Final[tuple[Entry, ...]]
    high_watermark: Final[int]
    reject: Final[bool]
    match_end: Final[int]
    hint_offset: Final[int]
    hint_epoch: Final[int]
    last_offset: Final[int]
    last_epoch: Final[int]
    force: Final[bool]
    at_leader_end: Final[bool]
    snapshot_voters: Final[frozenset[NodeId]]
    snapshot_data: Final[bytes]
    snapshot_learners: Final[frozenset[NodeId]]
    log_start_offset: Final[int]

    def __init__(
        self,
        group: str,
        type: MessageType,
        from_id: NodeId,
        to: NodeId,
        term: int,
        prev_offset: int = -1,
        prev_epoch: int = 0,
        entries: tuple[Entry, ...] = (),
        high_watermark: int = 0,
        reject: bool = False,
        match_end: int = 0,
        hint_offset: int = -1,
        hint_epoch: int = 0,
        last_offset: int = -1,
        last_epoch: int = 0,
        force: bool = False,
        at_leader_end: bool = False,
        snapshot_voters: frozenset[NodeId] = frozenset(),
        snapshot_data: bytes = b"",
        snapshot_learners: frozenset[NodeId] = frozenset(),
        log_start_offset: int = -1,
    ) -> None:
        self.group = group
        self.type = type
        self.from_id = from_id
        self.to = to
        self.term = term
        self.prev_offset = prev_offset
        self.prev_epoch = prev_epoch
        self.entries = entries
        self.high_watermark = high_watermark
        self.reject = reject
        self.match_end = match_end
        self.hint_offset = hint_offset
        self.hint_epoch = hint_epoch
        self.last_offset = last_offset
        self.last_epoch = last_epoch
        self.force = force
        self.at_leader_end = at_leader_end
        self.snapshot_voters = snapshot_voters
        self.snapshot_data = snapshot_data
        self.snapshot_learners = snapshot_learners
        self.log_start_offset = log_start_offset


@dataclass(slots=True, init=False, unsafe_hash=True)
class Snapshot:
    """State that replaces a follower's whole log: everything below `end_offset` is committed
    and summarized by `data` (the driver's state-machine payload; empty for a partition).

    `epoch` is the epoch of offset end_offset - 1 (or an upper bound of it no larger than the
    epoch of the leader's batch at end_offset), `voters` and `learners` the configuration in
    force there (empty voters: the group's configured voters, no learners).
    """

    end_offset: Final[int]
    epoch: Final[int]
    voters: Final[frozenset[NodeId]]
    data: Final[bytes]
    learners: Final[frozenset[NodeId]]

    def __init__(
        self,
        end_offset: int,
        epoch: int,
        voters: frozenset[NodeId],
        data: bytes = b"",
        learners: frozenset[NodeId] = frozenset(),
    ) -> None:
        self.end_offset = end_offset
        self.epoch = epoch
        self.voters = voters
        self.data = data
        self.learners = learners
