"""Fetches waiting for data: woken by their partitions' appends or their deadline, by one
task per broker.

A consumer that keeps up sends a Fetch that finds nothing and waits (`max_wait_ms`,
`min_bytes`) until its partitions have records. Such a wait used to cost its request a task
of its own: started, parked with a cancel scope for the deadline, woken by the append and
ended. Here a waiting fetch is a `Poll` in each of its partitions' waiter sets
(`Partition.notify_appended` calls `set`) and in one deadline heap; this task calls its
`on_wake` once, with `timed_out` False after an append to any of them, or True when its
deadline passed first. Appends only mark polls woken: `on_wake` runs in this task (after the
appending code has finished its step), for every poll woken in the same turn of the event
loop at once, so a fetch that reads in `on_wake` sees the log as a task would.

While the readiness poller serves a round of requests (`held`), the polls its appends wake
are served at the round's end by the poller itself (`release`), after its group commit wrote
the round's batches, rather than in a step of this task.

`on_wake` must not block. It may `watch` again (a fetch short of its `min_bytes`). A poll
that is cancelled (its connection ended) is never woken.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable, Iterable
from typing import Protocol

import trio

logger = logging.getLogger("raftka.fetch")


class Waitable(Protocol):
    """A partition as a poll waits on it: a set of waiters whose `set()` its appends call."""

    @property
    def waiters(self) -> set[Wakeable]: ...


class Wakeable(Protocol):
    def set(self) -> None:
        """Something was appended to the partition (or it changed leader, or went)."""


class Poll:
    """One fetch's wait; `LongPolls.watch` makes it."""

    __slots__ = ("_polls", "_partitions", "deadline", "on_wake", "finished", "cancelled")

    def __init__(
        self,
        polls: LongPolls,
        partitions: tuple[Waitable, ...],
        deadline: float,
        on_wake: Callable[[bool], None],
    ) -> None:
        self._polls = polls
        self._partitions = partitions
        self.deadline = deadline
        self.on_wake = on_wake
        #: Woken, timed out or cancelled: out of its partitions' waiter sets.
        self.finished = False
        #: `on_wake` is not to be called (even if an append already woke it).
        self.cancelled = False

    def set(self) -> None:
        """An append to one of the partitions (called by its `notify_appended`)."""
        if not self.finished:
            self._finish()
            self._polls._woke(self)

    def cancel(self) -> None:
        """No `on_wake` any more (the fetch's connection ended)."""
        self.cancelled = True
        self.on_wake = _ignore  # what the fetch holds goes now, not at the deadline
        if not self.finished:
            self._finish()
            self._polls._ended_early()

    def _finish(self) -> None:
        self.finished = True
        for partition in self._partitions:
            partition.waiters.discard(self)


def _ignore(timed_out: bool) -> None:
    """The callback of a poll already woken or cancelled."""


class LongPolls:
    """The broker's waiting fetches; `run` is the task that wakes them."""

    def __init__(self) -> None:
        # (deadline, tie-breaker, poll), the earliest first; finished polls stay until
        # their deadline or the next compaction.
        self._deadlines: list[tuple[float, int, Poll]] = []
        self._seq = itertools.count()
        self._finished_early = 0
        self._woken: list[Poll] = []
        # The task while it sleeps (to reschedule), and the scope of its sleep (whose
        # deadline follows the heap's earliest).
        self._sleeper: trio.lowlevel.Task | None = None
        self._sleep_scope: trio.CancelScope | None = None
        #: Woken polls wait for `release`, not for this task (the poller serves a round).
        self.held = False
        #: Polls made, and woken by an append or by their deadline (for tests and metrics).
        self.watched = 0
        self.woken = 0
        self.timed_out = 0

    def __len__(self) -> int:
        """Polls waiting."""
        return len(self._deadlines) - self._finished_early

    def watch(
        self, partitions: Iterable[Waitable], deadline: float, on_wake: Callable[[bool], None]
    ) -> Poll:
        """Call `on_wake(False)` after the next append to any of `partitions`, or
        `on_wake(True)` at trio time `deadline` if none came by then; once, from `run`."""
        poll = Poll(self, tuple(partitions), deadline, on_wake)
        for partition in poll._partitions:
            partition.waiters.add(poll)
        self.watched += 1
        heapq.heappush(self._deadlines, (deadline, next(self._seq), poll))
        scope = self._sleep_scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline
        return poll

    def _woke(self, poll: Poll) -> None:
        self._woken.append(poll)
        self._ended_early()
        sleeper = self._sleeper
        if sleeper is not None and not self.held:
            self._sleeper = None
            trio.lowlevel.reschedule(sleeper)

    def release(self) -> None:
        """End `held`: serve the polls woken meanwhile, now."""
        self.held = False
        if self._woken:
            self._serve_woken()

    def _ended_early(self) -> None:
        """A poll in the deadline heap ended before its deadline: once most of the heap is
        such leftovers (long `max_wait_ms` ended by data), drop them."""
        self._finished_early += 1
        if self._finished_early > 64 and 2 * self._finished_early > len(self._deadlines):
            self._deadlines = [d for d in self._deadlines if not d[2].finished]
            heapq.heapify(self._deadlines)
            self._finished_early = 0

    def serve_due(self, now: float) -> None:
        """Call `on_wake` of the polls woken so far and of those past their deadline."""
        self._serve_woken()
        # `on_wake` may watch again, and so replace the heap: read it each time.
        while self._deadlines and self._deadlines[0][0] <= now:
            poll = heapq.heappop(self._deadlines)[2]
            if poll.finished:
                self._finished_early -= 1
                continue
            poll._finish()
            self.timed_out += 1
            self._call(poll, True)

    def _serve_woken(self) -> None:
        woken, self._woken = self._woken, []
        for poll in woken:
            if poll.cancelled:
                continue
            self.woken += 1
            self._call(poll, False)

    @staticmethod
    def _call(poll: Poll, timed_out: bool) -> None:
        # Called once: a woken poll stays in the deadline heap until its deadline, and what
        # its fetch holds should not stay with it.
        on_wake, poll.on_wake = poll.on_wake, _ignore
        try:
            on_wake(timed_out)
        except Exception:
            # A bug of the fetch that waited; the others are still served.
            logger.exception("waking a waiting fetch failed")

    async def run(self) -> None:
        """Wake polls as appends and deadlines come, until cancelled."""
        task = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._sleeper = None  # the deadline passed: no reschedule may follow
            return trio.lowlevel.Abort.SUCCEEDED

        while True:
            self.serve_due(trio.current_time())
            if self._woken:
                await trio.lowlevel.checkpoint()  # woken while serving: serve them next turn
                continue
            deadline = self._deadlines[0][0] if self._deadlines else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                self._sleep_scope = scope
                self._sleeper = task
                try:
                    await trio.lowlevel.wait_task_rescheduled(abort)
                finally:
                    self._sleep_scope = None
                    self._sleeper = None
