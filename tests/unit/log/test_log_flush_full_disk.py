"""A flush job that a full disk refuses: the broker's scheduled flush (flush.ms) logs ENOSPC
and tries again next round, so a refused job must leave the log exactly as owing as before:
every segment still to sync, every file still to sync, its index entries still buffered and
no descriptor left open. A later job that succeeds then makes everything durable, and only
then may the recovery point (what a restart trusts without a scan) pass those offsets."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import validate_produce_records

NOW = 1_700_000_000_000
# A segment rolls after a few batches; every batch gets an index entry.
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=1)


def produce(log: PartitionLog, count: int) -> None:
    for _ in range(count):
        batch = encode_batch(count=1, value_size=100)
        log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW)


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_flush_job_refused_by_a_full_disk_leaves_everything_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    produce(log, 8)
    assert len(log.segments) >= 2, "the test needs a rolled segment and an active one"
    active_index = log.active_segment.offset_index
    entries = active_index.entries
    assert entries > 0
    end = log.log_end_offset
    before = open_descriptors()

    def no_space(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    # The sealed segment's entries were written at its roll: only the active segment's
    # buffered entries meet the full disk, after the sealed segment was looked at.
    real_write = os.write
    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(OSError) as refused:
        log.flush_job()
    assert refused.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "write", real_write)
    assert open_descriptors() == before, "a refused flush job left descriptors open"
    assert log.recovery_point < end

    # Space is back: the next job syncs every segment and the roll's snapshot.
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    job = log.flush_job()
    assert job is not None
    job()
    monkeypatch.setattr(os, "fsync", real_fsync)
    for segment in log.segments:
        assert segment.log_path.name in synced, f"{segment.log_path.name} never synced"
    snapshots = sorted(p.name for p in log.directory.glob("*.snapshot"))
    assert snapshots, "a roll writes a producer-state snapshot"
    assert set(snapshots) <= set(synced), f"snapshots {snapshots} not all synced: {synced}"
    assert log.recovery_point == end

    # The active segment's index entries reached its file once, whole.
    assert active_index.path.stat().st_size == entries * active_index.ENTRY.size
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL, NOW)
    assert reopened.log_end_offset == end
    assert reopened.active_segment.offset_index.entries == entries
