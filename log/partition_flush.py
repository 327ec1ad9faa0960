"""How a partition's log becomes durable: flush.messages and flush.ms, flush jobs that fsync
in a worker thread while appends go on (the recovery point advancing over a prefix of
finished jobs), and a synchronous flush.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .epochs import checked_fsync, fsync_directory, sync_all, write_file_atomically
from .partition_core import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    fsync_file,
)
from .partition_retention import PartitionRetention


class FlushJob:
    """A flush job (`PartitionFlush.flush_job`): call it to run it. It holds descriptors of
    the files it syncs from the moment it is made; one that will never run (its process
    "killed" in a simulation, a test's leftover) gives them back with `abandon`."""

    __slots__ = ("_run", "_descriptors")

    def __init__(self, run: Callable[[], None], descriptors: list[int]) -> None:
        self._run = run
        self._descriptors = descriptors

    def __call__(self) -> None:
        self._run()

    def abandon(self) -> None:
        """Close the descriptors without syncing (a job run already closed its own)."""
        while self._descriptors:
            os.close(self._descriptors.pop())


class PartitionFlush(PartitionRetention):
    """Making appended data durable: flush policy, flush jobs for worker threads, and a
    synchronous flush."""

    def flush_due_by_messages(self) -> bool:
        """Whether flush.messages asks for an fsync of what was appended so far."""
        return 0 < self.config.flush_messages <= self._unflushed_messages

    def should_flush(self, now_ms: int) -> bool:
        """Whether flush.messages or flush.ms asks for an fsync now."""
        self._clock_ms = now_ms
        if now_ms < self._last_flush_ms:
            # The wall clock stepped back: count flush.ms from the step, or data would wait
            # in the page cache for as long as the step was.
            self._last_flush_ms = now_ms
        if self._unflushed_messages == 0:
            return False
        return (
            self._unflushed_messages >= self.config.flush_messages
            or now_ms - self._last_flush_ms >= self.config.flush_ms
        )

    def flush_job(self, now_ms: int | None = None) -> FlushJob | None:
        """A function that makes everything appended so far durable, or None if nothing is
        pending. It may run in a worker thread while appends, rolls, retention and other jobs
        go on. `recovery_point` reaches this call's log end offset once this job and every
        job made before it have finished; a job that is never run holds it back until
        `close`.
        """
        dirty = [segment for segment in self.segments if segment.dirty]
        target = self.log_end_offset
        if (
            not dirty
            and not self._epochs_dirty
            and not self._log_start_dirty
            and not self._directory_dirty
            and not self._files_to_sync
            and target <= self.recovery_point
        ):
            return None
        # What can fail comes first, before anything is taken from the log's state: a full
        # disk refusing a segment's buffered index entries, or no descriptor to be had, leaves
        # every segment and file still owed (and no descriptor open) for the next job.
        for segment in dirty:
            segment.write_indexes()
        descriptors: list[int] = []
        try:
            for segment in dirty:
                descriptors += segment.fsync_targets()
        except BaseException:
            for fd in descriptors:
                os.close(fd)
            raise
        files = self._files_to_sync
        self._files_to_sync = set()
        for segment in dirty:
            segment.dirty = False
        # The leader epochs and the log start go together, as of one moment: a job finishing
        # before an older one must not leave epochs that begin at a log start whose file the
        # older job was to write (an open fits older epochs to a newer log start, not the
        # reverse).
        carried = self._epochs_dirty or self._log_start_dirty
        epochs = self.epochs.serialize() if carried else None
        log_start = self.log_start_offset if carried else None
        sync_directory = self._directory_dirty or bool(files)
        self._epochs_dirty = self._log_start_dirty = self._directory_dirty = False
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock_ms if now_ms is None else now_ms
        # Only the owner's thread changes these two, so no lock (a job may hold it for fsyncs).
        self._jobs_issued += 1
        ticket = self._jobs_issued
        generation = self._durable_generation
        directory = self.directory

        def flush() -> None:
            run_descriptors = descriptors[:]
            descriptors.clear()  # this run closes them; `abandon` then has none left
            try:
                for fd in run_descriptors:
                    checked_fsync(fd)
                for path in files:
                    fsync_file(path)
            except OSError:
                for segment in dirty:
                    segment.dirty = True  # a later job must sync them again
                    segment.txn_index.mark_unsynced()
                self._files_to_sync |= files
                self._directory_dirty = True
                if carried:  # and write what this one took
                    self._epochs_dirty = self._log_start_dirty = True
                raise
            finally:
                for fd in run_descriptors:
                    os.close(fd)
            if sync_directory and directory.exists():
                fsync_directory(directory)
            with self._durable_lock:
                current = generation == self._durable_generation
                if current and epochs is not None and ticket > self._epochs_written_by:
                    # The log start first: a crash between the two leaves older epochs,
                    # which the next open cuts to the newer log start.
                    write_file_atomically(
                        directory / LOG_START_OFFSET_FILE, f"{log_start}\n".encode()
                    )
                    write_file_atomically(directory / LEADER_EPOCH_CHECKPOINT, epochs)
                    self._epochs_written_by = ticket
                self._job_targets[ticket] = target if current else -1
                reached = -1
                while self._jobs_done_through + 1 in self._job_targets:
                    self._jobs_done_through += 1
                    reached = max(reached, self._job_targets.pop(self._jobs_done_through))
                if current and reached > self.recovery_point:
                    write_file_atomically(directory / RECOVERY_POINT_FILE, f"{reached}\n".encode())
                    self.recovery_point = reached

        return FlushJob(flush, descriptors)

    def flush(self, now_ms: int | None = None) -> None:
        """Make everything durable now, on this thread, regardless of jobs in flight."""
        for segment in self.segments:
            segment.write_indexes()
            sync_all(segment.fsync_targets())
        for path in self._files_to_sync:
            fsync_file(path)
        self._files_to_sync.clear()
        fsync_directory(self.directory)
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock_ms if now_ms is None else now_ms
        for segment in self.segments:
            segment.dirty = False
        with self._durable_lock:
            # Jobs made before this point have nothing left to add; let them finish quietly.
            self._durable_generation += 1
            self._job_targets.clear()
            self._jobs_done_through = self._jobs_issued
            self._epochs_written_by = self._jobs_issued
            directory = self.directory
            write_file_atomically(
                directory / LOG_START_OFFSET_FILE, f"{self.log_start_offset}\n".encode()
            )
            write_file_atomically(directory / LEADER_EPOCH_CHECKPOINT, self.epochs.serialize())
            write_file_atomically(
                directory / RECOVERY_POINT_FILE, f"{self.log_end_offset}\n".encode()
            )
            self.recovery_point = self.log_end_offset
        self._epochs_dirty = self._log_start_dirty = self._directory_dirty = False
