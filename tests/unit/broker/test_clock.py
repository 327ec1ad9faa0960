from __future__ import annotations

import time

import trio
import trio.testing

from raftka.broker.clock import SYSTEM_CLOCK, ManualClock


def test_a_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(now_s=5.0, wall_ms=1_000)
    assert (clock.now_s(), clock.wall_ms()) == (5.0, 1_000)
    clock.advance(1.5)
    assert (clock.now_s(), clock.wall_ms()) == (6.5, 2_500)


def test_the_system_clock_is_the_loops_clock_and_the_wall_clock() -> None:
    async def main() -> tuple[float, float]:
        before = SYSTEM_CLOCK.now_s()
        await trio.sleep(30)  # virtual under the mock clock
        return before, SYSTEM_CLOCK.now_s()

    before, after = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert after - before == 30
    assert abs(SYSTEM_CLOCK.wall_ms() - time.time() * 1000) < 5_000
