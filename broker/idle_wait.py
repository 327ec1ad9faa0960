"""The readiness poller waiting for its sockets inside its own step while trio's loop has
nothing else to do.

When each request reaches an idle broker alone (a thousand clients sending now and then, one
producer with `linger.ms=0`), every one costs a turn of trio's loop: trio's epoll reports the
poller's, trio steps the poller's task, the task re-arms its one-shot registration as it
waits again, and trio works out its next timeout before it sleeps: a tenth or more of
what such a request costs. Yet while no other task is runnable and no deadline is due, that
turn decides nothing: the poller would be the next to run whatever came.

So in that state the poller's step waits itself, in a `poll` of two descriptors: the
poller's epoll (its sockets) and trio's (every descriptor trio watches: other sockets, the
wake-up socket that signals and other threads write to, the poller's own epoll not among
them while its task runs). It waits no longer than trio would have slept, until the next
deadline. When only its sockets are ready it serves them in the same step and waits again;
it ends the step, and trio's loop turns, as soon as trio has work: one of trio's descriptors
is ready, a deadline is due, serving made a task runnable, or a task waits for the loop to
go idle (`trio.testing.wait_all_tasks_blocked`).

One condition is not visible in trio's state: trio runs its runnable tasks in batches, and a
task of the poller's batch that has not run yet is in no queue. A step may therefore wait
only when trio ran it in a batch of its own. trio's run queue is swapped for one that counts
each batch as trio takes it (broker/run_queue.py), and the count is read once per step.

These are trio's internals (`trio._core._run`'s runner: its run queue, deadlines, clock,
epoll, idle waiters and instruments). `IdleWait.of_current_run` checks each is what this
module expects and gives None otherwise, and then the poller waits with trio as before (it
also gives None under a guest run, a clock other than trio's own, or with
`RAFTKA_IDLE_WAIT=0` in the environment). While an instrument of trio's loop's waits for I/O
is installed (`before_io_wait`, `after_io_wait`) a step does not wait: it expects to see each.

trio's clock is read here as trio's `SystemClock` reads it (its offset plus `perf_counter`),
without the three Python calls of `trio.current_time()`: the poller reads it at each step.

Lingering (`request.linger.us`). A thousand clients sending now and then keep a broker busy
with requests that each come alone: every one costs a sleep and a wake-up of the broker in
the kernel, a round of the poller, and a write of the log of its own, about a quarter of
what the request costs, while the next request comes a few tens of microseconds later. So when
the requests come close together, the wait lingers: it first sleeps for the linger, then
takes what came meanwhile, and one wake-up serves them all. Close together means both that
the last two waits ended within the linger (one is also what the end of a burst looks like,
after which a linger would find nothing) and that a round since then served more than one
socket: a single client waiting for each answer before it sends again (or pipelining on one
connection) would only be slowed down, since no other request would come while it waits. A
request then waits about the linger at most (the kernel's timer may wake the sleep some tens
of microseconds late), only while requests come that often; at a lower rate the wait takes
each as it comes.
"""

from __future__ import annotations

import collections
import math
import os
import select
import time
from typing import TYPE_CHECKING, Any, Final

from raftka.broker.run_queue import CountingRunQueue

if TYPE_CHECKING:
    from raftka.broker.metrics import BrokerMetrics

#: trio's longest sleep (`trio._core._run._MAX_TIMEOUT`), in seconds.
_LONGEST_WAIT: Final = 86_400.0
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_perf_counter: Final = time.perf_counter
_sleep: Final = time.sleep
#: How many waits in a row must end within the linger before a wait lingers: one short wait
#: is also what the rest of a burst looks like, where a linger would find nothing.
LINGER_AFTER_SHORT_WAITS: Final = 2


