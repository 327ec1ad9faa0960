"""Writes that would break the log's layout raise LogInvariantError and change nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, LogInvariantError, LogSegment, NonContiguousAppend, PartitionLog
from raftka.log.segment import MAX_RELATIVE_OFFSET
from raftka.protocol.records import validate_produce_records

NOW = 1_700_000_000_000


def segment(tmp_path: Path, base_offset: int = 0) -> LogSegment:
    return LogSegment(
        tmp_path, base_offset, index_interval_bytes=0, segment_index_bytes=1 << 16, now_ms=NOW
    )


def write(seg: LogSegment, first_offset: int, count: int = 3) -> None:
    batch = encode_batch(count=count, base_offset=first_offset)
    seg.append(batch, validate_produce_records(batch, 1 << 20), first_offset)


def test_segment_refuses_batches_that_do_not_continue_it(tmp_path: Path) -> None:
    seg = segment(tmp_path, base_offset=10)
    write(seg, 10)
    size = seg.size_bytes
    with pytest.raises(LogInvariantError, match="from offset 14 appended at .* end offset 13"):
        write(seg, 14)
    with pytest.raises(LogInvariantError, match="from offset 12 appended"):
        write(seg, 12)
    assert (seg.size_bytes, seg.next_offset) == (size, 13)
    assert os.path.getsize(seg.log_path) == size
    write(seg, 13)
    assert seg.next_offset == 16


def test_segment_refuses_offsets_beyond_its_relative_range(tmp_path: Path) -> None:
    seg = segment(tmp_path, base_offset=0)
    seg.next_offset = MAX_RELATIVE_OFFSET - 1  # as if that many offsets were written
    with pytest.raises(LogInvariantError, match=f"offset {MAX_RELATIVE_OFFSET + 1} is beyond"):
        write(seg, MAX_RELATIVE_OFFSET - 1)
    assert os.path.getsize(seg.log_path) == 0
    write(seg, MAX_RELATIVE_OFFSET - 1, count=2)  # ends exactly at the last relative offset
    assert seg.next_offset == MAX_RELATIVE_OFFSET + 1


def test_index_entries_must_not_go_backwards(tmp_path: Path) -> None:
    seg = segment(tmp_path)
    seg.offset_index.append(5, 100)
    with pytest.raises(LogInvariantError, match=r"entry \(5, 200\) after \(5, 100\)"):
        seg.offset_index.append(5, 200)
    with pytest.raises(LogInvariantError, match=r"entry \(6, 99\) after \(5, 100\)"):
        seg.offset_index.append(6, 99)
    seg.offset_index.append(6, 100)
    seg.time_index.append(NOW, 5)
    with pytest.raises(LogInvariantError, match="keys must increase"):
        seg.time_index.append(NOW - 1, 6)
    with pytest.raises(LogInvariantError, match="values must not decrease"):
        seg.time_index.append(NOW + 1, 4)
    assert list(seg.offset_index.keys) == [5, 6] and list(seg.time_index.keys) == [NOW]


def test_segment_append_is_undone_when_its_index_entry_is_refused(tmp_path: Path) -> None:
    seg = segment(tmp_path)  # index_interval_bytes=0: every batch but the first is indexed
    write(seg, 0)
    write(seg, 3)
    seg.offset_index.append(100, seg.size_bytes)  # a stale entry past the segment's end
    before = (seg.size_bytes, seg.next_offset, seg.max_timestamp, seg._bytes_since_index_entry)
    with pytest.raises(LogInvariantError, match=r"entry \(6, "):
        write(seg, 6)
    assert (
        seg.size_bytes,
        seg.next_offset,
        seg.max_timestamp,
        seg._bytes_since_index_entry,
    ) == before
    assert os.path.getsize(seg.log_path) == seg.size_bytes
    assert list(seg.offset_index.keys) == [3, 100]


def test_truncation_outside_the_log_is_refused(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    batch = encode_batch(count=5)
    log.append(batch, validate_produce_records(batch, 1 << 20), 1, NOW)
    with pytest.raises(LogInvariantError, match=r"truncation to offset 6 outside the log \[0, 5\]"):
        log.truncate_to(6)
    with pytest.raises(LogInvariantError, match="truncation to offset -1"):
        log.truncate_to(-1)
    with pytest.raises(LogInvariantError, match="cannot start at offset -2"):
        log.truncate_fully_and_start_at(-2, NOW)
    log.truncate_to(5)  # the log end: nothing to drop
    assert (log.log_start_offset, log.log_end_offset) == (0, 5)


def test_a_non_contiguous_replicated_append_is_a_log_invariant_error(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    batch = encode_batch(count=2, base_offset=7)
    with pytest.raises(LogInvariantError, match="batch at offset 7, expected 0") as refused:
        log.append_replicated(batch, validate_produce_records(batch, 1 << 20))
    assert isinstance(refused.value, NonContiguousAppend) and isinstance(refused.value, ValueError)
    assert log.log_end_offset == 0
