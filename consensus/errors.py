"""The errors that stop whoever drives the consensus package: its own state impossible,
or storage that can no longer be trusted."""

from __future__ import annotations

import errno

#: Errors of a full disk (or quota): the write that met them was refused, nothing was
#: dropped from the page cache, so it may be retried once space returns.
OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class RaftInvariantError(Exception):
    """An invariant of Raft or of the core's contract with its driver does not hold: a
    committed entry about to be truncated, log offsets with a gap, a `Ready` handled out of
    order, a message stepped into the wrong group.

    It reports a bug, not a condition to handle. Continuing could lose or corrupt committed
    data, so it propagates and stops whoever drives the core (the message says what was
    violated, with the values involved).
    """


class SyncFailedError(Exception):
    """An fsync (or a commit of hard states) that acknowledgements waited for failed. The
    kernel may have dropped the data it could not write, so a retry that succeeds would not
    prove it durable: nothing that waited may go ahead, and the node must stop (a full
    disk, OUT_OF_SPACE, is retried instead: its write was refused before any sync). Raised by
    `RaftNode.run_syncs` when the node has no `on_sync_failure`, or when that did not remove
    the failed group (a broker takes the log directory offline, or halts when the hard
    states failed).
    """
