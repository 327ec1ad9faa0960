"""The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

An assignor is a pure function from the members' subscriptions, the subscribed topics'
partition counts and the previous target assignment to a new target assignment. Topics are
named by id (as the protocol does); a member's assignment maps topic id to partitions.

- `uniform` (Kafka's default): every partition of a subscribed topic goes to one member
  subscribed to it; members keep what they had as far as balance allows (sticky), and no
  partition can move to a member that would then have fewer than the giver minus one
  (balanced). With identical subscriptions the counts differ by at most one.
- `range`: for each topic, its subscribers in member-id order get consecutive ranges of
  partitions, the first `partitions % members` one more. Deterministic, not sticky.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[uuid.UUID, set[int]]

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member: the subscribed topics that exist, and its
    previous target assignment (for stickiness)."""

    topic_ids: frozenset[uuid.UUID]
    previous: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        """The target assignment of every member of `members` (empty for none assigned)."""


class UniformAssignor:
    name = UNIFORM

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        order = sorted(members)
        owner: dict[tuple[uuid.UUID, int], str] = {}
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in order}
        # 1. Keep every previous partition that still exists and is still subscribed to.
        for member_id in order:
            subscription = members[member_id]
            for topic_id, previous in sorted(subscription.previous.items()):
                if topic_id not in subscription.topic_ids:
                    continue
                for partition in sorted(previous):
                    tp = (topic_id, partition)
                    if partition < partitions.get(topic_id, 0) and tp not in owner:
                        owner[tp] = member_id
                        owned[member_id].add(tp)
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in order:
            for topic_id in members[member_id].topic_ids:
                if topic_id in partitions:
                    subscribers.setdefault(topic_id, []).append(member_id)
        # 2. Members with identical subscriptions share a quota: shed what is over it.
        if order and len({frozenset(members[m].topic_ids & partitions.keys()) for m in order}) == 1:
            total = sum(partitions[t] for t in subscribers)
            base, extra = divmod(total, len(order))
            # The members already holding the most keep the `extra` larger shares.
            by_size = sorted(order, key=lambda m: (-len(owned[m]), m))
            quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_size)}
            for member_id in order:
                surplus = sorted(owned[member_id])[quota[member_id] :]
                for tp in surplus:
                    owned[member_id].discard(tp)
                    del owner[tp]
        # 3. Every partition without an owner goes to its least loaded subscriber.
        for topic_id in sorted(subscribers):
            for partition in range(partitions[topic_id]):
                tp = (topic_id, partition)
                if tp in owner:
                    continue
                chosen = min(subscribers[topic_id], key=lambda m: (len(owned[m]), m))
                owner[tp] = chosen
                owned[chosen].add(tp)
        # 4. Move partitions from a member to a subscriber holding two or more fewer,
        # until none can move (each move lowers the sum of squared counts: it ends).
        moved = True
        while moved:
            moved = False
            for tp in sorted(owner):
                giver = owner[tp]
                taker = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[taker]) + 1 < len(owned[giver]):
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    owner[tp] = taker
                    moved = True
        return {member_id: _grouped(owned[member_id]) for member_id in order}


class RangeAssignor:
    name = RANGE

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        result: dict[str, Assignment] = {member_id: {} for member_id in members}
        for topic_id in sorted(partitions):
            subscribers = sorted(m for m, s in members.items() if topic_id in s.topic_ids)
            if not subscribers:
                continue
            base, extra = divmod(partitions[topic_id], len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                count = base + (1 if i < extra else 0)
                if count:
                    result[member_id][topic_id] = set(range(start, start + count))
                start += count
        return result


def _grouped(owned: set[tuple[uuid.UUID, int]]) -> Assignment:
    assignment: Assignment = {}
    for topic_id, partition in owned:
        assignment.setdefault(topic_id, set()).add(partition)
    return assignment


ASSIGNORS: dict[str, Assignor] = {UNIFORM: UniformAssignor(), RANGE: RangeAssignor()}


def assignors_named(names: list[str]) -> dict[str, Assignor]:
    """The assignors of `group.consumer.assignors`, in order (the first is the default);
    ValueError names an unknown one and the known ones."""
    chosen: dict[str, Assignor] = {}
    for name in names:
        assignor = ASSIGNORS.get(name.strip().lower())
        if assignor is None:
            raise ValueError(
                f"unknown consumer group assignor {name!r}; known: {', '.join(ASSIGNORS)}"
            )
        chosen[assignor.name] = assignor
    if not chosen:
        raise ValueError("group.consumer.assignors names no assignor")
    return chosen