class IdleWait:
    """The poller's waits in its own step, for the trio run it is in."""

    def __init__(
        self,
        runner: Any,
        ours: int,
        trios: int,
        linger_s: float = 0.0,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self._runner = runner
        self._trios = trios
        #: How long a wait lingers while requests come close together (0: never).
        self.linger_s = linger_s
        #: The waits in a row that ended within the linger (a linger that found requests
        #: keeps the count).
        self._short_waits = 0
        #: Counts the lingers (`BrokerMetrics.poller_lingers`).
        self._metrics = metrics
        self._clock_offset: float = runner.clock.offset
        self._poll = select.poll()
        self._poll.register(ours, select.POLLIN)
        self._poll.register(trios, select.POLLIN)
        instruments = runner.instruments  # by hook; a UserDict in recent trio
        self._hooks: dict[str, object] = getattr(instruments, "data", instruments)
        runq = runner.runq
        if type(runq) is not CountingRunQueue:
            runner.runq = CountingRunQueue(runq)

    @staticmethod
    def of_current_run(
        epoll: select.epoll, linger_s: float = 0.0, metrics: BrokerMetrics | None = None
    ) -> IdleWait | None:
        """The waits for the poller of `epoll` in the current trio run, lingering for
        `linger_s` while requests come close together (counted in `metrics`), or None if
        the run is not one whose state this module can read."""
        if os.environ.get("RAFTKA_IDLE_WAIT") == "0":
            return None
        try:
            from trio._core import _run

            runner = _run.GLOBAL_RUN_CONTEXT.runner
            trios = runner.io_manager._epoll
            usable = (
                type(runner.clock) is _run.SystemClock
                and isinstance(runner.clock.offset, float)
                and not runner.is_guest
                and isinstance(trios, select.epoll)
                and type(runner.runq) in (collections.deque, CountingRunQueue)
                and callable(runner.deadlines.next_deadline)
                and hasattr(runner, "waiting_for_idle")
                and isinstance(getattr(runner.instruments, "data", runner.instruments), dict)
            )
        except (ImportError, AttributeError):
            return None
        if not usable:
            return None
        return IdleWait(runner, epoll.fileno(), trios.fileno(), linger_s, metrics)

    def now(self) -> float:
        """trio's time (`trio.current_time()`), as its `SystemClock` tells it."""
        return self._clock_offset + _perf_counter()

    def stepped_alone(self) -> bool:
        """Whether the task that calls this was run in a batch of its own: to call once,
        as its step starts."""
        runq = self._runner.runq
        if type(runq) is not CountingRunQueue:
            return False  # trio replaced its queue: the count is gone
        alone: bool = runq.batch == 1
        runq.batch = 0  # read: a later step reads the count of its own batch
        return alone

    def wait(self, served: int = 0) -> bool:
        """Wait in the calling step until the poller's sockets are ready (True), or end
        it (False) at once if trio has anything to do, or when something of trio's is ready
        or its next deadline comes. For a step that `stepped_alone`; `served`: the most
        sockets a round of it served since its last wait (more than one, after
        `LINGER_AFTER_SHORT_WAITS` waits within the linger: it lingers)."""
        runner = self._runner
        if runner.runq or runner.waiting_for_idle:
            return False
        hooks = self._hooks
        if "before_io_wait" in hooks or "after_io_wait" in hooks:
            return False
        # A float local: compiled, the arithmetic and the comparisons are native.
        deadline: float = runner.deadlines.next_deadline()
        timeout = deadline - self.now()
        if timeout <= 0.0:
            return False
        if timeout > _LONGEST_WAIT:
            timeout = _LONGEST_WAIT
        linger = self.linger_s
        if served > 1 and self._short_waits >= LINGER_AFTER_SHORT_WAITS and timeout > linger:
            _sleep(linger)
            if self._metrics is not None:
                self._metrics.poller_lingers += 1
            ready = self._poll.poll(0)
            if ready:
                return all(fd != self._trios for fd, _ in ready)
            timeout -= linger
        began = _perf_counter()
        ready = self._poll.poll(math.ceil(timeout * 1000.0))
        if _perf_counter() - began < linger:
            self._short_waits += 1
        else:
            self._short_waits = 0
        return bool(ready) and all(fd != self._trios for fd, _ in ready)
