"""The sockets of plaintext connections watched by one epoll of the broker's own, and the
requests that arrive on them served by one task.

Waiting for a socket with trio (`trio.lowlevel.wait_readable`) arms a one-shot registration
in trio's epoll for every wait, a system call per request, and its wakeup is a step of the
connection's task. With many connections each sending a request at a time (a thousand
producers at ten records a second), the requests arrive one per turn of the loop, and each
paid for a task's step, the re-arming, and a second step for the group commit's task.

Instead every plaintext socket is registered here once, edge-triggered, and the poller's
task waits on this epoll alone. A connection whose reader has nothing left to do but wait
for bytes parks (`wait`); when its socket becomes readable the poller reads for it and
serves the requests that arrive as the reader would (`Connection.serve_readable`: the
common requests that need no wait), in the poller's own step and without waking the reader.
The reader is woken only for what needs it: a request that must wait (run alone, for room,
for a throttle), a frame still incomplete, a read that took all it asked for (more bytes
may wait, and no edge will say so), the end of the connection, an error. Answers that
wait for the group commit are written once for every connection served in a round, at its
end (`GroupCommit.held`), and the waiting fetches those batches wake are answered after it
(`LongPolls.held`). Before its step ends the poller takes the events again, and serves
the requests that came meanwhile in a further round (up to `ROUNDS_PER_STEP`), rather than
letting trio's loop report its epoll at once and step it again for them. And while trio's
loop has nothing else to do, the step does not end: it waits for the sockets itself
(broker/idle_wait.py), so that a request reaching an idle broker alone costs no turn of the
loop.

An edge reports bytes that arrived since the events were last taken. A socket whose reader
is not parked when its edge comes is marked (`Connection.readable`) and disarmed; its reader
reads before it next parks, and parking re-arms the socket, which then reports at once any
bytes that came meanwhile, so no bytes are left unseen.
"""

from __future__ import annotations

import contextlib
import select
from typing import TYPE_CHECKING, Final, Protocol

import outcome
import trio

from raftka.broker.idle_wait import IdleWait

if TYPE_CHECKING:
    from raftka.broker.group_commit import GroupCommit
    from raftka.broker.long_polls import LongPolls
    from raftka.broker.metrics import BrokerMetrics

#: What a socket is watched for: bytes, the peer's close (both edge-triggered). Errors and
#: hang-ups are always reported.
_EVENTS: Final = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET

#: How many times one step of the poller takes and serves the sockets' events before it
#: lets the other tasks run (if none has anything to do, it waits on in its step).
ROUNDS_PER_STEP: Final = 2


class Connection(Protocol):
    """What the poller uses of a connection (broker/connection.py)."""

    #: The socket's descriptor.
    fd: int
    #: The reader's task while it is parked (`ReadinessPoller.wait`).
    parked: trio.lowlevel.Task | None
    #: Bytes may have arrived since the reader last read.
    readable: bool
    #: Whether the poller hears of bytes for it (else they are the busy reader's to read).
    armed: bool

    def serve_readable(self, now: float) -> bytes | bytearray | None:
        """Read and serve what arrived while the reader is parked (`now`: trio's clock):
        None if the reader may wait on, else what to wake it with."""


