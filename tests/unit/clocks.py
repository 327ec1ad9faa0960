"""Clocks for tests of parts that take a `raftka.broker.clock.Clock`."""

from __future__ import annotations

from collections.abc import Callable

from raftka.broker.clock import SystemClock


class WallSetByTest(SystemClock):
    """The loop's clock (so trio's MockClock drives timeouts), with a wall clock the test
    moves: `wall()` gives epoch milliseconds."""

    def __init__(self, wall: Callable[[], int]) -> None:
        self.wall = wall

    def wall_ms(self) -> int:
        return self.wall()
