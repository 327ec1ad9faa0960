"""PartitionLog recovery after kill -9: torn tails, corrupt batches, lost indexes, clean opens."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.log.partition import CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_CHECKPOINT, RECOVERY_POINT_FILE
from raftka.log.segment import LogSegment, RecoveryResult
from raftka.protocol.records import iter_batch_headers, validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=3000, index_interval_bytes=150)


def fill(directory: Path, batches: int = 50, epoch: int = 0) -> tuple[PartitionLog, bytes]:
    """A log left open (as after kill -9): nothing flushed, no clean marker."""
    log = PartitionLog.open(directory, SMALL, NOW)
    for i in range(batches):
        batch = encode_batch(count=1 + i % 3, value_size=40, base_timestamp=NOW + i)
        log.append(batch, validate_produce_records(batch, 1 << 20), epoch, NOW)
    return log, everything(log)


def everything(log: PartitionLog) -> bytes:
    parts = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset, True)
        parts.append(data)
        offset = list(iter_batch_headers(data))[-1].next_offset
    return b"".join(parts)


def abandon(log: PartitionLog) -> None:
    """Drop descriptors without the clean-shutdown work, like a killed process."""
    for segment in log.segments:
        for index in (segment.offset_index, segment.time_index):
            index.write_pending()  # the page cache survives kill -9
        segment.release()  # the descriptor goes with the process


def last_log_file(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


def test_reopen_after_kill_keeps_everything(tmp_path: Path) -> None:
    log, data = fill(tmp_path / "t-0")
    end = log.log_end_offset
    abandon(log)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert again.log_end_offset == end
    assert everything(again) == data


def test_torn_tail_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, data = fill(tmp_path / "t-0")
    last_base = list(iter_batch_headers(data))[-1].base_offset
    abandon(log)
    path = last_log_file(tmp_path / "t-0")
    os.truncate(path, path.stat().st_size - 5)
    with caplog.at_level(logging.WARNING, logger="raftka.log"):
        again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert "truncated" in caplog.text
    assert again.log_end_offset == last_base
    assert data.startswith(everything(again))
    # Appends continue right after the last good batch.
    batch = encode_batch(count=2)
    info = again.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW)
    assert info.first_offset == last_base


def test_flipped_byte_in_last_batch(tmp_path: Path) -> None:
    log, data = fill(tmp_path / "t-0")
    headers = list(iter_batch_headers(data))
    abandon(log)
    path = last_log_file(tmp_path / "t-0")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x40
    path.write_bytes(raw)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert again.log_end_offset == headers[-1].base_offset
    assert everything(again) == data[: headers[-1].position]


def test_corruption_in_middle_drops_later_segments(tmp_path: Path) -> None:
    log, data = fill(tmp_path / "t-0", batches=80)
    assert len(log.segments) >= 4
    second = log.segments[1]
    abandon(log)
    raw = bytearray(second.log_path.read_bytes())
    raw[200] ^= 0xFF
    second.log_path.write_bytes(raw)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert len(again.segments) == 2
    assert again.log_end_offset < second.next_offset
    assert data.startswith(everything(again))
    assert len(list((tmp_path / "t-0").glob("*.log"))) == 2


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    log, data = fill(tmp_path / "t-0", batches=80)
    entries = [seg.offset_index.entries for seg in log.segments]
    assert max(entries) > 2
    log.close()
    directory = tmp_path / "t-0"
    for path in sorted(directory.glob("*.index"))[:2]:
        path.unlink()
    for path in sorted(directory.glob("*.timeindex"))[2:3]:
        path.write_bytes(b"\x00" * 5)
    (directory / "00000000000000099999.index").write_bytes(b"junk")  # no .log: stray
    (directory / "recovery-point-offset-checkpoint.tmp").write_bytes(b"1")
    again = PartitionLog.open(directory, SMALL, NOW)
    assert [seg.offset_index.entries for seg in again.segments] == entries
    assert everything(again) == data
    assert not (directory / "00000000000000099999.index").exists()
    assert not (directory / "recovery-point-offset-checkpoint.tmp").exists()
    assert again.offset_for_timestamp(NOW + 40) is not None
    assert (directory / "00000000000000000000.index").stat().st_size == 8 * entries[0]


def test_clean_close_skips_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, data = fill(tmp_path / "t-0", batches=80)
    state = [(s.base_offset, s.next_offset, s.max_timestamp, s.size_bytes) for s in log.segments]
    log.close()
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()

    def no_recover(self: LogSegment) -> None:
        raise AssertionError("a clean log must not be rescanned")

    monkeypatch.setattr(LogSegment, "recover", no_recover)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert not (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    assert [
        (s.base_offset, s.next_offset, s.max_timestamp, s.size_bytes) for s in again.segments
    ] == state
    assert everything(again) == data


def test_flushed_segments_are_trusted_after_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, data = fill(tmp_path / "t-0", batches=80)
    log.flush(NOW)
    assert int((tmp_path / "t-0" / RECOVERY_POINT_FILE).read_text()) == log.log_end_offset
    batch = encode_batch(count=2)
    log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW)
    abandon(log)
    recovered: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment) -> RecoveryResult:
        recovered.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(LogSegment, "recover", spy)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert recovered == [again.segments[-1].base_offset]
    assert again.log_end_offset == log.log_end_offset
    assert everything(again).startswith(data)


def test_lost_epoch_checkpoint_is_rebuilt(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    for epoch in (2, 2, 5, 7):
        batch = encode_batch(count=3)
        log.append(batch, validate_produce_records(batch, 1 << 20), epoch, NOW)
    log.close()
    (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).write_text("garbage")
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert again.epochs.entries == [(2, 0), (5, 6), (7, 9)]


def test_unflushed_epochs_follow_recovered_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    batch = encode_batch(count=3)
    log.append(batch, validate_produce_records(batch, 1 << 20), 1, NOW)
    log.flush(NOW)
    log.append(batch, validate_produce_records(batch, 1 << 20), 3, NOW)
    abandon(log)
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert again.epochs.entries == [(1, 0), (3, 3)]
    assert again.last_batch_epoch() == 3


def test_index_behind_its_segment_is_rebuilt(tmp_path: Path) -> None:
    log, data = fill(tmp_path / "t-0", batches=80)
    entries = [seg.offset_index.entries for seg in log.segments]
    log.close()
    first_index = tmp_path / "t-0" / "00000000000000000000.index"
    os.truncate(first_index, 8)  # keeps one entry: plausible, but behind
    again = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert [seg.offset_index.entries for seg in again.segments] == entries
    assert everything(again) == data


def produce(log: PartitionLog, epoch: int, batches: int) -> None:
    for _ in range(batches):
        batch = encode_batch(count=1, value_size=20)
        log.append(batch, validate_produce_records(batch, 1 << 20), epoch, NOW)


def test_a_truncation_after_an_unclean_open_is_not_trusted_by_the_next_open(
    tmp_path: Path,
) -> None:
    """A killed leader restarts (its last segment recovered, so the recovery point it holds
    is that segment's base, below the file's) and cuts its unreplicated tail inside that
    segment. Had the file kept its higher value, the next open after another kill would
    trust the rewritten segment and the epoch checkpoint of the old tail: epoch 1 would end
    where the cut tail's epoch began, below offsets of epoch 1 a consumer may have fetched,
    and librdkafka seeks back there, dropping the records it had queued."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, SMALL, NOW)
    produce(log, epoch=1, batches=10)  # 0..9
    log.roll(NOW)
    produce(log, epoch=3, batches=10)  # 10..19: an old leader's tail, never committed
    log.flush(NOW)
    assert (directory / RECOVERY_POINT_FILE).read_text() == "20\n"
    abandon(log)

    log = PartitionLog.open(directory, SMALL, NOW)
    assert log.recovery_point == 10  # the last segment was recovered
    log.truncate_to(10)  # the new leader's log holds epoch 1 from there
    produce(log, epoch=1, batches=5)  # 10..14
    log.roll(NOW)
    produce(log, epoch=4, batches=1)  # 15: the new leader's first batch
    assert log.epochs.entries == [(1, 0), (4, 15)]
    abandon(log)  # before any flush

    again = PartitionLog.open(directory, SMALL, NOW)
    assert again.epochs.entries == [(1, 0), (4, 15)]
    assert again.end_offset_for_epoch(1) == (1, 15)
    assert again.end_offset_for_epoch(3) == (1, 15)


