"""One segment of a partition log: a `.log` file of whole batches plus its two indexes.

A segment knows where batches are and their offsets and timestamps (from the batch headers),
nothing about producers, epochs or retention policy; `PartitionLog` decides those.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from raftka.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    moved_header,
    read_batch_header,
    scan_batches,
)

from .errors import LogInvariantError
from .index import OffsetIndex, TimeIndex
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex

OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12
#: Largest offset distance from a segment's base that its int32 relative offsets can hold.
MAX_RELATIVE_OFFSET: Final = 2**31 - 1
#: Bytes read per system call when walking batch headers or recovering a segment.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024
HEADER_WINDOW_BYTES = 64 * 1024
#: Batch headers a segment keeps of its last appends (`LogSegment.locate` reads them): at
#: least these many, at most twice as many (the oldest are let go in one go, not one per
#: append).
RECENT_BATCHES: Final = 8
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_memoryview: Final = memoryview


def segment_file_stem(base_offset: int) -> str:
    """Kafka's segment name: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}"


@dataclass(slots=True)
class RecoveryResult:
    """What `LogSegment.recover` kept and dropped."""

    truncated_bytes: int
    error: str | None
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start offset)


class LogSegment:
    """A segment file with cached descriptor, its indexes and running statistics.

    `size_bytes` and `next_offset` describe what has been written through this object; reads
    never look past `size_bytes`.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        now_ms: int,
    ) -> None:
        stem = segment_file_stem(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / f"{stem}.log"
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(
            directory / f"{stem}.index",
            base_offset,
            max(1, segment_index_bytes // OFFSET_INDEX_ENTRY_BYTES),
        )
        self.time_index = TimeIndex(
            directory / f"{stem}.timeindex",
            base_offset,
            max(1, segment_index_bytes // TIME_INDEX_ENTRY_BYTES),
        )
        # Aborted transactions whose ABORT marker is in this segment.
        self.txn_index = TransactionIndex(directory / f"{stem}{TXN_INDEX_SUFFIX}")
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # base offset of the batch holding it
        self.first_batch_timestamp = -1  # segment.ms counts from here, or from created_ms
        self.created_ms = now_ms
        self._bytes_since_index_entry = 0
        self.dirty = False  # written since the last flush job
        # The headers of the last few batches appended through this object, by file position
        # (in file order): a consumer reading at the end of the log finds its batches here
        # instead of walking the headers after the last index entry with a pread each.
        # Replaced, never cleared in place, when the bytes they describe change.
        self._recent: dict[int, BatchHeader] = {}

    # -- writing --------------------------------------------------------------------------
    def append(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        first_offset: int,
        log_append_time_ms: int = -1,
        *,
        as_stored: bool = False,
    ) -> None:
        """Write `data` (exactly the batches `headers` describe) with one system call.

        Batches take consecutive offsets from `first_offset`, which must be `next_offset`;
        `log_append_time_ms` >= 0 overrides their max timestamps. `as_stored`: `headers`
        were read from `data` itself (offsets and epochs as written), so the segment keeps
        them for its readers instead of reading them again. Raises LogInvariantError
        (nothing written) when the offsets do not continue the segment or do not fit its
        int32 relative offsets. On a failed write, or an index entry refused after it, the
        file is cut back, so the segment stays as it was.
        """
        end_offset = first_offset
        for header in headers:
            end_offset += header.last_offset_delta + 1
        if first_offset != self.next_offset:
            raise LogInvariantError(
                f"{self.log_path}: batches from offset {first_offset} appended at the"
                f" segment's end offset {self.next_offset}"
            )
        if end_offset - 1 - self.base_offset > MAX_RELATIVE_OFFSET:
            raise LogInvariantError(
                f"{self.log_path}: offset {end_offset - 1} is beyond the int32 relative"
                f" offsets of a segment based at {self.base_offset}"
            )
        position = self.size_bytes
        view = _memoryview(data)
        before = self._accounting()
        try:
            written = 0
            while written < len(view):
                written += os.write(self.fd, view[written:])
            offset = first_offset
            for header in headers:
                timestamp = header.max_timestamp if log_append_time_ms < 0 else log_append_time_ms
                # The size as fields: `size_bytes`, a property, is a call of its own when compiled.
                size = header.batch_length + LOG_OVERHEAD
                self._account(offset, position + header.position, size, timestamp)
                offset += header.last_offset_delta + 1
        except BaseException:
            os.ftruncate(self.fd, position)
            self._restore_accounting(before)
            raise
        self.size_bytes = position + len(view)
        self.next_offset = end_offset
        self.dirty = True
        recent = self._recent
        # Only the last RECENT_BATCHES of an append: a follower catching up appends many at once.
        for header in headers[-RECENT_BATCHES:]:
            # As written (the offsets and epoch assigned), as a pread would find it.
            at = position + header.position
            if as_stored:
                recent[at] = moved_header(header, at)
            else:
                recent[at] = read_batch_header(view, header.position, at)
        if len(recent) > 2 * RECENT_BATCHES:
            self._recent = dict(list(recent.items())[-RECENT_BATCHES:])

    def _accounting(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.max_timestamp,
            self.offset_of_max_timestamp,
            self.first_batch_timestamp,
            self._bytes_since_index_entry,
            self.offset_index.entries,
            self.time_index.entries,
        )

    def _restore_accounting(self, state: tuple[int, int, int, int, int, int]) -> None:
        (
            self.max_timestamp,
            self.offset_of_max_timestamp,
            self.first_batch_timestamp,
            self._bytes_since_index_entry,
            offset_entries,
            time_entries,
        ) = state
        self.offset_index.drop_from(offset_entries)
        self.time_index.drop_from(time_entries)

    def _account(self, base_offset: int, position: int, size: int, max_timestamp: int) -> None:
        if self.first_batch_timestamp < 0 and position == 0:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self._maybe_append_time_entry()
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    def _maybe_append_time_entry(self) -> None:
        last = self.time_index.last_entry()
        if self.max_timestamp >= 0 and (last is None or self.max_timestamp > last[0]):
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    def seal(self) -> None:
        """Record the final max timestamp in the time index (on roll and on close)."""
        self._recent = {}
        self._maybe_append_time_entry()
        self.write_indexes()
        self.dirty = True

    def write_indexes(self) -> None:
        """Move buffered index entries into the index files."""
        self.offset_index.write_pending()
        self.time_index.write_pending()

    @property
    def is_index_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def roll_due(
        self,
        append_bytes: int,
        last_offset: int,
        max_timestamp: int,
        segment_bytes: int,
        segment_ms: int,
        now_ms: int,
    ) -> bool:
        """Whether an append of `append_bytes` ending at `last_offset` needs a new segment.

        Like Kafka, segment.ms compares the incoming batches' max timestamp with the first
        batch's, and falls back to wall-clock age when either has no timestamp.
        """
        if self.size_bytes == 0:
            return False
        if self.size_bytes + append_bytes > segment_bytes:
            return True
        if self.is_index_full or last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if self.first_batch_timestamp >= 0 and max_timestamp >= 0:
            return max_timestamp - self.first_batch_timestamp > segment_ms
        return now_ms - self.created_ms > segment_ms

    # -- reading --------------------------------------------------------------------------
    def pread(self, length: int, position: int) -> bytes:
        """Exactly `length` bytes from `position` (which must lie within the segment)."""
        data = os.pread(self.fd, length, position)
        if len(data) < length:
            parts = [data]
            got = len(data)
            while got < length:
                more = os.pread(self.fd, length - got, position + got)
                if not more:
                    raise OSError(f"{self.log_path}: short read at {position + got}")
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data

    def batches_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers (with file positions) of the batches from `position` up to `end`."""
        end = self.size_bytes if end is None else end
        window = b""
        window_start = position
        while position + RECORD_BATCH_OVERHEAD <= end:
            rel = position - window_start
            if rel + RECORD_BATCH_OVERHEAD > len(window):
                window = self.pread(min(end - position, HEADER_WINDOW_BYTES), position)
                window_start, rel = position, 0
            header = read_batch_header(window, rel, position)
            if header.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                return
            yield header
            position += header.batch_length + LOG_OVERHEAD

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, or None."""
        _, position = self.offset_index.lookup(offset)
        for header in self.batches_from(position):
            if header.base_offset + header.last_offset_delta >= offset:
                return header
        return None

    def read(
        self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes | None:
        """Whole batches from the one containing `fetch_offset`; None if none is here.

        Stops before a batch whose last offset is >= `max_offset` and before exceeding
        `max_bytes`, except that `min_one_batch` returns a first batch larger than
        `max_bytes` whole. Usually one pread: the window covers the index gap and max_bytes.
        """
        _, position = self.offset_index.lookup(fetch_offset)
        end = self.size_bytes
        # The first indexed batch after max_offset starts past every batch we may return.
        bound = self.offset_index.position_after(max_offset)
        if bound is not None:
            end = min(end, bound)
        if position >= end:
            return None
        want = max(max_bytes, 0) + 2 * self.index_interval_bytes + RECORD_BATCH_OVERHEAD
        window = self.pread(min(end - position, want), position)
        window_start = position

        def header_at(pos: int) -> BatchHeader:
            rel = pos - window_start
            if rel + RECORD_BATCH_OVERHEAD <= len(window):
                return read_batch_header(window, rel)
            return read_batch_header(self.pread(RECORD_BATCH_OVERHEAD, pos))

        found = _walk(header_at, position, end, fetch_offset, max_bytes, max_offset, min_one_batch)
        if found is None:
            return None
        start, stop, _ = found
        if stop == start:
            return b""
        lo, hi = start - window_start, stop - window_start
        if hi <= len(window):
            return window if lo == 0 and hi == len(window) else window[lo:hi]
        return self.pread(stop - start, start)

    def locate(
        self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> tuple[int, int, int] | None:
        """File positions [start, stop) of what `read` returns, and the offset after the
        last batch in them (the first batch's base offset if none), reading batch headers only.

        None if no batch here holds `fetch_offset`; start == stop when none may be returned.
        The offset index skips most of the range: only the batches after its last entry
        inside the limits are walked, each with one small pread, but for the last few
        appended, whose headers are kept: a read at the end of the log reads none.
        """
        _, position = self.offset_index.lookup(fetch_offset)
        recent = self._recent
        if recent:
            # The last batch appended that starts at or before `fetch_offset` is a later
            # start for the walk than the index entry when it lies past it.
            for start, header in reversed(recent.items()):
                if header.base_offset <= fetch_offset:
                    position = max(position, start)
                    break
        end = self.size_bytes
        bound = self.offset_index.position_after(max_offset)
        if bound is not None:
            end = min(end, bound)
        keys, values = self.offset_index.keys, self.offset_index.values

        def skip(start: int) -> tuple[int, int] | None:
            # An index entry within both limits is a batch start every earlier batch fits
            # before.
            slot = min(
                bisect_right(values, start + max(max_bytes, 0)), bisect_right(keys, max_offset)
            )
            if slot > 0 and values[slot - 1] > start:
                return values[slot - 1], keys[slot - 1]
            return None

        def header_at(pos: int) -> BatchHeader:
            header = recent.get(pos)
            if header is not None:
                return header
            return read_batch_header(self.pread(RECORD_BATCH_OVERHEAD, pos))

        return _walk(
            header_at, position, end, fetch_offset, max_bytes, max_offset, min_one_batch, skip
        )

    # -- recovery -------------------------------------------------------------------------
    def load_trusted(self) -> bool:
        """Adopt the files of a cleanly written segment; False if they do not add up.

        Reads the index files and walks only the batches after the last offset-index entry.
        """
        self._recent = {}
        file_size = os.fstat(self.fd).st_size
        if not self.offset_index.load(file_size, 2**63 - 1):
            return False
        last_offset, position = (
            (self.offset_index.keys[-1], self.offset_index.values[-1])
            if self.offset_index.entries
            else (self.base_offset, 0)
        )
        next_offset = last_offset
        max_timestamp, offset_of_max = -1, self.base_offset
        check_first = self.offset_index.entries > 0
        since_entry = 0
        for header in self.batches_from(position, file_size):
            if check_first and header.base_offset != last_offset:
                return False  # the last entry does not point at the batch it names
            if since_entry > self.index_interval_bytes:
                return False  # this batch should have an entry: the index is behind
            check_first = False
            since_entry += header.batch_length + LOG_OVERHEAD
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.base_offset
            next_offset = header.base_offset + header.last_offset_delta + 1
            position = header.position + header.batch_length + LOG_OVERHEAD
        if position != file_size:
            return False
        if not self.time_index.load(file_size, next_offset):
            return False
        last_time = self.time_index.last_entry()
        if last_time is not None and last_time[0] >= max_timestamp:
            max_timestamp, offset_of_max = last_time
        self.size_bytes = file_size
        self.next_offset = next_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max
        self._bytes_since_index_entry = file_size - (
            self.offset_index.values[-1] if self.offset_index.entries else 0
        )
        if file_size:
            self.first_batch_timestamp = read_batch_header(
                self.pread(RECORD_BATCH_OVERHEAD, 0)
            ).max_timestamp
        return True

    def recover(self) -> RecoveryResult:
        """Validate every batch (length, magic, CRC, offsets), cut the file after the last
        good one and rebuild both indexes. Returns what was dropped and epoch changes seen.
        """
        file_size = os.fstat(self.fd).st_size
        self._recent = {}
        self.size_bytes = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = -1
        self._bytes_since_index_entry = 0
        self.offset_index.reset([])
        self.time_index.reset([])
        epoch_starts: list[tuple[int, int]] = []
        last_epoch = None
        position = 0
        chunk = SCAN_CHUNK_BYTES
        error: str | None = None
        while position < file_size:
            buf = self.pread(min(chunk, file_size - position), position)
            scan = scan_batches(buf, 0, verify_crc=True, next_offset=self.next_offset)
            for header in scan.headers:
                self._account(
                    header.base_offset,
                    position + header.position,
                    header.batch_length + LOG_OVERHEAD,
                    header.max_timestamp,
                )
                self.next_offset = header.base_offset + header.last_offset_delta + 1
                if header.partition_leader_epoch != last_epoch:
                    last_epoch = header.partition_leader_epoch
                    epoch_starts.append((last_epoch, header.base_offset))
            position += scan.valid_end
            if scan.error is None:
                continue
            if scan.incomplete:
                rest = len(buf) - scan.valid_end
                if rest < RECORD_BATCH_OVERHEAD:
                    if position + RECORD_BATCH_OVERHEAD <= file_size:
                        continue
                else:
                    size = read_batch_header(buf, scan.valid_end).batch_length + LOG_OVERHEAD
                    if position + size <= file_size:
                        chunk = max(chunk, size)
                        continue
            error = f"{scan.error} in {self.log_path.name}"
            break
        self.size_bytes = position
        if position < file_size:
            os.ftruncate(self.fd, position)
        if self.size_bytes == 0:
            self.first_batch_timestamp = -1
        self.write_indexes()
        self.dirty = True
        return RecoveryResult(file_size - position, error, epoch_starts)

    # -- truncation and removal -------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset`; returns bytes removed.

        A batch containing `offset` goes too, so `next_offset` may end below `offset`.
        """
        header = self.find_batch(offset)
        if header is None:
            return 0
        removed = self.size_bytes - header.position
        self._recent = {}
        os.ftruncate(self.fd, header.position)
        self.size_bytes = header.position
        self.next_offset = header.base_offset
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._rescan_tail()
        self.dirty = True
        return removed

    def _rescan_tail(self) -> None:
        last_time = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = (
            last_time if last_time is not None else (-1, self.base_offset)
        )
        position = self.offset_index.values[-1] if self.offset_index.entries else 0
        self._bytes_since_index_entry = self.size_bytes - position
        for header in self.batches_from(position):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
        if self.size_bytes == 0:
            self.first_batch_timestamp = -1

    def last_modified_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    def fsync_targets(self) -> list[int]:
        """Descriptors a flush must fsync (a duplicate of the segment's, new ones of its
        indexes); the caller owns and closes them."""
        targets = [os.dup(self.fd)]
        try:
            targets.append(self.offset_index.open_for_sync())
            targets.append(self.time_index.open_for_sync())
        except BaseException:
            for fd in targets:
                os.close(fd)
            raise
        txn_index = self.txn_index.fsync_target()
        if txn_index is not None:
            targets.append(txn_index)
        return targets

    def move_files_to(self, directory: Path) -> None:
        """Rename the `.log` and index files into `directory` (the cleaner's swap); the open
        descriptor follows the file. The aborted-transaction index is not moved."""
        for holder in (self.offset_index, self.time_index):
            target = directory / holder.path.name
            os.replace(holder.path, target)
            holder.path = target
        target = directory / self.log_path.name
        os.replace(self.log_path, target)
        self.log_path = target
        self.txn_index = TransactionIndex(directory / self.txn_index.path.name)

    def release(self) -> None:
        """Close the descriptor without writing anything: the files at this segment's paths
        now belong to the segment that replaced it (readers holding a duplicate of the
        descriptor keep reading the old file)."""
        self._recent = {}
        self.offset_index._pending.clear()
        self.time_index._pending.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        self._recent = {}
        self.offset_index.close()
        self.time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self._recent = {}
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)


