"""Concurrent dequeues of one broker-side share member served together.

A member's share session takes one call at a time, so its dequeues cannot run side by
side; instead, while one round (a ShareFetch, the priorities lookup, a ShareAcknowledge)
runs, the dequeues arriving wait, and the next round serves all of them at once: one
ShareFetch for the sum of their `max`, the records handed out to them first come first
served (on a priority queue the most urgent to the earliest request), and one
ShareAcknowledge for the records of those with `ack=true` and for any record fetched
beyond what they took (released at once, so none stays locked to nobody).

Whoever finds no round running runs the next one, for every waiting dequeue of the
oldest one's principal (a round's Kafka requests are made as that principal, so requests
of different callers are never merged: each keeps its own ACLs). The rules of waiting
(`DequeueRounds.serve`, the round itself in `QueueApi._round`):

- A dequeue takes part in at least one round that starts after it arrived, however short
  its `wait_ms`: its wait is how long it waits for records to be there, not for its turn.
- A round that finds no record at any leader answers at once the dequeues whose wait has
  ended, then waits for records at most the shortest wait left among the others; a dequeue
  of the same principal arriving meanwhile is answered empty when its own wait ends first
  (the member found nothing when it last looked), else it joins the round at its next
  look. Dequeues of another principal wait for a round of their own.
- A round that found records never waits for more: the dequeues it gave none (fewer were
  there than asked) stay first in line for the next round, which starts at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

if TYPE_CHECKING:
    from raftka.broker.console.calls import Caller

#: The records one round fetches at most (as many as one dequeue may ask).
ROUND_RECORDS_MAX = 500

T = TypeVar("T")


def principal_of(caller: Caller) -> Hashable:
    """What a caller's Kafka requests are authorized by: its principal and listener, and its
    host (ACLs may name hosts). Only dequeues alike in all three are merged."""
    session = caller.session
    if session is None:
        return (None, None, caller.client_host)
    return (str(session.principal), session.listener.name, caller.client_host)


@dataclass(eq=False)
class Dequeue:
    """One dequeue waiting for its records."""

    caller: Caller
    topic: Any  # Any: the queue's kio metadata topic, as the caller's metadata answered it
    wanted: int
    ack: bool
    #: When its wait for records ends (the event loop's clock).
    deadline_s: float
    #: Its place in line (DequeueRounds.serve numbers them as they arrive).
    arrival: int = 0
    principal: Hashable = None
    #: Its answer: the records handed to it (and the round's changed priorities and
    #: refused acknowledgements), or the problem its round met.
    records: list[Any] | None = None
    changed: dict[tuple[int, int], int] = field(default_factory=dict)
    refused: set[tuple[int, int]] = field(default_factory=set)
    failure: Exception | None = None
    #: Its request ended (cancelled) before an answer: it takes no records.
    gone: bool = False
    woken: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        if self.principal is None:
            self.principal = principal_of(self.caller)

    @property
    def answered(self) -> bool:
        return self.records is not None or self.failure is not None

    def answer(self, records: list[Any]) -> None:
        self.records = records
        self.woken.set()

    def fail(self, failure: Exception) -> None:
        self.failure = failure
        self.woken.set()


def take(pending: list[Dequeue], taken: list[Dequeue], principal: Hashable) -> None:
    """Move the dequeues of `principal` from `pending` to `taken`, oldest first, while the
    records they ask for stay within ROUND_RECORDS_MAX (a round takes at least one)."""
    asked = sum(d.wanted for d in taken)
    for d in list(pending):
        if d.principal != principal:
            continue
        if taken and asked + d.wanted > ROUND_RECORDS_MAX:
            break
        pending.remove(d)
        taken.append(d)
        asked += d.wanted


def hand_out(ordered: Sequence[T], taken: Sequence[Dequeue]) -> tuple[dict[int, list[T]], list[T]]:
    """Records in the order they are to go out, handed to the dequeues first come first
    served, each up to its `wanted` (none to one gone): (position in `taken` -> its
    records, for those given some; the records no dequeue took)."""
    given: dict[int, list[T]] = {}
    at = 0
    for position, d in enumerate(taken):
        if d.gone or at >= len(ordered):
            continue
        given[position] = list(ordered[at : at + d.wanted])
        at += d.wanted
    return given, list(ordered[at:])


class DequeueRounds:
    """The dequeues waiting at one member, and whether a round runs for them."""

    def __init__(self) -> None:
        #: Dequeues waiting for a round, oldest first.
        self.pending: list[Dequeue] = []
        self.running = False
        self._arrivals = itertools.count()
        #: The principal of the round waiting for records (it found none at any leader),
        #: None while none waits.
        self.waiting: Hashable | None = None

    @property
    def busy(self) -> bool:
        return self.running or bool(self.pending)

    def answer_expired(self, dequeues: list[Dequeue], principal: Hashable) -> None:
        """Answer empty, and drop from `dequeues`, those of `principal` whose wait has ended
        (a round made as `principal` found no record: one of another principal is answered
        by a round of its own, which may refuse it)."""
        now_s = trio.current_time()
        for d in [d for d in dequeues if d.deadline_s <= now_s and d.principal == principal]:
            dequeues.remove(d)
            d.answer([])

    async def serve(self, dequeue: Dequeue, run_round: Callable[[], Awaitable[None]]) -> None:
        """Wait until a round answers `dequeue`, running rounds (`run_round`, which takes
        its dequeues from `pending`) whenever none runs."""
        dequeue.arrival = next(self._arrivals)
        self.pending.append(dequeue)
        deadline_s = dequeue.deadline_s
        try:
            while not dequeue.answered:
                if not self.running:
                    self.running = True
                    try:
                        # Shielded: the dequeues it took, and the records it acquired for
                        # them, are answered or released even when this request is cancelled
                        # (a round lasts at most the longest wait plus its calls).
                        with trio.CancelScope(shield=True):
                            await run_round()
                    finally:
                        self.running = False
                        self._wake_next()
                    continue
                dequeue.woken = trio.Event()
                with trio.move_on_at(deadline_s) as waited:
                    await dequeue.woken.wait()
                if waited.cancelled_caught:
                    deadline_s = float("inf")  # from now on it waits for a round
                    if self.waiting == dequeue.principal and dequeue in self.pending:
                        self.pending.remove(dequeue)
                        dequeue.answer([])
        finally:
            if not dequeue.answered:
                dequeue.gone = True
                if dequeue in self.pending:
                    self.pending.remove(dequeue)
                if not self.running:
                    self._wake_next()

    def put_back(self, dequeues: Sequence[Dequeue]) -> None:
        """Dequeues a round took and gave nothing, back in line where they were."""
        self.pending += [d for d in dequeues if not d.gone and not d.answered]
        self.pending.sort(key=lambda d: d.arrival)

    def _wake_next(self) -> None:
        """Wake the oldest waiting dequeue to run the next round."""
        if self.pending:
            self.pending[0].woken.set()
