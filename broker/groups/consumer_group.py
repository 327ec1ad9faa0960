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
import uuid
from collections.abc import Callable, Mapping
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from raftka.broker.groups.assignors import Assignment
from raftka.broker.groups.consumer_reconcile import reconcile
from raftka.broker.groups.consumer_request import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    validate_request,
)
from raftka.broker.groups.consumer_state import (
    GROUP_TYPE_CONSUMER,
    ConsumerConfig,
    ConsumerMember,
    ConsumerProtocolGroup,
    GroupProtocolState,
    MemberState,
    TopicPartitions,
    commit_error,
    copy_assignment,
    fetch_error,
    restore_group,
)
from raftka.broker.groups.consumer_target import (
    REGEX_REFRESH_MS,
    TopicImage,
    compute_target,
    subscription_metadata,
)
from raftka.broker.groups.deadlines import DeadlineHeap
from raftka.broker.groups.group import ConsumerGroup, GroupState
from raftka.broker.groups.instant import Instant
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    MemberKey,
)

# The consumer protocol's names, importable from here as before the state, the request and
# the assignment moved to their own modules.
__all__ = [
    "GROUP_TYPE_CONSUMER",
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "REGEX_REFRESH_MS",
    "ConsumerConfig",
    "ConsumerMember",
    "ConsumerProtocolGroup",
    "ConsumerProtocolMachine",
    "DeadlineKey",
    "DeadlineKind",
    "GroupProtocolState",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "MemberState",
    "TopicImage",
    "TopicPartitions",
    "commit_error",
    "fetch_error",
    "restore_group",
    "validate_request",
]

logger = logging.getLogger("raftka.groups")

KeyValue = tuple[bytes, bytes | None]


class DeadlineKind(enum.IntEnum):
    SESSION = 0
    REBALANCE = 1


class DeadlineKey(NamedTuple):
    kind: DeadlineKind
    group_id: str
    member_id: str


def _nothing() -> None:
    pass


def _is_subset(owned: TopicPartitions | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(set(parts) <= assigned.get(t, set()) for t, parts in owned.items() if parts)


def _sync_state(group: ConsumerGroup, now: Instant) -> None:
    """The classic state the shared parts read (offset expiry, DeleteGroups): a consumer
    group with members is never Empty."""
    wanted = GroupState.STABLE if group.consumer and group.consumer.members else GroupState.EMPTY
    if group.state != wanted:
        group.transition(wanted, now.wall_ms)


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
        #: A group's own configs (Kafka 4's group configs, checked when they were set):
        #: consumer.session.timeout.ms and consumer.heartbeat.interval.ms replace the
        #: broker-wide values for that group.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}

    def session_timeout_ms(self, group_id: str) -> int:
        own = self.group_configs(group_id).get("consumer.session.timeout.ms")
        return self.config.session_timeout_ms if own is None else int(own)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        own = self.group_configs(group_id).get("consumer.heartbeat.interval.ms")
        return self.config.heartbeat_interval_ms if own is None else int(own)

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
        previous_assigned = copy_assignment(member.assigned)
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
        metadata = subscription_metadata(self.topics, state, now.ms)
        if metadata != state.subscription_metadata:
            state.subscription_metadata = metadata
            bump = True
        if bump:
            self._bump(group.group_id, state)
        if state.group_epoch > state.assignment_epoch:
            compute_target(self.config, state)
        reconcile(group.group_id, state, member, request.owned)
        metadata_changed = member.metadata_fields() != metadata_before
        if metadata_changed or member.assignment_fields() != assignment_before:
            self._record_member(group.group_id, member, metadata_changed)
        self.deadlines.schedule(
            DeadlineKey(DeadlineKind.SESSION, group.group_id, member.member_id),
            now.ms + self.session_timeout_ms(group.group_id),
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
            self.heartbeat_interval_ms(group.group_id),
            copy_assignment(member.assigned) if full or changed else None,
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
                assigned=copy_assignment(existing.assigned),
                pending_revocation=copy_assignment(existing.pending_revocation),
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
        state.subscription_metadata = subscription_metadata(self.topics, state, now.ms)
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
            state.target[member.member_id] = copy_assignment(member.assigned)
            self.deadlines.schedule(
                DeadlineKey(DeadlineKind.SESSION, group.group_id, member.member_id),
                now.ms + self.session_timeout_ms(group.group_id),
            )
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                self.deadlines.schedule(
                    DeadlineKey(DeadlineKind.REBALANCE, group.group_id, member.member_id),
                    now.ms + member.rebalance_timeout_ms,
                )
        newest = max((m.member_epoch for m in state.members.values()), default=0)
        state.group_epoch = state.assignment_epoch = max(state.group_epoch, newest)
        state.subscription_metadata = subscription_metadata(self.topics, state, now.ms)
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
