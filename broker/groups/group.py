"""One consumer group's state: members, generation, selected protocol, committed offsets.

The transitions themselves live in `broker.groups.rebalance`; this module holds the data and
the small queries Kafka's `GroupMetadata` answers (who has rejoined, which protocol wins).
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from raftka.broker.groups.records import (
    STRING_LENGTH_MAX,
    GroupMetadataValue,
    MemberRecord,
    OffsetValue,
)

if TYPE_CHECKING:
    from raftka.broker.groups.consumer_state import ConsumerProtocolGroup

T_contra = TypeVar("T_contra", contravariant=True)


def valid_group_id(group_id: str | None, *, empty_allowed: bool = False) -> bool:
    """Short enough for the int16-length strings of the record keys, and non-empty unless
    `empty_allowed`: as in Kafka, the APIs that only store, read, describe or delete a
    group's state (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups) accept the empty
    id, which clients without group management commit under; the others refuse it."""
    if group_id is None:
        return False
    return (empty_allowed or group_id != "") and len(group_id.encode()) <= STRING_LENGTH_MAX


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Answer(Protocol[T_contra]):
    """Where the answer of a waiting JoinGroup or SyncGroup goes once the group decides it.
    Only the first answer counts; later ones are ignored."""

    def set(self, value: T_contra) -> None: ...


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    session_deadline_ms: float = 0.0
    join_reply: Answer[JoinResult] | None = None
    sync_reply: Answer[SyncResult] | None = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_reply is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_reply is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among `candidates` (its own order)."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def to_record(self, protocol: str | None) -> MemberRecord:
        return MemberRecord(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            subscription=self.metadata(protocol) if protocol else b"",
            assignment=self.assignment,
        )


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id → member id
    pending_members: dict[str, float] = field(default_factory=dict)  # member id → deadline ms
    pending_sync: set[str] = field(default_factory=set)
    rebalance_deadline_ms: float | None = None
    initial_delay_remaining_ms: int = 0
    in_initial_delay: bool = False
    new_member_added: bool = False
    current_state_timestamp_ms: int = -1
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    # Log offset in `__consumer_offsets` of the record behind each committed offset: a
    # transaction's offset that commits later replaces only an older one.
    committed_at: dict[tuple[str, int], int] = field(default_factory=dict)
    # The consumer group protocol's state (KIP-848); None for a classic group.
    consumer: ConsumerProtocolGroup | None = None

    # -- queries ---------------------------------------------------------------------------

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """KIP-345: a known instance id presented with a member id that is not its current one."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's `GroupMetadata.supportsProtocols`: same type and one protocol in common."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        candidates = set(members[0].protocol_names())
        for member in members[1:]:
            candidates &= set(member.protocol_names())
        return candidates

    def select_protocol(self) -> str:
        """The protocol all members support that the most members prefer (Kafka's vote)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        # Ties go to the protocol that comes first in the candidates' preference order.
        first = next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(first.protocol_names())}
        return max(votes, key=lambda name: (votes[name], -order.get(name, 0)))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_consumer_subscription(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    # -- changes ---------------------------------------------------------------------------

    def transition(self, state: GroupState, wall_ms: int) -> None:
        self.state = state
        self.current_state_timestamp_ms = wall_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        # A still-waiting request of the old incarnation learns it was fenced.
        if member.join_reply is not None:
            member.join_reply.set(JoinResult(ErrorCode.fenced_instance_id, old_id))
            member.join_reply = None
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(ErrorCode.fenced_instance_id))
            member.sync_reply = None
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def to_record(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id if self.members else None,
            current_state_timestamp_ms=self.current_state_timestamp_ms,
            members=tuple(m.to_record(self.protocol_name) for m in self.members.values()),
        )


def parse_consumer_subscription(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version); None if it does not parse."""
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0 or version > 3:
            return None
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos = 6
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos : pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
