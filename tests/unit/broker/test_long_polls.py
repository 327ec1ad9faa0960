"""The broker's waiting fetches: each woken once, by an append to one of its partitions or at
its deadline, from the one task that serves them; a cancelled one never."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from raftka.broker.handlers.fetch import _long_poll
from raftka.broker.long_polls import LongPolls, Wakeable
from raftka.broker.topics import Partition


class _Partition:
    def __init__(self) -> None:
        self.waiters: set[Wakeable] = set()

    def append(self) -> None:
        """An append: the broker's partition wakes its waiters."""
        Partition.notify_appended(self)  # type: ignore[arg-type]


def _run(polls: LongPolls, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(polls.run)
            await body()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_append_wakes_the_poll_once_from_the_task_and_it_leaves_every_partition() -> None:
    polls = LongPolls()
    a, b = _Partition(), _Partition()
    calls: list[tuple[str, bool]] = []

    async def body() -> None:
        polls.watch([a, b], trio.current_time() + 30, lambda t: calls.append(("fetch", t)))
        assert len(polls) == 1 and a.waiters and b.waiters
        a.append()
        assert calls == []  # not inside the appending code
        await trio.testing.wait_all_tasks_blocked()
        assert calls == [("fetch", False)]
        assert not b.waiters  # the other partition forgot it
        a.append()
        b.append()
        await trio.sleep(60)  # past its deadline: nothing more

    _run(polls, body)
    assert calls == [("fetch", False)]
    assert (polls.woken, polls.timed_out, len(polls)) == (1, 0, 0)


def test_polls_woken_while_held_are_served_by_release_and_not_by_the_task() -> None:
    polls = LongPolls()
    a = _Partition()
    calls: list[tuple[str, bool]] = []
    steps: list[str] = []

    class _Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.endswith("LongPolls.run"):
                steps.append("task")

    async def body() -> None:
        trio.lowlevel.add_instrument(_Steps())
        polls.watch([a], trio.current_time() + 30, lambda t: calls.append(("fetch", t)))
        await trio.testing.wait_all_tasks_blocked()
        steps.clear()
        polls.held = True  # the poller serves a round; its appends wake the poll
        a.append()
        assert calls == []
        polls.release()  # the round's end: served there, not inside the appending code
        assert calls == [("fetch", False)]
        assert not polls.held
        await trio.testing.wait_all_tasks_blocked()
        assert (calls, steps) == ([("fetch", False)], [])  # the task was never woken
        polls.release()  # nothing woken: nothing to do
        assert calls == [("fetch", False)]

    _run(polls, body)
    assert (polls.woken, polls.timed_out, len(polls)) == (1, 0, 0)


def test_the_deadline_wakes_a_poll_no_append_reached_at_that_time() -> None:
    polls = LongPolls()
    partition = _Partition()
    woken_at: list[tuple[float, bool]] = []

    async def body() -> None:
        start = trio.current_time()
        polls.watch([partition], start + 0.5, lambda t: woken_at.append((trio.current_time(), t)))
        await trio.sleep(0.499)
        assert woken_at == []
        await trio.sleep(1)
        assert woken_at == [(start + 0.5, True)]
        assert not partition.waiters

    _run(polls, body)
    assert polls.timed_out == 1


def test_a_nearer_deadline_watched_while_the_task_sleeps_toward_a_later_one_is_kept() -> None:
    polls = LongPolls()
    partition = _Partition()
    woken_at: dict[str, float] = {}

    async def body() -> None:
        start = trio.current_time()
        polls.watch(
            [partition], start + 10, lambda _: woken_at.setdefault("late", trio.current_time())
        )
        await trio.testing.wait_all_tasks_blocked()  # the task sleeps until start + 10
        polls.watch(
            [partition], start + 1, lambda _: woken_at.setdefault("near", trio.current_time())
        )
        await trio.sleep(20)
        assert woken_at == {"near": start + 1, "late": start + 10}

    _run(polls, body)


def test_a_cancelled_poll_is_never_woken_and_leaves_its_partitions() -> None:
    polls = LongPolls()
    partition = _Partition()
    calls: list[bool] = []

    async def body() -> None:
        poll = polls.watch([partition], trio.current_time() + 1, calls.append)
        poll.cancel()
        assert not partition.waiters and len(polls) == 0
        partition.append()
        await trio.sleep(5)

    _run(polls, body)
    assert calls == []


def test_a_poll_cancelled_after_an_append_woke_it_but_before_the_task_ran_is_not_called() -> None:
    polls = LongPolls()
    partition = _Partition()
    calls: list[bool] = []

    async def body() -> None:
        poll = polls.watch([partition], trio.current_time() + 1, calls.append)
        partition.append()  # woken: its call is due in the task's next turn
        poll.cancel()  # ...but its connection ended first
        await trio.sleep(5)

    _run(polls, body)
    assert calls == []
    assert polls.woken == 0


def test_a_poll_may_watch_again_from_its_wake_and_is_woken_by_the_next_append() -> None:
    polls = LongPolls()
    partition = _Partition()
    calls: list[bool] = []

    def on_wake(timed_out: bool) -> None:
        calls.append(timed_out)
        if len(calls) == 1:  # short of min_bytes: wait on
            polls.watch([partition], deadline, on_wake)

    async def body() -> None:
        nonlocal deadline
        deadline = trio.current_time() + 5
        polls.watch([partition], deadline, on_wake)
        partition.append()
        await trio.testing.wait_all_tasks_blocked()
        assert calls == [False] and partition.waiters
        await trio.sleep(10)

    deadline = 0.0
    _run(polls, body)
    assert calls == [False, True]


def test_polls_ended_before_a_long_deadline_do_not_pile_up() -> None:
    polls = LongPolls()
    partition = _Partition()

    async def body() -> None:
        for _ in range(1000):
            polls.watch([partition], trio.current_time() + 3600, lambda _: None)
            partition.append()
            await trio.testing.wait_all_tasks_blocked()
        assert len(polls) == 0
        assert len(polls._deadlines) <= 130  # leftovers dropped once they are most of it

    _run(polls, body)
    assert polls.woken == 1000


def test_a_failing_wake_is_logged_and_the_other_polls_are_still_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    polls = LongPolls()
    partition = _Partition()
    calls: list[str] = []

    def broken(_: bool) -> None:
        raise RuntimeError("a bug")

    async def body() -> None:
        deadline = trio.current_time() + 1
        polls.watch([partition], deadline, broken)
        polls.watch([partition], deadline, lambda _: calls.append("served"))
        partition.append()
        await trio.testing.wait_all_tasks_blocked()

    with caplog.at_level(logging.ERROR, logger="raftka.fetch"):
        _run(polls, body)
    assert calls == ["served"]
    assert "waking a waiting fetch failed" in caplog.text


def test_a_fetchs_wait_leaves_no_reference_cycle_behind() -> None:
    """What a waiting fetch holds is freed as soon as it is answered, without the cyclic
    collector (which a serving broker runs rarely: `broker/collector.py`)."""
    polls = LongPolls()
    partition = _Partition()
    answered: list[str] = []

    class Fetch:  # what `_long_poll` uses of a `_Fetch`
        def __init__(self) -> None:
            self.watched = [partition]
            self.reads = 0
            self.context = SimpleNamespace(services=SimpleNamespace(long_polls=polls))

        def read(self) -> bool:
            self.reads += 1
            return self.reads >= 2  # short of min_bytes after the first append

    async def body() -> weakref.ref[Fetch]:
        fetch = Fetch()
        cancel = _long_poll(fetch, trio.current_time() + 30, lambda: answered.append("done"))
        gone = weakref.ref(fetch)
        del fetch, cancel
        for _ in range(2):  # woken, waits on; woken again, answers
            partition.append()
            await trio.testing.wait_all_tasks_blocked()
        return gone

    gc.disable()
    try:
        gone = _run_returning(polls, body)
        assert answered == ["done"]
        assert gone() is None, "the answered fetch is still held by a reference cycle"
    finally:
        gc.enable()


def _run_returning(polls: LongPolls, body: Callable[[], Awaitable[object]]) -> object:
    result: list[object] = []

    async def wrapped() -> None:
        result.append(await body())

    _run(polls, wrapped)
    return result[0]
