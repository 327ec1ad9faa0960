"""Share groups' membership (KIP-932), kept by the group's coordinator: members, their
subscriptions, epochs and assignments, given the time by the caller.

Every member may be given any partition of the topics it subscribes to; the assignment only
spreads the load (Kafka's SimpleAssignor): with at least as many partitions as subscribers a
topic's partitions are dealt out round robin, with more subscribers each partition goes to
several of them. Records, not partitions, are what members never share, and that is the
share-partitions' business. Nothing here is persisted: after a coordinator change members
are unknown and rejoin (UNKNOWN_MEMBER_ID), which costs no record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

LEAVE_EPOCH = -1
JOIN_EPOCH = 0

#: topic name -> partition count, for the topics that exist.
PartitionCounts = Callable[[], Mapping[str, int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    member_epoch: int = 0
    deadline_ms: float = 0.0
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # (topic, partition count) of the subscribed topics the assignment was made for.
    assigned_for: tuple[tuple[str, int], ...] = ()

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        return "Stable"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    # topic -> partitions; None when the member's assignment did not change.
    assignment: dict[str, tuple[int, ...]] | None = None


def assign(
    members: Mapping[str, tuple[str, ...]], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, tuple[int, ...]]]:
    """member id -> topic -> partitions, spreading each topic over its subscribers."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    topics = sorted({t for subscribed in members.values() for t in subscribed})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        subscribers = sorted(m for m, subscribed in members.items() if topic in subscribed)
        if count <= 0 or not subscribers:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(topic, []).append(p)
        else:
            for i, m in enumerate(subscribers):
                out[m].setdefault(topic, []).append(i % count)
    return {m: {t: tuple(ps) for t, ps in topics_.items()} for m, topics_ in out.items()}


class ShareGroups:
    """The share groups this broker coordinates (the caller checks coordination)."""

    def __init__(self, partition_counts: PartitionCounts) -> None:
        self.groups: dict[str, ShareGroup] = {}
        self.partition_counts = partition_counts
        # (group, member) whose session timed out, until the caller tells the partition
        # leaders (whose share sessions of the member then close, releasing its records).
        # A member that leaves is not among them: its client may still send its final
        # acknowledgements (librdkafka's close leaves first), so its share sessions end as
        # a client's do (final epoch, connection closed, idle).
        self.departed: list[tuple[str, str]] = []

    def take_departed(self) -> list[tuple[str, str]]:
        departed, self.departed = self.departed, []
        return departed

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: an empty share group goes (its persisted state is the caller's)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: tuple[str, ...] | None,
        client_id: str,
        client_host: str,
        now_ms: float,
        session_timeout_ms: int,
    ) -> HeartbeatResult:
        if not member_id:
            return HeartbeatResult(
                ErrorCode.invalid_request, "MemberId must be set: the client chooses it"
            )
        group = self.groups.get(group_id)
        if group is not None:
            self.expire(group, now_ms)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                del group.members[member_id]
                group.group_epoch += 1
            return HeartbeatResult(ErrorCode.none, None, member_id, LEAVE_EPOCH)
        if member_epoch < 0:
            return HeartbeatResult(
                ErrorCode.invalid_request, f"MemberEpoch {member_epoch} is not valid"
            )
        member = group.members.get(member_id) if group is not None else None
        if member_epoch == JOIN_EPOCH:
            if not subscribed:
                return HeartbeatResult(
                    ErrorCode.invalid_request,
                    "SubscribedTopicNames must be non-empty when joining",
                )
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            if member is None:
                member = ShareMember(member_id, client_id, client_host, rack_id, subscribed)
                group.members[member_id] = member
                group.group_epoch += 1
            member.member_epoch = JOIN_EPOCH  # rejoining: its assignment is sent again
        else:
            if member is None or group is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    f"member {member_id} is not in share group {group_id}: rejoin with epoch 0",
                )
            if member_epoch != member.member_epoch:
                return HeartbeatResult(
                    ErrorCode.fenced_member_epoch,
                    f"member epoch {member_epoch} is not the member's {member.member_epoch}: "
                    "rejoin with epoch 0",
                )
        if subscribed is not None and tuple(sorted(subscribed)) != tuple(sorted(member.subscribed)):
            member.subscribed = tuple(subscribed)
            group.group_epoch += 1
        member.rack_id = rack_id if rack_id is not None else member.rack_id
        member.deadline_ms = now_ms + session_timeout_ms
        self._reassign_if_needed(group)
        changed = member.member_epoch != group.assignment_epoch
        member.member_epoch = group.assignment_epoch
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member_id,
            member.member_epoch,
            dict(member.assignment) if changed else None,
        )

    def expire(self, group: ShareGroup, now_ms: float) -> None:
        """Members whose session timed out leave the group."""
        dead = [m for m, member in group.members.items() if member.deadline_ms <= now_ms]
        for member_id in dead:
            del group.members[member_id]
            self.departed.append((group.group_id, member_id))
        if dead:
            group.group_epoch += 1

    def expire_all(self, now_ms: float) -> None:
        for group in self.groups.values():
            self.expire(group, now_ms)
            self._reassign_if_needed(group)

    def _reassign_if_needed(self, group: ShareGroup) -> None:
        counts = self.partition_counts()
        assigned_for = tuple(sorted((t, counts.get(t, 0)) for t in group.subscribed_topics()))
        if assigned_for != group.assigned_for:
            group.assigned_for = assigned_for
            group.group_epoch += 1
        if group.assignment_epoch == group.group_epoch:
            return
        assignments = assign({m.member_id: m.subscribed for m in group.members.values()}, counts)
        for member_id, assignment in assignments.items():
            group.members[member_id].assignment = assignment
        group.assignment_epoch = group.group_epoch
