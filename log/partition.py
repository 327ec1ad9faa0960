"""A partition's log: ordered segments in `<data-dir>/<topic>-<partition>/`.

`PartitionLog` assigns offsets, stamps leader epochs, rolls, reads, flushes, recovers after a
crash and enforces retention. It is not thread-safe: every method runs on the owner's
thread, except the function `flush_job` returns, which may run in a worker thread while
appends continue.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from raftka.protocol.records import BatchHeader, UnsupportedBatch, record_timestamps

from .config import LogConfig
from .epochs import write_file_atomically
from .errors import OffsetOutOfRange
from .partition_core import (
    CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    AppendInfo,
    LogSlice,
)
from .partition_truncation import PartitionTruncation
from .producer_state import write_snapshot
from .segment import LogSegment
from .txn_index import AbortedTxn

#: A slice from its fields without the NamedTuple's Python-level `__new__` (one per fetch).
_new_slice: Final = tuple.__new__

# Importable from here, as before the parts moved to their own modules.
__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "LogSlice",
    "PartitionLog",
]


class PartitionLog(PartitionTruncation):
    """One partition's segments. Offsets in [log_start_offset, log_end_offset) are readable.

    Assembled from its parts, each in its own module and each the base of the next: the
    shared `PartitionCore`, retention, flushing, appending, cleaning, recovery and
    truncation (one line of classes, not a diamond of mixins, so that mypyc compiles them
    as native classes); reading, leader epochs, transactions and the lifecycle are here.
    """

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open the partition folder, creating it, or recovering it after a crash.

        After an unclean shutdown every segment at or after the recovery point is validated
        batch by batch; a torn or corrupt batch is cut off with everything after it.
        """
        log = cls(directory, config, now_ms)
        directory.mkdir(parents=True, exist_ok=True)
        log._open_segments(now_ms)
        return log

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's last stable offset under `high_watermark`: below it every transaction is
        decided and its marker replicated, so read_committed consumers read up to it. Never
        below the log start (a transaction open there may have been deleted), nor above
        `high_watermark`. A pure read: `on_high_watermark` forgets replicated markers."""
        unstable = self.producer_state.first_unstable_offset(high_watermark)
        if unstable is None:
            return high_watermark
        return min(max(unstable, self.log_start_offset), high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The partition's high watermark advanced (on every replica): completed
        transactions whose markers lie below it no longer hold back the LSO."""
        self.producer_state.on_high_watermark(high_watermark)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [fetch_offset, upper_bound_offset), from
        the aborted-transaction indexes of the segments from the one holding
        `fetch_offset` on, stopping once an index shows no later one can overlap (Kafka's
        collectAbortedTxns)."""
        found: list[AbortedTxn] = []
        if upper_bound_offset <= fetch_offset:
            return found
        for segment in self._segments_from(fetch_offset):
            search = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += search.aborted
            if search.complete:
                break
        return found

    def read(
        self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes:
        """Whole batches from the one containing `fetch_offset`, from a single segment.

        Stops before any batch reaching `max_offset` (the high watermark: its last offset
        >= max_offset) and at `max_bytes`, except that with `min_one_batch` (KIP-74) a first
        batch larger than max_bytes comes back whole. `log_end_offset` reads b"";
        outside [log_start_offset, log_end_offset] raises OffsetOutOfRange.
        """
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRange(fetch_offset, self.log_start_offset, self.log_end_offset)
        if fetch_offset == self.log_end_offset or fetch_offset >= max_offset:
            return b""
        for segment in self._segments_from(fetch_offset):
            data = segment.read(fetch_offset, max_bytes, max_offset, min_one_batch)
            if data is not None:
                return data
        return b""

    def fetch_slice(
        self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> LogSlice | None:
        """Where `read` would find its bytes (segment, position, length), with the offset
        just after the last batch in the slice (the upper bound a read_committed fetch
        collects aborted transactions below); None for b"".

        Reads batch headers only. The answer holds while the caller does not yield to other
        tasks: retention or truncation may delete the segment afterwards.
        """
        if fetch_offset < self.log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRange(fetch_offset, self.log_start_offset, self.log_end_offset)
        if fetch_offset == self.log_end_offset or fetch_offset >= max_offset:
            return None
        for segment in self._segments_from(fetch_offset):
            found = segment.locate(fetch_offset, max_bytes, max_offset, min_one_batch)
            if found is not None:
                start, stop, next_offset = found
                if stop <= start:
                    return None
                return _new_slice(LogSlice, (segment, start, stop - start, next_offset))
        return None

    def batch_header_at(self, offset: int) -> BatchHeader | None:
        """Header of the batch containing `offset` (position relative to its segment), or
        None outside [log_start_offset, log_end_offset). Reads headers only, never records."""
        if not self.log_start_offset <= offset < self.log_end_offset:
            return None
        return self.segments[self._segment_index(offset)].find_batch(offset)

    def _batch_bytes(self, segment: LogSegment, header: BatchHeader) -> bytes:
        return segment.pread(header.batch_length + 12, header.position)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `log_start_offset` whose
        timestamp is >= `timestamp_ms` (ListOffsets), or None.

        Batches are found through the time index; only the one matching batch is decoded.
        If its records cannot be decoded, answers its first offset and max timestamp.
        """
        start = self.log_start_offset
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms or segment.next_offset <= start:
                continue
            from_offset = max(segment.time_index.lookup(timestamp_ms), start)
            _, position = segment.offset_index.lookup(from_offset)
            for header in segment.batches_from(position):
                last = header.base_offset + header.last_offset_delta
                if header.max_timestamp < timestamp_ms or last < start:
                    continue
                try:
                    for offset, timestamp in record_timestamps(self._batch_bytes(segment, header)):
                        if timestamp >= timestamp_ms and offset >= start:
                            return offset, timestamp
                except UnsupportedBatch:
                    return max(header.base_offset, start), header.max_timestamp
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record carrying it), or (-1, -1) if no record
        has a timestamp (ListOffsets MAX_TIMESTAMP)."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None:
            return -1, -1
        header = best.find_batch(best.offset_of_max_timestamp)
        if header is None:
            return best.max_timestamp, best.offset_of_max_timestamp
        try:
            for offset, timestamp in record_timestamps(self._batch_bytes(best, header)):
                if timestamp == header.max_timestamp:
                    return timestamp, offset
        except UnsupportedBatch:
            pass
        return header.max_timestamp, header.base_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """Leader epoch that wrote `offset`, per the leader-epoch cache."""
        return self.epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101): (largest known epoch <= `epoch`, its end offset)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def last_batch_epoch(self) -> int:
        """Epoch of the newest stamped batch (the cache's latest epoch), -1 if none."""
        return self.epochs.latest_epoch

    def close(self) -> None:
        """Flush everything, mark the folder cleanly shut down and release descriptors. If a
        write fails (a full disk) the descriptors are still released, the folder stays
        unmarked (the next open recovers it) and the OSError propagates."""
        self._cancel_cleaning()
        try:
            self.segments[-1].seal()
            self.flush()
            write_snapshot(self.directory, self.log_end_offset, self.producer_state)
            write_file_atomically(self.directory / CLEAN_SHUTDOWN_FILE, b"")
        finally:
            for segment in self.segments:
                segment.close()

    def abandon(self) -> None:
        """Release every descriptor without writing or syncing anything (a log whose
        directory failed: a flush could record data the kernel lost as durable). The folder
        stays unmarked, so the next open recovers it."""
        self._cancel_cleaning()
        for segment in self.segments:
            segment.release()

    def delete(self) -> None:
        """Close descriptors and remove the partition folder."""
        self._cancel_cleaning()
        with self._durable_lock:
            self._durable_generation += 1
            for segment in self.segments:
                segment.close()
            shutil.rmtree(self.directory, ignore_errors=True)
