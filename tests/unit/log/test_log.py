"""PartitionLog: append/read, rolling, indexes, timestamps, retention, truncation, epochs."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, NonContiguousAppend, OffsetOutOfRange, PartitionLog
from raftka.protocol.records import iter_batch_headers, validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def produce(log: PartitionLog, batch: bytes, epoch: int = 0, now_ms: int = NOW) -> tuple[int, int]:
    headers = validate_produce_records(batch, 1 << 20)
    info = log.append(batch, headers, epoch, now_ms)
    return info.first_offset, info.last_offset


def offsets_in(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in iter_batch_headers(data)]


def read_all(log: PartitionLog, start: int | None = None) -> list[tuple[int, int]]:
    offset = log.log_start_offset if start is None else start
    batches: list[tuple[int, int]] = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset, True)
        assert data, f"no data at {offset}"
        got = offsets_in(data)
        batches += got
        offset = got[-1][1] + 1
    return batches


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", SMALL, NOW)


def test_open_empty_folder_creates_segment_zero(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert log.log_start_offset == log.log_end_offset == 0
    assert log.read(0, 100, 0, True) == b""


def test_append_read_round_trip_across_rolls(log: PartitionLog) -> None:
    expected = []
    for i in range(60):
        first, last = produce(log, encode_batch(count=1 + i % 4, value_size=30))
        expected.append((first, last))
    assert len(log.segments) >= 5
    assert log.log_end_offset == expected[-1][1] + 1
    assert read_all(log) == expected
    names = sorted(p.name for p in log.directory.iterdir() if p.suffix == ".log")
    assert names[1] == f"{log.segments[1].base_offset:020d}.log"
    # Stored bytes are the produced batches with offsets and epoch stamped, CRC still valid.
    data = log.read(0, 1 << 20, log.log_end_offset, True)
    assert all(h.partition_leader_epoch == 0 for h in validate_produce_records(data, 1 << 20))


def test_append_stamps_writable_buffer_in_place(log: PartitionLog) -> None:
    produce(log, encode_batch(count=3))
    buf = bytearray(encode_batch(count=2))
    log.append(buf, validate_produce_records(buf, 1 << 20), 4, NOW)
    assert bytes(buf) == log.read(3, 1000, 10, True)


def test_read_from_inside_a_batch_returns_whole_batch(log: PartitionLog) -> None:
    produce(log, encode_batch(count=5))
    produce(log, encode_batch(count=5))
    assert offsets_in(log.read(7, 1 << 20, 100, True)) == [(5, 9)]
    assert offsets_in(log.read(0, 1 << 20, 100, True)) == [(0, 4), (5, 9)]


def test_max_bytes_and_min_one_batch(log: PartitionLog) -> None:
    size = len(encode_batch(count=2, value_size=50))
    for _ in range(4):
        produce(log, encode_batch(count=2, value_size=50))
    assert len(log.read(0, size * 2 + 1, 100, True)) == size * 2
    assert log.read(0, size - 1, 100, False) == b""
    assert len(log.read(0, size - 1, 100, True)) == size


def test_high_watermark_bounds_reads(log: PartitionLog) -> None:
    produce(log, encode_batch(count=3))
    produce(log, encode_batch(count=3))
    assert offsets_in(log.read(0, 1 << 20, 3, True)) == [(0, 2)]
    assert offsets_in(log.read(0, 1 << 20, 4, True)) == [(0, 2)]  # 3..5 is not all committed
    assert log.read(3, 1 << 20, 3, True) == b""
    assert log.read(6, 1 << 20, 6, True) == b""


def test_offset_out_of_range(log: PartitionLog) -> None:
    produce(log, encode_batch(count=3))
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100, 10, True)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100, 10, True)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100, 10, True)
    assert offsets_in(log.read(2, 1000, 10, True)) == [(0, 2)]


def test_time_index_lookups(log: PartitionLog) -> None:
    # Three records per batch with out-of-order timestamps inside a batch.
    for i in range(40):
        base = 1000 * i
        produce(log, encode_batch(count=3, timestamps=[base + 10, base + 500, base + 300]))
    assert len(log.segments) >= 3
    assert log.offset_for_timestamp(0) == (0, 10)
    assert log.offset_for_timestamp(10) == (0, 10)
    assert log.offset_for_timestamp(11) == (1, 500)
    assert log.offset_for_timestamp(501) == (3, 1010)
    assert log.offset_for_timestamp(25_400) == (76, 25_500)
    assert log.offset_for_timestamp(39_500) == (118, 39_500)
    assert log.offset_for_timestamp(39_501) is None
    assert log.max_timestamp_and_offset() == (39_500, 118)


def test_log_append_time(tmp_path: Path) -> None:
    cfg = LogConfig(message_timestamp_type_log_append=True)
    log = PartitionLog.open(tmp_path / "t-0", cfg, NOW)
    batch = encode_batch(count=2, base_timestamp=5)
    info = log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW + 7)
    assert info.log_append_time_ms == NOW + 7
    (header,) = validate_produce_records(log.read(0, 1000, 10, True), 1 << 20)
    assert header.is_log_append_time and header.max_timestamp == NOW + 7
    assert log.offset_for_timestamp(NOW) == (0, NOW + 7)


def test_retention_by_time(log: PartitionLog) -> None:
    for i in range(30):
        produce(log, encode_batch(count=2, value_size=40, base_timestamp=NOW + i * 1000))
    segments = len(log.segments)
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=200, retention_ms=10_000)
    log.update_config(cfg)
    deleted = log.enforce_retention(NOW + 30_000)
    assert 0 < deleted < segments
    assert log.log_start_offset == log.segments[0].base_offset
    assert all(seg.max_timestamp >= NOW + 20_000 for seg in log.segments[:-1])
    assert read_all(log)[0][0] == log.log_start_offset
    # Never the active segment, even when everything is old.
    log.enforce_retention(NOW + 10**9)
    assert len(log.segments) == 1
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100, 1000, True)


def test_retention_by_bytes_and_high_watermark(log: PartitionLog) -> None:
    for _ in range(80):
        produce(log, encode_batch(count=2, value_size=40))
    log.update_config(LogConfig(segment_bytes=2000, index_interval_bytes=200, retention_bytes=0))
    assert log.enforce_retention(NOW, high_watermark=log.segments[2].base_offset) == 2
    log.update_config(LogConfig(segment_bytes=2000, index_interval_bytes=200, retention_bytes=4500))
    log.enforce_retention(NOW)
    assert log.size_bytes - log.segments[0].size_bytes < 4500 <= log.size_bytes


def test_truncate_to(log: PartitionLog) -> None:
    spans = [produce(log, encode_batch(count=3, value_size=40)) for _ in range(40)]
    cut = spans[25][0]
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert read_all(log) == spans[:25]
    # Inside a batch: the whole batch goes.
    log.truncate_to(spans[10][0] + 1)
    assert log.log_end_offset == spans[10][0]
    assert produce(log, encode_batch(count=1)) == (spans[10][0], spans[10][0])
    log.truncate_to(0)
    assert log.log_end_offset == 0 and len(log.segments) == 1
    assert produce(log, encode_batch(count=2)) == (0, 1)


def test_leader_epochs(log: PartitionLog) -> None:
    produce(log, encode_batch(count=5), epoch=1)  # 0..4
    produce(log, encode_batch(count=5), epoch=1)  # 5..9
    produce(log, encode_batch(count=5), epoch=3)  # 10..14
    produce(log, encode_batch(count=5), epoch=4)  # 15..19
    assert log.epochs.entries == [(1, 0), (3, 10), (4, 15)]
    assert log.end_offset_for_epoch(1) == (1, 10)
    assert log.end_offset_for_epoch(2) == (1, 10)
    assert log.end_offset_for_epoch(3) == (3, 15)
    assert log.end_offset_for_epoch(4) == (4, 20)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(9) == (-1, -1)
    assert log.epoch_for_offset(12) == 3
    assert log.last_batch_epoch() == 4
    log.truncate_to(12)
    assert log.epochs.entries == [(1, 0)]
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL, NOW)
    assert reopened.epochs.entries == [(1, 0)]
    text = (log.directory / "leader-epoch-checkpoint").read_text()
    assert text == "0\n1\n1 0\n"


def test_append_replicated(tmp_path: Path, log: PartitionLog) -> None:
    for epoch in (1, 1, 2):
        produce(log, encode_batch(count=3), epoch=epoch)
    data = log.read(0, 1 << 20, 100, True)
    follower = PartitionLog.open(tmp_path / "f-0", SMALL, NOW)
    headers = validate_produce_records(data, 1 << 20)
    with pytest.raises(NonContiguousAppend):
        follower.append_replicated(
            data[headers[1].position :],
            [h._replace(position=h.position - headers[1].position) for h in headers[1:]],
        )
    info = follower.append_replicated(data, headers)
    assert (info.first_offset, info.last_offset) == (0, 8)
    assert follower.read(0, 1 << 20, 100, True) == data
    assert follower.epochs.entries == [(1, 0), (2, 6)]


def test_flush_job_survives_segment_deletion(log: PartitionLog) -> None:
    assert not log.should_flush(NOW)
    for _ in range(30):
        produce(log, encode_batch(count=2, value_size=40))
    log.update_config(LogConfig(segment_bytes=2000, index_interval_bytes=200, flush_messages=10))
    assert log.should_flush(NOW)
    job = log.flush_job(NOW)
    assert job is not None
    log.update_config(LogConfig(segment_bytes=2000, index_interval_bytes=200, retention_bytes=0))
    log.enforce_retention(NOW)
    job()
    assert log.recovery_point == 60
    assert not log.should_flush(NOW)
    assert log.flush_job(NOW) is not None  # retention changed the folder
    assert log.flush_job(NOW) is None


def test_delete_removes_folder(log: PartitionLog) -> None:
    produce(log, encode_batch())
    log.delete()
    assert not log.directory.exists()


def test_flush_jobs_finishing_out_of_order(log: PartitionLog) -> None:
    produce(log, encode_batch(count=5))
    first = log.flush_job(NOW)
    produce(log, encode_batch(count=5))
    second = log.flush_job(NOW)
    assert first is not None and second is not None
    second()
    assert log.recovery_point == 0  # the first job's fsyncs may not have happened yet
    first()
    assert log.recovery_point == 10
    assert (log.directory / "recovery-point-offset-checkpoint").read_text() == "10\n"


def test_flush_job_made_before_truncation_does_not_advance(log: PartitionLog) -> None:
    produce(log, encode_batch(count=5))
    produce(log, encode_batch(count=5))
    job = log.flush_job(NOW)
    assert job is not None
    log.truncate_to(5)
    job()
    assert log.recovery_point <= 5


def test_flush_jobs_in_threads_while_appending(log: PartitionLog) -> None:
    import threading

    threads = []
    for i in range(200):
        produce(log, encode_batch(count=2, value_size=40))
        if i % 20 == 0:
            log.update_config(
                LogConfig(segment_bytes=2000, index_interval_bytes=200, retention_bytes=6000)
            )
            log.enforce_retention(NOW)
        job = log.flush_job(NOW) if i % 5 == 0 or i == 199 else None
        if job is not None and i % 3 == 0:
            thread = threading.Thread(target=job)
            thread.start()
            threads.append(thread)
        elif job is not None:
            job()
    for thread in threads:
        thread.join()
    assert log.recovery_point == log.log_end_offset == 400
    log.close()
    reopened = PartitionLog.open(log.directory, SMALL, NOW)
    assert reopened.log_end_offset == 400
    assert read_all(reopened)[-1] == (398, 399)


def test_flush_ms_counts_from_the_last_flush(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_ms=1000), NOW)
    produce(log, encode_batch(), now_ms=NOW + 500)
    assert not log.should_flush(NOW + 999)
    assert log.should_flush(NOW + 1000)
    job = log.flush_job()  # no time given: the last time seen counts
    assert job is not None
    job()
    produce(log, encode_batch(), now_ms=NOW + 1500)
    assert not log.should_flush(NOW + 1500)
    assert log.should_flush(NOW + 2000)


def test_flush_ms_is_at_most_one_interval_late_after_the_wall_clock_steps_back(
    tmp_path: Path,
) -> None:
    """A wall clock stepped back five minutes (a bad NTP step) must not hold unflushed data
    in the page cache for five minutes: flush.ms counts again from the step."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_ms=1000), NOW)
    produce(log, encode_batch(), now_ms=NOW + 500)
    stepped = NOW - 300_000
    assert not log.should_flush(stepped)
    produce(log, encode_batch(), now_ms=stepped + 100)
    assert not log.should_flush(stepped + 999)
    assert log.should_flush(stepped + 1000)


