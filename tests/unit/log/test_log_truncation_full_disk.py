"""A follower's truncation on a full disk: the log it leaves must claim no offset it lost
(a Raft group restarted on it reads its last entry back) and must answer every fetch with
the batch holding the offset asked for, never a later one (which a consumer takes as the
next records and so skips the ones between)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import iter_batch_headers, validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)


def produce(log: PartitionLog, batch: bytes, epoch: int) -> tuple[int, int]:
    info = log.append(batch, validate_produce_records(batch, 1 << 20), epoch, NOW)
    return info.first_offset, info.last_offset


def first_batch_read(log: PartitionLog, offset: int) -> tuple[int, int]:
    data = log.read(offset, 1, log.log_end_offset, True)
    assert data, f"nothing read at offset {offset}"
    header = next(iter(iter_batch_headers(data)))
    return header.base_offset, header.last_offset


def no_space(fd: int, data: bytes | memoryview) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_truncation_refused_by_a_full_disk_leaves_no_stale_index_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-3", SMALL, NOW)
    kept = [produce(log, encode_batch(count=1, value_size=40), epoch=1) for _ in range(4)]
    # The divergent tail an old leader wrote: a large batch, then a small one that gets an
    # offset-index entry (buffered, as entries are until the next flush).
    cut = log.log_end_offset
    produce(log, encode_batch(count=1, value_size=150), epoch=1)
    produce(log, encode_batch(count=1, value_size=40), epoch=1)
    index = log.active_segment.offset_index
    assert index.keys[-1] == cut + 1, "the tail's second batch needs an index entry"

    # The new leader's log diverges at `cut`: truncating there while the disk is full.
    real_write = os.write
    monkeypatch.setattr(os, "write", no_space)
    with contextlib.suppress(OSError):  # whether it raises is not the point
        log.truncate_to(cut)
    monkeypatch.setattr(os, "write", real_write)
    # A Raft group restarted after the failed write reads its last entry back: the log
    # must not claim offsets whose batches are gone.
    last = log.batch_header_at(log.log_end_offset - 1)
    assert last is not None and last.last_offset == log.log_end_offset - 1
    assert max(index.keys, default=-1) < cut, "an index entry names an offset cut away"
    assert [first_batch_read(log, first) for first, _ in kept] == kept

    # Space is back; the leader sends the truncation again, then its own batches: first
    # three records in exactly the bytes the old tail's first batch took, then one more.
    log.truncate_to(min(cut, log.log_end_offset))
    assert log.log_end_offset == cut
    new = [
        produce(log, encode_batch(count=3, value_size=46), epoch=2),
        produce(log, encode_batch(count=1, value_size=40), epoch=2),
    ]
    assert new == [(cut, cut + 2), (cut + 3, cut + 3)]
    for first, last in kept + new:
        for offset in range(first, last + 1):
            assert first_batch_read(log, offset) == (first, last), f"fetch at {offset}"
    log.flush()
    reopened = PartitionLog.open(log.directory, SMALL, NOW)
    for first, last in kept + new:
        for offset in range(first, last + 1):
            assert first_batch_read(reopened, offset) == (first, last), f"after reopen, {offset}"
