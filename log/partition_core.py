"""The state every part of a partition's log shares (`PartitionCore`): its segments, offsets,
leader epochs, producer state, durability bookkeeping and compaction progress, with the
small helpers each part uses. `PartitionLog` (in `partition`) is assembled from the parts
built on it: recovery, appending, flushing, retention, truncation and cleaning.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

from .cleaner import CleanerCheckpoint, CleaningJob, CleanRequest
from .config import LogConfig
from .epochs import LeaderEpochCache, checked_fsync, write_file_atomically
from .producer_state import CompletedTxn, ProducerStateManager
from .segment import LogSegment
from .txn_index import AbortedTxn

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class AppendInfo(NamedTuple):
    """Where an append landed. `offset_of_max_timestamp` is the base offset of the batch
    holding `max_timestamp` (-1 when no batch had a timestamp)."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes: int


class LogSlice(NamedTuple):
    """Whole batches of one segment: bytes [position, position + length), and the offset
    after the last of them."""

    segment: LogSegment
    position: int
    length: int
    next_offset: int


def fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # replaced or deleted since: its successor is synced on its own
    try:
        checked_fsync(fd)
    finally:
        os.close(fd)


class PartitionCore:
    """What the parts of `PartitionLog` share: one partition's segments and offsets (those in
    [log_start_offset, log_end_offset) are readable) and the state kept beside them."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int) -> None:
        # Use `PartitionLog.open`; this only sets fields.
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.epochs = LeaderEpochCache()
        # Idempotent producers' sequences; rebuilt from snapshots and batch headers on open.
        self.producer_state = ProducerStateManager(config.producer_id_expiration_ms)
        self._epochs_dirty = False
        self._log_start_dirty = False
        self._directory_dirty = False
        # Small files written without fsync on the owner's thread; the next flush job
        # syncs them (and the directory) in its worker thread.
        self._files_to_sync: set[Path] = set()
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._clock_ms = now_ms  # latest time a caller told us; flush.ms counts from it
        # Flush jobs may finish in any order on worker threads; the recovery point only
        # advances over a prefix of finished jobs, and a truncation (new generation) voids
        # the jobs made before it. All of this state is guarded by `_durable_lock`.
        self._durable_lock = threading.Lock()
        self._durable_generation = 0
        self._jobs_issued = 0
        self._jobs_done_through = 0
        self._job_targets: dict[int, int] = {}
        self._epochs_written_by = 0
        self.recovery_point = 0  # every offset below is on disk with its indexes
        # Compaction: committed or not, the clean requests in the log this replica has not
        # carried out yet (in log order), and where the last one carried out reached.
        self.clean_requests: list[CleanRequest] = []
        self._cleaning: CleaningJob | None = None  # the job started and not yet finished
        self.cleaner_checkpoint = CleanerCheckpoint(-1, 0)
        self.tombstone_horizon_ms = -1  # earliest delete horizon of tombstones left, if known

    def _new_segment(self, base_offset: int, now_ms: int, *, fresh: bool = False) -> LogSegment:
        segment = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            segment_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
        )
        if fresh:
            # Create the index files now: a missing one later means it was lost.
            segment.offset_index.create()
            segment.time_index.create()
            segment.txn_index.create()
        return segment

    def _append_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs; index sizes apply to segments created from now on."""
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def _segments_from(self, offset: int) -> list[LogSegment]:
        """The segments from the one holding `offset` (or the first) on."""
        first = self._segment_index(offset)
        return self.segments[first:]

    def _index_aborted(self, segment: LogSegment, completed: CompletedTxn) -> None:
        segment.txn_index.append(
            AbortedTxn(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                self.producer_state.last_stable_offset_after(completed),
            )
        )
        segment.dirty = True

    def _cancel_cleaning(self) -> None:
        """Stop the running job, if any: it writes no swap marker from now on."""
        if self._cleaning is not None:
            self._cleaning.cancel()
            self._cleaning = None

    def _lower_recovery_point(self, offset: int) -> None:
        with self._durable_lock:
            self._durable_generation += 1
            # Jobs made before this write neither the leader epochs nor the log start they
            # took (they are of an old generation): the next job must, or a change they
            # carried (an epoch appended, DeleteRecords) never reaches its file while later
            # jobs raise the recovery point past it.
            self._epochs_dirty = self._log_start_dirty = True
            if offset < self.recovery_point:
                self.recovery_point = offset
                # Not fsynced here (it runs inside a Raft Ready, on the event loop): recovery
                # always re-checks the last segment, and the next flush job syncs this file.
                path = self.directory / RECOVERY_POINT_FILE
                write_file_atomically(path, f"{offset}\n".encode(), durable=False)
                self._files_to_sync.add(path)
