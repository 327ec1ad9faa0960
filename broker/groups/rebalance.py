"""Kafka's classic group membership protocol as a state machine: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the deadlines of members and groups.

A group moves Empty → PreparingRebalance → CompletingRebalance → Stable (and Dead when
deleted). The machine reads no clock, starts no task and does no I/O: every operation is
given the time (`Instant`) by its caller, and what the machine needs from outside goes
through what it was built with:

- a JoinGroup or SyncGroup that waits for the group brings an `Answer`, which the machine
  sets once the group decides (the operation returns None then);
- group metadata to append to `__consumer_offsets` goes to `store_group`; a leader's
  assignment goes to `store_assignment`, and the caller reports the append's outcome with
  `assignment_stored` (as in Kafka, members get their assignment once it is committed);
- deadlines (initial rebalance delay, rebalance timeout, session timeouts, KIP-394 pending
  members) live in a `DeadlineHeap`: the caller calls `tick(now)` when `next_deadline_ms()`
  passes, and `on_earlier_deadline` tells it that a new deadline comes before that.

Callers check the group id (`valid_group_id`) and that this broker coordinates the group
before they call in.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from raftka.broker.groups.config import CoordinatorConfig
from raftka.broker.groups.deadlines import DeadlineHeap
from raftka.broker.groups.group import (
    Answer,
    ConsumerGroup,
    GroupState,
    JoinedMember,
    JoinResult,
    Member,
    SyncResult,
)
from raftka.broker.groups.instant import Instant

logger = logging.getLogger("raftka.groups")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


class DeadlineKind(enum.IntEnum):
    # Within one group, due deadlines fire in this order.
    PENDING_MEMBER = 0
    SESSION = 1
    REBALANCE = 2


class DeadlineKey(NamedTuple):
    kind: DeadlineKind
    group_id: str
    member_id: str = ""


def random_member_id(prefix: str) -> str:
    """Kafka's member ids: the client (or group instance) id and a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


def _nothing() -> None:
    pass


