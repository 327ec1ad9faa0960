"""How a partition's log is compacted: a clean request carried out by a `CleaningJob` on
the segments below its end, and the staged segments swapped in on the owner's thread.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from .cleaner import (
    CLEANER_CHECKPOINT_FILE,
    CLEANER_STAGING_DIR,
    CLEANER_SWAP_FILE,
    CleanerCheckpoint,
    CleaningJob,
    CleanRequest,
    SourceSegment,
)
from .epochs import fsync_directory, write_file_atomically
from .errors import LogInvariantError
from .partition_append import PartitionAppend
from .segment import LogSegment


class PartitionCleaning(PartitionAppend):
    """Carrying out clean requests (compaction) with the cleaner, and swapping results in."""

    def source_segments(self, end_offset: int) -> list[SourceSegment]:
        """The segments holding offsets below `end_offset`, each with a descriptor of its
        own for a worker thread (the caller closes them, see `SourceSegment.close`)."""
        sources: list[SourceSegment] = []
        try:
            for segment in self.segments:
                if segment.base_offset >= end_offset:
                    break
                fd = os.open(segment.log_path, os.O_RDONLY)
                sources.append(SourceSegment(segment, fd, segment.size_bytes))
        except BaseException:
            for source in sources:
                source.close()
            raise
        return sources

    def start_cleaning(
        self, request: CleanRequest, now_ms: int, io_bytes_per_second: float
    ) -> CleaningJob:
        """A job carrying out `request` (the first of `clean_requests`, committed), whose
        `run` goes to a worker thread and whose result `finish_cleaning` swaps in. Rolls the
        active segment first if it holds offsets below the request's end: the active
        segment is never rewritten."""
        if not self.clean_requests or self.clean_requests[0] != request:
            raise LogInvariantError(f"{self.directory}: {request} is not the next clean request")
        if self.segments[-1].base_offset < request.end_offset:
            self.roll(now_ms)
        self._cancel_cleaning()
        self._cleaning = CleaningJob(
            self.directory,
            request,
            self.source_segments(request.end_offset),
            index_interval_bytes=self.config.index_interval_bytes,
            segment_index_bytes=self.config.segment_index_bytes,
            io_bytes_per_second=io_bytes_per_second,
        )
        return self._cleaning

    def finish_cleaning(self, job: CleaningJob) -> Callable[[], None]:
        """Swap the job's staged segments in (on the owner's thread, after `run`); returns
        what must then run in a worker thread (checkpoint, marker removal, fsyncs).

        A staged segment whose original is gone meanwhile (retention, DeleteRecords) is
        dropped. Readers holding a replaced segment keep reading its old file.
        """
        if self._cleaning is job:
            self._cleaning = None
        for source in job.sources:
            source.close()
        result = job.result
        if result is None:
            raise LogInvariantError(f"{self.directory}: cleaning finished before it ran")
        swaps: list[tuple[int, LogSegment, LogSegment]] = []
        for base, staged in result.staged.items():
            if base < self.segments[0].base_offset:
                staged.delete()  # retention or DeleteRecords removed it meanwhile
                continue
            index = self._segment_index(base)
            old = self.segments[index]
            if (
                old.base_offset != base
                or old is self.segments[-1]
                or old.next_offset != staged.next_offset
            ):
                # The segment changed under the cleaning (a truncation of an uncommitted
                # tail it held): drop the whole result, the request is carried out again.
                (self.directory / CLEANER_SWAP_FILE).unlink(missing_ok=True)
                fsync_directory(self.directory)
                for other in result.staged.values():
                    other.delete()
                raise LogInvariantError(
                    f"{self.directory}: segment {base} changed during the cleaning to offset"
                    f" {result.cleaned_end}; it will be cleaned again"
                )
            swaps.append((index, old, staged))
        for index, old, staged in swaps:
            staged.move_files_to(self.directory)
            staged.txn_index = old.txn_index
            self.segments[index] = staged
            old.release()
        self._directory_dirty = True
        if self.clean_requests and self.clean_requests[0] == job.request:
            self.clean_requests.pop(0)
        checkpoint = CleanerCheckpoint(job.request.offset, result.cleaned_end)
        self.cleaner_checkpoint = checkpoint
        self.tombstone_horizon_ms = result.tombstone_horizon_ms
        directory = self.directory

        def finish() -> None:
            fsync_directory(directory)
            write_file_atomically(directory / CLEANER_CHECKPOINT_FILE, checkpoint.encode())
            (directory / CLEANER_SWAP_FILE).unlink(missing_ok=True)
            shutil.rmtree(directory / CLEANER_STAGING_DIR, ignore_errors=True)
            fsync_directory(directory)

        return finish

    def abandon_cleaning(self, job: CleaningJob) -> None:
        """Release what a job that will not be finished holds, once its `run` has ended
        (its staging folder stays for the next cleaning or the next open to remove)."""
        if self._cleaning is job:
            self._cleaning = None
        for source in job.sources:
            source.close()
        if job.result is not None:
            for staged in job.result.staged.values():
                staged.close()
