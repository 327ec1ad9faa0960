"""What a broker does when a partition's files meet an I/O error: the log directory goes
offline (Kafka's LogDirFailureChannel and LogManager.handleLogDirFailure).

An error of a write, fsync, read or rename of a partition's log (other than a full disk's,
below) takes its log directory offline on this broker, and only that one: the partitions in
the broker's other log directories (`log.dirs`) go on. Every replica in it stops (its Raft
group is removed, so it no longer votes, appends or acknowledges), the other replicas elect
a leader among themselves, and clients asking this broker get KAFKA_STORAGE_ERROR and go to
them. Nothing is retried. After a failed fsync Linux may have dropped the dirty pages it
could not write and marked them clean, so a later fsync that succeeds says nothing about the
data written before it (PostgreSQL's "fsyncgate"): retrying would let the broker acknowledge
records, and record a recovery point, that may not be on disk. The offline logs are neither
flushed nor closed for the same reason. The directory comes back when the broker restarts
(as in Kafka), its logs recovered from their last recovery point.

A full disk (ENOSPC, EDQUOT) is not such an error: the write that met it was refused before
anything reached the page cache, so the replica refuses writes and takes them again by
itself once space returns (`consensus.errors.OUT_OF_SPACE`).

The metadata log (`__cluster_metadata-0`) and the Raft hard states (`raft.lmdb`) are not a
partition's files: a failure of either halts the broker, as Kafka halts when its metadata log
directory fails (they live in the first log directory). Kafka also halts when its last log
directory fails; raftka keeps running with every partition offline, so it stays in the
metadata quorum and reports the failed directories (DescribeLogDirs, metrics, `raftka
cluster status`); a replica placed on it meanwhile is offline too.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, NoReturn

from raftka.consensus.core import StorageError

if TYPE_CHECKING:
    from raftka.broker.topics import TopicManager

logger = logging.getLogger("raftka.server")

#: The broker's exit status after a failure it cannot survive (Kafka's halt status).
SYNC_FAILURE_EXIT_CODE = 1


def halt_after_failed_sync(what: str, exc: OSError) -> NoReturn:
    """Log why and end the process now (no clean-up: see the module's docstring)."""
    logger.critical(
        "I/O error on %s: %s. Data written since the last good fsync may be gone from the "
        "page cache, so this broker stops now without flushing or closing its logs; other "
        "replicas take over its partitions. Check the disk (dmesg, smartctl) before "
        "restarting it: on restart the logs are recovered from their last recovery point.",
        what,
        exc,
    )
    logging.shutdown()  # the line above must reach the log file
    os._exit(SYNC_FAILURE_EXIT_CODE)


class LogDirFailureHandler:
    """Called (as the Raft node's `on_sync_failure`, and by the broker's flush, retention
    and cleaning jobs) with the Raft group or partition whose files failed; `topics` is
    set once the broker has made its TopicManager."""

    def __init__(self, metadata_group: str) -> None:
        self.metadata_group = metadata_group
        self.topics: TopicManager | None = None

    def __call__(self, group: str | None, exc: OSError) -> None:
        if group is None:
            halt_after_failed_sync("the Raft hard states", exc)
        if group == self.metadata_group or self.topics is None:
            halt_after_failed_sync(f"the log of {group}", exc)
        log_dir = self.topics.log_dir_of(group)
        if log_dir is None:
            # Its folder was deleted meanwhile (topic deleted, replica moved away).
            logger.warning("I/O error on the log of %s, no longer hosted here: %s", group, exc)
            return
        self.log_dir_failed(log_dir, f"the log of {group}", exc)

    def log_dir_failed(self, log_dir: str, what: str, exc: OSError) -> None:
        """Take the log directory `log_dir` offline after an I/O error on `what`
        (idempotent)."""
        topics = self.topics
        assert topics is not None
        if log_dir in topics.offline_log_dirs:
            return
        reason = f"I/O error on {what}: {exc}"
        taken = topics.take_log_dir_offline(log_dir, reason, StorageError(None, reason))
        live = [d for d in topics.log_dirs if d not in topics.offline_log_dirs]
        logger.error(
            "log directory %s is offline after an I/O error on %s: %s. Its %d "
            "partitions stop here (no retry: after a failed write or fsync the kernel "
            "may have dropped the data); their other replicas take over. %s Check the "
            "disk (dmesg, smartctl), then restart the broker to bring the directory back.",
            log_dir,
            what,
            exc,
            len(taken),
            f"The partitions in {', '.join(live)} go on."
            if live
            else "No log directory is left: every partition of this broker is offline.",
        )