def test_a_write_failing_on_a_full_disk_leaves_the_indexes_as_they_were(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC during an append (the segment write and the index files alike) must not leave
    an index entry pointing into bytes that were cut back: a later fetch would start at
    whatever batch comes to lie there and skip the offsets before it."""
    for i in range(4):
        produce(log, encode_batch(count=2, value_size=60 + i))
    segment = log.segments[-1]
    keys_before = list(segment.offset_index.keys)
    times_before = list(segment.time_index.keys)
    real_write = os.write

    def full_disk(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError):
        produce(log, encode_batch(count=3, value_size=150))
    monkeypatch.setattr(os, "write", real_write)
    assert list(segment.offset_index.keys) == keys_before
    assert list(segment.time_index.keys) == times_before
    # The space is back: different batches now take those offsets and positions.
    expected = read_all(log)
    for i in range(6):
        expected.append(produce(log, encode_batch(count=1 + i % 3, value_size=20 + 7 * i)))
    assert read_all(log) == expected
    for first, last in expected:
        for offset in range(first, last + 1):
            assert offsets_in(log.read(offset, 1, log.log_end_offset, True))[0] == (first, last)
    log.flush()
    reopened = PartitionLog.open(log.directory, SMALL, NOW)
    assert read_all(reopened) == expected


def test_index_entries_a_full_disk_refused_are_written_by_the_next_flush(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        produce(log, encode_batch(count=2, value_size=60 + i))
    index = log.segments[-1].offset_index
    assert index.keys, "the test needs buffered index entries"
    real_write = os.write
    calls = 0

    def half_then_full(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[:3])  # a partial entry, then no space
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.setattr(os, "write", real_write)
    assert index.path.stat().st_size == 0  # the partial entry was cut back
    log.flush()
    assert index.path.stat().st_size == len(index.keys) * index.ENTRY.size


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_failed_fsync_of_a_flush_closes_every_descriptor_it_opened(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush opens a descriptor of each segment and its two indexes; an fsync that fails
    on the first must not leave the others open (two per failed flush, for good)."""
    for i in range(3):
        produce(log, encode_batch(count=2, value_size=40 + i))
    before = _open_descriptors()

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert _open_descriptors() == before
