"""The consumer group protocol (KIP-848) as a state machine: ConsumerGroupHeartbeat, the
deadlines of its members, and the checks OffsetCommit v9 / OffsetFetch v9 make against it.

The coordinator decides everything: it keeps each member's subscription, computes the
group's target assignment with a server-side assignor whenever the group epoch moves past
the assignment epoch, and reconciles each member towards its target one heartbeat at a time
(Kafka's CurrentAssignmentBuilder):

- a member that owns partitions its target no longer has keeps its epoch and is asked to
  revoke them (UNREVOKED_PARTITIONS) -- they are taken out of its assignment at once -- and
  it moves on only once its heartbeat no longer reports them as owned;
- a member is given only partitions no other member still holds (assigned or pending
  revocation); the others stay pending (UNRELEASED_PARTITIONS) until released;
- the group epoch is bumped when a member joins, leaves or is fenced, when a subscription
  or assignor changes, and when a subscribed topic appears, disappears or changes its
  partition count.

Like `rebalance.RebalanceMachine`, the machine reads no clock and does no I/O: each call is
given the time, deadlines (session timeouts, rebalance timeouts of pending revocations)
live in a `DeadlineHeap` fired by `tick`, and topic metadata comes from a `TopicImage`.
A group's state lives on its `ConsumerGroup` (the registry classic groups share), in
`group.consumer`; a group with `consumer` None is a classic group.
"""

from __future__ import annotations

import enum
import logging
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import re2
from kio.schema.errors import ErrorCode

from raftka.broker.groups.assignors import Assignment, Assignor, MemberSubscription
from raftka.broker.groups.consumer_records import MemberAssignmentValue, MemberMetadataValue
from raftka.broker.groups.deadlines import DeadlineHeap
from raftka.broker.groups.group import ConsumerGroup, GroupState
from raftka.broker.groups.rebalance import Instant
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    MemberKey,
)

logger = logging.getLogger("raftka.groups")

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
GROUP_TYPE_CONSUMER = "consumer"
# How often regular-expression subscriptions are matched against the topics again.
REGEX_REFRESH_MS = 10_000

TopicPartitions = Mapping[uuid.UUID, Iterable[int]]
KeyValue = tuple[bytes, bytes | None]


