"""The time a group machine is given with every call (it reads no clock itself)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Instant:
    """A moment as the machine sees it: `ms` on the monotonic clock deadlines are kept on,
    `wall_ms` (ms since the Unix epoch) for the state timestamps stored with a group."""

    ms: float
    wall_ms: int
