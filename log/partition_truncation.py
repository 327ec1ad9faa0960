"""How a partition's log is cut back: a follower's divergent suffix dropped, or all data
deleted and the log restarted at an offset (after a snapshot).
"""

from __future__ import annotations

import shutil

from .cleaner import CLEANER_STAGING_DIR, CLEANER_SWAP_FILE
from .epochs import LeaderEpochCache, fsync_directory, write_file_atomically
from .errors import LogInvariantError
from .partition_core import LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_FILE
from .partition_recovery import PartitionRecovery
from .producer_state import ProducerStateManager, delete_snapshots_after


class PartitionTruncation(PartitionRecovery):
    """Cutting the log back: a follower's divergent suffix, or everything."""

    def truncate_to(self, offset: int) -> None:
        """Drop every batch whose last offset is >= `offset`, with its index entries and
        epochs (a Raft follower's divergent suffix). A batch containing `offset` goes whole,
        so `log_end_offset` may end below `offset`. Truncating below the first segment
        empties the log and restarts it at `offset`; to `log_end_offset` changes nothing.
        An offset past the end or negative raises LogInvariantError (nothing changes).
        """
        if offset > self.log_end_offset or offset < 0:
            raise LogInvariantError(
                f"{self.directory}: truncation to offset {offset} outside the log"
                f" [0, {self.log_end_offset}]"
            )
        if offset == self.log_end_offset:
            return
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, self._clock_ms)
            return
        delete_snapshots_after(self.directory, offset)
        self._lower_recovery_point(offset)
        self.clean_requests = [r for r in self.clean_requests if r.offset < offset]
        while self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
            self._directory_dirty = True
        active = self.segments[-1]
        active.truncate_to(offset)
        # What the files now hold is told before anything is written, so a write refused
        # (a full disk) leaves a log that claims nothing it lost.
        self.log_end_offset = active.next_offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._epochs_dirty |= self.epochs.truncate_from_end(self.log_end_offset)
        self._load_producer_state()
        self._lower_recovery_point(self.log_end_offset)
        active.write_indexes()

    def truncate_fully_and_start_at(
        self, offset: int, now_ms: int, epoch: int | None = None
    ) -> None:
        """Delete all data and restart the log empty at `offset` (e.g. after a snapshot).
        `epoch`, if given, is the leader epoch of the offset just below: the epoch cache
        starts with it, so the empty log still knows its latest epoch."""
        if offset < 0:
            raise LogInvariantError(f"{self.directory}: a log cannot start at offset {offset}")
        self._lower_recovery_point(0)
        # A cleaning of the old data must not be swapped in at the next open.
        self._cancel_cleaning()
        (self.directory / CLEANER_SWAP_FILE).unlink(missing_ok=True)
        shutil.rmtree(self.directory / CLEANER_STAGING_DIR, ignore_errors=True)
        fsync_directory(self.directory)
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._bases.clear()
        self.clean_requests = []
        self._append_segment(self._new_segment(offset, now_ms, fresh=True))
        self._directory_dirty = True
        self.log_start_offset = self.log_end_offset = offset
        self.epochs = LeaderEpochCache()
        if epoch is not None:
            self.epochs.assign(epoch, offset)
        delete_snapshots_after(self.directory, -1)
        self.producer_state = ProducerStateManager(self.config.producer_id_expiration_ms)
        # Written now: a stale checkpoint would outlive the data it describes.
        with self._durable_lock:
            write_file_atomically(self.directory / LEADER_EPOCH_CHECKPOINT, self.epochs.serialize())
            write_file_atomically(self.directory / LOG_START_OFFSET_FILE, f"{offset}\n".encode())
