"""The leader-epoch cache: which offset each leader epoch started at (KIP-101).

Kept in memory as a list of (epoch, start offset) with both strictly increasing, and on disk
as Kafka's `leader-epoch-checkpoint` text file: a version line (0), a count line, then one
"epoch start_offset" line per entry. Every batch carries its epoch, so the cache can always
be rebuilt from the log; the file only saves that scan.
"""

from __future__ import annotations

import errno
import os
from bisect import bisect_right
from pathlib import Path

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_VERSION = 0
#: An epoch file with more entries than this is treated as corrupt and rebuilt.
MAX_ENTRIES = 1 << 20


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries; mutations return whether anything changed."""

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])

    # -- persistence ----------------------------------------------------------------------
    @classmethod
    def read_checkpoint(cls, path: Path) -> LeaderEpochCache | None:
        """The cache stored at `path`, or None if it is missing or malformed."""
        try:
            lines = path.read_text(encoding="ascii").splitlines()
            if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
                return None
            count = int(lines[1])
            if count != len(lines) - 2 or count > MAX_ENTRIES:
                return None
            entries = []
            for line in lines[2:]:
                epoch_text, offset_text = line.split()
                entries.append((int(epoch_text), int(offset_text)))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        for (e1, o1), (e2, o2) in zip(entries, entries[1:], strict=False):
            if e2 <= e1 or o2 < o1:
                return None
        if any(e < 0 or o < 0 for e, o in entries):
            return None
        return cls(entries)

    def serialize(self) -> bytes:
        lines = [str(CHECKPOINT_VERSION), str(len(self.entries))]
        lines += [f"{epoch} {offset}" for epoch, offset in self.entries]
        return ("\n".join(lines) + "\n").encode("ascii")

    # -- queries --------------------------------------------------------------------------
    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the leader that wrote `offset` (the entry starting at or before it)."""
        slot = bisect_right(self.entries, offset, key=lambda entry: entry[1]) - 1
        return self.entries[slot][0] if slot >= 0 else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (largest epoch <= `epoch`, its end offset).

        The end offset is the start of the next larger epoch, or `log_end_offset` for the
        latest. An epoch below every known one answers (epoch, first start offset); unknown
        or undefined answers (-1, -1).
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = bisect_right(self.entries, epoch, key=lambda entry: entry[0])
        if higher >= len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    # -- updates --------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (Kafka's LeaderEpochFileCache.assign).

        Entries that would break monotonicity (epoch >= `epoch` or start >= `start_offset`)
        are dropped first.
        """
        if epoch < 0 or start_offset < 0:
            return False
        if self.entries:
            latest_epoch, latest_start = self.entries[-1]
            if epoch == latest_epoch and start_offset >= latest_start:
                return False
        while self.entries and (
            self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset
        ):
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after `end_offset` (the log was cut there)."""
        keep = bisect_right(self.entries, end_offset - 1, key=lambda entry: entry[1])
        if keep == len(self.entries):
            return False
        del self.entries[keep:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget epochs wholly before `start_offset`; the one spanning it now starts there."""
        drop = bisect_right(self.entries, start_offset, key=lambda entry: entry[1])
        if drop == 0 or (drop == 1 and self.entries[0][1] == start_offset):
            return False
        epoch = self.entries[drop - 1][0]
        del self.entries[:drop]
        self.entries.insert(0, (epoch, start_offset))
        return True


#: A full disk's (or quota's) errors. From a write they mean it was refused and may be tried
#: again once space returns; from an fsync they can mean pages already written were dropped.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def checked_fsync(fd: int) -> None:
    """`os.fsync`, but a full disk's error comes out as EIO. A write refused for space may
    be retried, and the log's callers retry those; an fsync that failed for space may
    have dropped the pages it could not write back, so one that succeeds later proves
    nothing (PostgreSQL's "fsyncgate"). As EIO it takes the log directory offline as any
    failed fsync does, as Kafka does on a failed flush."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in OUT_OF_SPACE_ERRNOS:
            raise
        raise OSError(
            errno.EIO,
            f"fsync failed ({exc.strerror}): the kernel may have dropped the data it could "
            "not write back, so it is not retried",
        ) from exc


def sync_all(descriptors: list[int]) -> None:
    """fsync each descriptor, then close them all, also when an fsync fails (a failed fsync
    left the rest open: two index descriptors per failed flush)."""
    try:
        for fd in descriptors:
            checked_fsync(fd)
    finally:
        for fd in descriptors:
            os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make a directory's entries (files created, renamed or deleted in it) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        checked_fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace `path` by `data` so that a crash leaves the old or the new content, durably
    (file and directory fsynced) unless `durable` is False: then a process crash keeps it
    and whoever asked must fsync it later."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            checked_fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent)
