"""The error raised when the consensus package finds its own state impossible."""

from __future__ import annotations


class RaftInvariantError(Exception):
    """An invariant of Raft or of the core's contract with its driver does not hold: a
    committed entry about to be truncated, log offsets with a gap, a `Ready` handled out of
    order, a message stepped into the wrong group.

    It reports a bug, not a condition to handle. Continuing could lose or corrupt committed
    data, so it propagates and stops whoever drives the core (the message says what was
    violated, with the values involved).
    """
