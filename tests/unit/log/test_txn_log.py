"""Transactions in a partition log: producer state, the last stable offset, the
aborted-transaction index (.txnindex) through append, recovery, truncation and retention,
and the upper bound a read_committed fetch collects aborted transactions below."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.log.producer_state import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    SNAPSHOT_VERSION,
    ProducerStateError,
    ProducerStateManager,
    list_snapshots,
    snapshot_path,
)
from raftka.log.txn_index import ENTRY_BYTES, AbortedTxn
from raftka.protocol.batch_builder import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    build_batch,
    build_end_txn_marker,
    control_key,
    control_record_type,
    end_txn_marker,
)
from raftka.protocol.records import validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=150)


def txn_batch(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytes:
    return build_batch(
        [(None, b"v" * 40)] * count,
        NOW,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def plain_batch(count: int = 1) -> bytes:
    return build_batch([(None, b"p" * 40)] * count, NOW)


def marker(pid: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_end_txn_marker(pid, epoch, coordinator_epoch, committed, NOW)


def append(log: PartitionLog, data: bytes) -> int:
    headers = validate_produce_records(data, 1 << 20)
    return log.append(bytearray(data), headers, 0, NOW).first_offset


def ongoing(state: ProducerStateManager) -> dict[int, int]:
    """Producer id -> first offset of each ongoing transaction, from the producer entries."""
    return {
        producer_id: entry.current_txn_first_offset
        for producer_id, entry in state.producers.items()
        if entry.current_txn_first_offset >= 0
    }


def txn_index_file(log: PartitionLog, base_offset: int) -> Path:
    return log.directory / f"{base_offset:020d}.txnindex"


def test_marker_batch_is_a_transactional_control_batch() -> None:
    data = marker(7, committed=True, epoch=3, coordinator_epoch=9)
    (header,) = validate_produce_records(data, 1 << 20)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert control_record_type(data) == CONTROL_TYPE_COMMIT
    assert control_record_type(marker(7, committed=False)) == CONTROL_TYPE_ABORT
    assert end_txn_marker(data) == (CONTROL_TYPE_COMMIT, 9)
    assert end_txn_marker(marker(7, committed=False, coordinator_epoch=4)) == (
        CONTROL_TYPE_ABORT,
        4,
    )
    # Other control batches are not transaction markers; a marker without its value has
    # coordinator epoch -1.
    leader_change = build_batch([(control_key(2), b"")], NOW, control=True)
    assert control_record_type(leader_change) == 2
    assert end_txn_marker(leader_change) is None
    assert end_txn_marker(build_batch([(control_key(0), None)], NOW, control=True)) == (0, -1)
    assert end_txn_marker(plain_batch()) is None


def test_ongoing_transaction_holds_the_lso_until_its_marker_is_replicated(
    tmp_path: Path,
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, plain_batch(3))  # 0-2
    assert append(log, txn_batch(1, 0)) == 3  # 3-4
    append(log, plain_batch())  # 5
    assert log.last_stable_offset(6) == 3
    assert log.last_stable_offset(2) == 2  # never above the high watermark
    marker_offset = append(log, marker(1, committed=True))
    assert marker_offset == 6
    assert ongoing(log.producer_state) == {}
    # Complete, but a truncation could still remove the marker: still unstable.
    assert log.last_stable_offset(6) == 3
    assert log.last_stable_offset(7) == 7
    # A pure read: only the high watermark's advance forgets the replicated marker.
    assert len(log.producer_state.unreplicated_txns) == 1
    log.on_high_watermark(6)
    assert len(log.producer_state.unreplicated_txns) == 1
    assert log.last_stable_offset(6) == 3
    log.on_high_watermark(7)
    assert not log.producer_state.unreplicated_txns
    assert log.last_stable_offset(7) == 7
    assert log.collect_aborted(0, 7) == []  # a commit is not indexed
    log.close()


def test_abort_marker_is_indexed_with_the_lso_after_it(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, txn_batch(1, 0))  # 0-1
    append(log, txn_batch(2, 0))  # 2-3
    append(log, txn_batch(1, 2))  # 4-5
    assert append(log, marker(1, committed=False)) == 6
    # Producer 2's transaction (from 2) is still ongoing: the recorded LSO is 2.
    assert log.collect_aborted(0, 7) == [AbortedTxn(1, 0, 6, 2)]
    assert append(log, marker(2, committed=False)) == 7
    assert log.collect_aborted(0, 8) == [AbortedTxn(1, 0, 6, 2), AbortedTxn(2, 2, 7, 8)]
    # Only transactions overlapping the range come back.
    assert log.collect_aborted(7, 8) == [AbortedTxn(2, 2, 7, 8)]
    assert log.collect_aborted(0, 2) == [AbortedTxn(1, 0, 6, 2)]
    assert txn_index_file(log, 0).stat().st_size == 2 * ENTRY_BYTES
    assert log.last_stable_offset(8) == 8
    log.close()


def test_lso_is_never_below_the_log_start(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, txn_batch(7, 0, count=1))  # 0, never ended
    for _ in range(9):
        append(log, plain_batch())  # 1-9
    log.roll(NOW)
    for _ in range(5):
        append(log, plain_batch())  # 10-14
    assert log.last_stable_offset(15) == 0
    assert log.delete_records_before(12) == 12
    # DeleteRecords removed where the transaction began: read_committed starts at the log
    # start (Kafka: max(firstUnstableOffset, logStartOffset)), never below it.
    assert log.last_stable_offset(15) == 12
    assert log.last_stable_offset(11) == 11  # and never above the high watermark
    found = log.fetch_slice(log.last_stable_offset(15), 1000, 15, True)
    assert found is None or found.next_offset > 12
    log.close()


def test_marker_without_a_transaction_changes_nothing_visible(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, marker(5, committed=False, epoch=2))
    assert log.collect_aborted(0, 1) == []
    assert log.last_stable_offset(1) == 1
    entry = log.producer_state.get(5)
    assert entry is not None and entry.epoch == 2
    log.close()


def test_marker_epoch_rules() -> None:
    state = ProducerStateManager()
    state.check_marker(1, 0, 0)  # unknown producer: nothing to compare with
    (header,) = validate_produce_records(txn_batch(1, 0, epoch=3), 1 << 20)
    state.update(header, 0, NOW)
    with pytest.raises(ProducerStateError) as caught:
        state.check_marker(1, 2, 0)
    assert caught.value.error_code == INVALID_PRODUCER_EPOCH
    state.check_marker(1, 3, 0)
    state.check_marker(1, 4, 0)  # a newer epoch is accepted and becomes the producer's
    (end,) = validate_produce_records(marker(1, False, epoch=4), 1 << 20)
    completed = state.update(end, 2, NOW, (CONTROL_TYPE_ABORT, 0))
    assert completed is not None and completed.is_aborted
    entry = state.get(1)
    assert entry is not None and entry.epoch == 4 and entry.current_txn_first_offset == -1


def test_non_transactional_write_inside_a_transaction_is_refused(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, txn_batch(1, 0))
    plain = encode_batch(count=1, producer_id=1, producer_epoch=0, base_sequence=2)
    with pytest.raises(ProducerStateError) as caught:
        log.producer_state.check(validate_produce_records(plain, 1 << 20, produce_version=9))
    assert caught.value.error_code == INVALID_TXN_STATE
    log.close()


def fill(log: PartitionLog) -> list[AbortedTxn]:
    """Several segments of interleaved transactions, some aborted in every segment;
    returns the aborted ones."""
    sequences = {1: 0, 2: 0, 3: 0}
    for round_number in range(12):
        for pid in (1, 2, 3):
            append(log, txn_batch(pid, sequences[pid]))
            sequences[pid] += 2
        append(log, plain_batch())
        for pid in (2, 1, 3):
            append(log, marker(pid, committed=(round_number + pid) % 3 == 0))
    assert len(log.segments) >= 3
    aborted = log.collect_aborted(0, log.log_end_offset)
    assert all(segment.txn_index.entries for segment in log.segments[:-1])
    return aborted


def test_clean_reopen_keeps_lso_and_aborted_transactions(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    aborted = fill(log)
    assert aborted
    append(log, txn_batch(9, 0))  # left open
    open_at = log.log_end_offset - 2
    end = log.log_end_offset
    lso = log.last_stable_offset(end)
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert reopened.collect_aborted(0, end) == aborted
    assert ongoing(reopened.producer_state).get(9) == open_at
    assert reopened.last_stable_offset(end) == lso
    reopened.close()


@pytest.mark.parametrize("damage", ["missing", "torn", "garbage", "unclean"])
def test_recovery_rebuilds_damaged_txn_indexes(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, SMALL, NOW)
    aborted = fill(log)
    end = log.log_end_offset
    open_txns = ongoing(log.producer_state)
    log.close()
    damaged = [p for p in directory.glob("*.txnindex") if p.stat().st_size > 0]
    assert damaged
    victim = damaged[0]
    if damage == "missing":
        victim.unlink()
    elif damage == "torn":
        victim.write_bytes(victim.read_bytes()[:-3])
    elif damage == "garbage":
        victim.write_bytes(struct.pack(">hqqqq", 0, 1, 5, 10**9, 0))
    else:
        # A crash before anything was flushed: every segment is recovered.
        (directory / ".kafka_cleanshutdown").unlink()
        (directory / "recovery-point-offset-checkpoint").write_text("0\n")
        for path in directory.glob("*.txnindex"):
            path.write_bytes(b"")
        for offset in list_snapshots(directory):
            snapshot_path(directory, offset).unlink()
    reopened = PartitionLog.open(directory, SMALL, NOW)
    assert reopened.collect_aborted(0, end) == aborted
    assert ongoing(reopened.producer_state) == open_txns
    reopened.close()
    # The rebuilt files are whole: a clean open trusts them as they are.
    for path in directory.glob("*.snapshot"):
        path.unlink()
    again = PartitionLog.open(directory, SMALL, NOW)
    for segment in again.segments:
        assert segment.txn_index.load(segment.base_offset, segment.next_offset)
    assert again.collect_aborted(0, end) == aborted
    again.close()


def test_old_snapshot_version_is_ignored_and_the_log_replayed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), NOW)
    append(log, txn_batch(1, 0))
    log.close()
    (offset,) = list_snapshots(directory)
    path = snapshot_path(directory, offset)
    data = bytearray(path.read_bytes())
    struct.pack_into(">h", data, 0, SNAPSHOT_VERSION - 1)
    path.write_bytes(bytes(data))
    reopened = PartitionLog.open(directory, LogConfig(), NOW)
    assert ongoing(reopened.producer_state).get(1) == 0
    reopened.close()


def test_snapshot_round_trip_keeps_transaction_state() -> None:
    state = ProducerStateManager()
    (header,) = validate_produce_records(txn_batch(3, 0, epoch=2), 1 << 20)
    state.update(header, 17, NOW)
    (end,) = validate_produce_records(marker(4, True, epoch=1, coordinator_epoch=6), 1 << 20)
    state.update(end, 19, NOW, (CONTROL_TYPE_COMMIT, 6))
    copy = ProducerStateManager.deserialize(state.serialize())
    assert copy is not None
    assert ongoing(copy) == {3: 17}
    assert copy.first_unstable_offset() == 17
    entry = copy.get(4)
    assert entry is not None and entry.coordinator_epoch == 6 and entry.epoch == 1


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, txn_batch(1, 0))  # 0-1
    append(log, marker(1, committed=False))  # 2
    append(log, txn_batch(2, 0))  # 3-4
    append(log, marker(2, committed=False))  # 5
    assert len(log.collect_aborted(0, 6)) == 2
    log.truncate_to(5)  # a divergent suffix: producer 2's marker
    assert log.collect_aborted(0, 6) == [AbortedTxn(1, 0, 2, 3)]
    assert txn_index_file(log, 0).stat().st_size == ENTRY_BYTES
    assert ongoing(log.producer_state).get(2) == 3
    assert log.last_stable_offset(5) == 3
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    assert reopened.collect_aborted(0, 6) == [AbortedTxn(1, 0, 2, 3)]
    reopened.close()


def _open_descriptors_of(path: Path) -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_txn_index_holds_no_descriptor_and_is_synced_once_written(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    append(log, txn_batch(1, 0))
    append(log, marker(1, committed=False))  # an index entry in segment 0
    path = txn_index_file(log, 0)
    assert path.stat().st_size == ENTRY_BYTES
    assert _open_descriptors_of(path) == 0
    segment = log.segments[0]
    targets = segment.fsync_targets()
    try:
        assert sum(os.readlink(f"/proc/self/fd/{fd}") == str(path) for fd in targets) == 1
    finally:
        for fd in targets:
            os.close(fd)
    targets = segment.fsync_targets()  # nothing written since: not synced again
    try:
        assert all(os.readlink(f"/proc/self/fd/{fd}") != str(path) for fd in targets)
    finally:
        for fd in targets:
            os.close(fd)
    log.roll(NOW)
    job = log.flush_job(NOW)
    assert job is not None
    job()
    assert _open_descriptors_of(path) == 0
    log.close()


def test_deleted_segments_take_their_txn_index_along(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    fill(log)
    first = log.segments[0].base_offset
    assert txn_index_file(log, first).exists()
    log.delete_records_before(log.segments[1].base_offset)
    assert not txn_index_file(log, first).exists()
    log.close()


def test_fetch_slice_reports_the_offset_after_its_last_batch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=20_000), NOW)
    rng = random.Random(3)
    for _ in range(200):
        append(log, encode_batch(count=rng.randint(1, 5), value_size=rng.randint(10, 400)))
    end = log.log_end_offset
    for _ in range(300):
        offset = rng.randrange(0, end + 1)
        max_bytes = rng.choice([0, 1, 100, 1000, 5000, 50_000])
        max_offset = rng.randrange(offset, end + 1)
        one = rng.random() < 0.5
        found = log.fetch_slice(offset, max_bytes, max_offset, one)
        expected = log.read(offset, max_bytes, max_offset, one)
        if found is None:
            assert expected == b""
            continue
        headers = validate_produce_records(expected, 1 << 20)
        assert found.next_offset == headers[-1].next_offset
        assert found.segment.pread(found.length, found.position) == expected
    log.close()
