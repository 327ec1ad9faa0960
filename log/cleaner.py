"""Log compaction: the replicated clean request and the cleaner that carries it out.

A compacted partition's leader decides when and how far to clean and appends a
`CleanRequest` to the log as a control batch (type `CONTROL_LOG_CLEAN`, which Kafka does not
use; consumers skip it like any control batch they do not know). Every replica, once that
batch is committed, cleans its own log with the request's values, so every replica ends with
the same batches at the same offsets: cleaning is a function of the log below the request's
end offset and the values the request carries, nothing local.

The cleaner maps the latest offset of every key in the dirty region [dirty_start, end) (up to
`max_map_keys` keys: a region that does not fit is cleaned only as far as the map reached,
at a batch boundary) and rewrites every data batch below that point with
`protocol.compacted.clean_batch`. Batches keep their offsets; a batch that loses every record
stays as an empty batch. Cleaned segments are written beside the log in `cleaner-staging/`,
fsynced, and committed by the `cleaner-swap` marker; `PartitionLog` then moves them in (and
completes a swap the marker names when it recovers after a crash).
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from raftka.protocol.batch_builder import build_batch, control_key, decode_batch
from raftka.protocol.compacted import CleanedBatch, clean_batch, records_section, walk_records
from raftka.protocol.records import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    UnsupportedBatch,
    read_batch_header,
)

from .epochs import fsync_directory, sync_all, write_file_atomically
from .segment import LogSegment

#: Control record type of a clean request (Kafka's types are 0-6; clients ignore others).
CONTROL_LOG_CLEAN = 0x5243
CLEANER_STAGING_DIR = "cleaner-staging"
CLEANER_SWAP_FILE = "cleaner-swap"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: Kafka sizes its offset map at 24 bytes a key (a 16-byte hash and an 8-byte offset) and
#: fills it to 90%.
MAP_BYTES_PER_KEY = 24
MAP_LOAD_FACTOR = 0.9
_REQUEST = struct.Struct(">hqqqqq")  # version, dirty start, end, time, delete retention, keys
_REQUEST_VERSION = 0
_READ_CHUNK_BYTES = 4 * 1024 * 1024
_WRITE_CHUNK_BYTES = 1024 * 1024
_HEADER_WINDOW_BYTES = 64 * 1024


def max_map_keys(dedupe_buffer_bytes: int) -> int:
    """Keys a cleaning may map with `log.cleaner.dedupe.buffer.size` bytes, as Kafka counts."""
    return max(1, int(dedupe_buffer_bytes * MAP_LOAD_FACTOR) // MAP_BYTES_PER_KEY)


@dataclass(frozen=True, slots=True)
class CleanRequest:
    """Clean the log below `end_offset` at time `now_ms`, mapping keys from `dirty_start`.

    `offset` is where the request's own batch lies in the log (-1 before it is appended).
    """

    dirty_start: int
    end_offset: int
    now_ms: int
    delete_retention_ms: int
    max_map_keys: int
    offset: int = -1

    def encode_batch(self) -> bytes:
        """The control batch that carries this request (unstamped; timestamp `now_ms`)."""
        value = _REQUEST.pack(
            _REQUEST_VERSION,
            self.dirty_start,
            self.end_offset,
            self.now_ms,
            self.delete_retention_ms,
            self.max_map_keys,
        )
        return build_batch([(control_key(CONTROL_LOG_CLEAN), value)], self.now_ms, control=True)


def decode_clean_request(header: BatchHeader, batch: bytes | memoryview) -> CleanRequest | None:
    """The request a stored control batch carries, or None if it is not one (or is not a
    version this broker reads)."""
    if not header.is_control or header.producer_id >= 0 or header.records_count != 1:
        return None
    try:
        records = decode_batch(batch, check_crc=False)
    except ValueError:
        return None
    key, value = records[0].key, records[0].value
    if key != control_key(CONTROL_LOG_CLEAN) or value is None or len(value) != _REQUEST.size:
        return None
    version, dirty_start, end, now_ms, retention, keys = _REQUEST.unpack(value)
    if version != _REQUEST_VERSION or keys < 1 or dirty_start < 0 or end < 0:
        return None
    return CleanRequest(dirty_start, end, now_ms, retention, keys, header.base_offset)


class CleanerCheckpoint(NamedTuple):
    """The last request a replica carried out and where its cleaning reached."""

    request_offset: int
    cleaned_end: int

    def encode(self) -> bytes:
        return f"{self.request_offset} {self.cleaned_end}\n".encode()


def read_checkpoint(path: Path) -> CleanerCheckpoint | None:
    try:
        first, second = path.read_text(encoding="ascii").split()[:2]
        return CleanerCheckpoint(int(first), int(second))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def complete_interrupted_swap(directory: Path) -> None:
    """Finish or discard a cleaning a crash interrupted (at `PartitionLog.open`): with the
    swap marker present the staged segments are moved in and the checkpoint written; without
    it the staging folder is dropped. Either way the log is wholly old or wholly new."""
    marker = directory / CLEANER_SWAP_FILE
    staging = directory / CLEANER_STAGING_DIR
    checkpoint = read_checkpoint(marker)
    if checkpoint is not None:
        if staging.is_dir():
            for path in sorted(staging.iterdir()):
                os.replace(path, directory / path.name)
        fsync_directory(directory)
        write_file_atomically(directory / CLEANER_CHECKPOINT_FILE, checkpoint.encode())
    marker.unlink(missing_ok=True)
    if staging.exists():
        shutil.rmtree(staging, ignore_errors=True)


class CleaningCancelled(Exception):
    """The cleaning was cancelled (its log closed or truncated, or the broker stopping)."""


class Throttle:
    """Holds the calling thread back to `bytes_per_second` (log.cleaner.io.max.bytes.per.second).
    With a `cancelled` event it is also where a job stops: it raises `CleaningCancelled`
    once the event is set, waking from its wait at once."""

    def __init__(self, bytes_per_second: float, cancelled: threading.Event | None = None) -> None:
        self.bytes_per_second = bytes_per_second
        self.cancelled = cancelled
        self._start = time.monotonic()
        self._bytes = 0

    def __call__(self, nbytes: int) -> None:
        self._bytes += nbytes
        self.check()
        if self.bytes_per_second <= 0 or self.bytes_per_second >= 1e300:
            return
        due = self._bytes / self.bytes_per_second - (time.monotonic() - self._start)
        if due > 0:
            if self.cancelled is None:
                time.sleep(due)
            elif self.cancelled.wait(due):
                raise CleaningCancelled("the cleaning was cancelled")

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise CleaningCancelled("the cleaning was cancelled")


@dataclass(slots=True)
class SourceSegment:
    """A segment as the cleaner reads it: its own descriptor (so retention closing the
    segment meanwhile harms nothing) and its size when the cleaning started."""

    segment: LogSegment
    fd: int
    size_bytes: int

    def batches(self, throttle: Throttle | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, bytes) of each whole batch, in order."""
        position = 0
        while position + RECORD_BATCH_OVERHEAD <= self.size_bytes:
            want = min(_READ_CHUNK_BYTES, self.size_bytes - position)
            chunk = os.pread(self.fd, want, position)
            if throttle is not None:
                throttle(len(chunk))
            rel = 0
            while rel + RECORD_BATCH_OVERHEAD <= len(chunk):
                header = read_batch_header(chunk, rel)
                size = header.batch_length + LOG_OVERHEAD
                if header.batch_length < MIN_BATCH_LENGTH:
                    return
                if rel + size > len(chunk):
                    if rel == 0:  # one batch larger than a chunk
                        chunk = os.pread(self.fd, size, position)
                        if len(chunk) < size:
                            return
                        continue
                    break
                yield header._replace(position=position + rel), chunk[rel : rel + size]
                rel += size
            if rel == 0:
                return
            position += rel

    def headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Headers (with positions) of the batches from `position` (a batch start), reading
        64 KiB windows: bodies of larger batches are skipped, not read."""
        window = b""
        window_start = position
        while position + RECORD_BATCH_OVERHEAD <= self.size_bytes:
            rel = position - window_start
            if rel < 0 or rel + RECORD_BATCH_OVERHEAD > len(window):
                want = min(_HEADER_WINDOW_BYTES, self.size_bytes - position)
                window, window_start, rel = os.pread(self.fd, want, position), position, 0
                if len(window) < RECORD_BATCH_OVERHEAD:
                    return
            header = read_batch_header(window, rel)
            if header.batch_length < MIN_BATCH_LENGTH:
                return
            yield header._replace(position=position)
            position += header.batch_length + LOG_OVERHEAD

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(slots=True)
class CleaningResult:
    """What a cleaning produced: staged segments (base offset → segment in the staging
    folder) and where it reached."""

    cleaned_end: int
    staged: dict[int, LogSegment] = field(default_factory=dict)
    tombstone_horizon_ms: int = -1  # earliest horizon of the tombstones left, -1: none
    bytes_before: int = 0
    bytes_after: int = 0


class CleaningJob:
    """One request carried out on one replica's log. `run` is the worker-thread part; it
    reads only its `sources` (own descriptors) and writes only the staging folder and the
    swap marker. `cancel` (from any thread) stops it at its next batch or throttle wait;
    once `cancel` returned the job writes no marker, and `done` is set when `run` ended."""

    def __init__(
        self,
        directory: Path,
        request: CleanRequest,
        sources: list[SourceSegment],
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        io_bytes_per_second: float,
    ) -> None:
        self.directory = directory
        self.request = request
        self.sources = sources
        self.index_interval_bytes = index_interval_bytes
        self.segment_index_bytes = segment_index_bytes
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.throttle = Throttle(io_bytes_per_second, self.cancelled)
        self.result: CleaningResult | None = None
        self._marker_lock = threading.Lock()

    def cancel(self) -> None:
        """Stop the job: after this returns it writes no swap marker (one already written
        stays: that cleaning is complete)."""
        with self._marker_lock:
            self.cancelled.set()

    def build_key_map(self) -> tuple[dict[bytes, int], int]:
        """The latest offset of each key in [dirty_start, end_offset), and the offset the
        map reached: a batch whose new keys would overflow `max_map_keys` ends it (unless
        the map is empty)."""
        request = self.request
        latest: dict[bytes, int] = {}
        for source in self.sources:
            if source.segment.next_offset <= request.dirty_start:
                continue
            for header, batch in source.batches(self.throttle):
                if header.last_offset < request.dirty_start:
                    continue
                if header.base_offset >= request.end_offset:
                    return latest, request.end_offset
                if header.is_control or header.is_transactional or header.records_count == 0:
                    continue
                try:
                    views = walk_records(records_section(batch), header.records_count)
                except UnsupportedBatch:
                    continue  # kept as it is by every replica alike
                keys = [
                    (v.key, header.base_offset + v.offset_delta) for v in views if v.key is not None
                ]
                new = {key for key, _ in keys if key not in latest}
                if latest and len(latest) + len(new) > request.max_map_keys:
                    return latest, header.base_offset
                for key, offset in keys:
                    latest[key] = offset
        return latest, request.end_offset

    def run(self) -> CleaningResult:
        """Map, rewrite and stage; fsync everything and write the swap marker last. Raises
        `CleaningCancelled` (leaving no staging folder) if cancelled."""
        try:
            return self._run()
        finally:
            self.done.set()

    def _run(self) -> CleaningResult:
        request = self.request
        self.throttle.check()
        latest, cleaned_end = self.build_key_map()
        staging = self.directory / CLEANER_STAGING_DIR
        # A marker left by a job that was abandoned must not commit this one's half-staged
        # segments.
        (self.directory / CLEANER_SWAP_FILE).unlink(missing_ok=True)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        result = CleaningResult(cleaned_end)
        try:
            for source in self.sources:
                if source.segment.base_offset >= cleaned_end:
                    break
                staged = self._clean_segment(source, latest, cleaned_end, staging, result)
                if staged is not None:
                    result.staged[source.segment.base_offset] = staged
            for staged in result.staged.values():
                sync_all(staged.fsync_targets())
            fsync_directory(staging)
            with self._marker_lock:
                self.throttle.check()
                write_file_atomically(
                    self.directory / CLEANER_SWAP_FILE,
                    CleanerCheckpoint(request.offset, cleaned_end).encode(),
                )
        except BaseException:
            for staged in result.staged.values():
                staged.close()
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.result = result
        return result

    def _clean_segment(
        self,
        source: SourceSegment,
        latest: dict[bytes, int],
        cleaned_end: int,
        staging: Path,
        result: CleaningResult,
    ) -> LogSegment | None:
        request = self.request
        out = LogSegment(
            staging,
            source.segment.base_offset,
            index_interval_bytes=self.index_interval_bytes,
            segment_index_bytes=self.segment_index_bytes,
            now_ms=request.now_ms,
        )
        pending: list[bytes] = []
        pending_bytes = 0
        changed = False

        def write_pending() -> None:
            nonlocal pending, pending_bytes
            if not pending:
                return
            data = b"".join(pending)
            headers = []
            position = 0
            for part in pending:
                headers.append(read_batch_header(data, position))
                position += len(part)
            out.append(data, headers, headers[0].base_offset)
            self.throttle(len(data))
            pending, pending_bytes = [], 0

        try:
            for header, batch in source.batches(self.throttle):
                result.bytes_before += len(batch)
                if header.last_offset < cleaned_end:
                    try:
                        cleaned = clean_batch(
                            batch, latest, request.now_ms, request.delete_retention_ms
                        )
                    except UnsupportedBatch:
                        cleaned = CleanedBatch(batch, False, -1)
                    batch = cleaned.batch
                    changed |= cleaned.changed
                    horizon = cleaned.tombstone_horizon_ms
                    if horizon >= 0 and (
                        result.tombstone_horizon_ms < 0 or horizon < result.tombstone_horizon_ms
                    ):
                        result.tombstone_horizon_ms = horizon
                result.bytes_after += len(batch)
                pending.append(batch)
                pending_bytes += len(batch)
                if pending_bytes >= _WRITE_CHUNK_BYTES:
                    write_pending()
            write_pending()
        except BaseException:
            out.delete()
            raise
        if not changed or out.next_offset != source.segment.next_offset:
            # Nothing to swap, or the segment is not what it was (a concurrent change).
            out.delete()
            return None
        out.seal()
        return out


def cleaning_due(
    plan: CleaningPlan,
    min_dirty_ratio: float,
    max_compaction_lag_ms: int,
    tombstone_horizon_ms: int,
    now_ms: int,
) -> int | None:
    """The end offset a leader should ask a cleaning to reach now, or None if none is due:
    the plan's end when its dirty bytes reach `min_dirty_ratio` of the cleanable bytes or
    its first dirty batch is older than `max_compaction_lag_ms`; the start of the dirty
    region (nothing new to map) when only tombstones have passed their horizon."""
    if plan.dirty_bytes > 0 and (
        plan.dirty_bytes >= min_dirty_ratio * plan.total_bytes
        or 0 <= plan.first_dirty_timestamp < now_ms - max_compaction_lag_ms
    ):
        return plan.end_offset
    if 0 <= tombstone_horizon_ms <= now_ms:
        return plan.dirty_start
    return None


class CleaningPlan(NamedTuple):
    """What a leader learns of its dirty region before it asks for a cleaning."""

    dirty_start: int
    end_offset: int  # batch boundary the cleaning may reach
    dirty_bytes: int  # bytes of batches in [dirty_start, end_offset)
    total_bytes: int  # bytes of batches below end_offset
    first_dirty_timestamp: int  # max timestamp of the first dirty batch, -1 if none


def plan_cleaning(
    sources: list[SourceSegment], dirty_start: int, limit: int, newest_timestamp: int
) -> CleaningPlan:
    """How far a cleaning may go: up to `limit` (a batch boundary), stopping before the
    first dirty batch with a timestamp after `newest_timestamp` (min.compaction.lag.ms).
    Reads the sources (run it in a worker thread)."""
    total = dirty = 0
    end = dirty_start
    first_timestamp = -1
    for source in sources:
        if source.segment.next_offset <= dirty_start:
            total += source.size_bytes
            continue
        # Sealed segments: their offset index no longer changes, so a thread may read it.
        _, position = source.segment.offset_index.lookup(dirty_start)
        total += position
        for header in source.headers(position):
            size = header.batch_length + LOG_OVERHEAD
            if header.last_offset < dirty_start:
                total += size
                continue
            if header.base_offset >= limit or header.max_timestamp > newest_timestamp:
                return CleaningPlan(dirty_start, end, dirty, total, first_timestamp)
            total += size
            end = header.next_offset
            if header.is_control:
                continue  # clean requests and no-ops alone do not make a cleaning due
            if first_timestamp < 0:
                first_timestamp = header.max_timestamp
            dirty += size
    return CleaningPlan(dirty_start, end, dirty, total, first_timestamp)
