"""What a broker does when an fsync fails: it stops at once.

After a failed fsync Linux may have dropped the dirty pages it could not write and marked
them clean, so a later fsync that succeeds says nothing about the data written before it
(PostgreSQL's "fsyncgate"). Retrying would let the broker acknowledge records, and record a
recovery point, that may not be on disk. Kafka takes such a log directory offline, and halts
when it has no other; raftka keeps one data directory, so it halts: without flushing or
closing its logs (which would fsync again and could write a recovery point over the lost
data). The partitions' other replicas take over, and on restart the log's recovery checks
every batch after the last recovery point.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

logger = logging.getLogger("raftka.server")

#: The broker's exit status after a failed fsync (Kafka's halt status).
SYNC_FAILURE_EXIT_CODE = 1


def halt_after_failed_sync(what: str, exc: OSError) -> NoReturn:
    """Log why and end the process now (no clean-up: see the module's docstring)."""
    logger.critical(
        "fsync of %s failed: %s. Data written since the last good fsync may be gone from "
        "the page cache, so this broker stops now without flushing or closing its logs; "
        "other replicas take over its partitions. Check the disk (dmesg, smartctl) before "
        "restarting it: on restart the logs are recovered from their last recovery point.",
        what,
        exc,
    )
    logging.shutdown()  # the line above must reach the log file
    os._exit(SYNC_FAILURE_EXIT_CODE)
