"""Idle client connections closed after `connections.max.idle.ms`, by one task per broker.

A connection that waits for bytes registers the time it will give up (`waiting`): when it
was last idle plus the idle limit, or, in the middle of a request, when that request began
plus the limit. The reaper looks at the registered waits a few times per limit and expires
those past their time, as Kafka's selector does on each poll. This costs a connection a dict
update per wait instead of a cancel scope, and an idle connection no task wakeup at all.
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
    def expire(self) -> None:
        """Stop waiting for bytes: the connection's time is up."""


class IdleConnections:
    """The connections waiting for bytes, with the trio time each gives up at."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = math.inf if idle_ms < 0 else idle_ms / 1000
        self._deadlines: dict[Expirable, float] = {}

    def waiting(self, connection: Expirable, deadline: float) -> None:
        self._deadlines[connection] = deadline

    def done(self, connection: Expirable) -> None:
        self._deadlines.pop(connection, None)

    def expire_due(self, now: float) -> int:
        """Expire every connection past its deadline; how many were."""
        due = [c for c, deadline in self._deadlines.items() if deadline <= now]
        for connection in due:
            del self._deadlines[connection]
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
