"""Idempotent producer state: Kafka's sequence and epoch rules, and rebuilding it from the log
after a clean close, after a kill, and after truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from batches import encode_batch

from raftka.log import LogConfig, PartitionLog
from raftka.log.producer_state import (
    BATCHES_KEPT,
    INT32_MAX,
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
    increment_sequence,
    list_snapshots,
)
from raftka.protocol.records import BatchHeader, validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1500, index_interval_bytes=150)
PID = 4242


def batch(seq: int, count: int = 1, epoch: int = 0, pid: int = PID, ts: int = NOW) -> bytes:
    return encode_batch(
        count=count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_timestamp=ts,
        value_size=40,
    )


def headers_of(data: bytes) -> list[BatchHeader]:
    return validate_produce_records(data, 1 << 20, produce_version=9)


def produce(log: PartitionLog, data: bytes, now_ms: int = NOW) -> tuple[int, bool]:
    """Check and append like the Produce handler: (base offset, was it a duplicate)."""
    headers = headers_of(data)
    duplicate = log.producer_state.check(headers)
    if duplicate is not None:
        return duplicate.first_offset, True
    return log.append(bytearray(data), headers, 0, now_ms).first_offset, False


def rejected(log: PartitionLog, data: bytes) -> int:
    with pytest.raises(ProducerStateError) as caught:
        produce(log, data)
    return caught.value.error_code


def abandon(log: PartitionLog) -> None:
    """Drop descriptors without the clean-shutdown work, like a killed process."""
    for segment in log.segments:
        for index in (segment.offset_index, segment.time_index):
            index.write_pending()
        segment.release()  # the descriptor goes with the process


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", SMALL, NOW)


# -- sequence rules ----------------------------------------------------------------------


def test_in_order_batches_append(log: PartitionLog) -> None:
    seq = 0
    for i in range(10):
        count = 1 + i % 3
        _offset, duplicate = produce(log, batch(seq, count))
        assert not duplicate
        seq += count
    entry = log.producer_state.get(PID)
    assert entry is not None and entry.epoch == 0
    assert entry.last_sequence == seq - 1
    assert len(entry.batches) == BATCHES_KEPT


def test_each_of_the_last_five_batches_is_a_duplicate(log: PartitionLog) -> None:
    sent = []
    seq = 0
    for _ in range(8):
        offset, _dup = produce(log, batch(seq, 2))
        sent.append((seq, offset))
        seq += 2
    end = log.log_end_offset
    for first_seq, offset in sent[-BATCHES_KEPT:]:
        assert produce(log, batch(first_seq, 2)) == (offset, True)
    assert log.log_end_offset == end  # nothing stored twice
    # Older than the retained five: Kafka can no longer tell, and answers out of order.
    assert rejected(log, batch(sent[0][0], 2)) == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_same_first_sequence_but_other_last_is_not_a_duplicate(log: PartitionLog) -> None:
    produce(log, batch(0, 3))
    assert rejected(log, batch(0, 2)) == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gap_is_out_of_order(log: PartitionLog) -> None:
    produce(log, batch(0, 2))
    assert rejected(log, batch(3)) == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(log, batch(2))[1] is False


def test_older_epoch_is_fenced(log: PartitionLog) -> None:
    produce(log, batch(0, epoch=0))
    produce(log, batch(0, epoch=1))
    assert rejected(log, batch(1, epoch=0)) == INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero(log: PartitionLog) -> None:
    produce(log, batch(0, 5, epoch=0))
    assert rejected(log, batch(5, epoch=1)) == OUT_OF_ORDER_SEQUENCE_NUMBER
    _offset, duplicate = produce(log, batch(0, epoch=1))
    assert not duplicate
    entry = log.producer_state.get(PID)
    assert entry is not None and entry.epoch == 1 and len(entry.batches) == 1


def test_duplicate_needs_the_same_epoch(log: PartitionLog) -> None:
    produce(log, batch(0, epoch=0))
    # Same sequences, newer epoch: a new batch, not a duplicate.
    assert produce(log, batch(0, epoch=1))[1] is False


def test_unknown_producer_may_start_anywhere(log: PartitionLog) -> None:
    assert produce(log, batch(1234, 2))[1] is False
    assert produce(log, batch(1236))[1] is False


def test_sequence_wraps_at_int32_max(log: PartitionLog) -> None:
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    produce(log, batch(INT32_MAX - 1, 2))  # INT32_MAX-1, INT32_MAX
    offset, duplicate = produce(log, batch(0, 3))
    assert not duplicate
    assert produce(log, batch(0, 3)) == (offset, True)
    assert produce(log, batch(3))[1] is False
    # A batch that wraps inside itself.
    produce(log, batch(INT32_MAX - 1, 4, pid=7))  # ..., 0, 1
    entry = log.producer_state.get(7)
    assert entry is not None and entry.last_sequence == 1
    assert produce(log, batch(2, pid=7))[1] is False


def test_batches_without_producer_id_pass(log: PartitionLog) -> None:
    for _ in range(3):
        data = encode_batch(count=2)
        assert log.producer_state.check(headers_of(data)) is None
        log.append(bytearray(data), headers_of(data), 0, NOW)
    assert len(log.producer_state) == 0


def test_producers_are_independent(log: PartitionLog) -> None:
    produce(log, batch(0, pid=1))
    produce(log, batch(0, pid=2))
    assert produce(log, batch(1, pid=1))[1] is False
    assert produce(log, batch(0, pid=2))[1] is True


def test_idle_producers_expire() -> None:
    state = ProducerStateManager(expiration_ms=1000)
    old = headers_of(batch(0, pid=1, ts=NOW))[0]
    new = headers_of(batch(0, pid=2, ts=NOW + 900))[0]
    state.update(old, 0, old.max_timestamp)
    state.update(new, 1, new.max_timestamp)
    assert state.remove_expired(NOW + 1500) == 1
    assert state.get(1) is None and state.get(2) is not None


def test_snapshot_round_trip_and_corruption() -> None:
    state = ProducerStateManager()
    for seq in range(7):
        header = headers_of(batch(seq, pid=9))[0]
        state.update(header, seq * 10, NOW + seq)
    data = state.serialize()
    loaded = ProducerStateManager.deserialize(data)
    assert loaded is not None
    entry = loaded.get(9)
    assert entry is not None
    assert list(entry.batches) == [
        BatchMetadata(seq, seq, seq * 10, seq * 10, NOW + seq) for seq in range(2, 7)
    ]
    broken = bytearray(data)
    broken[-1] ^= 1
    assert ProducerStateManager.deserialize(bytes(broken)) is None
    assert ProducerStateManager.deserialize(data[:5]) is None


# -- durability --------------------------------------------------------------------------


def _fill(log: PartitionLog, n: int = 40) -> list[tuple[int, int]]:
    """n batches of 2 records from PID; returns (first seq, base offset) of each."""
    sent = []
    for i in range(n):
        offset, duplicate = produce(log, batch(2 * i, 2))
        assert not duplicate
        sent.append((2 * i, offset))
    return sent


def test_state_survives_clean_close(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    sent = _fill(log)
    assert len(log.segments) > 3
    log.close()
    assert list_snapshots(tmp_path / "t-0")[-1] == log.log_end_offset
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    for first_seq, offset in sent[-BATCHES_KEPT:]:
        assert produce(reopened, batch(first_seq, 2)) == (offset, True)
    assert rejected(reopened, batch(2 * len(sent) + 1)) == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(reopened, batch(2 * len(sent)))[1] is False


def test_state_is_rebuilt_after_kill(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    sent = _fill(log)
    expected = log.producer_state.get(PID)
    assert expected is not None
    abandon(log)  # no clean close, no snapshot of the end
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    entry = reopened.producer_state.get(PID)
    assert entry is not None
    assert list(entry.batches) == list(expected.batches)
    for first_seq, offset in sent[-BATCHES_KEPT:]:
        assert produce(reopened, batch(first_seq, 2)) == (offset, True)


def test_state_is_rebuilt_without_any_snapshot(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    sent = _fill(log, 12)
    abandon(log)
    for offset in list_snapshots(tmp_path / "t-0"):
        (tmp_path / "t-0" / f"{offset:020d}.snapshot").unlink()
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    first_seq, offset = sent[-1]
    assert produce(reopened, batch(first_seq, 2)) == (offset, True)


def test_snapshot_beyond_the_recovered_end_is_ignored(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    _fill(log, 10)
    log.close()
    # A stale snapshot claiming more than the log holds must not be trusted.
    stale = tmp_path / "t-0" / f"{log.log_end_offset + 100:020d}.snapshot"
    stale.write_bytes(ProducerStateManager().serialize())
    reopened = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    assert not stale.exists()
    assert reopened.producer_state.get(PID) is not None


def test_truncate_rebuilds_state(log: PartitionLog) -> None:
    sent = _fill(log, 30)
    cut_seq, cut_offset = sent[20]
    log.truncate_to(cut_offset)
    assert log.log_end_offset == cut_offset
    entry = log.producer_state.get(PID)
    assert entry is not None
    assert entry.last_sequence == cut_seq - 1
    # The truncated batches are new again; the retained ones before them are duplicates.
    assert produce(log, batch(sent[19][0], 2)) == (sent[19][1], True)
    assert produce(log, batch(cut_seq, 2)) == (cut_offset, False)


def test_truncate_to_empty_forgets_producers(log: PartitionLog) -> None:
    _fill(log, 5)
    log.truncate_to(0)
    assert len(log.producer_state) == 0
    assert list_snapshots(log.directory) == []
    assert produce(log, batch(0, 2))[1] is False


def test_replicated_appends_update_state(tmp_path: Path) -> None:
    leader = PartitionLog.open(tmp_path / "leader", SMALL, NOW)
    follower = PartitionLog.open(tmp_path / "follower", SMALL, NOW)
    _fill(leader, 3)
    data = leader.read(0, 1 << 20, leader.log_end_offset, True)
    follower.append_replicated(data, validate_produce_records(data, 1 << 20), NOW)
    leader_entry = leader.producer_state.get(PID)
    follower_entry = follower.producer_state.get(PID)
    assert leader_entry is not None and follower_entry is not None
    assert list(follower_entry.batches) == list(leader_entry.batches)


def test_producer_ids_are_unique_across_reopen_and_nodes(tmp_path: Path) -> None:
    from raftka.broker.producer_ids import ProducerIdAllocator

    async def take(allocator: ProducerIdAllocator, count: int) -> list[int]:
        return [await allocator.next_producer_id() for _ in range(count)]

    first = ProducerIdAllocator(tmp_path / "a.lmdb", node_id=1, block_size=10)
    ids = trio.run(take, first, 15)
    first.close()  # the rest of the second block is skipped, never reused
    again = ProducerIdAllocator(tmp_path / "a.lmdb", node_id=1, block_size=10)
    more = trio.run(take, again, 5)
    other = ProducerIdAllocator(tmp_path / "b.lmdb", node_id=2, block_size=10)
    assert len(set(ids + more + trio.run(take, other, 1))) == 21
    assert min(ids + more) >= 0 and more[0] > ids[-1]
