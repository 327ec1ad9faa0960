"""A segment keeps the headers of its last appends, so a read at the end of the log walks no
batch header from the file; what it keeps never outlives the bytes it describes."""

from __future__ import annotations

from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.log.segment import RECENT_BATCHES, LogSegment
from raftka.protocol.records import read_batch_header, validate_produce_records

NOW = 1_700_000_000_000
# No offset-index entry before 1 MB: every read walks the headers from the segment's start.
CONFIG = LogConfig(index_interval_bytes=1 << 20)


def append(log: PartitionLog, count: int = 1, value_size: int = 10) -> None:
    batch = encode_batch(count=count, value_size=value_size)
    log.append(batch, validate_produce_records(batch, 1 << 20), 1, NOW)


def count_preads(segment: LogSegment, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions `segment` reads from its file from now on."""
    positions: list[int] = []
    pread = segment.pread

    def counted(length: int, position: int) -> bytes:
        positions.append(position)
        return pread(length, position)

    monkeypatch.setattr(segment, "pread", counted)
    return positions


def assert_slices_match_reads(log: PartitionLog) -> None:
    end = log.log_end_offset
    for offset in range(log.log_start_offset, end):
        for max_bytes in (1, 10_000):
            found = log.fetch_slice(offset, max_bytes, end, True)
            sliced = b"" if found is None else found.segment.pread(found.length, found.position)
            assert sliced == log.read(offset, max_bytes, end, True), (offset, max_bytes)


def test_a_read_at_the_end_of_the_log_walks_no_header_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, NOW)
    for _ in range(50):
        append(log)
    preads = count_preads(log.segments[-1], monkeypatch)
    # A consumer one batch behind, and one a few batches behind.
    assert log.fetch_slice(49, 1 << 20, 50, True) is not None
    assert log.fetch_slice(50 - RECENT_BATCHES, 1 << 20, 50, True) is not None
    assert preads == []
    # Further back the headers come from the file, as before.
    found = log.fetch_slice(10, 1 << 20, 50, True)
    assert found is not None and found.next_offset == 50
    assert len(preads) >= 10
    assert_slices_match_reads(log)
    log.close()


def test_a_follower_appending_many_batches_at_once_keeps_the_last_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = PartitionLog.open(tmp_path / "l-0", CONFIG, NOW)
    for _ in range(20):
        append(leader)
    data = leader.read(0, 1 << 20, 20, True)
    follower = PartitionLog.open(tmp_path / "f-0", CONFIG, NOW)
    follower.append_replicated(data, validate_produce_records(data, 1 << 20))  # one call
    preads = count_preads(follower.segments[-1], monkeypatch)
    assert follower.fetch_slice(19, 1 << 20, 20, True) is not None
    assert follower.fetch_slice(20 - RECENT_BATCHES, 1 << 20, 20, True) is not None
    assert preads == []
    found = follower.fetch_slice(20 - RECENT_BATCHES - 1, 1 << 20, 20, True)
    assert found is not None and preads  # the one before them comes from the file
    assert_slices_match_reads(follower)
    leader.close()
    follower.close()


def test_batches_rewritten_after_a_truncation_are_read_as_they_now_are(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, NOW)
    for _ in range(5):
        append(log)
    # The tail goes, and batches of other sizes and offsets take its positions.
    log.truncate_to(1)
    append(log, count=3)
    append(log, value_size=40)
    append(log, count=2, value_size=5)
    assert log.log_end_offset == 7
    assert_slices_match_reads(log)
    log.close()


def test_a_rolled_segment_and_a_reopened_log_read_as_before(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, NOW)
    for _ in range(6):
        append(log)
    log.roll(NOW)
    for _ in range(3):
        append(log)
    assert_slices_match_reads(log)
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", CONFIG, NOW)
    assert_slices_match_reads(log)
    append(log, count=2)
    assert_slices_match_reads(log)
    log.close()


def test_the_headers_kept_are_those_the_file_holds(tmp_path: Path) -> None:
    # The leader's append reads them back from the stamped bytes; a follower's are the
    # headers it was handed (read from the bytes it copies): both must be the stored ones,
    # at their positions in the segment.
    leader = PartitionLog.open(tmp_path / "l-0", CONFIG, NOW)
    for count in (1, 3, 2):
        append(leader, count=count)
    follower = PartitionLog.open(tmp_path / "f-0", CONFIG, NOW)
    data = leader.read(0, 1 << 20, 6, True)
    follower.append_replicated(data, validate_produce_records(data, 1 << 20))
    for log in (leader, follower):
        segment = log.segments[-1]
        kept = segment._recent
        headers = [kept[position] for position in sorted(kept)]
        assert [(h.position, h.base_offset) for h in headers] == [
            (0, 0),
            (headers[0].size_bytes, 1),
            (headers[0].size_bytes + headers[1].size_bytes, 4),
        ]
        for header in headers:
            stored = segment.pread(61, header.position)
            assert header == read_batch_header(stored, 0, header.position)
    leader.close()
    follower.close()
