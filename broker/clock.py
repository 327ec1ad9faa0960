"""The broker's one source of time, injected into the parts that read it.

`now_s()` is the event loop's clock (`trio.current_time()`: monotonic, and virtual under
`trio.testing.MockClock`), for deadlines, timeouts and intervals; `wall_ms()` is epoch
milliseconds, for what Kafka stamps or compares with a client's time (record timestamps,
retention, expiry). A part given a `Clock` reads no other time, so a test can hand it a
`ManualClock` and step time exactly.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def now_s(self) -> float:
        """Seconds on a monotonic clock (the event loop's); only differences mean anything."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    """The running trio loop's clock and the machine's wall clock."""

    def now_s(self) -> float:
        return trio.current_time()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to, for tests of pure parts."""

    def __init__(self, now_s: float = 0.0, wall_ms: int = 1_700_000_000_000) -> None:
        self._now_s = now_s
        self._wall_ms = wall_ms

    def now_s(self) -> float:
        return self._now_s

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by `seconds`."""
        assert seconds >= 0, "a clock never goes back"
        self._now_s += seconds
        self._wall_ms += round(seconds * 1000)


SYSTEM_CLOCK: Clock = SystemClock()
