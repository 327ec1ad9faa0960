"""acks=all waits: only the proposed entry's own commit may succeed.

A leader that is cut off, replaced, and then hears from the new leader truncates its
uncommitted entry and learns a high watermark past that entry's offset, possibly in one
Ready. Its waiter must fail (the client retries); succeeding would acknowledge a record that
no replica holds.

Messages and ticks are delivered by hand and the waits run on trio's mock clock, so a waiter
that is never resolved times out at once instead of after its real 30 s.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import pytest
import trio
from test_raft_driver import VOTERS, MemoryRaftGroupStorage
from trio.testing import MockClock

from raftka.consensus import NotLeaderError, Role
from raftka.consensus.core import RaftConfig, RaftCore
from raftka.consensus.driver import TIMED_OUT, MarkOutcome, RaftGroup, RaftNode
from raftka.consensus.transport import PeerTransport
from raftka.consensus.types import Message, MessageType

GROUP = "orders-0"


class Pump:
    """Three RaftGroups whose messages are delivered by hand; a node can be cut off. It is
    also their host: sync tickets are served as messages are delivered."""

    def __init__(self) -> None:
        self.outbox: list[Message] = []
        self.tickets: list[Any] = []
        self.cut: set[int] = set()
        self.groups: dict[int, RaftGroup] = {}
        self.deadlines: list[Any] = []
        for node in sorted(VOTERS):
            storage = MemoryRaftGroupStorage()
            core = RaftCore(
                RaftConfig(
                    node_id=node,
                    group=GROUP,
                    voters=VOTERS,
                    seed=node,
                    skip_noop_when_committed=True,
                ),
                storage.raft_log,
            )
            self.groups[node] = RaftGroup(GROUP, core, storage, self, None, self)  # type: ignore[arg-type]

    def send(self, message: Message) -> None:
        self.outbox.append(message)

    def _queue_sync(self, ticket: Any) -> None:
        self.tickets.append(ticket)

    def _note_soft_state(self) -> None:
        pass

    def _set_ticked(self, group: RaftGroup, ticked: bool) -> None:
        pass  # every group is ticked by hand

    # The node's side of `RaftGroup.on_committed`: deadlines expired by hand (`expire`).
    def _expire_at(self, deadline: float, subscription: Any) -> None:
        self.deadlines.append(subscription)

    def _subscription_done(self) -> None:
        pass

    def expire(self) -> None:
        for subscription in self.deadlines:
            subscription.timed_out()
        self.deadlines.clear()

    def deliver(self) -> None:
        while self.outbox or self.tickets:
            while self.tickets:
                ticket = self.tickets.pop(0)
                ticket.group._synced(ticket)
            if not self.outbox:
                continue
            m = self.outbox.pop(0)
            if m.from_id in self.cut or m.to in self.cut:
                continue
            self.groups[m.to]._step(m)

    def tick(self, times: int) -> None:
        for _ in range(times):
            for node, group in self.groups.items():
                if node not in self.cut:
                    group._tick()
            self.deliver()

    def leader(self) -> RaftGroup:
        leaders = [g for n, g in self.groups.items() if n not in self.cut and g.role is Role.LEADER]
        assert len(leaders) == 1
        return leaders[0]


def _cut_off_leader(data: bytes) -> tuple[Pump, RaftGroup, Any]:
    """Node 1 elected, then cut off right after it proposes `data`, which nobody receives."""
    pump = Pump()
    pump.groups[1].campaign()
    pump.deliver()
    old = pump.leader()
    pump.cut.add(1)
    return pump, old, old.propose(1, data)


def test_replaced_leader_fails_its_waiter_instead_of_acknowledging() -> None:
    async def scenario() -> None:
        pump = Pump()
        pump.groups[1].campaign()
        pump.deliver()
        old = pump.leader()
        committed = old.propose(1, b"committed")
        pump.deliver()
        assert old.high_watermark >= committed.end_offset

        # Cut the leader off right after it appends an entry nobody else receives.
        pump.cut.add(1)
        lost = old.propose(1, b"never replicated")
        outcome: dict[str, Any] = {}

        async def wait() -> None:
            try:
                outcome["ok"] = await old.wait_committed(lost.end_offset, 30, lost.epoch)
            except NotLeaderError as exc:
                outcome["error"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0)
            # The others elect a new leader and commit past the lost entry's offset.
            pump.tick(40)
            new = pump.leader()
            assert new is not old
            for i in range(3):
                new.propose(1, b"new-%d" % i)
                pump.deliver()
            assert new.high_watermark > lost.end_offset
            # The old leader hears from the new one: truncation and a high watermark past
            # `lost` arrive together.
            pump.cut.clear()
            pump.tick(3)
            await trio.sleep(0)
        assert "error" in outcome, outcome
        assert old.role is not Role.LEADER

    trio.run(scenario, clock=MockClock(autojump_threshold=0))


def test_waiter_succeeds_for_its_own_committed_entry() -> None:
    async def scenario() -> None:
        pump = Pump()
        pump.groups[2].campaign()
        pump.deliver()
        leader = pump.leader()
        entry = leader.propose(1, b"x")
        async with trio.open_nursery() as nursery:
            result: list[bool] = []

            async def wait() -> None:
                result.append(await leader.wait_committed(entry.end_offset, 30, entry.epoch))

            nursery.start_soon(wait)
            await trio.sleep(0)
            pump.deliver()
        assert result == [True]

    trio.run(scenario, clock=MockClock(autojump_threshold=0))


@pytest.mark.parametrize("epoch_shift", [1])
def test_high_watermark_over_a_replaced_entry_is_not_its_commit(epoch_shift: int) -> None:
    """Without waiting (the high watermark already passed): the epoch check alone decides."""

    async def scenario() -> None:
        pump, old, lost = _cut_off_leader(b"lost")
        pump.tick(40)
        new = pump.leader()
        for i in range(3):
            new.propose(1, b"n%d" % i)
            pump.deliver()
        pump.cut.clear()
        pump.tick(3)
        assert old.high_watermark >= lost.end_offset
        with pytest.raises(NotLeaderError):
            await old.wait_committed(lost.end_offset, 1, lost.epoch)
        assert lost.epoch + epoch_shift <= new.term

    trio.run(scenario, clock=MockClock(autojump_threshold=0))


# -- the same waits as callbacks (`on_committed`), as the broker's Produce path uses them --


def test_callback_of_a_replaced_leader_gets_the_error_not_an_acknowledgement() -> None:
    pump, old, lost = _cut_off_leader(b"never replicated")
    outcomes: list[MarkOutcome] = []
    old.on_committed(lost.end_offset, 30, lost.epoch, outcomes.append)
    pump.tick(40)
    new = pump.leader()
    assert new is not old
    for i in range(3):
        new.propose(1, b"new-%d" % i)
        pump.deliver()
    pump.cut.clear()
    pump.tick(3)
    assert len(outcomes) == 1 and isinstance(outcomes[0], NotLeaderError), outcomes
    pump.expire()  # its deadline passing later changes nothing
    assert len(outcomes) == 1


def test_callback_comes_once_when_its_entry_commits() -> None:
    pump = Pump()
    pump.groups[2].campaign()
    pump.deliver()
    leader = pump.leader()
    entry = leader.propose(1, b"x")
    outcomes: list[MarkOutcome] = []
    leader.on_committed(entry.end_offset, 30, entry.epoch, outcomes.append)
    assert outcomes == []
    pump.deliver()
    assert outcomes == [None]
    later = leader.propose(1, b"y")
    pump.deliver()
    leader.on_committed(later.end_offset, 30, later.epoch, outcomes.append)  # already there
    pump.expire()
    assert outcomes == [None, None]


def test_callback_times_out_when_no_majority_answers() -> None:
    pump = Pump()
    pump.groups[3].campaign()
    pump.deliver()
    leader = pump.leader()
    pump.cut.update({1, 2})
    entry = leader.propose(1, b"x")
    outcomes: list[MarkOutcome] = []
    leader.on_committed(entry.end_offset, 5, entry.epoch, outcomes.append)
    pump.deliver()
    assert outcomes == []
    pump.expire()
    assert outcomes == [TIMED_OUT]
    pump.cut.clear()
    pump.tick(2)  # the entry commits after all: the callback already had its answer
    assert leader.high_watermark >= entry.end_offset
    assert outcomes == [TIMED_OUT]


def test_callbacks_of_a_removed_group_get_the_removal_error() -> None:
    transport = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1), 3: ("127.0.0.1", 2)})
    node = RaftNode(1, transport, election_timeout_ticks=10**6)
    group = node.add_raft_group("gone-0", VOTERS, MemoryRaftGroupStorage())
    outcomes: list[MarkOutcome] = []
    group.on_committed(5, 30, None, outcomes.append)  # a follower's wait
    node.remove_raft_group("gone-0")
    assert len(outcomes) == 1 and isinstance(outcomes[0], NotLeaderError)
    with pytest.raises(NotLeaderError):
        group.on_committed(5, 30, None, outcomes.append)


def _serve_syncs(node: RaftNode) -> None:
    """The node's sync tickets, served by hand (as `run_syncs` would)."""
    while node._tickets:
        ticket = node._tickets.pop(0)
        ticket.group._synced(ticket)


