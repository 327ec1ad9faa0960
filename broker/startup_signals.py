"""A SIGTERM that reaches `raftka serve` before the broker listens for it.

Until the broker's event loop runs, Python's default for SIGTERM would end the process at
once, half started, with no exit code a supervisor reads as a clean stop. `defer` (the first
thing `raftka serve` does) records such a signal instead; the broker then stops cleanly as
soon as it can (`requested`), without serving.
"""

from __future__ import annotations

import signal

_received: list[int] = []


def defer() -> None:
    """Record SIGTERM from now on, until the broker's own handling replaces this."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: _received.append(signum))


def requested() -> bool:
    """Whether a SIGTERM came while the broker was starting."""
    return bool(_received)
