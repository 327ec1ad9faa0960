"""A partition's log: ordered segments in `<data-dir>/<topic>-<partition>/`.

`PartitionLog` assigns offsets, stamps leader epochs, rolls, reads, flushes, recovers after a
crash and enforces retention. It is not thread-safe: every method runs on the owner's
thread, except the function `flush_job` returns, which may run in a worker thread while
appends continue.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from raftka.protocol.batch_builder import end_txn_marker
from raftka.protocol.records import (
    BatchHeader,
    UnsupportedBatch,
    record_timestamps,
    set_log_append_time,
    stamp_batches,
)

from .cleaner import (
    CLEANER_CHECKPOINT_FILE,
    CLEANER_STAGING_DIR,
    CLEANER_SWAP_FILE,
    CleanerCheckpoint,
    CleaningJob,
    CleanRequest,
    SourceSegment,
    complete_interrupted_swap,
    decode_clean_request,
    read_checkpoint,
)
from .config import LogConfig
from .epochs import LeaderEpochCache, fsync_directory, write_file_atomically
from .errors import LogInvariantError, NonContiguousAppend, OffsetOutOfRange
from .producer_state import (
    CompletedTxn,
    ProducerStateManager,
    delete_snapshots_after,
    load_latest_snapshot,
    write_snapshot,
)
from .segment import LogSegment
from .txn_index import AbortedTxn

logger = logging.getLogger("raftka.log")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
# Left behind by an interrupted atomic write or segment deletion; never data.
_STRAY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


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


def _fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # replaced or deleted since: its successor is synced on its own
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_offset_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


class PartitionLog:
    """One partition's segments. Offsets in [log_start_offset, log_end_offset) are readable."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int) -> None:
        # Use `open`; this only sets fields.
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
        self._log_start_written_by = 0
        self.recovery_point = 0  # every offset below is on disk with its indexes
        # Compaction: committed or not, the clean requests in the log this replica has not
        # carried out yet (in log order), and where the last one carried out reached.
        self.clean_requests: list[CleanRequest] = []
        self._cleaning: CleaningJob | None = None  # the job started and not yet finished
        self.cleaner_checkpoint = CleanerCheckpoint(-1, 0)
        self.tombstone_horizon_ms = -1  # earliest delete horizon of tombstones left, if known

    # -- opening and recovery -------------------------------------------------------------
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

    def _open_segments(self, now_ms: int) -> None:
        directory = self.directory
        complete_interrupted_swap(directory)
        log_bases: set[int] = set()
        index_files: list[tuple[int, Path]] = []
        for path in directory.iterdir():
            if path.name.endswith(_STRAY_SUFFIXES):
                path.unlink(missing_ok=True)
                continue
            match = _SEGMENT_FILE.match(path.name)
            if match is None:
                continue
            base = int(match.group(1))
            if match.group(2) == "log":
                log_bases.add(base)
            else:
                index_files.append((base, path))
        for base, path in index_files:
            if base not in log_bases:
                path.unlink(missing_ok=True)

        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        recovery_point = _read_offset_file(directory / RECOVERY_POINT_FILE) or 0
        persisted_start = _read_offset_file(directory / LOG_START_OFFSET_FILE)
        cached_epochs = LeaderEpochCache.read_checkpoint(directory / LEADER_EPOCH_CHECKPOINT)

        bases = sorted(log_bases)
        recovering = not clean
        recovered_from: int | None = None
        epoch_starts: list[tuple[int, int]] = []
        for i, base in enumerate(bases):
            segment = self._new_segment(base, now_ms)
            if self.segments and base < self.segments[-1].next_offset:
                # Overlaps its predecessor: not a segment this log could have written.
                logger.warning(
                    "%s: removing overlapping segment %s",
                    directory,
                    base,
                    extra={"partition": directory.name},
                )
                segment.delete()
                for later in bases[i + 1 :]:
                    self._new_segment(later, now_ms).delete()
                break
            below_recovery_point = i + 1 < len(bases) and bases[i + 1] <= recovery_point
            trusted = (clean or below_recovery_point) and recovered_from is None
            if trusted and not segment.load_trusted():
                logger.warning(
                    "%s: rebuilding indexes of segment %s",
                    directory,
                    base,
                    extra={"partition": directory.name},
                )
                trusted = False
            if not trusted:
                recovering = True
                if recovered_from is None:
                    recovered_from = base
                result = segment.recover()
                epoch_starts.extend(result.epoch_starts)
                if result.error is not None:
                    dropped = bases[i + 1 :]
                    logger.warning(
                        "%s: recovery truncated %d bytes at offset %d (%s)%s",
                        directory,
                        result.truncated_bytes,
                        segment.next_offset,
                        result.error,
                        f" and removed {len(dropped)} later segments" if dropped else "",
                        extra={"partition": directory.name},
                    )
                    self._append_segment(segment)
                    for later in dropped:
                        self._new_segment(later, now_ms).delete()
                    break
            self._append_segment(segment)

        if not self.segments:
            self._append_segment(self._new_segment(persisted_start or 0, now_ms, fresh=True))
            self._directory_dirty = True
        self.log_end_offset = self.segments[-1].next_offset
        first_base = self.segments[0].base_offset
        self.log_start_offset = min(max(first_base, persisted_start or 0), self.log_end_offset)

        if cached_epochs is None:
            if self.log_end_offset > first_base:
                logger.info(
                    "%s: rebuilding the leader-epoch cache from the log",
                    directory,
                    extra={"partition": directory.name},
                )
            self.epochs = self._epochs_from_log()
            self._epochs_dirty = True
        else:
            self.epochs = cached_epochs
            if recovered_from is not None:
                self._epochs_dirty |= self.epochs.truncate_from_end(recovered_from)
                for epoch, start in epoch_starts:
                    self._epochs_dirty |= self.epochs.assign(epoch, start)
        self._epochs_dirty |= self.epochs.truncate_from_end(self.log_end_offset)
        self._epochs_dirty |= self.epochs.truncate_from_start(self.log_start_offset)

        if clean and not recovering:
            self.recovery_point = self.log_end_offset
        else:
            self.recovery_point = min(
                recovery_point,
                self.log_end_offset if recovered_from is None else recovered_from,
            )
        # A recovered segment's aborted-transaction index, or one missing or implausible, is
        # rebuilt with everything after it while the producer state is replayed.
        rebuild_from = recovered_from
        for segment in self.segments:
            if rebuild_from is not None and segment.base_offset >= rebuild_from:
                break
            if not segment.txn_index.load(segment.base_offset, segment.next_offset):
                rebuild_from = segment.base_offset
                break
        if rebuild_from is not None and self.log_end_offset > rebuild_from:
            logger.info(
                "%s: rebuilding aborted-transaction indexes from offset %d",
                directory,
                rebuild_from,
                extra={"partition": directory.name},
            )
        self._load_producer_state(rebuild_from)
        self._load_clean_requests()
        clean_marker.unlink(missing_ok=True)

    def _load_clean_requests(self) -> None:
        """The cleaner's checkpoint, and the clean requests in the log after it (only a log
        that is or was compacted has any, so others are not scanned)."""
        checkpoint = read_checkpoint(self.directory / CLEANER_CHECKPOINT_FILE)
        if checkpoint is not None:
            self.cleaner_checkpoint = checkpoint
        elif not self.config.compact:
            return
        start = max(self.cleaner_checkpoint.request_offset + 1, self.segments[0].base_offset)
        self.clean_requests = []
        for segment in self.segments[self._segment_index(start) :]:
            _, position = segment.offset_index.lookup(start)
            for header in segment.batches_from(position):
                if header.base_offset < start or not header.is_control or header.producer_id >= 0:
                    continue
                request = decode_clean_request(
                    header, segment.pread(header.size_bytes, header.position)
                )
                if request is not None:
                    self.clean_requests.append(request)

    def _load_producer_state(self, rebuild_txn_index_from: int | None = None) -> None:
        """Producer state as of the log end: the newest snapshot at or below it, then the
        batches after it (all of the log if there is no snapshot): headers only, plus the
        records of transaction markers. With `rebuild_txn_index_from`, the aborted-transaction
        indexes of the segments from that offset (a segment's base) on are rebuilt on the way."""
        expiration_ms = self.config.producer_id_expiration_ms
        upto = self.log_end_offset
        if rebuild_txn_index_from is not None:
            # A segment's base: the indexes from that segment on are rebuilt whole.
            upto = min(upto, rebuild_txn_index_from)
            for segment in self.segments:
                if segment.base_offset >= rebuild_txn_index_from:
                    segment.txn_index.clear()
        loaded = load_latest_snapshot(self.directory, upto, expiration_ms)
        if loaded is None:
            start, state = self.segments[0].base_offset, ProducerStateManager(expiration_ms)
        else:
            start, state = loaded
        self.producer_state = state
        for segment in self.segments[self._segment_index(start) :]:
            _, position = segment.offset_index.lookup(start)
            for header in segment.batches_from(position):
                if header.base_offset < start or header.producer_id < 0:
                    continue
                marker = None
                if header.is_control:
                    marker = end_txn_marker(segment.pread(header.size_bytes, header.position))
                completed = state.update(header, header.base_offset, header.max_timestamp, marker)
                if (
                    completed is not None
                    and completed.is_aborted
                    and rebuild_txn_index_from is not None
                    and completed.last_offset >= rebuild_txn_index_from
                ):
                    self._index_aborted(segment, completed)
        state.remove_expired(self._clock_ms)

    def _epochs_from_log(self) -> LeaderEpochCache:
        cache = LeaderEpochCache()
        for segment in self.segments:
            for header in segment.batches_from(0):
                cache.assign(header.partition_leader_epoch, header.base_offset)
        return cache

    def _append_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs; index sizes apply to segments created from now on."""
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    # -- appending ------------------------------------------------------------------------
    def _roll_if_due(self, append_bytes: int, last_offset: int, max_ts: int, now_ms: int) -> None:
        active = self.segments[-1]
        if active.roll_due(
            append_bytes,
            last_offset,
            max_ts,
            self.config.segment_bytes,
            self.config.segment_ms,
            now_ms,
        ):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        active = self.segments[-1]
        if active.size_bytes == 0:
            return active
        active.seal()
        # Like Kafka, a snapshot per roll bounds the headers replayed after a crash. A lost
        # one only means more headers to replay: no fsync here, the next flush job syncs it.
        self._files_to_sync.add(
            write_snapshot(self.directory, self.log_end_offset, self.producer_state, False)
        )
        segment = self._new_segment(self.log_end_offset, now_ms, fresh=True)
        self._append_segment(segment)
        self._directory_dirty = True
        return segment

    def append(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Append validated batches as the leader, with one write.

        `headers` must describe batches tiling `records` from position 0 (as returned by
        `validate_produce_records`). Offsets are assigned from `log_end_offset`, the leader
        epoch is stamped, and with LogAppendTime the timestamp is set and the CRC recomputed.
        A writable `records` (bytearray, writable memoryview) is stamped in place, so the
        caller holds the batches as stored; anything else is copied once.
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        size = len(records)
        if headers[0].position != 0 or headers[-1].end_position != size:
            raise ValueError("headers do not tile the records buffer")
        count = 0
        for header in headers:
            count += header.last_offset_delta + 1
        first_offset = self.log_end_offset
        last_offset = first_offset + count - 1
        self._clock_ms = now_ms
        log_append_time_ms = now_ms if self.config.message_timestamp_type_log_append else -1
        if log_append_time_ms >= 0:
            max_timestamp, offset_of_max = log_append_time_ms, first_offset
        else:
            max_timestamp, offset_of_max = self._max_timestamp_of(headers, first_offset)
        self._roll_if_due(size, last_offset, max_timestamp, now_ms)

        buf: bytearray | memoryview
        if isinstance(records, bytearray) or (
            isinstance(records, memoryview) and not records.readonly
        ):
            buf = records
        else:
            buf = bytearray(records)
        stamp_batches(buf, headers, first_offset, leader_epoch)
        if log_append_time_ms >= 0:
            for header in headers:
                set_log_append_time(buf, header, log_append_time_ms)
        self.segments[-1].append(buf, headers, first_offset, log_append_time_ms)
        self.log_end_offset = last_offset + 1
        self._update_producer_state(buf, headers, first_offset, log_append_time_ms)
        self._unflushed_messages += count
        if leader_epoch >= 0 and self.epochs.assign(leader_epoch, first_offset):
            self._epochs_dirty = True
        return AppendInfo(
            first_offset, last_offset, log_append_time_ms, max_timestamp, offset_of_max, size
        )

    def _update_producer_state(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        first_offset: int,
        log_append_time_ms: int,
    ) -> None:
        """Record just appended batches (in the active segment) in the producer state; an
        ABORT marker that ends a transaction gets its aborted-transaction index entry."""
        offset = first_offset
        for header in headers:
            if header.producer_id >= 0:
                timestamp = log_append_time_ms if log_append_time_ms >= 0 else header.max_timestamp
                marker = None
                if header.is_control:
                    marker = end_txn_marker(
                        memoryview(records)[header.position : header.end_position]
                    )
                completed = self.producer_state.update(header, offset, timestamp, marker)
                if completed is not None and completed.is_aborted:
                    self._index_aborted(self.segments[-1], completed)
            offset += header.last_offset_delta + 1

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

    # -- transactions -----------------------------------------------------------------------
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
        for segment in self.segments[self._segment_index(fetch_offset) :]:
            search = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += search.aborted
            if search.complete:
                break
        return found

    @staticmethod
    def _max_timestamp_of(headers: Sequence[BatchHeader], first_offset: int) -> tuple[int, int]:
        max_timestamp, offset_of_max = -1, -1
        offset = first_offset
        for header in headers:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, offset
            offset += header.last_offset_delta + 1
        return max_timestamp, offset_of_max

    def append_replicated(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append batches that already carry offsets and epochs (a follower copying its
        leader). They must start at `log_end_offset` and be contiguous, else
        NonContiguousAppend and nothing is written. `now_ms` drives segment.ms rolling.
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        size = len(records)
        if headers[0].position != 0 or headers[-1].end_position != size:
            raise ValueError("headers do not tile the records buffer")
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset != expected:
                raise NonContiguousAppend(
                    f"batch at offset {header.base_offset}, expected {expected}"
                )
            expected = header.base_offset + header.last_offset_delta + 1
        first_offset = self.log_end_offset
        max_timestamp, offset_of_max = self._max_timestamp_of(headers, first_offset)
        if now_ms is not None:
            self._clock_ms = now_ms
        now = self._clock_ms
        self._roll_if_due(size, expected - 1, max_timestamp, now)
        self.segments[-1].append(records, headers, first_offset)
        self.log_end_offset = expected
        self._update_producer_state(records, headers, first_offset, -1)
        self._unflushed_messages += expected - first_offset
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch != self.epochs.latest_epoch:
                self._epochs_dirty |= self.epochs.assign(epoch, header.base_offset)
            if header.is_control and header.producer_id < 0:
                request = decode_clean_request(
                    header, memoryview(records)[header.position : header.end_position]
                )
                if request is not None:
                    self.clean_requests.append(request)
        return AppendInfo(first_offset, expected - 1, -1, max_timestamp, offset_of_max, size)

    # -- reading --------------------------------------------------------------------------
    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

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
        for segment in self.segments[self._segment_index(fetch_offset) :]:
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
        for segment in self.segments[self._segment_index(fetch_offset) :]:
            found = segment.locate(fetch_offset, max_bytes, max_offset, min_one_batch)
            if found is not None:
                start, stop, next_offset = found
                return LogSlice(segment, start, stop - start, next_offset) if stop > start else None
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

    # -- epochs ---------------------------------------------------------------------------
    def epoch_for_offset(self, offset: int) -> int | None:
        """Leader epoch that wrote `offset`, per the leader-epoch cache."""
        return self.epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101): (largest known epoch <= `epoch`, its end offset)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def last_batch_epoch(self) -> int:
        """Epoch of the newest stamped batch (the cache's latest epoch), -1 if none."""
        return self.epochs.latest_epoch

    # -- durability -----------------------------------------------------------------------
    def flush_due_by_messages(self) -> bool:
        """Whether flush.messages asks for an fsync of what was appended so far."""
        return 0 < self.config.flush_messages <= self._unflushed_messages

    def should_flush(self, now_ms: int) -> bool:
        """Whether flush.messages or flush.ms asks for an fsync now."""
        self._clock_ms = now_ms
        if self._unflushed_messages == 0:
            return False
        return (
            self._unflushed_messages >= self.config.flush_messages
            or now_ms - self._last_flush_ms >= self.config.flush_ms
        )

    def flush_job(self, now_ms: int | None = None) -> Callable[[], None] | None:
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
        files = self._files_to_sync
        self._files_to_sync = set()
        descriptors: list[int] = []
        for segment in dirty:
            segment.write_indexes()
            descriptors += segment.fsync_targets()
            segment.dirty = False
        epochs = self.epochs.serialize() if self._epochs_dirty else None
        log_start = self.log_start_offset if self._log_start_dirty else None
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
            try:
                for fd in descriptors:
                    os.fsync(fd)
                for path in files:
                    _fsync_file(path)
            except OSError:
                for segment in dirty:
                    segment.dirty = True  # a later job must sync them again
                    segment.txn_index.mark_unsynced()
                self._files_to_sync |= files
                self._directory_dirty = True
                raise
            finally:
                for fd in descriptors:
                    os.close(fd)
            if sync_directory and directory.exists():
                fsync_directory(directory)
            with self._durable_lock:
                current = generation == self._durable_generation
                if current and epochs is not None and ticket > self._epochs_written_by:
                    write_file_atomically(directory / LEADER_EPOCH_CHECKPOINT, epochs)
                    self._epochs_written_by = ticket
                if current and log_start is not None and ticket > self._log_start_written_by:
                    write_file_atomically(
                        directory / LOG_START_OFFSET_FILE, f"{log_start}\n".encode()
                    )
                    self._log_start_written_by = ticket
                self._job_targets[ticket] = target if current else -1
                reached = -1
                while self._jobs_done_through + 1 in self._job_targets:
                    self._jobs_done_through += 1
                    reached = max(reached, self._job_targets.pop(self._jobs_done_through))
                if current and reached > self.recovery_point:
                    write_file_atomically(directory / RECOVERY_POINT_FILE, f"{reached}\n".encode())
                    self.recovery_point = reached

        return flush

    def flush(self, now_ms: int | None = None) -> None:
        """Make everything durable now, on this thread, regardless of jobs in flight."""
        for segment in self.segments:
            segment.write_indexes()
            for fd in segment.fsync_targets():
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        for path in self._files_to_sync:
            _fsync_file(path)
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
            self._epochs_written_by = self._log_start_written_by = self._jobs_issued
            directory = self.directory
            write_file_atomically(directory / LEADER_EPOCH_CHECKPOINT, self.epochs.serialize())
            write_file_atomically(
                directory / LOG_START_OFFSET_FILE, f"{self.log_start_offset}\n".encode()
            )
            write_file_atomically(
                directory / RECOVERY_POINT_FILE, f"{self.log_end_offset}\n".encode()
            )
            self.recovery_point = self.log_end_offset
        self._epochs_dirty = self._log_start_dirty = self._directory_dirty = False

    # -- retention and truncation -----------------------------------------------------------
    def _delete_first_segment(self) -> None:
        segment = self.segments.pop(0)
        self._bases.pop(0)
        segment.delete()
        self._directory_dirty = True
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self._epochs_dirty |= self.epochs.truncate_from_start(self.log_start_offset)

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole old segments by retention.ms (a segment's largest timestamp, or its
        file time if it has none) and retention.bytes, oldest first, unless cleanup.policy
        lacks delete. Never deletes the active segment, nor one with offsets at or above
        `high_watermark`. Returns how many went.
        """
        limit = self.log_end_offset if high_watermark is None else high_watermark
        self.producer_state.remove_expired(now_ms)
        deleted = 0
        if not self.config.delete:
            return 0  # cleanup.policy=compact: the cleaner alone removes records
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while len(self.segments) > 1 and self.segments[1].base_offset <= limit:
                segment = self.segments[0]
                largest = (
                    segment.max_timestamp
                    if segment.max_timestamp >= 0
                    else segment.last_modified_ms()
                )
                if now_ms - largest <= retention_ms:
                    break
                self._delete_first_segment()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            while (
                len(self.segments) > 1
                and self.segments[1].base_offset <= limit
                and excess >= self.segments[0].size_bytes
            ):
                excess -= self.segments[0].size_bytes
                self._delete_first_segment()
                deleted += 1
        if deleted:
            logger.info(
                "%s: retention deleted %d segments",
                self.directory,
                deleted,
                extra={"partition": self.directory.name},
            )
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """Advance `log_start_offset` to `offset` (DeleteRecords); returns the new value.

        Segments wholly below it are deleted. Raises OffsetOutOfRange past the log end.
        """
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._log_start_dirty = True
            self._epochs_dirty |= self.epochs.truncate_from_start(offset)
            while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
                self._delete_first_segment()
        return self.log_start_offset

    def _lower_recovery_point(self, offset: int) -> None:
        with self._durable_lock:
            self._durable_generation += 1
            if offset < self.recovery_point:
                self.recovery_point = offset
                # Not fsynced here (it runs inside a Raft Ready, on the event loop): recovery
                # always re-checks the last segment, and the next flush job syncs this file.
                path = self.directory / RECOVERY_POINT_FILE
                write_file_atomically(path, f"{offset}\n".encode(), durable=False)
                self._files_to_sync.add(path)

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
        active.write_indexes()
        self.log_end_offset = active.next_offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._epochs_dirty |= self.epochs.truncate_from_end(self.log_end_offset)
        self._lower_recovery_point(self.log_end_offset)
        self._load_producer_state()

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

    # -- compaction -----------------------------------------------------------------------
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

    def _cancel_cleaning(self) -> None:
        """Stop the running job, if any: it writes no swap marker from now on."""
        if self._cleaning is not None:
            self._cleaning.cancel()
            self._cleaning = None

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

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

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

    def delete(self) -> None:
        """Close descriptors and remove the partition folder."""
        self._cancel_cleaning()
        with self._durable_lock:
            self._durable_generation += 1
            for segment in self.segments:
                segment.close()
            shutil.rmtree(self.directory, ignore_errors=True)