def _lone_leader() -> tuple[RaftNode, RaftGroup]:
    """A node leading one group of which it is the only voter, its syncs served by hand."""
    transport = PeerTransport(1, ("127.0.0.1", 0), {})
    node = RaftNode(1, transport, election_timeout_ticks=2)
    group = node.add_raft_group("alone-0", frozenset({1}), MemoryRaftGroupStorage())
    for _ in range(4):
        node.tick()
        _serve_syncs(node)
    assert group.role is Role.LEADER
    return node, group


def test_answered_callbacks_do_not_pile_up_until_their_deadline() -> None:
    """Every callback answered long before its deadline: the node's deadline heap is
    compacted, so its size stays bounded however many requests pass (not 30 s of them)."""
    node, group = _lone_leader()
    outcomes: list[MarkOutcome] = []
    largest = 0
    for i in range(5000):
        entry = group.propose_unwritten(1, b"r%d" % i)
        group.on_committed(entry.end_offset, 30, entry.epoch, outcomes.append)
        largest = max(largest, len(node._deadlines))
        group.write_proposed()
        _serve_syncs(node)
    assert outcomes == [None] * 5000
    assert largest <= 2100, largest
    # A callback for a mark already passed is answered at once and never queued, so it is
    # not counted as a leftover of the heap either.
    done_before = node._deadlines_done
    group.on_committed(entry.end_offset, 30, entry.epoch, outcomes.append)
    assert outcomes == [None] * 5001 and node._deadlines_done == done_before
    node._expire_subscriptions(time.monotonic() + 60)
    assert outcomes == [None] * 5001
    assert not node._deadlines and node._deadlines_done == 0


