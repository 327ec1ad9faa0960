"""Batches of many connections written together, once per turn of the event loop.

A Produce request's batch is proposed while its request is read, and written (to the log,
and sent to the followers) by `ReplicaManager.write_proposed`, which writes every batch
proposed so far with one write and one round of messages per partition. A connection that
has answered what its buffer held, and whose answers wait for that write, used to write
before it waited for more bytes; with many connections each sending a request at a time,
every request was then a write of its own, and each answer was sent before the next
connection's request was even looked at. Instead such a connection hands its answers to
this task and waits for bytes at once. trio runs the task after every task that was ready
in the same turn (each connection that had bytes), so it writes all of their batches
together and sends each connection's answers, in their order, without waking the
connections again. Answers decided outside the reader (a commit that acknowledges several of
a connection's Produce requests, a long-polling Fetch that found records) are handed here
too, so that a connection's answers decided in one turn leave in one send. The requests
the readiness poller serves for parked connections (broker/readiness.py) are all served in
one step of its task: their write is made at the end of that step (`held`, `write_held`),
without a step of this task.

The task costs a turn of the event loop of its own, which pays only when several
connections share its write. A connection served alone, turn after turn (a client that sends
one request and waits, or one producer pipelining on its own connection), writes its own
batches at once instead (`write_now`): a tenth or more of such a request's CPU. Which of the
two a broker does follows what its writes see: a write for the batches of several
connections turns grouping on; a run of `SOLO_WRITES_BEFORE_INLINE` writes for one
connection's batches (or none: answers decided in other tasks only) turns it off; and while
it is off, one connection's ask in `PROBE_EVERY` goes through the task anyway, so that
connections served together are noticed (those of the same turn join the probe's write).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Protocol

import trio

logger = logging.getLogger("raftka.connection")

#: Writes in a row for one connection's batches (or none), after which connections write
#: their own batches at once (`GroupCommit.write_now`).
SOLO_WRITES_BEFORE_INLINE: Final = 32
#: While connections write their own batches, one ask in this many goes through the task.
PROBE_EVERY: Final = 16


class Flushable(Protocol):
    def written(self) -> None:
        """The batches proposed so far are written: settle and send the answers."""

    def abort(self) -> None:
        """`written` raised: log why and end the connection."""


class GroupCommit:
    """The connections whose answers wait for the next write of the proposed batches."""

    def __init__(self, write_proposed: Callable[[], None]) -> None:
        self._write_proposed = write_proposed
        self._waiting: dict[Flushable, None] = {}
        self._wakeup = trio.Event()
        #: Writes made, and the connections answered after them.
        self.writes = 0
        self.connections_answered = 0
        #: Whether connections that ask are answered after the turn's write (else they
        #: write their own batches at once), and the solo writes in a row meanwhile.
        self.grouping = True
        self._solo_writes = 0
        self._asks = 0
        #: Connections waiting for this turn's write that proposed batches (the others
        #: only send answers decided outside their reader, such as a long-polling Fetch's).
        self._writers: set[Flushable] = set()
        #: While the readiness poller serves the connections of its step, those that wait
        #: for a write are written for at its end (`write_held`), not by the task.
        self.held = False

    def write_now(self, connection: Flushable) -> bool:
        """Whether `connection`, whose answers wait for the batches it proposed, writes them
        itself now (True) or is answered after this turn's write (False, as
        `wait_for_write`): now only while no write is due this turn and connections have
        been served alone (the module's docstring says how that is told)."""
        if not self.grouping and not self._waiting:
            self._asks += 1
            if self._asks % PROBE_EVERY:
                return True
        self._writers.add(connection)
        self.wait_for_write(connection)
        return False

    def wait_for_write(self, connection: Flushable) -> None:
        """`connection.written()` is called after the next write, at this turn's end."""
        if not self._waiting and not self.held:
            self._wakeup.set()
        self._waiting[connection] = None

    def write_held(self) -> None:
        """The poller's step is over: write for the connections that asked during it
        (with any that asked before it in this turn)."""
        if self._waiting:
            self.write()

    def forget(self, connection: Flushable) -> None:
        """A connection that ends settles its own answers."""
        self._waiting.pop(connection, None)
        self._writers.discard(connection)

    def write(self) -> None:
        """Write the proposed batches, then let each waiting connection answer. A failure
        is the failing connection's alone: the others still answer."""
        waiting, self._waiting = self._waiting, {}
        self.writes += 1
        self.connections_answered += len(waiting)
        writers, self._writers = self._writers, set()
        if len(writers) > 1:
            self.grouping = True
            self._solo_writes = 0
        elif self.grouping:
            self._solo_writes += 1
            if self._solo_writes >= SOLO_WRITES_BEFORE_INLINE:
                self.grouping = False
                self._solo_writes = 0
        try:
            # Errors of a partition's write become its answers (`write_proposed`); anything
            # else is a bug, logged here and met again by each connection's own settle.
            self._write_proposed()
        except Exception:
            logger.exception("writing the proposed batches failed")
        for connection in waiting:
            try:
                connection.written()
            except Exception:
                connection.abort()

    async def run(self) -> None:
        """Write once per turn in which a connection asked, until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if self._waiting:  # else the poller's step wrote for them (`write_held`)
                self.write()
