"""The share-partition's ranges in chunks (`RangeList`), and the share-partition built on
them, each driven by random operations beside a plain model: a sorted Python list for the
ranges, one state per offset for the share-partition."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from raftka.broker.share import range_list
from raftka.broker.share.partition import (
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    StateBatch,
)
from raftka.broker.share.persisted import PersistedState, StateUpdate, fold
from raftka.broker.share.range_list import RangeList

LIMIT = 3
LOCK_MS = 100
MEMBERS = ("m1", "m2")
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass
class Piece:
    first: int
    last: int


@pytest.fixture(params=[4, 512], ids=["chunks-of-4", "chunks-of-512"])
def chunk_max(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Small chunks make every chunk split, join and emptying happen within a few ranges."""
    monkeypatch.setattr(range_list, "CHUNK_MAX", request.param)
    monkeypatch.setattr(range_list, "_CHUNK_LOW", request.param // 4)
    return int(request.param)


def test_a_range_list_answers_as_a_sorted_list_through_random_changes(chunk_max: int) -> None:
    rng = random.Random(5)
    for _round in range(8):
        # Ranges of 2 offsets each at first, every other offset pair free.
        model = [Piece(4 * i, 4 * i + 1) for i in range(rng.randrange(0, 3 * chunk_max))]
        ranges = RangeList(model)
        model = list(model)
        for _step in range(400):
            action = rng.random()
            end = 4 * len(model) + 20
            if action < 0.3:
                # Split a range in two, as a share-partition does.
                if not model:
                    continue
                r = rng.choice(model)
                if r.first == r.last:
                    continue
                at = rng.randrange(r.first + 1, r.last + 1)
                tail = Piece(at, r.last)
                r.last = at - 1
                ranges.insert(tail)
                model.insert(model.index(r) + 1, tail)
            elif action < 0.5:
                # A new range in a free space (or past the last).
                at = rng.randrange(end)
                if any(p.first <= at <= p.last for p in model):
                    continue
                following = [p for p in model if p.first > at]
                new = Piece(at, at)
                if not following:
                    ranges.append(new)
                else:
                    ranges.insert(new)
                model.append(new)
                model.sort(key=lambda p: p.first)
            elif action < 0.75:
                if not model:
                    continue
                r = rng.choice(model)
                ranges.remove(r)
                model.remove(r)
            elif action < 0.8:
                if model:
                    assert ranges.pop_first() is model.pop(0)
            elif action < 0.85:
                at = rng.randrange(end // 4 + 1)
                ranges.drop_below(at)
                model = [p for p in model if p.first >= at]
            ranges.check()
            assert list(ranges) == model and len(ranges) == len(model)
            assert ranges.first() is (model[0] if model else None)
            assert ranges.last() is (model[-1] if model else None)
            for _probe in range(5):
                first = rng.randrange(-2, end)
                last = first + rng.randrange(0, 12)
                covering = [p for p in model if p.first <= first <= p.last]
                assert ranges.covering(first) is (covering[0] if covering else None)
                overlapping = [p for p in model if p.last >= first and p.first <= last]
                assert ranges.overlapping(first, last) == overlapping
                # The range before the overlapping ones and the one after, when there are.
                before = [p for p in model if p.first <= first]
                lo = model.index(before[-1]) - 1 if before else 0
                after = [i for i, p in enumerate(model) if p.first > last]
                hi = after[0] + 1 if after else len(model)
                assert ranges.around(first, last) == model[max(0, lo) : hi]


@dataclass
class Offset:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str = ""
    deadline: float = 0.0


class Model:
    """A share-partition one offset at a time."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.next = start
        self.offsets: dict[int, Offset] = {}

    def _extend_to(self, offset: int) -> None:
        for o in range(self.next, offset):
            self.offsets[o] = Offset()
        self.next = max(self.next, offset)

    def _take(self, o: int, member: str, deadline: float) -> None:
        r = self.offsets[o]
        r.state, r.member_id, r.deadline = RecordState.ACQUIRED, member, deadline
        r.delivery_count += 1

    def _advance(self) -> None:
        while self.start < self.next and self.offsets[self.start].state in _DONE:
            del self.offsets[self.start]
            self.start += 1

    def _leave(self, o: int, state: RecordState) -> None:
        r = self.offsets[o]
        if state == RecordState.AVAILABLE and r.delivery_count >= LIMIT:
            state = RecordState.ARCHIVED
        r.state, r.member_id, r.deadline = state, "", 0.0

    def acquire(
        self, member: str, stop: int, max_records: int, max_in_flight: int, deadline: float
    ) -> set[tuple[int, int]]:
        budget = max_records
        if self.next - self.start > max_in_flight:
            held = sum(r.state == RecordState.ACQUIRED for r in self.offsets.values())
            budget = min(budget, max_in_flight - held)
        got = []
        for o in range(self.start, min(stop, self.next)):
            if budget <= 0:
                break
            if self.offsets[o].state == RecordState.AVAILABLE:
                self._take(o, member, deadline)
                got.append(o)
                budget -= 1
        room = self.start + max_in_flight - self.next
        last = min(stop - 1, self.next + min(budget, room) - 1)
        if budget > 0 and last >= self.next:
            first = self.next
            self._extend_to(last + 1)
            for o in range(first, last + 1):
                self._take(o, member, deadline)
                got.append(o)
        return {(o, self.offsets[o].delivery_count) for o in got}

    def acquire_offsets(
        self, member: str, runs: list[tuple[int, int]], deadline: float
    ) -> set[tuple[int, int]]:
        got = []
        for first, last in runs:
            for o in range(max(first, self.start), last + 1):
                if o >= self.next:
                    self._extend_to(o + 1)
                if self.offsets[o].state == RecordState.AVAILABLE:
                    self._take(o, member, deadline)
                    got.append(o)
        return {(o, self.offsets[o].delivery_count) for o in got}

    def acknowledge(self, member: str, first: int, last: int, types: list[int]) -> bool:
        for o in range(first, last + 1):
            r = self.offsets.get(o)
            if o < self.start or r is None or r.state != RecordState.ACQUIRED:
                return False
            if r.member_id != member:
                return False
        for o in range(first, last + 1):
            ack = types[0] if len(types) == 1 else types[o - first]
            self._leave(
                o,
                {
                    AckType.GAP: RecordState.ARCHIVED,
                    AckType.ACCEPT: RecordState.ACKNOWLEDGED,
                    AckType.RELEASE: RecordState.AVAILABLE,
                    AckType.REJECT: RecordState.ARCHIVED,
                }[AckType(ack)],
            )
        self._advance()
        return True

    def release(self, member: str | None, now: float) -> int:
        """A member's records (`member`) or those whose lock expired at `now` (None)."""
        released = 0
        for o, r in self.offsets.items():
            if r.state != RecordState.ACQUIRED:
                continue
            if (r.member_id == member) if member is not None else r.deadline <= now:
                self._leave(o, RecordState.AVAILABLE)
                released += 1
        self._advance()
        return released

    def move_start(self, offset: int) -> None:
        if offset <= self.start:
            return
        for o in range(self.start, min(offset, self.next)):
            del self.offsets[o]
        self.start = offset
        self.next = max(self.next, offset)
        self._advance()

    def cancel(self, offset: int) -> None:
        self._extend_to(offset + 1)
        self.offsets[offset].state = RecordState.ARCHIVED
        self._advance()

    def batches(self) -> list[StateBatch]:
        out: list[StateBatch] = []
        for o in range(self.start, self.next):
            r = self.offsets[o]
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            if out and out[-1].state == state and out[-1].delivery_count == r.delivery_count:
                out[-1] = StateBatch(out[-1].first, o, state, r.delivery_count)
            else:
                out.append(StateBatch(o, o, state, r.delivery_count))
        return out


def _offsets(acquired: list[Acquired]) -> set[tuple[int, int]]:
    return {(o, a.delivery_count) for a in acquired for o in range(a.first, a.last + 1)}


def _compare(state: SharePartition, model: Model) -> None:
    state.ranges.check()
    assert (state.start_offset, state.next_offset) == (model.start, model.next)
    for o in range(model.start, model.next):
        r = model.offsets[o]
        assert state.state_of(o) == r.state, o
        assert state.is_available(o) == (r.state == RecordState.AVAILABLE), o
    held = {
        (o, r.member_id, r.delivery_count)
        for r in state.ranges
        if r.state == RecordState.ACQUIRED
        for o in range(r.first, r.last + 1)
    }
    assert held == {
        (o, r.member_id, r.delivery_count)
        for o, r in model.offsets.items()
        if r.state == RecordState.ACQUIRED
    }
    assert state.state_batches() == model.batches()
    counts = state.counts()
    for s in RecordState:
        assert counts[s] == sum(r.state == s for r in model.offsets.values()), s


@pytest.mark.parametrize("seed", range(6))
def test_a_share_partition_keeps_each_offsets_state_as_a_model_of_offsets_does(
    seed: int, chunk_max: int
) -> None:
    """Fetches in offset order and scattered (as a priority topic's), acknowledgements of
    every type in and out of order, lock expiry, members leaving, the log start moving and
    cancelled records: every offset's state, delivery count and holder agree with the
    model, and the state written as updates folds into the state written whole."""
    rng = random.Random(seed)
    start = rng.randrange(0, 50)
    state, model = SharePartition(start), Model(start)
    persisted = PersistedState(1, state.start_offset, tuple(state.state_batches()), (), (), 7)
    now = 0.0
    for _step in range(250):
        action = rng.random()
        member = rng.choice(MEMBERS)
        deadline = now + LOCK_MS
        if action < 0.15:
            stop = model.next + rng.randrange(0, 40)
            count, window = rng.randrange(1, 30), rng.randrange(10, 200)
            got = state.acquire(member, stop, count, window, now, LOCK_MS)
            assert _offsets(got) == model.acquire(member, stop, count, window, deadline)
        elif action < 0.35:
            # Scattered runs, as the delivery index picks them.
            picks = sorted(rng.sample(range(model.start, model.next + 60), rng.randrange(1, 25)))
            runs: list[tuple[int, int]] = []
            for o in picks:
                length = rng.choice([1, 1, 1, 2, 4])
                if runs and o <= runs[-1][1] + 1:
                    continue
                runs.append((o, o + length - 1))
            got = state.acquire_offsets(member, runs, now, LOCK_MS)
            assert _offsets(got) == model.acquire_offsets(member, runs, deadline)
        elif action < 0.7:
            held = sorted(o for o, r in model.offsets.items() if r.state == RecordState.ACQUIRED)
            if not held or rng.random() < 0.05:
                # Not held (or by another member): refused, nothing changes.
                first = rng.randrange(model.start, model.next + 5)
                last = first + rng.randrange(0, 3)
            else:
                first = rng.choice(held)
                last = first + rng.randrange(0, 4)
                member = model.offsets[first].member_id
            if rng.random() < 0.5:
                types = [rng.choice(list(AckType))]
            else:
                types = [rng.choice(list(AckType)) for _ in range(last - first + 1)]
            ok = model.acknowledge(member, first, last, types)
            assert (state.acknowledge(member, first, last, types, LIMIT) == 0) == ok
        elif action < 0.8:
            now += rng.choice([10, 60, 150])
            assert state.release_expired(now, LIMIT) == model.release(None, now)
        elif action < 0.85:
            assert state.release_member(member, LIMIT) == model.release(member, now)
        elif action < 0.9:
            offset = model.start + rng.randrange(0, 12)
            state.move_start(offset)
            model.move_start(offset)
        else:
            offset = rng.randrange(model.start, model.next + 10)
            if model.offsets.get(offset, Offset()).state == RecordState.AVAILABLE:
                state.cancel(offset)
                model.cancel(offset)
        _compare(state, model)
        changes = state.take_changes()
        update = StateUpdate(1, 7, state.start_offset, changes.spans, changes.batches, (), ())
        persisted = fold(persisted, [update])
        assert persisted.start_offset == state.start_offset
        assert list(persisted.batches) == state.state_batches()
    # Reloaded from what was persisted, the share-partition holds the same states (with
    # the acquired records available again, their locks gone with the leader).
    reloaded = SharePartition(state.start_offset, state.state_batches())
    _compare_states_only(reloaded, state)


def _compare_states_only(reloaded: SharePartition, state: SharePartition) -> None:
    reloaded.ranges.check()
    assert (reloaded.start_offset, reloaded.next_offset) == (
        state.start_offset,
        state.next_offset,
    )
    for o in range(state.start_offset, state.next_offset):
        expected = state.state_of(o)
        if expected == RecordState.ACQUIRED:
            expected = RecordState.AVAILABLE
        assert reloaded.state_of(o) == expected, o
