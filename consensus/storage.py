"""The narrow read interface the Raft core needs from a partition log, and an in-memory one.

The core only ever reads durable storage through `RaftLog`. Writes (truncate, append) are
done by the driver from a `Ready`; `MemoryRaftLog` offers them for tests and the simulation.
A Kafka segment log backs the same protocol in the broker: `entry_at` is a lookup through the
offset index, `config_entries` can come from an index of control batches kept on recovery.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol

from raftka.consensus.errors import RaftInvariantError
from raftka.consensus.types import Entry, EntryKind, NodeId, Snapshot, decode_config


class RaftLog(Protocol):
    """Durable log as the core sees it. Offsets are contiguous: no gaps between batches."""

    def log_start_offset(self) -> int:
        """First offset held (0 until retention deletes segments)."""
        ...

    def log_end_offset(self) -> int:
        """Offset the next batch would get (exclusive end)."""
        ...

    def record_log_start(self) -> int:
        """The log start offset replicas report to each other (Kafka's logStartOffset): at
        least log_start_offset, inside the first batch when DeleteRecords left it there."""
        ...

    def entry_at(self, offset: int) -> Entry:
        """The batch covering `offset`; log_start_offset <= offset < log_end_offset."""
        ...

    def entries_from(self, offset: int, max_bytes: int) -> Sequence[Entry]:
        """Batches starting at batch boundary `offset`, as many as fit in `max_bytes` but at
        least one when the log is not empty there (a batch larger than the budget still
        travels alone, as Kafka's fetch does)."""
        ...

    def config_entries(self) -> Sequence[Entry]:
        """Every CONFIG batch still in the log, ascending by offset."""
        ...

    def log_start_epoch(self) -> int:
        """Epoch of offset log_start_offset - 1 (the last offset a snapshot or retention
        removed); an upper bound of it no larger than the epoch of the batch at the log start
        will do. 0 when nothing was ever removed."""
        ...

    def log_start_config(self) -> tuple[frozenset[NodeId], frozenset[NodeId]] | None:
        """(voters, learners) in force at the log start as a snapshot or a prefix deletion
        kept them (the CONFIG batch that set them is gone); None: the group's configured
        voters and no learners, or a CONFIG batch `config_entries` still lists."""
        ...


class MemoryRaftLog:
    """In-memory RaftLog with the writes a driver performs; used by tests and the simulation."""

    def __init__(self, log_start_offset: int = 0) -> None:
        self._start = log_start_offset
        self._start_epoch = 0
        self._start_config: tuple[frozenset[NodeId], frozenset[NodeId]] | None = None
        self._entries: list[Entry] = []
        self._bases: list[int] = []
        self._record_start = log_start_offset

    # -- RaftLog --------------------------------------------------------------------------
    def log_start_offset(self) -> int:
        return self._start

    def record_log_start(self) -> int:
        return max(self._start, self._record_start)

    def log_end_offset(self) -> int:
        return self._entries[-1].end_offset if self._entries else self._start

    def entry_at(self, offset: int) -> Entry:
        if not self._start <= offset < self.log_end_offset():
            raise RaftInvariantError(
                f"no entry at offset {offset}: the log holds [{self._start},"
                f" {self.log_end_offset()})"
            )
        return self._entries[bisect.bisect_right(self._bases, offset) - 1]

    def entries_from(self, offset: int, max_bytes: int) -> list[Entry]:
        i = self._batch_index(offset)
        out: list[Entry] = []
        used = 0
        for entry in self._entries[i:]:
            if out and used + entry.size_bytes > max_bytes:
                break
            out.append(entry)
            used += entry.size_bytes
        return out

    def config_entries(self) -> list[Entry]:
        return [e for e in self._entries if e.kind is EntryKind.CONFIG]

    def log_start_epoch(self) -> int:
        return self._start_epoch

    def log_start_config(self) -> tuple[frozenset[NodeId], frozenset[NodeId]] | None:
        return self._start_config

    # -- driver writes --------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after `offset` (a batch boundary)."""
        i = self._batch_index(offset)
        del self._entries[i:]
        del self._bases[i:]

    def append(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.base_offset != self.log_end_offset():
                raise RaftInvariantError(
                    f"entry at offset {entry.base_offset} appended at log end offset"
                    f" {self.log_end_offset()}: offsets must be contiguous"
                )
            if entry.last_offset < entry.base_offset:
                raise RaftInvariantError(
                    f"entry [{entry.base_offset}, {entry.last_offset}] holds no offset"
                )
            self._entries.append(entry)
            self._bases.append(entry.base_offset)

    def delete_records_before(self, offset: int) -> None:
        """DeleteRecords: the reported log start rises to `offset`, which may lie inside a
        batch; the batches stay (the Raft log starts at a batch boundary)."""
        self._record_start = max(self._record_start, offset)

    def truncate_prefix(self, offset: int) -> None:
        """Drop every batch below batch boundary `offset` (retention, DeleteRecords); the log
        then starts there, remembering the epoch and configuration in force just below it."""
        if offset <= self._start:
            return
        i = self._batch_index(offset)
        for entry in self._entries[:i]:
            if entry.kind is EntryKind.CONFIG:
                self._start_config = decode_config(entry.payload)
        if i:
            self._start_epoch = self._entries[i - 1].epoch
        del self._entries[:i]
        del self._bases[:i]
        self._start = offset

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot`: empty, starting at its end."""
        self._entries.clear()
        self._bases.clear()
        self._start = snapshot.end_offset
        self._start_epoch = snapshot.epoch
        self._start_config = (snapshot.voters, snapshot.learners) if snapshot.voters else None

    def copy(self) -> MemoryRaftLog:
        other = MemoryRaftLog(self._start)
        other._start_epoch = self._start_epoch
        other._start_config = self._start_config
        other._entries = list(self._entries)
        other._bases = list(self._bases)
        return other

    def _batch_index(self, offset: int) -> int:
        """Index of the batch starting at `offset`; the batch count at or past the log end."""
        i = bisect.bisect_left(self._bases, offset)
        if offset < self.log_end_offset() and (i == len(self._bases) or self._bases[i] != offset):
            raise RaftInvariantError(f"offset {offset} does not start a batch")
        return i

    def all_entries(self) -> list[Entry]:
        return list(self._entries)