class ReadinessPoller:
    """The plaintext connections of one broker, by socket descriptor."""

    def __init__(
        self,
        group_commit: GroupCommit,
        metrics: BrokerMetrics | None = None,
        long_polls: LongPolls | None = None,
        linger_us: int = 0,
    ) -> None:
        self._epoll = select.epoll()
        #: `request.linger.us` (broker/idle_wait.py): how long a wait lingers while requests
        #: come close together.
        self.linger_us = linger_us
        self._group_commit = group_commit
        #: Fetches the round's appends wake are answered at its end (`LongPolls.held`).
        self._long_polls = long_polls
        self._connections: dict[int, Connection] = {}
        #: Counts the wake-ups (`BrokerMetrics.poller_wakeups`).
        self._metrics = metrics

    def register(self, connection: Connection) -> bool:
        """Watch `connection`'s socket until `unregister`; False once the poller stopped
        (the broker is closing: the connection waits with trio)."""
        if self._epoll.closed:
            return False
        fd = connection.fd
        self._epoll.register(fd, _EVENTS)
        self._connections[fd] = connection
        return True

    def unregister(self, connection: Connection) -> None:
        """Stop watching `connection`'s socket; before it is closed."""
        fd = connection.fd
        if self._connections.get(fd) is connection:
            del self._connections[fd]
            if not self._epoll.closed:
                # OSError: already closed, and dropped by the kernel with the socket.
                with contextlib.suppress(OSError):
                    self._epoll.unregister(fd)

    async def wait(self, connection: Connection) -> bytes | bytearray:
        """Park `connection`'s reader until the poller wakes it, with what it woke it for
        (`Connection.serve_readable`); cancellable. The reader read all there was since
        its socket was disarmed (`serve_events`)."""
        if not connection.armed and not self._epoll.closed:
            # Re-armed, the socket reports bytes that came meanwhile at once.
            self._epoll.modify(connection.fd, _EVENTS)
            connection.armed = True
        connection.parked = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            connection.parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        woken: bytes | bytearray = await trio.lowlevel.wait_task_rescheduled(abort)
        return woken

    def serve_events(self, events: list[tuple[int, int]], now: float) -> None:
        """Serve the connections whose sockets had events at `now` (trio's time), then
        write the batches their answers wait for, once."""
        connections = self._connections
        group_commit = self._group_commit
        long_polls = self._long_polls
        group_commit.held = True
        if long_polls is not None:
            long_polls.held = True
        try:
            for fd, _ in events:
                connection = connections.get(fd)
                if connection is None:
                    continue
                task = connection.parked
                if task is None:
                    # The reader is busy: it reads before it parks again. Until then the
                    # socket is disarmed, so that a client sending while it is served (a
                    # large request comes in many pieces) does not wake the poller for each.
                    connection.readable = True
                    if connection.armed:
                        self._epoll.modify(fd, 0)
                        connection.armed = False
                    continue
                wake: outcome.Outcome[bytes | bytearray]
                try:
                    woken = connection.serve_readable(now)
                    if woken is None:
                        continue
                    wake = outcome.Value(woken)
                except Exception as exc:  # the reader's to meet: it would have raised it
                    wake = outcome.Error(exc)
                # Unless serving it cancelled the reader (a failed send ends the connection).
                if connection.parked is task:
                    connection.parked = None
                    trio.lowlevel.reschedule(task, wake)
        finally:
            group_commit.held = False
            try:
                group_commit.write_held()
            finally:
                if long_polls is not None:
                    long_polls.release()

    async def run(self) -> None:
        """Serve the sockets' events as they come, until cancelled."""
        epoll = self._epoll
        metrics = self._metrics
        idle = IdleWait.of_current_run(epoll, self.linger_us / 1_000_000, metrics)
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                # Read as the step starts: only a step trio ran alone may wait in itself.
                alone = idle is not None and idle.stepped_alone()
                while True:
                    if metrics is not None:
                        metrics.poller_wakeups += 1
                    events = epoll.poll(0)
                    rounds = 0
                    # The most sockets a round served, for the wait's linger (a socket
                    # served in two rounds is one client's).
                    served = 0
                    while events:
                        if len(events) > served:
                            served = len(events)
                        # Once for every connection served in the round.
                        now = trio.current_time() if idle is None else idle.now()
                        self.serve_events(events, now)
                        rounds += 1
                        if rounds == ROUNDS_PER_STEP:
                            break
                        # Requests that came while these were served, without a turn of
                        # trio's loop (its epoll would report this one at once) for each.
                        events = epoll.poll(0)
                    # While trio has nothing else to do, wait here rather than in its loop.
                    if idle is None or not alone or not idle.wait(served):
                        break
        finally:
            epoll.close()