class TopicImage(Protocol):
    """The cluster's topics as the coordinator sees them."""

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of an existing topic; None if there is none."""

    def names(self) -> Iterable[str]:
        """Every topic's name (for regex subscriptions)."""

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id; None if there is none."""


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
            member.assigned = _copy(assignment.assigned)
            member.pending_revocation = _copy(assignment.pending_revocation)
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


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class DeadlineKind(enum.IntEnum):
    SESSION = 0
    REBALANCE = 1


class DeadlineKey(NamedTuple):
    kind: DeadlineKind
    group_id: str
    member_id: str


def _nothing() -> None:
    pass


def _copy(assignment: Mapping[uuid.UUID, Iterable[int]]) -> Assignment:
    return {t: set(p) for t, p in assignment.items() if p}


def _is_subset(owned: TopicPartitions | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(set(parts) <= assigned.get(t, set()) for t, parts in owned.items() if parts)


def _owns_any(owned: TopicPartitions | None, partitions: Assignment) -> bool:
    """Does the member (by its reported owned partitions) still hold any of `partitions`?
    Not reporting them (None) counts as still holding them, as in Kafka."""
    if owned is None:
        return True
    return any(set(parts) & partitions.get(t, set()) for t, parts in owned.items())


def _compile_regex(pattern: str) -> Any:
    """A subscription's regular expression compiled with RE2 (Kafka's syntax, matching in
    time linear in the name); raises `re2.error` if it is invalid."""
    options = re2.Options()
    options.log_errors = False  # the heartbeat answers INVALID_REGULAR_EXPRESSION instead
    return re2.compile(pattern, options)


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


def _sync_state(group: ConsumerGroup, now: Instant) -> None:
    """The classic state the shared parts read (offset expiry, DeleteGroups): a consumer
    group with members is never Empty."""
    wanted = GroupState.STABLE if group.consumer and group.consumer.members else GroupState.EMPTY
    if group.state != wanted:
        group.transition(wanted, now.wall_ms)


def validate_request(request: HeartbeatRequest, version: int, assignors: Iterable[str]) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat's fields; HeartbeatError (INVALID_REQUEST
    or UNSUPPORTED_ASSIGNOR) names the bad one."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.invalid_request, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if version >= 1 and not request.member_id:
        raise invalid("MemberId can't be empty: the consumer chooses it from version 1 on.")
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or any(request.owned.values()):
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        has_names = bool(request.subscribed_topic_names)
        if not has_names and request.subscribed_topic_regex is None:
            raise invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid(f"MemberEpoch {epoch} is invalid.")
    if request.subscribed_topic_regex is not None:
        if version < 1:
            raise invalid("SubscribedTopicRegex needs version 1.")
        try:
            _compile_regex(request.subscribed_topic_regex)
        except re2.error as exc:
            reason = b"".join(a for a in exc.args if isinstance(a, bytes)).decode(errors="replace")
            raise HeartbeatError(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex {request.subscribed_topic_regex!r} is invalid "
                f"(RE2 syntax, as in Kafka): {reason or exc}",
            ) from exc
    known = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in known:
        raise HeartbeatError(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(known)}.",
        )


class ConsumerProtocolMachine:
    """The consumer-protocol groups among `groups` (shared with the classic machine)."""

    def __init__(
        self,
        config: ConsumerConfig,
        groups: dict[str, ConsumerGroup],
        topics: TopicImage,
        *,
        on_earlier_deadline: Callable[[], None] = _nothing,
        on_records: Callable[[str, list[KeyValue]], None] | None = None,
        new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.config = config
        self.groups = groups
        self.topics = topics
        self.deadlines: DeadlineHeap[DeadlineKey] = DeadlineHeap(on_earlier_deadline)
        self._on_records = on_records
        self._new_member_id = new_member_id
        # Records of the operation under way, by group: handed to `on_records` at its end.
        self._records: dict[str, list[KeyValue]] = {}

    def _flush(self) -> None:
        records, self._records = self._records, {}
        if self._on_records is not None:
            for group_id, batch in records.items():
                if batch:
                    self._on_records(group_id, batch)

    def _record_member(self, group_id: str, member: ConsumerMember, metadata: bool) -> None:
        out = self._records.setdefault(group_id, [])
        if metadata:
            key = MemberKey(group_id, member.member_id, assignment=False)
            out.append((key.encode(), member.metadata_value().encode()))
        key = MemberKey(group_id, member.member_id, assignment=True)
        out.append((key.encode(), member.assignment_value().encode()))

    def _record_removal(self, group_id: str, member_id: str) -> None:
        self._records.setdefault(group_id, []).extend(
            (MemberKey(group_id, member_id, assignment=a).encode(), None) for a in (True, False)
        )

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    def heartbeat(
        self, request: HeartbeatRequest, now: Instant, version: int = 1
    ) -> HeartbeatResult:
        """The answer to one ConsumerGroupHeartbeat (the caller checked coordination)."""
        try:
            validate_request(request, version, self.config.assignors)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request, now)
            return self._heartbeat(request, now)
        except HeartbeatError as exc:
            return HeartbeatResult(exc.error, exc.message, request.member_id or None)
        finally:
            self._flush()

    def _group(self, group_id: str, create: bool) -> tuple[ConsumerGroup, ConsumerProtocolGroup]:
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            return group, group.consumer
        if group is None:
            if not create:
                raise HeartbeatError(
                    ErrorCode.group_id_not_found, f"Consumer group {group_id} not found."
                )
            group = self.groups[group_id] = ConsumerGroup(group_id)
        elif not create or not group.is_(GroupState.EMPTY) or group.members:
            raise HeartbeatError(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        # A new group, or an empty classic group (its committed offsets stay) turns into a
        # consumer group, as Kafka converts it.
        group.consumer = ConsumerProtocolGroup(
            assignor_name=self.config.default_assignor(), group_epoch=group.generation_id
        )
        group.consumer.assignment_epoch = group.consumer.group_epoch
        group.protocol_type = GROUP_TYPE_CONSUMER
        group.protocol_name = None
        return group, group.consumer

    def _heartbeat(self, request: HeartbeatRequest, now: Instant) -> HeartbeatResult:
        joining = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group, state = self._group(request.group_id, joining)
        member_id = request.member_id or self._new_member_id()
        if (
            len(state.members) >= self.config.max_size
            and member_id not in state.members
            and not (
                request.instance_id is not None and request.instance_id in state.static_members
            )
        ):
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        member = self._member(group.group_id, state, member_id, request, joining, now)
        known = member.member_id in state.members
        metadata_before = member.metadata_fields() if known else None
        assignment_before = member.assignment_fields() if known else None
        # A static member's new incarnation replaces the old one without a rebalance.
        bump = not known and (
            member.instance_id is None or member.instance_id not in state.static_members
        )
        if not known:
            state.members[member.member_id] = member
            if member.instance_id is not None:
                state.static_members[member.instance_id] = member.member_id
            state.add_owned(member)
            _sync_state(group, now)
        previous_assigned = _copy(member.assigned)
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        if (
            request.server_assignor is not None
            and request.server_assignor != member.server_assignor
        ):
            member.server_assignor = request.server_assignor
            bump = True
        names = request.subscribed_topic_names
        if names is not None and tuple(sorted(set(names))) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(set(names)))
            bump = True
        regex = request.subscribed_topic_regex
        if regex is not None and regex != (member.subscribed_topic_regex or ""):
            member.subscribed_topic_regex = regex or None
            bump = True
        if bump:
            state.subscribed_names = None  # the membership or a subscription changed
        metadata = self._subscription_metadata(state, now.ms)
        if metadata != state.subscription_metadata:
            state.subscription_metadata = metadata
            bump = True
        if bump:
            self._bump(group.group_id, state)
        if state.group_epoch > state.assignment_epoch:
            self._compute_target(state)
        self._reconcile(group.group_id, state, member, request.owned)
        metadata_changed = member.metadata_fields() != metadata_before
        if metadata_changed or member.assignment_fields() != assignment_before:
            self._record_member(group.group_id, member, metadata_changed)
        self.deadlines.schedule(
            DeadlineKey(DeadlineKind.SESSION, group.group_id, member.member_id),
            now.ms + self.config.session_timeout_ms,
        )
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            key = DeadlineKey(DeadlineKind.REBALANCE, group.group_id, member.member_id)
            if key not in self.deadlines:
                self.deadlines.schedule(key, now.ms + member.rebalance_timeout_ms)
        else:
            self.deadlines.cancel(
                DeadlineKey(DeadlineKind.REBALANCE, group.group_id, member.member_id)
            )
        full = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = member.assigned != previous_assigned
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member.member_id,
            member.member_epoch,
            self.config.heartbeat_interval_ms,
            _copy(member.assigned) if full or changed else None,
        )

    def _member(
        self,
        group_id: str,
        state: ConsumerProtocolGroup,
        member_id: str,
        request: HeartbeatRequest,
        joining: bool,
        now: Instant,
    ) -> ConsumerMember:
        """The member the request speaks for: existing, new, or a static member's new
        incarnation (which takes over the assignment of the one that left with -2)."""
        instance_id = request.instance_id
        if instance_id is None:
            member = state.members.get(member_id)
            if member is None:
                if not joining:
                    raise HeartbeatError(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group_id}.",
                    )
                return ConsumerMember(member_id)
            return self._known_member(group_id, state, member, request, joining, now)
        existing_id = state.static_members.get(instance_id)
        existing = None if existing_id is None else state.members.get(existing_id)
        if joining:
            if existing is None:
                member = state.members.get(member_id)
                if member is not None:
                    return self._known_member(group_id, state, member, request, joining, now)
                return ConsumerMember(member_id, instance_id=instance_id)
            if existing.member_id == member_id:
                return self._known_member(group_id, state, existing, request, joining, now)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {existing.member_id} with instance id {instance_id} is "
                    f"present in the consumer group {group_id}; it must leave first.",
                )
            # The new incarnation takes over the old one's assignment, from epoch 0.
            target = state.target.get(existing.member_id)
            self._drop_member(group_id, state, existing)
            self._record_removal(group_id, existing.member_id)
            state.static_members[instance_id] = member_id  # joins in `_heartbeat`
            member = ConsumerMember(
                member_id,
                instance_id=instance_id,
                rack_id=existing.rack_id,
                rebalance_timeout_ms=existing.rebalance_timeout_ms,
                subscribed_topic_names=existing.subscribed_topic_names,
                subscribed_topic_regex=existing.subscribed_topic_regex,
                server_assignor=existing.server_assignor,
                state=existing.state,
                assigned=_copy(existing.assigned),
                pending_revocation=_copy(existing.pending_revocation),
            )
            if target is not None:
                state.target[member_id] = target
            return member
        if existing is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Instance id {instance_id} is unknown in group {group_id}.",
            )
        if existing.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, request)
        return existing

    def _known_member(
        self,
        group_id: str,
        state: ConsumerProtocolGroup,
        member: ConsumerMember,
        request: HeartbeatRequest,
        joining: bool,
        now: Instant,
    ) -> ConsumerMember:
        """A known member, its epoch checked. One that rejoins (epoch 0, owning nothing)
        after it was fenced -- clients keep their member id from v1 on -- is removed and
        joins again as a new member: refusing it would fence it until its session ends."""
        try:
            self._check_epoch(member, request)
        except HeartbeatError:
            if not joining:
                raise
            logger.info(
                "group %s: member %s rejoins at epoch 0; its epoch %d ends",
                group_id,
                member.member_id,
                member.member_epoch,
                extra={"group": group_id},
            )
            self.fence(group_id, member.member_id, now)
            return ConsumerMember(member.member_id, instance_id=request.instance_id)
        return member

    @staticmethod
    def _check_epoch(member: ConsumerMember, request: HeartbeatRequest) -> None:
        received = request.member_epoch
        if received > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                f"must abandon all its partitions and rejoin.",
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch
            or not _is_subset(request.owned, member.assigned)
        ):
            # The previous epoch with owned partitions within the assignment is a member
            # whose answer bumping its epoch was lost: accepted.
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member "
                f"must abandon all its partitions and rejoin.",
            )

    def _leave(self, request: HeartbeatRequest, now: Instant) -> HeartbeatResult:
        group = self.groups.get(request.group_id)
        state = None if group is None else group.consumer
        if group is None or state is None:
            raise HeartbeatError(
                ErrorCode.group_id_not_found, f"Consumer group {request.group_id} not found."
            )
        if request.instance_id is not None:
            existing_id = state.static_members.get(request.instance_id)
            if existing_id is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Instance id {request.instance_id} is unknown in group {request.group_id}.",
                )
            if existing_id != request.member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id "
                    f"{request.instance_id} was fenced by member {existing_id}.",
                )
        member = state.members.get(request.member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member {request.member_id} is not a member of group {request.group_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for a while keeps its assignment: the same instance
            # rejoining takes it over. Its session still runs out if it does not.
            logger.info(
                "group %s: static member %s (instance %s) leaves temporarily",
                request.group_id,
                member.member_id,
                member.instance_id,
                extra={"group": request.group_id},
            )
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            self._record_member(request.group_id, member, metadata=False)
            self.deadlines.cancel(
                DeadlineKey(DeadlineKind.REBALANCE, request.group_id, member.member_id)
            )
            return HeartbeatResult(
                ErrorCode.none, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH
            )
        logger.info(
            "group %s: member %s leaves",
            request.group_id,
            member.member_id,
            extra={"group": request.group_id},
        )
        self.fence(request.group_id, member.member_id, now)
        return HeartbeatResult(ErrorCode.none, None, member.member_id, LEAVE_GROUP_MEMBER_EPOCH)

    # -- membership changes ----------------------------------------------------------------

    def fence(self, group_id: str, member_id: str, now: Instant) -> None:
        """Remove a member (left, session or rebalance timed out): its partitions are
        released and the group epoch bumped."""
        group = self.groups.get(group_id)
        state = None if group is None else group.consumer
        if group is None or state is None or member_id not in state.members:
            return
        self._drop_member(group_id, state, state.members[member_id])
        self._record_removal(group_id, member_id)
        state.subscription_metadata = self._subscription_metadata(state, now.ms)
        self._bump(group_id, state)
        _sync_state(group, now)

    def _drop_member(
        self, group_id: str, state: ConsumerProtocolGroup, member: ConsumerMember
    ) -> None:
        state.remove_owned(member)
        state.subscribed_names = None
        del state.members[member.member_id]
        state.target.pop(member.member_id, None)
        if (
            member.instance_id is not None
            and state.static_members.get(member.instance_id) == member.member_id
        ):
            del state.static_members[member.instance_id]
        for kind in DeadlineKind:
            self.deadlines.cancel(DeadlineKey(kind, group_id, member.member_id))

    def _bump(self, group_id: str, state: ConsumerProtocolGroup) -> None:
        state.group_epoch += 1
        logger.info(
            "group %s: group epoch %d", group_id, state.group_epoch, extra={"group": group_id}
        )
        record = (
            ConsumerGroupMetadataKey(group_id).encode(),
            ConsumerGroupMetadataValue(state.group_epoch).encode(),
        )
        self._records.setdefault(group_id, []).append(record)

    @staticmethod
    def _subscribed_names(state: ConsumerProtocolGroup, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex is not None:
            names |= state.regex_matches.get(member.subscribed_topic_regex, frozenset())
        return names

    def _group_topic_names(self, state: ConsumerProtocolGroup, now_ms: float) -> set[str]:
        """The topic names the members subscribe to, cached until the membership or a
        subscription changes; regular expressions are matched again at most every
        `REGEX_REFRESH_MS`, so a heartbeat costs one lookup per subscribed topic."""
        if state.subscribed_names is None:
            state.subscribed_regexes = frozenset(
                m.subscribed_topic_regex
                for m in state.members.values()
                if m.subscribed_topic_regex is not None
            )
        regexes = state.subscribed_regexes
        stale = regexes and now_ms - state.regex_resolved_ms >= REGEX_REFRESH_MS
        if state.subscribed_names is None or stale:
            # Kafka matches with RE2/J against the whole name; RE2 is the same syntax and
            # matches in linear time, whatever the client sends. Internal topics are never
            # matched.
            candidates = (
                [n for n in self.topics.names() if not n.startswith("__")] if regexes else []
            )
            state.regex_matches = {}
            for regex in regexes:
                compiled = _compile_regex(regex)
                state.regex_matches[regex] = frozenset(
                    n for n in candidates if compiled.fullmatch(n)
                )
            state.regex_resolved_ms = now_ms
            names: set[str] = set()
            for member in state.members.values():
                names |= self._subscribed_names(state, member)
            state.subscribed_names = names
        return state.subscribed_names

    def _subscription_metadata(
        self, state: ConsumerProtocolGroup, now_ms: float
    ) -> dict[str, tuple[uuid.UUID, int]]:
        metadata: dict[str, tuple[uuid.UUID, int]] = {}
        for name in self._group_topic_names(state, now_ms):
            found = self.topics.lookup(name)
            if found is not None:
                metadata[name] = found
        return metadata

    def _assignor(self, state: ConsumerProtocolGroup) -> Assignor:
        # Kafka picks the assignor most members ask for, else the first configured one.
        asked: dict[str, int] = {}
        for member in state.members.values():
            if member.server_assignor is not None:
                asked[member.server_assignor] = asked.get(member.server_assignor, 0) + 1
        name = (
            max(sorted(asked), key=lambda n: asked[n]) if asked else self.config.default_assignor()
        )
        return self.config.assignors[name]

    def _compute_target(self, state: ConsumerProtocolGroup) -> None:
        assignor = self._assignor(state)
        partitions = {topic_id: count for topic_id, count in state.subscription_metadata.values()}
        subscriptions = {}
        for member_id, member in state.members.items():
            ids = frozenset(
                state.subscription_metadata[name][0]
                for name in self._subscribed_names(state, member)
                if name in state.subscription_metadata
            )
            previous = {t: frozenset(p) for t, p in state.target.get(member_id, {}).items()}
            subscriptions[member_id] = MemberSubscription(ids, previous)
        state.target = assignor.assign(subscriptions, partitions)
        state.assignment_epoch = state.group_epoch
        state.assignor_name = assignor.name

    # -- reconciliation (Kafka's CurrentAssignmentBuilder) ---------------------------------

    def _reconcile(
        self,
        group_id: str,
        state: ConsumerProtocolGroup,
        member: ConsumerMember,
        owned: TopicPartitions | None,
    ) -> None:
        target_epoch = state.assignment_epoch
        if member.state == MemberState.STABLE:
            if member.member_epoch == target_epoch:
                return
            epoch = member.member_epoch
        elif member.state == MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                return
            epoch = member.member_epoch + 1
        else:
            epoch = member.member_epoch
        state.remove_owned(member)
        self._next_assignment(state, member, epoch, owned)
        state.add_owned(member)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            logger.debug(
                "group %s: member %s must revoke %s",
                group_id,
                member.member_id,
                member.pending_revocation,
                extra={"group": group_id},
            )

    def _next_assignment(
        self,
        state: ConsumerProtocolGroup,
        member: ConsumerMember,
        epoch: int,
        owned: TopicPartitions | None,
    ) -> None:
        target = state.target.get(member.member_id, {})
        assigned: Assignment = {}
        revoking: Assignment = {}
        adding: Assignment = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            wanted = target.get(topic_id, set())
            current = member.assigned.get(topic_id, set())
            kept = current & wanted
            if kept:
                assigned[topic_id] = kept
            if current - kept:
                revoking[topic_id] = current - kept
            free = set()
            for partition in wanted - kept:
                if (topic_id, partition) in state.partition_epochs:
                    unreleased = True
                else:
                    free.add(partition)
            if free:
                adding[topic_id] = free
        member.previous_member_epoch = member.member_epoch
        if revoking and _owns_any(owned, revoking):
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.member_epoch = epoch
            member.assigned = assigned
            member.pending_revocation = revoking
            return
        for topic_id, partitions in adding.items():
            assigned.setdefault(topic_id, set()).update(partitions)
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        member.member_epoch = state.assignment_epoch
        member.assigned = assigned
        member.pending_revocation = {}

    # -- deadlines -------------------------------------------------------------------------

    def next_deadline_ms(self) -> float | None:
        return self.deadlines.earliest()

    def adopt(self, group: ConsumerGroup, now: Instant) -> None:
        """Serve a consumer group restored from `__consumer_offsets`: its members keep
        their epochs and partitions (so no partition is given to two members), their
        sessions start now, and the group epoch is bumped (and stored) so that a target
        assignment is computed again -- it is not stored."""
        state = group.consumer
        if state is None:
            return
        for member in state.members.values():
            if member.instance_id is not None:
                state.static_members[member.instance_id] = member.member_id
            state.add_owned(member)
            state.target[member.member_id] = _copy(member.assigned)
            self.deadlines.schedule(
                DeadlineKey(DeadlineKind.SESSION, group.group_id, member.member_id),
                now.ms + self.config.session_timeout_ms,
            )
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                self.deadlines.schedule(
                    DeadlineKey(DeadlineKind.REBALANCE, group.group_id, member.member_id),
                    now.ms + member.rebalance_timeout_ms,
                )
        newest = max((m.member_epoch for m in state.members.values()), default=0)
        state.group_epoch = state.assignment_epoch = max(state.group_epoch, newest)
        state.subscription_metadata = self._subscription_metadata(state, now.ms)
        if state.members:
            self._bump(group.group_id, state)
        _sync_state(group, now)
        self._flush()

    def tick(self, now: Instant) -> None:
        """Fence every member whose session or rebalance timeout is at or before `now`."""
        try:
            self._fence_due(now)
        finally:
            self._flush()

    def _fence_due(self, now: Instant) -> None:
        for key in self.deadlines.pop_due(now.ms):
            group = self.groups.get(key.group_id)
            if group is None or group.consumer is None:
                continue
            what = "session" if key.kind == DeadlineKind.SESSION else "rebalance (revocation)"
            if key.member_id in group.consumer.members:
                logger.info(
                    "group %s: member %s fenced: its %s timeout expired",
                    key.group_id,
                    key.member_id,
                    what,
                    extra={"group": key.group_id},
                )
            self.fence(key.group_id, key.member_id, now)

    def drop(self, group_id: str) -> None:
        """Forget the deadlines of a group this broker no longer coordinates."""
        group = self.groups.get(group_id)
        if group is None or group.consumer is None:
            return
        for member_id in group.consumer.members:
            for kind in DeadlineKind:
                self.deadlines.cancel(DeadlineKey(kind, group_id, member_id))


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
