"""trio's run queue, counting the batches trio takes from it (broker/idle_wait.py says why).

Kept apart from the compiled modules (broker/compiled.py): a class mypyc compiles cannot
derive from `collections.deque`.
"""

from __future__ import annotations

import collections


class CountingRunQueue(collections.deque):  # type: ignore[type-arg]
    """trio's run queue, counting the batch trio takes from it: trio copies the queue to a
    batch and then clears it (`unrolled_run`)."""

    #: The size of the batch trio took last, until a step reads it (`IdleWait.stepped_alone`).
    batch = 0
    #: How many batches trio took: the turns of its loop that ran tasks.
    batches = 0

    def clear(self) -> None:
        self.batch = len(self)
        self.batches += 1
        super().clear()


def batches_run() -> int:
    """How many batches of tasks trio's loop has run in the current run since an `IdleWait`
    began counting them (0 if none did): the turns of the loop that stepped a task."""
    from trio._core import _run

    runq = _run.GLOBAL_RUN_CONTEXT.runner.runq
    return runq.batches if type(runq) is CountingRunQueue else 0