def _walk(
    header_at: Callable[[int], BatchHeader],
    position: int,
    end: int,
    fetch_offset: int,
    max_bytes: int,
    max_offset: int,
    min_one_batch: bool,
    skip: Callable[[int], tuple[int, int] | None] | None = None,
) -> tuple[int, int, int] | None:
    """File positions [start, stop) of whole batches from the one holding `fetch_offset`,
    and the offset after the last of them (the first one's base offset when none fits),
    walking headers from `position` (a batch start at or before it) up to `end`: stops before
    a batch whose last offset is >= `max_offset` and before exceeding `max_bytes`, except
    that `min_one_batch` takes a first batch larger than `max_bytes` whole. None if no batch
    before `end` holds `fetch_offset`. `skip(start)` may name a later batch start (position,
    base offset) that every batch before it fits under both limits, to jump over them."""
    while position + RECORD_BATCH_OVERHEAD <= end:
        header = header_at(position)
        if header.base_offset + header.last_offset_delta >= fetch_offset:
            break
        position += header.batch_length + LOG_OVERHEAD
    else:
        return None
    start = stop = position
    next_offset = header.base_offset
    if skip is not None:
        skipped = skip(start)
        if skipped is not None:
            stop, next_offset = skipped
    while stop + RECORD_BATCH_OVERHEAD <= end:
        header = header_at(stop)
        if header.base_offset + header.last_offset_delta >= max_offset:
            break
        size = header.batch_length + LOG_OVERHEAD
        if stop + size - start > max_bytes:
            if stop == start and min_one_batch:
                stop += size
                next_offset = header.next_offset
            break
        stop += size
        next_offset = header.next_offset
    return start, stop, next_offset
