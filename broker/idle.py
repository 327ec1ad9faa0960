"""Idle client connections closed after `connections.max.idle.ms`, by one task per broker.

A connection that waits for bytes registers, with the time it will give up (`waiting`):
when it was last idle plus the idle limit, or, in the middle of a request, when that request
began plus the limit. The reaper looks at the registered waits a few times per limit and
expires those past their time, as Kafka's selector does on each poll. This costs a
connection a dict update per wait instead of a cancel scope, and an idle connection no task
wakeup at all. The time is kept on the connection (`idle_deadline`), so a connection that
stays registered while requests are served for it (the poller's) moves its time on by
setting a number of its own, with no dict update and no float object made or freed.
"""

from __future__ import annotations

import math
from typing import Protocol

import trio

#: How often the reaper looks, as a share of the idle limit, within these bounds.
CHECKS_PER_LIMIT = 10
CHECK_INTERVAL_MIN_S = 0.05
CHECK_INTERVAL_MAX_S = 1.0


class Expirable(Protocol):
    #: The trio time the connection gives up waiting at (set by `waiting`).
    idle_deadline: float

    def expire(self) -> None:
        """Stop waiting for bytes: the connection's time is up."""


class IdleConnections:
    """The connections waiting for bytes; each holds the trio time it gives up at."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = math.inf if idle_ms < 0 else idle_ms / 1000
        self._waiting: dict[Expirable, None] = {}

    def waiting(self, connection: Expirable, deadline: float) -> None:
        """`connection` waits for bytes until `deadline`; while it stays registered it may
        move its deadline itself (`idle_deadline`)."""
        connection.idle_deadline = deadline
        self._waiting[connection] = None

    def done(self, connection: Expirable) -> None:
        self._waiting.pop(connection, None)

    def expire_due(self, now: float) -> int:
        """Expire every connection past its deadline; how many were."""
        due = [c for c in self._waiting if c.idle_deadline <= now]
        for connection in due:
            del self._waiting[connection]
            connection.expire()
        return len(due)

    async def run(self) -> None:
        """Expire connections as their time comes, until cancelled."""
        if self.idle_s == math.inf:
            await trio.sleep_forever()
        interval = min(
            CHECK_INTERVAL_MAX_S, max(CHECK_INTERVAL_MIN_S, self.idle_s / CHECKS_PER_LIMIT)
        )
        while True:
            await trio.sleep(interval)
            self.expire_due(trio.current_time())
