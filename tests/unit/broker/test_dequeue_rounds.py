"""The combining of one share member's concurrent dequeues (broker/queues/rounds.py): which
dequeues a round takes, how its records are handed out, and when a waiting dequeue is
answered, driven by a round that stands in for the ShareFetch (no broker: the rules alone,
on trio's mock clock)."""

from __future__ import annotations

from typing import Any

import trio
from trio.testing import MockClock

from raftka.broker.queues.rounds import (
    ROUND_RECORDS_MAX,
    Dequeue,
    DequeueRounds,
    hand_out,
    take,
)


def dequeue(wanted: int, principal: str = "alice", wait_s: float = 0.0, at: float = 0.0) -> Dequeue:
    caller: Any = None  # the principal is given, so no caller is read
    return Dequeue(caller, None, wanted, True, at + wait_s, principal=principal)


def test_a_round_takes_one_principals_dequeues_oldest_first_within_the_bound() -> None:
    pending = [dequeue(300), dequeue(1, "bob"), dequeue(150), dequeue(100), dequeue(50)]
    first, bobs, second, third, fourth = pending
    taken: list[Dequeue] = []
    take(pending, taken, "alice")
    # 300 + 150 fit, 100 more would pass the bound: the round stops there (first come first
    # served: the 50 behind it waits too).
    assert taken == [first, second] and ROUND_RECORDS_MAX == 500
    assert pending == [bobs, third, fourth]
    alone: list[Dequeue] = []
    take([big := dequeue(500), dequeue(1)], alone, "alice")
    assert alone == [big]


def test_records_go_first_come_first_served_and_the_rest_is_left() -> None:
    taken = [dequeue(2), dequeue(1), dequeue(3), dequeue(2)]
    taken[1].gone = True
    given, left = hand_out(list("abcdefgh"), taken)
    assert given == {0: ["a", "b"], 2: ["c", "d", "e"], 3: ["f", "g"]}
    assert left == ["h"]
    given, left = hand_out(list("abc"), taken)
    assert given == {0: ["a", "b"], 2: ["c"]} and left == []


def test_dequeues_arriving_during_a_round_are_served_together_by_the_next() -> None:
    rounds = DequeueRounds()
    served: list[list[int]] = []

    async def run_round() -> None:
        taken: list[Dequeue] = []
        take(rounds.pending, taken, rounds.pending[0].principal)
        await trio.sleep(1)  # the round's fetch and acknowledgement
        served.append([d.wanted for d in taken])
        for d in taken:
            d.answer(list(range(d.wanted)))

    answers: dict[int, list[Any] | None] = {}
    arrivals: list[int] = []

    async def one(n: int) -> None:
        d = dequeue(n)
        arrivals.append(n)  # serve() puts it in line before its first checkpoint
        await rounds.serve(d, run_round)
        answers[n] = d.records

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, 1)
            await trio.sleep(0.5)
            for n in range(2, 12):
                nursery.start_soon(one, n)
        # trio starts the ten in an order of its own: they are served in the order they came.
        assert served == [[1], arrivals[1:]] and sorted(arrivals) == list(range(1, 12))
        assert answers == {n: list(range(n)) for n in range(1, 12)}
        assert not rounds.busy

    trio.run(scenario, clock=MockClock(autojump_threshold=0))


def test_a_dequeue_whose_wait_ends_while_the_round_waits_is_answered_empty() -> None:
    rounds = DequeueRounds()
    rounds_run: list[str] = []

    async def run_round() -> None:
        principal = rounds.pending[0].principal
        rounds_run.append(str(principal))
        taken: list[Dequeue] = []
        take(rounds.pending, taken, principal)
        rounds.answer_expired(taken, principal)
        if not taken:
            return
        rounds.waiting = principal  # nothing found: wait for the shortest wait left
        await trio.sleep(min(d.deadline_s for d in taken) - trio.current_time())
        rounds.waiting = None
        rounds.answer_expired(taken, principal)

    ended: dict[str, float] = {}

    async def one(name: str, wait_s: float, principal: str = "alice") -> None:
        d = dequeue(1, principal, wait_s=wait_s, at=trio.current_time())
        await rounds.serve(d, run_round)
        assert d.records == []
        ended[name] = trio.current_time()

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "long", 5.0)
            await trio.sleep(1)
            nursery.start_soon(one, "short", 0.5)
            nursery.start_soon(one, "bob's", 0.5, "bob")
        # The short one ended at its own deadline, not the round's, and took no round of its
        # own; bob's, of another principal, was answered by a round made as bob.
        assert ended == {"short": 1.5, "long": 5.0, "bob's": 5.0}
        assert rounds_run == ["alice", "bob"]

    trio.run(scenario, clock=MockClock(autojump_threshold=0))
