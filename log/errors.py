"""Errors of the partition log."""

from __future__ import annotations


class OffsetOutOfRange(Exception):
    """A fetch offset outside [log_start_offset, log_end_offset] (OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogInvariantError(Exception):
    """A write that would break the log's layout: offsets that do not continue at the end,
    index entries that go backwards, a truncation past the end.

    Raised before anything is written, so the files stay as they were. It reports a bug in
    the caller (the log's own bookkeeping or the replication above it), not a condition to
    handle: it propagates and stops whoever writes.
    """


class NonContiguousAppend(LogInvariantError, ValueError):
    """Replicated batches that do not continue exactly at the log end offset."""
