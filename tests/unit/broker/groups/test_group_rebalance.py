"""The rebalance state machine driven directly: every request and tick names its `Instant`,
no trio, no clock; stores are recorded and acknowledged by the test."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.groups.config import CoordinatorConfig
from raftka.broker.groups.group import ConsumerGroup, GroupState, JoinResult, SyncResult
from raftka.broker.groups.rebalance import (
    DeadlineKey,
    DeadlineKind,
    Instant,
    JoinRequest,
    RebalanceMachine,
    SyncRequest,
)

E = ErrorCode
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
CONFIG = CoordinatorConfig(initial_rebalance_delay_ms=DELAY_MS)

T = TypeVar("T")


def at(ms: float) -> Instant:
    return Instant(ms=ms, wall_ms=1_700_000_000_000 + int(ms))


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


@dataclass
class Box(Generic[T]):
    """An `Answer` that records what it was given."""

    values: list[T] = field(default_factory=list)

    def set(self, value: T) -> None:
        self.values.append(value)

    @property
    def value(self) -> T:
        assert len(self.values) == 1, self.values
        return self.values[0]


class Machine:
    """A RebalanceMachine with recorded stores and deterministic member ids."""

    def __init__(self, config: CoordinatorConfig = CONFIG) -> None:
        self.stored_groups: list[tuple[str, GroupState, int]] = []
        self.stored_assignments: list[tuple[ConsumerGroup, int]] = []
        self.earlier = 0
        ids = itertools.count(1)
        self.m = RebalanceMachine(
            config,
            store_group=lambda g: self.stored_groups.append((g.group_id, g.state, g.generation_id)),
            store_assignment=lambda g: self.stored_assignments.append((g, g.generation_id)),
            on_earlier_deadline=self._on_earlier,
            new_member_id=lambda prefix: f"{prefix}-{next(ids)}",
        )

    def _on_earlier(self) -> None:
        self.earlier += 1

    def join(
        self,
        now: float,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        known_id_required: bool = False,
    ) -> tuple[JoinResult | None, Box[JoinResult]]:
        box: Box[JoinResult] = Box()
        request = JoinRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            client_id="client",
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type="consumer",
            protocols=protocols if protocols is not None else [("range", subscription("t"))],
            require_known_member_id=known_id_required,
        )
        return self.m.join(request, box, at(now)), box

    def sync(
        self,
        now: float,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> tuple[SyncResult | None, Box[SyncResult]]:
        box: Box[SyncResult] = Box()
        request = SyncRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=None,
            protocol_name=None,
            assignments=assignments or {},
        )
        return self.m.sync(request, box, at(now)), box

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.m.groups[group_id]

    def tick_until(self, end_ms: float) -> list[float]:
        """Fire every deadline up to `end_ms` at its own time; returns the times fired."""
        fired = []
        while (deadline := self.m.next_deadline_ms()) is not None and deadline <= end_ms:
            self.m.tick(at(deadline))
            fired.append(deadline)
        return fired

    def tick_until_answered(self, *boxes: Box[JoinResult]) -> float:
        """Fire deadlines one by one until every box has its answer; returns the time."""
        now = 0.0
        while not all(b.values for b in boxes):
            deadline = self.m.next_deadline_ms()
            assert deadline is not None, "nothing left to fire"
            now = deadline
            self.m.tick(at(now))
        return now

    def stable(self, now: float, members: int, **kwargs: object) -> tuple[list[str], float]:
        """`members` join at `now` and sync once their join completes; returns their ids
        (leader first) and when the group became stable."""
        boxes = [self.join(now, **kwargs)[1] for _ in range(members)]  # type: ignore[arg-type]
        now = self.tick_until_answered(*boxes)
        results = [b.value for b in boxes]
        leader = results[0].leader
        ids = [leader] + [r.member_id for r in results if r.member_id != leader]
        generation = results[0].generation_id
        for member_id in ids:
            self.sync(now, member_id, generation, {m: m.encode() for m in ids})
        group, stored_generation = self.stored_assignments[-1]
        self.m.assignment_stored(group, stored_generation, E.none, at(now))
        assert self.group().state == GroupState.STABLE
        return ids, now


# -- join → completing → stable ----------------------------------------------------------------


def test_join_completes_after_the_initial_delay_then_sync_makes_the_group_stable() -> None:
    m = Machine()
    immediate, box = m.join(0)
    assert immediate is None and box.values == []
    assert m.group().state == GroupState.PREPARING_REBALANCE
    assert m.m.next_deadline_ms() == DELAY_MS
    assert m.tick_until(DELAY_MS - 1) == []
    m.tick_until(DELAY_MS)
    joined = box.value
    assert joined.error == E.none and joined.generation_id == 1
    assert joined.leader == joined.member_id == "client-1"
    assert [x.member_id for x in joined.members] == ["client-1"]
    assert m.group().state == GroupState.COMPLETING_REBALANCE

    immediate_sync, sync_box = m.sync(DELAY_MS + 5, "client-1", 1, {"client-1": b"a"})
    assert immediate_sync is None
    # The assignment is given only once it is stored.
    assert [gen for _, gen in m.stored_assignments] == [1]
    assert sync_box.values == [] and m.group().state == GroupState.COMPLETING_REBALANCE
    m.m.assignment_stored(m.group(), 1, E.none, at(DELAY_MS + 10))
    assert sync_box.value == SyncResult(E.none, "consumer", "range", b"a")
    assert m.group().state == GroupState.STABLE
    assert m.group().current_state_timestamp_ms == at(DELAY_MS + 10).wall_ms
    # Stable: SyncGroup and Heartbeat answer at once.
    again, _ = m.sync(DELAY_MS + 20, "client-1", 1)
    assert again is not None and again.assignment == b"a"
    assert m.m.heartbeat("g", 1, "client-1", None, at(DELAY_MS + 30)) == E.none


def test_a_failed_assignment_store_answers_the_error_and_rebalances() -> None:
    m = Machine()
    _, box = m.join(0)
    m.tick_until(DELAY_MS)
    _, sync_box = m.sync(DELAY_MS, "client-1", 1, {"client-1": b"a"})
    m.m.assignment_stored(m.group(), 1, E.not_coordinator, at(DELAY_MS + 1))
    assert sync_box.value == SyncResult(E.not_coordinator)
    assert m.group().state == GroupState.PREPARING_REBALANCE
    assert m.group().members["client-1"].assignment == b""


def test_a_store_reported_after_the_group_moved_on_changes_nothing() -> None:
    m = Machine()
    m.join(0)
    m.tick_until(DELAY_MS)
    m.sync(DELAY_MS, "client-1", 1, {"client-1": b"a"})
    group, generation = m.stored_assignments[-1]
    m.m.leave("g", [("client-1", None)], at(DELAY_MS + 1))
    assert m.group().state == GroupState.EMPTY
    m.m.assignment_stored(group, generation, E.none, at(DELAY_MS + 2))
    assert m.group().state == GroupState.EMPTY
    assert m.stored_groups[-1] == ("g", GroupState.EMPTY, 2)


# -- initial rebalance delay -------------------------------------------------------------------


def test_initial_delay_extends_while_members_keep_joining() -> None:
    m = Machine()
    _, a = m.join(0)
    _, b = m.join(DELAY_MS - 500)
    # b arrived in the delay: it is extended by another delay (up to the rebalance timeout).
    assert m.tick_until(DELAY_MS) == [DELAY_MS]
    assert a.values == [] and b.values == []
    assert m.m.next_deadline_ms() == 2 * DELAY_MS
    m.tick_until(2 * DELAY_MS)
    assert a.value.generation_id == b.value.generation_id == 1
    assert {len(a.value.members), len(b.value.members)} == {0, 2}


def test_initial_delay_is_not_extended_beyond_the_rebalance_timeout() -> None:
    m = Machine()
    rebalance_ms = DELAY_MS + 1000
    boxes = [m.join(0, rebalance_ms=rebalance_ms)[1]]
    for now in range(1000, 10 * DELAY_MS, 1000):
        boxes.append(m.join(now, rebalance_ms=rebalance_ms)[1])
        m.tick_until(now)
        if all(b.values for b in boxes):
            break
    # The delay ran DELAY_MS, then the remaining 1000 ms of the rebalance timeout.
    assert all(b.value.error == E.none for b in boxes)
    assert m.group().generation_id == 1
    assert len(boxes) == (DELAY_MS + 1000) // 1000 + 1


# -- session timeout ---------------------------------------------------------------------------


def test_two_members_joining_together_extend_the_initial_delay_once() -> None:
    m = Machine()
    _, a = m.join(0)
    _, b = m.join(0)
    assert m.tick_until_answered(a, b) == 2 * DELAY_MS


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    m = Machine()
    (a, b), t = m.stable(0, 2)
    for now in range(int(t) + 1000, int(t) + SESSION_MS, 1000):
        assert m.m.heartbeat("g", 1, a, None, at(now)) == E.none
        m.tick_until(now)
    # b's session ends SESSION_MS after its SyncGroup.
    assert m.m.next_deadline_ms() == t + SESSION_MS
    m.tick_until(t + SESSION_MS)
    assert b not in m.group().members
    assert m.group().state == GroupState.PREPARING_REBALANCE
    assert m.m.heartbeat("g", 1, a, None, at(t + SESSION_MS)) == E.rebalance_in_progress
    _, box = m.join(t + SESSION_MS + 1, a)
    assert box.value.generation_id == 2 and [x.member_id for x in box.value.members] == [a]


def test_a_heartbeat_moves_the_session_deadline_without_waking_the_timer() -> None:
    m = Machine()
    (a,), t = m.stable(0, 1)
    earlier = m.earlier
    assert m.m.heartbeat("g", 1, a, None, at(t + 5000)) == E.none
    assert m.earlier == earlier  # later than before: the timer finds it when it wakes
    # The old deadline surfaces and finds the member alive.
    assert m.m.next_deadline_ms() == t + 5000 + SESSION_MS
    m.tick_until(t + SESSION_MS)
    assert a in m.group().members
    m.tick_until(t + 5000 + SESSION_MS)
    assert a not in m.group().members


def test_a_member_waiting_for_the_assignment_outlives_its_session() -> None:
    m = Machine()
    _, a = m.join(0, session_ms=6000)
    _, b = m.join(0, session_ms=6000)
    t = m.tick_until_answered(a, b)
    leader = a.value.leader
    follower = next(x.value.member_id for x in (a, b) if x.value.member_id != leader)
    _, waiting = m.sync(t, follower, 1)
    for now in range(int(t) + 1000, int(t) + 9000, 1000):  # only the leader heartbeats
        assert m.m.heartbeat("g", 1, leader, None, at(now)) == E.none
        m.tick_until(now)
    assert follower in m.group().members and waiting.values == []
    m.sync(t + 9000, leader, 1, {leader: b"L", follower: b"F"})
    m.m.assignment_stored(m.group(), 1, E.none, at(t + 9000))
    assert waiting.value.assignment == b"F"
    # Its session runs again from the answer.
    assert m.group().members[follower].session_deadline_ms == t + 9000 + 6000
    m.tick_until(t + 9000 + 6000 - 1)
    assert follower in m.group().members


# -- rebalance timeout -------------------------------------------------------------------------


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() -> None:
    m = Machine()
    (a, b), t = m.stable(0, 2)
    start = t + 100
    _, box = m.join(start, a)  # the leader rejoins: a rebalance starts
    assert m.group().state == GroupState.PREPARING_REBALANCE
    now = start
    while box.values == []:  # b keeps heartbeating but never rejoins; a waits past its session
        now += 1000
        m.m.heartbeat("g", 1, b, None, at(now))
        m.tick_until(now)
    assert now == pytest.approx(start + REBALANCE_MS, abs=1000)
    assert list(m.group().members) == [a]
    assert box.value.generation_id == 2
    assert m.m.heartbeat("g", 2, b, None, at(now)) == E.unknown_member_id


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    m = Machine()
    _, a = m.join(0, session_ms=2 * REBALANCE_MS)
    _, b = m.join(0, session_ms=2 * REBALANCE_MS)
    t = m.tick_until_answered(a, b)
    follower = next(x.value.member_id for x in (a, b) if not x.value.members)
    _, waiting = m.sync(t, follower, 1)  # the leader never syncs (and its session outlasts)
    assert m.tick_until(t + REBALANCE_MS) == [t + REBALANCE_MS]
    assert waiting.value.error == E.rebalance_in_progress
    assert list(m.group().members) == [follower]
    assert m.group().state == GroupState.PREPARING_REBALANCE


# -- KIP-394 pending members -------------------------------------------------------------------


def test_pending_member_expires_after_its_session_timeout() -> None:
    m = Machine()
    first, _ = m.join(0, known_id_required=True)
    assert first is not None and first.error == E.member_id_required
    pending = first.member_id
    assert m.group().pending_members == {pending: SESSION_MS}
    assert m.group().state == GroupState.EMPTY
    assert m.m.next_deadline_ms() == SESSION_MS
    m.tick_until(SESSION_MS - 1)
    assert pending in m.group().pending_members
    m.tick_until(SESSION_MS)
    assert m.group().pending_members == {}
    # Too late: the id is unknown now.
    late, _ = m.join(SESSION_MS + 1, pending)
    assert late is not None and late.error == E.unknown_member_id


def test_pending_member_that_rejoins_in_time_is_added() -> None:
    m = Machine()
    first, _ = m.join(0, known_id_required=True)
    assert first is not None
    immediate, box = m.join(100, first.member_id)
    assert immediate is None
    assert m.group().pending_members == {}
    m.tick_until(100 + DELAY_MS)
    assert box.value.member_id == first.member_id and box.value.generation_id == 1


def test_a_rebalance_waits_for_pending_members() -> None:
    m = Machine()
    (a,), t = m.stable(0, 1)
    first, _ = m.join(t + 1, known_id_required=True)
    assert first is not None and first.error == E.member_id_required
    _, box = m.join(t + 2, a)  # the leader rejoins; the pending member never comes
    m.tick_until(t + SESSION_MS)
    assert box.values == []
    m.tick_until(t + 1 + SESSION_MS)  # its pending deadline completes the join
    assert box.value.generation_id == 2 and len(box.value.members) == 1


# -- static members (KIP-345) ------------------------------------------------------------------


def test_static_member_rejoins_without_rebalance_and_keeps_its_assignment() -> None:
    m = Machine()
    _, a = m.join(0, instance="i-a")
    _, b = m.join(0, instance="i-b")
    t = m.tick_until_answered(a, b) - DELAY_MS  # times below are relative to DELAY_MS
    ids = {a.value.member_id: "i-a", b.value.member_id: "i-b"}
    leader = a.value.leader
    for member_id in ids:
        m.sync(t + DELAY_MS, member_id, 1, {x: inst.encode() for x, inst in ids.items()})
    m.m.assignment_stored(m.group(), 1, E.none, at(t + DELAY_MS))
    old_b = b.value.member_id
    stored = len(m.stored_groups)

    again, box = m.join(t + DELAY_MS + 100, instance="i-b")
    assert again is not None and again.error == E.none and box.values == []
    assert again.generation_id == 1 and again.member_id != old_b
    assert again.leader == leader
    assert m.group().state == GroupState.STABLE
    # The new member id is stored at once, so a new coordinator knows it.
    assert m.stored_groups[stored:] == [("g", GroupState.STABLE, 1)]
    synced, _ = m.sync(t + DELAY_MS + 200, again.member_id, 1, instance="i-b")
    assert synced is not None and synced.assignment == b"i-b"
    # The old incarnation is fenced; its session deadline went with its id.
    assert m.m.heartbeat("g", 1, old_b, "i-b", at(t + DELAY_MS + 300)) == E.fenced_instance_id
    assert m.m.leave("g", [(old_b, "i-b")], at(t + DELAY_MS + 300))[1] == [E.fenced_instance_id]
    assert DeadlineKey(DeadlineKind.SESSION, "g", old_b) not in m.m.deadlines
    assert m.m.deadlines.deadline(DeadlineKey(DeadlineKind.SESSION, "g", again.member_id)) == (
        t + DELAY_MS + 200 + SESSION_MS
    )
    # Leaving by instance id alone works.
    assert m.m.leave("g", [("", "i-b")], at(t + DELAY_MS + 400))[1] == [E.none]
    assert m.group().state == GroupState.PREPARING_REBALANCE


def test_static_member_with_new_protocols_in_a_stable_group_rebalances() -> None:
    m = Machine()
    (a,), t = m.stable(0, 1, instance="i-a")
    again, box = m.join(t + 1, instance="i-a", protocols=[("range", subscription("t", "u"))])
    assert again is None
    m.tick_until(t + 1 + REBALANCE_MS)
    assert box.value.generation_id == 2 and box.value.member_id != a


def test_a_waiting_request_of_a_replaced_static_member_is_fenced() -> None:
    m = Machine()
    _, first = m.join(0, instance="i-a")
    again, second = m.join(1, instance="i-a")  # restarted before the first join completed
    assert again is None
    assert first.value.error == E.fenced_instance_id
    m.tick_until(1 + DELAY_MS)
    assert second.value.error == E.none and second.value.generation_id == 1


# -- dropping and deleting ---------------------------------------------------------------------


def test_dropped_group_answers_not_coordinator_and_leaves_no_deadlines() -> None:
    m = Machine()
    _, box = m.join(0)
    m.join(0, known_id_required=True)
    m.m.drop("g")
    assert box.value.error == E.not_coordinator
    assert m.m.next_deadline_ms() is None and len(m.m.deadlines) == 0


def test_on_earlier_deadline_is_called_for_an_earlier_deadline_only() -> None:
    m = Machine()
    m.join(0, group="a")  # a session deadline, then an earlier initial-delay deadline
    assert m.earlier == 2 and m.m.next_deadline_ms() == DELAY_MS
    m.join(1000, group="b")  # both of its deadlines come later
    assert m.earlier == 2
    m.join(-1000, group="c")  # its initial delay ends first
    assert m.earlier == 3 and m.m.next_deadline_ms() == DELAY_MS - 1000