def test_an_answered_callback_left_in_the_deadline_heap_keeps_nothing_of_its_request() -> None:
    """An answered callback stays in the node's deadline heap until the heap is compacted
    (after about a thousand answers) or its deadline passes: it must not keep what its
    callback refers to (the request, records and all) that long. With 1 KB records on three
    brokers that was seconds of produced data in the leader's memory."""
    node, group = _lone_leader()

    class Request:  # stands for a Produce request and its records
        pass

    request = Request()
    gone = weakref.ref(request)
    outcomes: list[MarkOutcome] = []

    def answer(outcome: MarkOutcome, request: Request = request) -> None:
        outcomes.append(outcome)

    entry = group.propose_unwritten(1, b"r")
    group.on_committed(entry.end_offset, 30, entry.epoch, answer)
    del request, answer
    group.write_proposed()
    _serve_syncs(node)
    assert outcomes == [None]
    assert len(node._deadlines) == 1, "left in the heap until it is compacted"
    assert gone() is None, "the answered callback still holds its request"


def test_entries_proposed_together_leave_in_one_append_per_follower() -> None:
    """Group commit reaches the followers: batches proposed in one turn (before the write)
    go out as one APPEND per follower, not one per batch."""
    pump = Pump()
    pump.groups[1].campaign()
    pump.deliver()
    leader = pump.leader()
    entries = [leader.propose_unwritten(1, b"r%d" % i) for i in range(3)]
    assert not [m for m in pump.outbox if m.type is MessageType.APPEND]
    leader.write_proposed()
    appends = [m for m in pump.outbox if m.type is MessageType.APPEND]
    assert sorted(m.to for m in appends) == [2, 3]
    for m in appends:
        assert [e.base_offset for e in m.entries] == [e.base_offset for e in entries]
    pump.deliver()
    assert leader.high_watermark >= entries[-1].end_offset


def _deposed_leader_with_an_unreplicated_entry() -> tuple[Pump, RaftGroup, Any]:
    """A leader that proposed an entry nobody else received, then heard from the leader
    elected meanwhile, which appends nothing more: the entry is not in the new leader's
    log and no high watermark will pass its offset until the new leader gets more."""
    pump, old, lost = _cut_off_leader(b"never replicated")
    pump.tick(40)
    assert pump.leader() is not old
    pump.cut.clear()
    pump.tick(3)
    assert old.role is not Role.LEADER
    assert old.high_watermark < lost.end_offset
    return pump, old, lost


def test_a_callback_begun_after_its_proposer_lost_leadership_gets_the_error_at_once() -> None:
    """A Produce whose batch was proposed while this broker led and whose wait for acks
    begins after it stopped leading (a group commit writes the batch later in the same turn
    of the event loop): nothing would end that wait but its timeout, since a follower's
    high watermark passes the offset only once the new leader has more records, and its
    client waits for this answer before it sends them. Kafka answers NOT_LEADER_OR_FOLLOWER
    at once; so does the wait."""
    pump, old, lost = _deposed_leader_with_an_unreplicated_entry()
    outcomes: list[MarkOutcome] = []
    old.on_committed(lost.end_offset, 30, lost.epoch, outcomes.append)
    assert len(outcomes) == 1 and isinstance(outcomes[0], NotLeaderError), outcomes
    pump.expire()
    assert len(outcomes) == 1


def test_a_wait_begun_after_its_proposer_lost_leadership_fails_at_once() -> None:
    async def scenario() -> None:
        _pump, old, lost = _deposed_leader_with_an_unreplicated_entry()
        started = trio.current_time()
        with pytest.raises(NotLeaderError):
            await old.wait_committed(lost.end_offset, 30, lost.epoch)
        assert trio.current_time() == started  # no wait on the mock clock

    trio.run(scenario, clock=MockClock(autojump_threshold=0))
