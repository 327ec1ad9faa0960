"""DeadlineHeap: one current deadline per key, popped earliest first, stale entries skipped."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from raftka.broker.groups.deadlines import STALE_ENTRIES_SLACK, DeadlineHeap


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_pop_due_returns_due_keys_earliest_first() -> None:
    heap: DeadlineHeap[str] = DeadlineHeap()
    heap.schedule("c", 30)
    heap.schedule("a", 10)
    heap.schedule("b", 20)
    heap.schedule("d", 40)
    assert heap.earliest() == 10
    assert heap.pop_due(5) == []
    assert heap.pop_due(30) == ["a", "b", "c"]
    assert len(heap) == 1 and "d" in heap and "a" not in heap
    assert heap.earliest() == 40
    assert heap.pop_due(100) == ["d"]
    assert heap.earliest() is None and heap.pop_due(1000) == []


def test_equal_deadlines_pop_in_scheduling_order() -> None:
    heap: DeadlineHeap[str] = DeadlineHeap()
    for key in ["x", "y", "z"]:
        heap.schedule(key, 7)
    assert heap.pop_due(7) == ["x", "y", "z"]


def test_reschedule_replaces_the_keys_deadline() -> None:
    heap: DeadlineHeap[str] = DeadlineHeap()
    heap.schedule("a", 10)
    heap.schedule("b", 20)
    heap.schedule("a", 30)  # later: its old entry is stale
    assert heap.deadline("a") == 30
    assert heap.earliest() == 20
    assert heap.pop_due(25) == ["b"]
    heap.schedule("a", 5)  # earlier again
    assert heap.pop_due(10) == ["a"]
    assert heap.pop_due(100) == []  # the 30 entry was stale


def test_cancel_removes_the_key() -> None:
    heap: DeadlineHeap[str] = DeadlineHeap()
    heap.schedule("a", 10)
    heap.schedule("b", 20)
    heap.cancel("a")
    heap.cancel("missing")  # no error
    assert "a" not in heap and heap.deadline("a") is None
    assert heap.earliest() == 20
    assert heap.pop_due(100) == ["b"]
    heap.schedule("a", 50)  # a cancelled key can come back
    assert heap.pop_due(100) == ["a"]


def test_on_earlier_is_called_only_for_a_deadline_before_all_others() -> None:
    calls = Counter()
    heap: DeadlineHeap[str] = DeadlineHeap(calls)
    heap.schedule("a", 100)
    assert calls.calls == 1  # the first deadline
    heap.schedule("b", 200)
    heap.schedule("c", 100)  # equal is not earlier
    assert calls.calls == 1
    heap.schedule("d", 50)
    assert calls.calls == 2
    heap.schedule("d", 50)  # unchanged
    heap.schedule("a", 300)  # later
    heap.cancel("d")
    assert calls.calls == 2
    heap.schedule("e", 10)
    assert calls.calls == 3


def test_a_timer_sleeping_until_earliest_is_never_late() -> None:
    """Whatever is scheduled, a deadline before the one a timer sleeps until wakes it."""
    rng = random.Random(7)
    calls = Counter()
    heap: DeadlineHeap[int] = DeadlineHeap(calls)
    sleeping_until = heap.earliest()
    for _ in range(5000):
        key = rng.randrange(50)
        if rng.random() < 0.2:
            heap.cancel(key)
            continue
        deadline = rng.randrange(10_000)
        before = calls.calls
        heap.schedule(key, deadline)
        if sleeping_until is None or deadline < sleeping_until:
            assert calls.calls == before + 1
        if calls.calls != before:
            sleeping_until = heap.earliest()  # the timer woke and looked again


def test_compaction_keeps_the_heap_within_a_bound_of_the_live_keys() -> None:
    heap: DeadlineHeap[int] = DeadlineHeap()
    for key in range(10):
        heap.schedule(key, 1_000_000)
    # Heartbeats: every key rescheduled many times, each leaving a stale entry behind.
    for round_ in range(1, 1000):
        for key in range(10):
            heap.schedule(key, 1_000_000 + round_)
            assert len(heap._heap) <= 2 * len(heap) + STALE_ENTRIES_SLACK + 1
    assert len(heap) == 10
    assert heap.pop_due(2_000_000) == list(range(10))
    # Cancelling compacts too.
    for key in range(100):
        heap.schedule(key, key)
    for key in range(100):
        heap.cancel(key)
        assert len(heap._heap) <= 2 * len(heap) + STALE_ENTRIES_SLACK + 1
    assert heap.earliest() is None


@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.one_of(st.none(), st.integers(0, 1000))),
        max_size=200,
    ),
    st.integers(0, 1000),
)
def test_pop_due_matches_a_dict_of_current_deadlines(
    operations: list[tuple[int, int | None]], now: int
) -> None:
    heap: DeadlineHeap[int] = DeadlineHeap()
    model: dict[int, int] = {}
    for key, deadline in operations:
        if deadline is None:
            heap.cancel(key)
            model.pop(key, None)
        else:
            heap.schedule(key, deadline)
            model[key] = deadline
    assert heap.earliest() == min(model.values(), default=None)
    due = heap.pop_due(now)
    assert sorted(due) == sorted(k for k, d in model.items() if d <= now)
    assert [model[k] for k in due] == sorted(model[k] for k in due)
    assert len(heap) == sum(1 for d in model.values() if d > now)
