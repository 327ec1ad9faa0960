"""The broker's reaper of idle connections: who is expired, and when."""

from __future__ import annotations

import trio
import trio.testing

from raftka.broker.idle import IdleConnections


class Waiter:
    def __init__(self) -> None:
        self.expired = 0
        self.idle_deadline = 0.0

    def expire(self) -> None:
        self.expired += 1


def test_only_connections_past_their_deadline_expire_and_only_once() -> None:
    idle = IdleConnections(1000)
    early, late, done = Waiter(), Waiter(), Waiter()
    idle.waiting(early, 5.0)
    idle.waiting(late, 9.0)
    idle.waiting(done, 1.0)
    idle.done(done)  # bytes came: no longer waiting
    assert idle.expire_due(4.9) == 0
    assert idle.expire_due(5.0) == 1
    assert (early.expired, late.expired, done.expired) == (1, 0, 0)
    assert idle.expire_due(100.0) == 1
    assert idle.expire_due(200.0) == 0
    assert (early.expired, late.expired, done.expired) == (1, 1, 0)


def test_a_new_wait_replaces_the_last_deadline() -> None:
    idle = IdleConnections(1000)
    waiter = Waiter()
    idle.waiting(waiter, 1.0)
    idle.done(waiter)
    idle.waiting(waiter, 10.0)
    assert idle.expire_due(5.0) == 0
    assert waiter.expired == 0


def test_the_reaper_expires_a_wait_within_a_tenth_of_the_limit() -> None:
    async def main() -> None:
        idle = IdleConnections(2000)
        waiter = Waiter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle.run)
            idle.waiting(waiter, trio.current_time() + 2.0)
            await trio.sleep(1.9)
            assert waiter.expired == 0
            await trio.sleep(0.2 + 0.2)
            assert waiter.expired == 1
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_no_limit_means_no_reaping() -> None:
    async def main() -> None:
        idle = IdleConnections(-1)
        waiter = Waiter()
        idle.waiting(waiter, 0.0)
        with trio.move_on_after(3600):
            await idle.run()
        assert waiter.expired == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