class RebalanceMachine:
    """The groups this broker coordinates and their membership, driven by requests and
    deadlines (see the module docstring)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        store_group: Callable[[ConsumerGroup], None],
        store_assignment: Callable[[ConsumerGroup], None],
        on_earlier_deadline: Callable[[], None] = _nothing,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self.deadlines: DeadlineHeap[DeadlineKey] = DeadlineHeap(on_earlier_deadline)
        self._store_group = store_group
        self._store_assignment = store_assignment
        self._new_member_id = new_member_id
        # (group id, generation) of assignments being stored: a repeated leader SyncGroup
        # meanwhile waits for that store instead of starting another.
        self._storing: set[tuple[str, int]] = set()

    # -- the groups themselves -------------------------------------------------------------

    def group_for_offsets(self, group_id: str) -> ConsumerGroup:
        """The group, created empty when it has none yet (a group that only stores
        offsets)."""
        return self.groups.setdefault(group_id, ConsumerGroup(group_id))

    def adopt(self, group: ConsumerGroup) -> None:
        """Serve a group restored from `__consumer_offsets`: its members' sessions run from
        their restored deadlines."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._arm_session(group, member)

    def drop(self, group_id: str) -> None:
        """Forget a group this broker no longer coordinates; its waiting JoinGroup and
        SyncGroup requests get NOT_COORDINATOR."""
        group = self.groups.pop(group_id)
        for member in group.members.values():
            if member.join_reply is not None:
                member.join_reply.set(JoinResult(ErrorCode.not_coordinator, member.member_id))
                member.join_reply = None
            if member.sync_reply is not None:
                member.sync_reply.set(SyncResult(ErrorCode.not_coordinator))
                member.sync_reply = None
        self._cancel_deadlines(group)

    def delete(self, group_id: str, wall_ms: int) -> None:
        """A deleted (or expired) group turns Dead and is forgotten."""
        group = self.groups.pop(group_id)
        group.transition(GroupState.DEAD, wall_ms)
        self._cancel_deadlines(group)

    def keep_alive(self, group: ConsumerGroup, member_id: str, now: Instant) -> None:
        """A request of the member that counts as a heartbeat (OffsetCommit)."""
        member = group.members.get(member_id)
        if member is not None:
            self._set_session_deadline(group, member, now.ms + member.session_timeout_ms)

    # -- JoinGroup -------------------------------------------------------------------------

    def join(
        self, request: JoinRequest, answer: Answer[JoinResult], now: Instant
    ) -> JoinResult | None:
        """The JoinGroup answer now, or None when `answer` gets it later."""
        member_id = request.member_id
        if not (
            self.config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.get(request.group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = ConsumerGroup(request.group_id)
        if group.is_(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if group.consumer is not None:
            if group.consumer.members:
                # Classic members do not join a group of the consumer protocol (KIP-848).
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            # An empty consumer group becomes a classic one, as in Kafka.
            group.consumer = None
            group.protocol_type = None
        if not group.supports_protocols(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        self.groups.setdefault(request.group_id, group)
        if not member_id:
            return self._join_unknown_member(group, request, answer, now)
        return self._join_known_member(group, request, answer, now)

    def _join_unknown_member(
        self, group: ConsumerGroup, request: JoinRequest, answer: Answer[JoinResult], now: Instant
    ) -> JoinResult | None:
        instance_id = request.group_instance_id
        new_id = self._new_member_id(instance_id or request.client_id)
        if instance_id is not None:
            if instance_id in group.static_members:
                return self._rejoin_static_member(group, request, new_id, answer, now)
        elif request.require_known_member_id:
            # KIP-394: hand out the id first so a client that loses this answer leaves no
            # orphan member behind to wait out a session timeout.
            group.pending_members[new_id] = now.ms + request.session_timeout_ms
            self.deadlines.schedule(
                DeadlineKey(DeadlineKind.PENDING_MEMBER, group.group_id, new_id),
                group.pending_members[new_id],
            )
            return JoinResult(ErrorCode.member_id_required, new_id)
        self._add_member_and_rebalance(group, new_id, request, answer, now)
        return None

    def _join_known_member(
        self, group: ConsumerGroup, request: JoinRequest, answer: Answer[JoinResult], now: Instant
    ) -> JoinResult | None:
        member_id = request.member_id
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, request, answer, now)
            return None
        if group.is_static_member_fenced(member_id, request.group_instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY, GroupState.DEAD):
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        if group.is_(GroupState.COMPLETING_REBALANCE) and member.matches(request.protocols):
            # A lost JoinGroup answer: give the same one again.
            return self._join_result(group, member, member_id == group.leader_id)
        if (
            group.is_(GroupState.STABLE)
            and member_id != group.leader_id
            and member.matches(request.protocols)
        ):
            return self._join_result(group, member, False)
        self._update_member_and_rebalance(group, member, request, answer, now)
        return None

    def _add_member_and_rebalance(
        self,
        group: ConsumerGroup,
        member_id: str,
        request: JoinRequest,
        answer: Answer[JoinResult],
        now: Instant,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            join_reply=answer,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.in_initial_delay:
            group.new_member_added = True
        group.add(member)
        self.deadlines.cancel(DeadlineKey(DeadlineKind.PENDING_MEMBER, group.group_id, member_id))
        self._set_session_deadline(group, member, now.ms + request.session_timeout_ms)
        logger.info(
            "group %s: member %s joins", group.group_id, member_id, extra={"group": group.group_id}
        )
        self._rebalance_for_join(group, now)

    def _update_member_and_rebalance(
        self,
        group: ConsumerGroup,
        member: Member,
        request: JoinRequest,
        answer: Answer[JoinResult],
        now: Instant,
    ) -> None:
        if member.join_reply is not None:
            # A second JoinGroup while the first waits: the newer one is the one answered.
            member.join_reply.set(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_reply = answer
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        self._rebalance_for_join(group, now)

    def _rejoin_static_member(
        self,
        group: ConsumerGroup,
        request: JoinRequest,
        new_id: str,
        answer: Answer[JoinResult],
        now: Instant,
    ) -> JoinResult | None:
        """KIP-345: a known group.instance.id with a new member id takes over its old place."""
        instance_id = request.group_instance_id
        if instance_id is None:
            raise ValueError("a static member rejoins with its group.instance.id")
        old_id = group.static_members[instance_id]
        old_leader = group.leader_id
        member = group.members[old_id]
        protocols_unchanged = member.matches(request.protocols)
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.deadlines.cancel(DeadlineKey(DeadlineKind.SESSION, group.group_id, old_id))
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.protocols = request.protocols
        self._set_session_deadline(group, member, now.ms + request.session_timeout_ms)
        logger.info(
            "group %s: static member %s rejoins as %s (was %s)",
            group.group_id,
            instance_id,
            new_id,
            old_id,
            extra={"group": group.group_id},
        )
        if group.is_(GroupState.STABLE) and protocols_unchanged:
            # No rebalance: the member gets its old assignment from SyncGroup. The old leader
            # id is returned so a rejoining leader does not compute an assignment that a
            # stable group would never distribute.
            self._store_group(group)
            return JoinResult(
                error=ErrorCode.none,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=old_leader or "",
            )
        member.join_reply = answer
        self._rebalance_for_join(group, now)
        return None

    def _rebalance_for_join(self, group: ConsumerGroup, now: Instant) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now)
        elif group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now)

    def _join_result(self, group: ConsumerGroup, member: Member, as_leader: bool) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if as_leader:
            protocol = group.protocol_name or ""
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol))
                for m in group.members.values()
            )
        return JoinResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    # -- SyncGroup -------------------------------------------------------------------------

    def sync(
        self, request: SyncRequest, answer: Answer[SyncResult], now: Instant
    ) -> SyncResult | None:
        """The SyncGroup answer now, or None when `answer` gets it later."""
        group = self.groups.get(request.group_id)
        if group is None or group.consumer is not None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(GroupState.DEAD):
            return SyncResult(ErrorCode.coordinator_not_available)
        member_id = request.member_id
        if group.is_static_member_fenced(member_id, request.group_instance_id):
            return SyncResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if request.generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.is_(GroupState.EMPTY):
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._set_session_deadline(group, member, now.ms + member.session_timeout_ms)
        group.pending_sync.discard(member_id)
        if group.is_(GroupState.STABLE):
            return self._sync_result(group, member)
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_reply = answer
        stored = (group.group_id, group.generation_id)
        if member_id == group.leader_id and stored not in self._storing:
            for m in group.members.values():
                m.assignment = request.assignments.get(m.member_id, b"")
            self._set_rebalance_deadline(group, None)
            group.pending_sync.clear()
            # As Kafka: the group turns Stable (and members get their assignment) once its
            # metadata with the assignment is committed to `__consumer_offsets`.
            self._storing.add(stored)
            self._store_assignment(group)
        return None

    def assignment_stored(
        self, group: ConsumerGroup, generation: int, error: ErrorCode, now: Instant
    ) -> None:
        """The append `store_assignment` asked for of `generation` ended with `error`."""
        self._storing.discard((group.group_id, generation))
        if (
            self.groups.get(group.group_id) is not group
            or group.generation_id != generation
            or not group.is_(GroupState.COMPLETING_REBALANCE)
        ):
            return  # the group moved on (or is no longer coordinated here) meanwhile
        if error == ErrorCode.none:
            self._complete_sync(group, now)
            return
        logger.info(
            "group %s: cannot store the assignment of generation %d (%s); rebalancing",
            group.group_id,
            generation,
            error.name,
            extra={"group": group.group_id},
        )
        for m in group.members.values():
            m.assignment = b""
            self._answer_sync(group, m, SyncResult(error))
        self._prepare_rebalance(group, now)

    def _complete_sync(self, group: ConsumerGroup, now: Instant) -> None:
        group.transition(GroupState.STABLE, now.wall_ms)
        for m in group.members.values():
            if m.sync_reply is not None:
                reply = m.sync_reply
                m.sync_reply = None
                self._set_session_deadline(group, m, now.ms + m.session_timeout_ms)
                reply.set(self._sync_result(group, m))
        logger.info(
            "group %s is stable at generation %d",
            group.group_id,
            group.generation_id,
            extra={"group": group.group_id},
        )

    def _sync_result(self, group: ConsumerGroup, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
        )

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now: Instant,
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._set_session_deadline(group, member, now.ms + member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]], now: Instant
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, group instance id) leaving)."""
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(
                members
            )
        return ErrorCode.none, [self._leave_one(group, m, i, now) for m, i in members]

    def _leave_one(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, now: Instant
    ) -> ErrorCode:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self.deadlines.cancel(
                DeadlineKey(DeadlineKind.PENDING_MEMBER, group.group_id, member_id)
            )
            self._maybe_complete_join(group, now)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        logger.info(
            "group %s: member %s leaves", group.group_id, member_id, extra={"group": group.group_id}
        )
        self._remove_member_and_update(group, member, now)
        return ErrorCode.none

    # -- deadlines -------------------------------------------------------------------------

    def next_deadline_ms(self) -> float | None:
        return self.deadlines.earliest()

    def tick(self, now: Instant) -> None:
        """Fire every deadline at or before `now`."""
        due: dict[str, list[DeadlineKey]] = {}
        for key in self.deadlines.pop_due(now.ms):
            due.setdefault(key.group_id, []).append(key)
        for group_id, keys in due.items():
            group = self.groups.get(group_id)
            if group is not None:
                self._fire(group, sorted(keys, key=lambda k: k.kind), now)

    def _fire(self, group: ConsumerGroup, keys: list[DeadlineKey], now: Instant) -> None:
        for key in keys:
            if key.kind is DeadlineKind.PENDING_MEMBER:
                deadline = group.pending_members.get(key.member_id)
                if deadline is None:
                    continue
                if deadline > now.ms:
                    self.deadlines.schedule(key, deadline)
                    continue
                del group.pending_members[key.member_id]
                logger.info(
                    "pending member %s of group %s expired",
                    key.member_id,
                    group.group_id,
                    extra={"group": group.group_id},
                )
                self._maybe_complete_join(group, now)
            elif key.kind is DeadlineKind.SESSION:
                member = group.members.get(key.member_id)
                if member is None or member.is_awaiting_join or member.is_awaiting_sync:
                    continue  # Kafka keeps members alive while they wait on the group
                if member.session_deadline_ms > now.ms:
                    self.deadlines.schedule(key, member.session_deadline_ms)
                    continue
                logger.info(
                    "member %s of group %s failed to heartbeat within %d ms; removing it",
                    member.member_id,
                    group.group_id,
                    member.session_timeout_ms,
                    extra={"group": group.group_id},
                )
                self._remove_member_and_update(group, member, now)
        # Also a rebalance deadline that the expiries above moved to `now`.
        if group.rebalance_deadline_ms is not None and group.rebalance_deadline_ms <= now.ms:
            self._set_rebalance_deadline(group, None)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._on_join_deadline(group, now)
            elif group.is_(GroupState.COMPLETING_REBALANCE):
                self._on_sync_deadline(group, now)

    def _on_join_deadline(self, group: ConsumerGroup, now: Instant) -> None:
        if group.in_initial_delay:
            if group.new_member_added and group.initial_delay_remaining_ms > 0:
                delay = min(
                    self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms
                )
                group.initial_delay_remaining_ms -= delay
                group.new_member_added = False
                self._set_rebalance_deadline(group, now.ms + delay)
                return
            group.in_initial_delay = False
        self._complete_join(group, now)

    def _on_sync_deadline(self, group: ConsumerGroup, now: Instant) -> None:
        missing = [m for m in group.pending_sync if m in group.members]
        logger.info(
            "group %s: members %s did not sync within the rebalance timeout",
            group.group_id,
            missing,
            extra={"group": group.group_id},
        )
        for member_id in missing:
            self._remove(group, member_id)
        self._prepare_rebalance(group, now)

    def _set_rebalance_deadline(self, group: ConsumerGroup, deadline_ms: float | None) -> None:
        group.rebalance_deadline_ms = deadline_ms
        key = DeadlineKey(DeadlineKind.REBALANCE, group.group_id)
        if deadline_ms is None:
            self.deadlines.cancel(key)
        else:
            self.deadlines.schedule(key, deadline_ms)

    def _set_session_deadline(
        self, group: ConsumerGroup, member: Member, deadline_ms: float
    ) -> None:
        member.session_deadline_ms = deadline_ms
        self._arm_session(group, member)

    def _arm_session(self, group: ConsumerGroup, member: Member) -> None:
        # A member's session also runs while it waits on the group: its deadline then fires
        # to no effect, and is armed again when the member stops waiting.
        self.deadlines.schedule(
            DeadlineKey(DeadlineKind.SESSION, group.group_id, member.member_id),
            member.session_deadline_ms,
        )

    def _cancel_deadlines(self, group: ConsumerGroup) -> None:
        group_id = group.group_id
        self.deadlines.cancel(DeadlineKey(DeadlineKind.REBALANCE, group_id))
        for member_id in group.pending_members:
            self.deadlines.cancel(DeadlineKey(DeadlineKind.PENDING_MEMBER, group_id, member_id))
        for member_id in group.members:
            self.deadlines.cancel(DeadlineKey(DeadlineKind.SESSION, group_id, member_id))

    # -- transitions -----------------------------------------------------------------------

    def _prepare_rebalance(self, group: ConsumerGroup, now: Instant) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                self._answer_sync(group, member, SyncResult(ErrorCode.rebalance_in_progress))
        group.pending_sync.clear()
        if group.is_(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.max_rebalance_timeout_ms() - delay, 0)
            self._set_rebalance_deadline(group, now.ms + delay)
        else:
            group.in_initial_delay = False
            self._set_rebalance_deadline(group, now.ms + group.max_rebalance_timeout_ms())
        group.transition(GroupState.PREPARING_REBALANCE, now.wall_ms)
        self._maybe_complete_join(group, now)

    def _maybe_complete_join(self, group: ConsumerGroup, now: Instant) -> None:
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and not group.in_initial_delay
            and group.all_members_joined()
        ):
            self._complete_join(group, now)

    def _complete_join(self, group: ConsumerGroup, now: Instant) -> None:
        for member in [m for m in group.members.values() if not m.is_awaiting_join]:
            logger.info(
                "group %s: member %s did not rejoin in time; removing it",
                group.group_id,
                member.member_id,
                extra={"group": group.group_id},
            )
            self._remove(group, member.member_id)
        self._set_rebalance_deadline(group, None)
        group.in_initial_delay = False
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, now.wall_ms)
            logger.info(
                "group %s is empty at generation %d",
                group.group_id,
                group.generation_id,
                extra={"group": group.group_id},
            )
            self._store_group(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now.wall_ms)
        group.pending_sync = set(group.members)
        self._set_rebalance_deadline(group, now.ms + group.max_rebalance_timeout_ms())
        logger.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
            extra={"group": group.group_id},
        )
        for member in group.members.values():
            reply = member.join_reply
            member.join_reply = None
            self._set_session_deadline(group, member, now.ms + member.session_timeout_ms)
            if reply is not None:
                reply.set(self._join_result(group, member, member.member_id == group.leader_id))

    def _remove_member_and_update(self, group: ConsumerGroup, member: Member, now: Instant) -> None:
        if member.join_reply is not None:
            member.join_reply.set(JoinResult(ErrorCode.unknown_member_id, member.member_id))
            member.join_reply = None
        self._answer_sync(group, member, SyncResult(ErrorCode.unknown_member_id))
        self._remove(group, member.member_id)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now)

    def _answer_sync(self, group: ConsumerGroup, member: Member, result: SyncResult) -> None:
        if member.sync_reply is not None:
            member.sync_reply.set(result)
            member.sync_reply = None
            self._arm_session(group, member)

    def _remove(self, group: ConsumerGroup, member_id: str) -> None:
        if group.remove(member_id) is not None:
            self.deadlines.cancel(DeadlineKey(DeadlineKind.SESSION, group.group_id, member_id))
