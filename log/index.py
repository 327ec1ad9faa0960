"""Sparse indexes of one segment: where a batch is (offset index) and when (time index).

Each index lives in memory as two parallel arrays and on disk as an append-only file of
fixed-size big-endian entries, Kafka's layout: `.index` holds (relative offset int32,
position int32), `.timeindex` holds (timestamp int64, relative offset int32). New entries
are buffered and reach the file on `write_pending` (called before a flush, a roll and a
close), so an index file may lag its segment after a crash; recovery rebuilds what is
missing. An index never says what bytes mean, only where or when they are.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from .errors import LogInvariantError


class _SparseIndex:
    """Entries (key, value), keys strictly increasing, values non-decreasing."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.keys = array("q")
        self.values = array("q")
        self._pending = bytearray()

    # -- encoding between memory (absolute) and disk (Kafka's relative) values ----------------
    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _decode(self, raw_key: int, raw_value: int) -> tuple[int, int]:
        raise NotImplementedError

    def _entry_is_sane(self, key: int, value: int, log_size: int, next_offset: int) -> bool:
        raise NotImplementedError

    # -- file handling ----------------------------------------------------------------------
    # The file is open only while it is written: a broker with 10,000 partitions would
    # otherwise hold two index descriptors per partition besides its segment's.
    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def create(self) -> None:
        """Make sure the file exists (empty if it did not)."""
        os.close(self._open())

    def open_for_sync(self) -> int:
        """A new descriptor of the file for an fsync; the caller closes it."""
        return self._open()

    def load(self, log_size: int, next_offset: int) -> bool:
        """Read the file; returns False (and stays empty) if it is missing or implausible."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return False
        size = self.ENTRY.size
        if len(raw) % size:
            return False
        keys = array("q")
        values = array("q")
        last_key = -(2**63)
        last_value = -(2**63)
        for raw_key, raw_value in self.ENTRY.iter_unpack(raw):
            key, value = self._decode(raw_key, raw_value)
            if key <= last_key or value < last_value:
                return False
            if not self._entry_is_sane(key, value, log_size, next_offset):
                return False
            keys.append(key)
            values.append(value)
            last_key, last_value = key, value
        self.keys, self.values = keys, values
        return True

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry, in memory and on disk."""
        self.keys = array("q", (k for k, _ in entries))
        self.values = array("q", (v for _, v in entries))
        fd = self._open()
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        self._pending = bytearray(b"".join(self._encode(k, v) for k, v in entries))
        self.write_pending()

    def append(self, key: int, value: int) -> None:
        """Add an entry after the last one; LogInvariantError (nothing added) if its key does
        not increase or its value decreases, since lookups bisect these arrays."""
        if self.keys and (key <= self.keys[-1] or value < self.values[-1]):
            raise LogInvariantError(
                f"{self.path.name}: entry ({key}, {value}) after ({self.keys[-1]},"
                f" {self.values[-1]}): keys must increase and values must not decrease"
            )
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._encode(key, value)

    def write_pending(self) -> bool:
        """Write buffered entries to the file; True if there were any."""
        if not self._pending:
            return False
        data = bytes(self._pending)
        fd = self._open()
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            except OSError:
                # A full disk: cut back a partial entry and keep them all for the next try.
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        del self._pending[: len(data)]
        return True

    def drop_from(self, count: int) -> None:
        """Keep only the first `count` entries, in memory and on disk.

        Writes nothing (the file is only cut shorter), so a full disk cannot leave entries
        in memory that name offsets whose batches are gone: a lookup would start a read at
        whatever batch later comes to lie at that position and skip the offsets before it.
        """
        if count >= len(self.keys):
            return
        size = self.ENTRY.size
        # The file holds the entries before the buffered ones, exactly.
        written = len(self.keys) - len(self._pending) // size
        if count < written:
            fd = self._open()
            try:
                os.ftruncate(fd, count * size)
            finally:
                os.close(fd)
            self._pending.clear()
        else:
            del self._pending[(count - written) * size :]
        del self.keys[count:]
        del self.values[count:]

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    @property
    def entries(self) -> int:
        return len(self.keys)

    def close(self) -> None:
        self.write_pending()

    def delete(self) -> None:
        self._pending.clear()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    """Maps a batch's base offset to its byte position in the segment."""

    ENTRY = struct.Struct(">ii")

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key - self.base_offset, value)

    def _decode(self, raw_key: int, raw_value: int) -> tuple[int, int]:
        return raw_key + self.base_offset, raw_value

    def _entry_is_sane(self, key: int, value: int, log_size: int, next_offset: int) -> bool:
        return key >= self.base_offset and key < next_offset and 0 <= value < log_size

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`; the segment start if none.

        The batch containing `offset` starts at or after the returned position.
        """
        slot = bisect_right(self.keys, offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.keys[slot], self.values[slot]

    def position_after(self, offset: int) -> int | None:
        """Position of the first indexed batch starting after `offset`, if any."""
        slot = bisect_right(self.keys, offset)
        return self.values[slot] if slot < len(self.values) else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches starting at `offset` or later."""
        self.drop_from(bisect_right(self.keys, offset - 1))


class TimeIndex(_SparseIndex):
    """Maps a timestamp to the first batch whose max timestamp reached it (running maximum).

    Entries hold that batch's base offset; Kafka stores its last offset, and either value
    leads a lookup to the same batch.
    """

    ENTRY = struct.Struct(">qi")

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key, value - self.base_offset)

    def _decode(self, raw_key: int, raw_value: int) -> tuple[int, int]:
        return raw_key, raw_value + self.base_offset

    def _entry_is_sane(self, key: int, value: int, log_size: int, next_offset: int) -> bool:
        return self.base_offset <= value < next_offset

    def lookup(self, timestamp_ms: int) -> int:
        """An offset at or before the first batch whose max timestamp >= `timestamp_ms`."""
        slot = bisect_right(self.keys, timestamp_ms) - 1
        if slot < 0:
            return self.base_offset
        # Batches before this entry's batch have smaller max timestamps: an entry is added
        # only when the running maximum strictly grows, pointing at the batch that grew it.
        return self.values[slot]

    def last_entry(self) -> tuple[int, int] | None:
        if not self.keys:
            return None
        return self.keys[-1], self.values[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries that point at offset `offset` or later."""
        self.drop_from(bisect_right(self.values, offset - 1))
