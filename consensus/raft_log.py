"""The core's view of its log: durable batches (read through `RaftLog`) plus an unstable tail.

Like etcd's unstable log, batches the core has accepted but the driver has not yet written
live here until `persisted()` is called. A truncation of durable batches is recorded as a
pending truncation point the driver applies before appending the unstable tail. An installed
snapshot is pending the same way: until the driver has installed it, the view starts (and, but
for the unstable tail, ends) at the snapshot's end.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from raftka.consensus.errors import RaftInvariantError
from raftka.consensus.storage import RaftLog
from raftka.consensus.types import Entry, Snapshot


class LogView:
    def __init__(self, stable: RaftLog) -> None:
        self.stable = stable
        # Durable batches are valid strictly below `unstable_offset`; the tail starts there.
        self.unstable_offset = stable.log_end_offset()
        self.unstable: list[Entry] = []
        self.pending_truncate: int | None = None
        self.pending_snapshot: Snapshot | None = None

    def log_start_offset(self) -> int:
        if self.pending_snapshot is not None:
            return self.pending_snapshot.end_offset
        return self.stable.log_start_offset()

    def record_log_start(self) -> int:
        return self.stable.record_log_start()

    def log_start_epoch(self) -> int:
        if self.pending_snapshot is not None:
            return self.pending_snapshot.epoch
        return self.stable.log_start_epoch()

    def log_end_offset(self) -> int:
        return self.unstable[-1].end_offset if self.unstable else self.unstable_offset

    def entry_at(self, offset: int) -> Entry:
        if not self.log_start_offset() <= offset < self.log_end_offset():
            raise RaftInvariantError(
                f"no entry at offset {offset}: the log holds"
                f" [{self.log_start_offset()}, {self.log_end_offset()})"
            )
        if offset >= self.unstable_offset:
            i = bisect.bisect_right(self.unstable, offset, key=lambda e: e.base_offset) - 1
            return self.unstable[i]
        return self.stable.entry_at(offset)

    def epoch_at(self, offset: int) -> int:
        """Epoch of the batch covering `offset`; at log start - 1 the epoch the log keeps for
        it (a snapshot's or retention's boundary), 0 further before the log start."""
        start = self.log_start_offset()
        if offset < start:
            return self.log_start_epoch() if offset == start - 1 else 0
        return self.entry_at(offset).epoch

    def last_offset_and_epoch(self) -> tuple[int, int]:
        last = self.log_end_offset() - 1
        return last, self.epoch_at(last)

    def is_batch_end(self, offset: int, epoch: int) -> bool:
        """Whether this log holds a batch of `epoch` ending exactly at `offset`."""
        if offset < self.log_start_offset():
            return offset == self.log_start_offset() - 1
        if offset >= self.log_end_offset():
            return False
        entry = self.entry_at(offset)
        return entry.epoch == epoch and entry.last_offset == offset

    def entries_from(self, offset: int, max_bytes: int) -> list[Entry]:
        out: list[Entry] = []
        used = 0
        if offset < self.unstable_offset and self.pending_snapshot is None:
            for entry in self.stable.entries_from(offset, max_bytes):
                if entry.base_offset >= self.unstable_offset:
                    break
                out.append(entry)
                used += entry.size_bytes
            if out and out[-1].end_offset < self.unstable_offset:
                return out  # the byte budget ran out inside durable storage
            offset = out[-1].end_offset if out else offset
        i = bisect.bisect_left(self.unstable, offset, key=lambda e: e.base_offset)
        for entry in self.unstable[i:]:
            if out and used + entry.size_bytes > max_bytes:
                break
            out.append(entry)
            used += entry.size_bytes
        return out

    def find_conflict_by_epoch(self, offset: int, epoch: int) -> int:
        """Largest batch end <= `offset` whose batch epoch is <= `epoch`.

        Everything after it may differ from a log whose batch at `offset` has epoch `epoch`,
        everything up to it may match; log_start_offset - 1 when nothing qualifies. Epochs
        never decrease along a Raft log, so this is a binary search (O(log n) lookups), the
        same question Kafka's leader-epoch cache answers with end_offset_for_epoch.
        """
        lo, hi = self.log_start_offset() - 1, min(offset, self.log_end_offset() - 1)
        # Invariant: epoch_at(lo) <= epoch (or lo is before the log); answer in [lo, hi].
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.entry_at(mid).epoch <= epoch:
                lo = mid
            else:
                hi = mid - 1
        if lo < self.log_start_offset():
            return lo
        entry = self.entry_at(lo)
        return entry.last_offset if entry.last_offset <= offset else entry.base_offset - 1

    def append(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.base_offset != self.log_end_offset():
                raise RaftInvariantError(
                    f"entry at offset {entry.base_offset} appended at log end offset"
                    f" {self.log_end_offset()}: offsets must be contiguous"
                )
            self.unstable.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after batch boundary `offset`."""
        if offset >= self.unstable_offset:
            i = bisect.bisect_left(self.unstable, offset, key=lambda e: e.base_offset)
            del self.unstable[i:]
            return
        self.unstable.clear()
        self.unstable_offset = offset
        if self.pending_truncate is None or offset < self.pending_truncate:
            self.pending_truncate = offset

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (the driver installs it from the Ready)."""
        self.pending_snapshot = snapshot
        self.pending_truncate = None
        self.unstable.clear()
        self.unstable_offset = snapshot.end_offset

    def persisted(self) -> None:
        """The driver installed the pending snapshot, applied the pending truncation and
        appended the whole unstable tail."""
        snapshot = self.pending_snapshot
        if snapshot is not None and self.stable.log_start_offset() != snapshot.end_offset:
            raise RaftInvariantError(
                f"the driver must install a Ready's snapshot before advance(): the log starts"
                f" at {self.stable.log_start_offset()}, the snapshot ends at"
                f" {snapshot.end_offset}"
            )
        self.pending_snapshot = None
        self.unstable_offset = self.log_end_offset()
        self.unstable.clear()
        self.pending_truncate = None
        if self.stable.log_end_offset() != self.unstable_offset:
            raise RaftInvariantError(
                f"the driver must persist every entry of a Ready before advance(): the log"
                f" ends at {self.stable.log_end_offset()}, the Ready at {self.unstable_offset}"
            )
