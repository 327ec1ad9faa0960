"""A consumer group's KIP-848 state: its members with their subscriptions, epochs and
assignments, the group epoch and target assignment, and the checks OffsetCommit v9 /
OffsetFetch v9 make against it. Data and queries only; `consumer_group` changes it.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from raftka.broker.groups.assignors import Assignment, Assignor
from raftka.broker.groups.consumer_records import MemberAssignmentValue, MemberMetadataValue

GROUP_TYPE_CONSUMER = "consumer"

TopicPartitions = Mapping[uuid.UUID, Iterable[int]]


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Kafka's group.consumer.* broker configs."""

    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 2**31 - 1
    assignors: Mapping[str, Assignor] = field(default_factory=dict)

    def default_assignor(self) -> str:
        return next(iter(self.assignors))


class MemberState(enum.Enum):
    # Values as Kafka stores them (ConsumerGroupCurrentMemberAssignmentValue.State).
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


class GroupProtocolState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    # Replaced, never changed in place (`assignment_fields` relies on it).
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def metadata_fields(self) -> tuple[object, ...]:
        """What `metadata_value` stores, to tell a change without building the record."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
        )

    def assignment_fields(self) -> tuple[object, ...]:
        """What `assignment_value` stores, to tell a change without building the record."""
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned,
            self.pending_revocation,
        )

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
        )

    def assignment_value(self) -> MemberAssignmentValue:
        return MemberAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            self.state.value,
            {t: frozenset(p) for t, p in self.assigned.items()},
            {t: frozenset(p) for t, p in self.pending_revocation.items()},
        )

    @classmethod
    def restore(
        cls, member_id: str, metadata: MemberMetadataValue, assignment: MemberAssignmentValue | None
    ) -> ConsumerMember:
        """A member as its records in `__consumer_offsets` describe it."""
        member = cls(
            member_id,
            instance_id=metadata.instance_id,
            rack_id=metadata.rack_id,
            client_id=metadata.client_id,
            client_host=metadata.client_host,
            rebalance_timeout_ms=metadata.rebalance_timeout_ms,
            subscribed_topic_names=metadata.subscribed_topic_names,
            subscribed_topic_regex=metadata.subscribed_topic_regex,
            server_assignor=metadata.server_assignor,
        )
        if assignment is not None:
            member.member_epoch = assignment.member_epoch
            member.previous_member_epoch = assignment.previous_member_epoch
            member.state = MemberState(assignment.state)
            member.assigned = copy_assignment(assignment.assigned)
            member.pending_revocation = copy_assignment(assignment.pending_revocation)
        return member

    def owned_partitions(self) -> Iterable[tuple[uuid.UUID, int]]:
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    yield topic_id, partition


@dataclass(eq=False)
class ConsumerProtocolGroup:
    """A consumer group's KIP-848 state (Kafka's modern ConsumerGroup)."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)
    # Topic name -> (id, partitions) of the subscribed topics, as of the last group epoch.
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    # (topic id, partition) -> the epoch of the member holding it (assigned or revoking).
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    assignor_name: str = ""
    # The members' subscribed topic names (None: to be computed again, with
    # `subscribed_regexes`, the members' regular expressions) and each regular
    # expression's matches, as of `regex_resolved_ms`.
    subscribed_names: set[str] | None = None
    subscribed_regexes: frozenset[str] = frozenset()
    regex_matches: dict[str, frozenset[str]] = field(default_factory=dict)
    regex_resolved_ms: float = -math.inf

    def state(self) -> GroupProtocolState:
        if not self.members:
            return GroupProtocolState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupProtocolState.ASSIGNING
        for member in self.members.values():
            if member.state != MemberState.STABLE or member.member_epoch != self.assignment_epoch:
                return GroupProtocolState.RECONCILING
        return GroupProtocolState.STABLE

    def add_owned(self, member: ConsumerMember) -> None:
        for tp in member.owned_partitions():
            self.partition_epochs[tp] = member.member_epoch

    def remove_owned(self, member: ConsumerMember) -> None:
        for tp in member.owned_partitions():
            self.partition_epochs.pop(tp, None)


def copy_assignment(assignment: Mapping[uuid.UUID, Iterable[int]]) -> Assignment:
    """A copy of its own, without empty topics."""
    return {t: set(p) for t, p in assignment.items() if p}


def restore_group(
    epoch: int,
    metadata: Mapping[str, MemberMetadataValue],
    assignments: Mapping[str, MemberAssignmentValue],
) -> ConsumerProtocolGroup:
    """A consumer group as its records describe it (`adopt` makes it servable)."""
    state = ConsumerProtocolGroup(group_epoch=epoch, assignment_epoch=epoch)
    for member_id, stored in metadata.items():
        state.members[member_id] = ConsumerMember.restore(
            member_id, stored, assignments.get(member_id)
        )
    return state


# -- offsets (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch) ------------


def commit_error(
    state: ConsumerProtocolGroup,
    member_id: str,
    member_epoch: int,
    transactional: bool = False,
    api_version: int = 9,
) -> ErrorCode:
    """An OffsetCommit (or TxnOffsetCommit) against a consumer group: one without a member
    epoch (admin tools, consumers without group management) passes while the group has no
    members, a transactional one without a member (before KIP-447) always; a member's must
    carry its current epoch."""
    if member_epoch < 0 and not state.members:
        return ErrorCode.none
    if transactional and member_epoch < 0 and not member_id:
        return ErrorCode.none
    member = state.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if not transactional and api_version < 9:
        return ErrorCode.unsupported_version  # a member's epoch needs OffsetCommit v9
    if member_epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return ErrorCode.none


def fetch_error(
    state: ConsumerProtocolGroup, member_id: str | None, member_epoch: int
) -> ErrorCode:
    """An OffsetFetch (v9) against a consumer group: a member must give its current epoch."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.none
    member = state.members.get(member_id or "")
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return ErrorCode.none