def test_a_flush_job_overtaken_by_a_truncation_leaves_its_writes_to_the_next_job(
    tmp_path: Path,
) -> None:
    """A job made before a truncation writes nothing when it runs (its generation is old).
    The leader epochs and the log start it took must still reach their files with a later
    job, or that job raises the recovery point over segments whose epochs the checkpoint
    lacks, and DeleteRecords is undone by the next open after a kill."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, SMALL, NOW)
    produce(log, epoch=1, batches=5)  # 0..4
    log.flush(NOW)
    produce(log, epoch=2, batches=5)  # 5..9
    log.delete_records_before(2)
    job = log.flush_job(NOW)
    assert job is not None
    log.truncate_to(8)  # inside epoch 2: the epoch cache does not change
    job()
    produce(log, epoch=2, batches=2)  # 8..9
    log.roll(NOW)
    produce(log, epoch=2, batches=2)  # 10..11
    later = log.flush_job(NOW)
    assert later is not None
    later()
    assert (directory / RECOVERY_POINT_FILE).read_text() == "12\n"
    abandon(log)

    again = PartitionLog.open(directory, SMALL, NOW)
    assert again.epochs.entries == [(1, 2), (2, 5)]
    assert again.log_start_offset == 2
    assert again.end_offset_for_epoch(1) == (1, 5)


def test_flush_jobs_finishing_out_of_order_write_epochs_and_log_start_of_one_moment(
    tmp_path: Path,
) -> None:
    """Jobs may finish out of order. The later one must not write epochs that start at a
    log start (DeleteRecords) whose file only the earlier, unfinished one was to write: the
    next open would keep the old log start with a cache naming no epoch below the new one."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, SMALL, NOW)
    produce(log, epoch=1, batches=5)  # 0..4
    produce(log, epoch=2, batches=5)  # 5..9
    log.roll(NOW)
    log.flush(NOW)
    log.delete_records_before(7)
    first = log.flush_job(NOW)  # takes the log start and the epochs it moved
    produce(log, epoch=3, batches=1)  # 10
    second = log.flush_job(NOW)
    assert first is not None and second is not None
    second()
    abandon(log)  # `first` never finished

    again = PartitionLog.open(directory, SMALL, NOW)
    assert (again.log_start_offset, again.epochs.entries) == (7, [(2, 7), (3, 10)])
