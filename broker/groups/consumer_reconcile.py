"""Reconciliation of a consumer group member towards its target assignment, one heartbeat at
a time (Kafka's CurrentAssignmentBuilder): partitions the target no longer has are revoked
first, and partitions another member still holds are given only once it releases them.
"""

from __future__ import annotations

import logging

from raftka.broker.groups.assignors import Assignment
from raftka.broker.groups.consumer_state import (
    ConsumerMember,
    ConsumerProtocolGroup,
    MemberState,
    TopicPartitions,
)

logger = logging.getLogger("raftka.groups")


def _owns_any(owned: TopicPartitions | None, partitions: Assignment) -> bool:
    """Does the member (by its reported owned partitions) still hold any of `partitions`?
    Not reporting them (None) counts as still holding them, as in Kafka."""
    if owned is None:
        return True
    return any(set(parts) & partitions.get(t, set()) for t, parts in owned.items())


def reconcile(
    group_id: str,
    state: ConsumerProtocolGroup,
    member: ConsumerMember,
    owned: TopicPartitions | None,
) -> None:
    """Move `member` one step towards its target, given the partitions its heartbeat
    reports as owned (None: not reported)."""
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
    next_assignment(state, member, epoch, owned)
    state.add_owned(member)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        logger.debug(
            "group %s: member %s must revoke %s",
            group_id,
            member.member_id,
            member.pending_revocation,
            extra={"group": group_id},
        )


def next_assignment(
    state: ConsumerProtocolGroup,
    member: ConsumerMember,
    epoch: int,
    owned: TopicPartitions | None,
) -> None:
    """The member's next assignment and state: revocations pending while it still owns
    revoked partitions, else its kept and free partitions at the assignment epoch."""
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
