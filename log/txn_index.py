"""A segment's aborted-transaction index: Kafka's `.txnindex` file.

One 34-byte entry per transaction whose ABORT marker lies in the segment, in marker order:
version int16 (0) | producer id int64 | first offset int64 | last offset int64 (the
marker's) | last stable offset int64 (the LSO once that transaction was complete). A
read_committed fetch lists the aborted transactions overlapping what it returns, so the
consumer can drop their records (Kafka's collectAbortedTxns).

Entries are kept in memory too (there are few) and appended to the file without fsync; the
partition's flush job syncs the file with its segment.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(ABORTED_TXN_VERSION, *self)


class TxnIndexSearch(NamedTuple):
    """Aborted transactions found in one index; `complete` when no later segment can hold
    one that overlaps the range searched."""

    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex:
    """The aborted transactions of one segment, file and memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        # Written since the last `fsync_target`. The file is open only while it is written
        # (as the offset and time indexes): sealed segments hold no descriptor.
        self._unsynced = False

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def create(self) -> None:
        """Create the (empty) file: most segments never write an entry, and a missing file
        later means it was lost."""
        os.close(self._open())

    def load(self, base_offset: int, next_offset: int) -> bool:
        """Read the file; False (entries left empty) when it is missing or implausible:
        a size not a whole number of entries, an unknown version, a marker outside
        [base_offset, next_offset), markers out of order or a first offset after its marker.
        """
        self.entries = []
        try:
            data = self.path.read_bytes()
        except OSError:
            return False
        if len(data) % ENTRY_BYTES:
            return False
        entries = []
        previous = base_offset - 1
        for pos in range(0, len(data), ENTRY_BYTES):
            version, producer_id, first, last, stable = _ENTRY.unpack_from(data, pos)
            if (
                version != ABORTED_TXN_VERSION
                or not base_offset <= last < next_offset
                or last <= previous
                or first > last
                or producer_id < 0
            ):
                return False
            previous = last
            entries.append(AbortedTxn(producer_id, first, last, stable))
        self.entries = entries
        return True

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {entry.last_offset} appended after "
                f"one ending at {self.entries[-1].last_offset}"
            )
        view = memoryview(entry.encode())
        fd = self._open()
        try:
            try:
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            except OSError:
                os.ftruncate(fd, len(self.entries) * ENTRY_BYTES)  # no partial entry stays
                raise
        finally:
            os.close(fd)
        self.entries.append(entry)
        self._unsynced = True

    def clear(self) -> None:
        """Drop every entry, file and memory (recovery rebuilds them from the log)."""
        self.create()
        os.truncate(self.path, 0)
        self._unsynced = True
        self.entries = []

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset`."""
        keep = [entry for entry in self.entries if entry.last_offset < offset]
        if len(keep) != len(self.entries):
            os.truncate(self.path, len(keep) * ENTRY_BYTES)
            self.entries = keep
            self._unsynced = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearch(found, True)
        return TxnIndexSearch(found, False)

    def fsync_target(self) -> int | None:
        """A new descriptor to fsync (the caller closes it) if the file was written since
        the last call, else None."""
        if not self._unsynced:
            return None
        fd = self._open()
        self._unsynced = False
        return fd

    def mark_unsynced(self) -> None:
        """A flush given `fsync_target` failed: the next one must sync the file again."""
        self._unsynced = True

    def delete(self) -> None:
        self._unsynced = False
        self.path.unlink(missing_ok=True)
