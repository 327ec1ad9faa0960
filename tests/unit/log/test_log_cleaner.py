"""Log compaction: the cleaner against a model, determinism across replicas, the delete
horizon of tombstones, crash safety of the swap, and the KIP-467 key scan."""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.config import ConfigError, validate_topic_configs
from raftka.broker.groups.store import read_partition
from raftka.log import LogConfig, LogInvariantError, PartitionLog
from raftka.log.cleaner import (
    CLEANER_STAGING_DIR,
    CLEANER_SWAP_FILE,
    CONTROL_LOG_CLEAN,
    CleaningPlan,
    CleanRequest,
    Throttle,
    cleaning_due,
    decode_clean_request,
    plan_cleaning,
)
from raftka.protocol.batch_builder import build_batch, control_record_type
from raftka.protocol.compacted import clean_batch, keyless_records, records_section, walk_records
from raftka.protocol.records import (
    DELETE_HORIZON_FLAG_MASK,
    read_batch_header,
    scan_batches,
    stamp_batches,
)
from tests.unit.batches import encode_batch

T0 = 1_700_000_000_000
EPOCH = 3


def open_log(directory: Path, segment_bytes: int = 600) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100, compact=True)
    return PartitionLog.open(directory, config, T0)


def append(log: PartitionLog, batch: bytes) -> int:
    """Append one batch as a replica does (stamped at the log end); its base offset."""
    buf = bytearray(batch)
    headers = scan_batches(buf, verify_crc=False).headers
    base = log.log_end_offset
    stamp_batches(buf, headers, base, EPOCH)
    log.append_replicated(buf, scan_batches(buf, verify_crc=False).headers, T0)
    return base


def request_clean(log: PartitionLog, request: CleanRequest) -> CleanRequest:
    """Append the request's control batch; the request as the log recorded it."""
    append(log, request.encode_batch())
    return log.clean_requests[-1]


def carry_out(log: PartitionLog) -> None:
    request = log.clean_requests[0]
    job = log.start_cleaning(request, request.now_ms, float("inf"))
    job.run()
    log.finish_cleaning(job)()


def batches_of(log: PartitionLog) -> list[bytes]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset, True)
        for header in scan_batches(data, verify_crc=True).headers:
            out.append(bytes(data[header.position : header.end_position]))
            offset = header.next_offset
    return out


def records_of(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record, in log order."""
    found = []
    for batch in batches_of(log):
        header = read_batch_header(batch)
        if header.is_control:
            continue
        section = records_section(batch)
        for view in walk_records(section, header.records_count):
            value = None
            if not view.is_tombstone:
                from raftka.protocol.batch_builder import decode_varint

                _, pos = decode_varint(section, view.rest_at)
                pos += len(view.key or b"")
                length, pos = decode_varint(section, pos)
                value = section[pos : pos + length]
            found.append((header.base_offset + view.offset_delta, view.key, value))
    return found


def check_contiguous(log: PartitionLog) -> None:
    expected = log.log_start_offset
    for batch in batches_of(log):
        header = read_batch_header(batch)
        assert header.base_offset == expected, "batches must stay contiguous"
        assert header.partition_leader_epoch == EPOCH
        expected = header.next_offset
    assert expected == log.log_end_offset


Op = tuple[bytes, bytes | None]


def write_ops(log: PartitionLog, ops: list[list[Op]], gzip: bool = False) -> None:
    for i, batch in enumerate(ops):
        append(log, encode_batch(batch, base_timestamp=T0 + i, gzip=gzip and i % 2 == 0))


def model(ops: list[list[Op]], horizon_passed: bool) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for batch in ops:
        for key, value in batch:
            latest[key] = value
    if horizon_passed:
        return {k: v for k, v in latest.items() if v is not None}
    return latest


def random_ops(seed: int, batches: int = 40, keys: int = 12) -> list[list[Op]]:
    rng = random.Random(seed)
    ops = []
    for _ in range(batches):
        batch: list[Op] = []
        for _ in range(rng.randint(1, 5)):
            key = b"k%d" % rng.randrange(keys)
            value = None if rng.random() < 0.2 else b"v%d" % rng.randrange(1000)
            batch.append((key, value))
        ops.append(batch)
    return ops


@pytest.mark.parametrize("gzip", [False, True])
def test_cleaning_keeps_the_latest_value_per_key_at_its_offset(tmp_path: Path, gzip: bool) -> None:
    log = open_log(tmp_path / "p-0")
    ops = random_ops(1)
    write_ops(log, ops, gzip=gzip)
    before = records_of(log)
    end = log.log_end_offset
    request_clean(log, CleanRequest(0, end, T0 + 10_000, 1000, 1 << 20))
    assert len(log.segments) > 3, "the test needs several segments"
    carry_out(log)
    check_contiguous(log)
    after = records_of(log)
    # Only records present before survive, each at its own offset.
    assert set(after) <= set(before)
    expected = model(ops, horizon_passed=False)
    assert {key: value for _, key, value in after} == expected
    assert len({key for _, key, _ in after}) == len(after), "one record per key"
    latest_offset = {key: offset for offset, key, _ in before}
    assert all(offset == latest_offset[key] for offset, key, _ in after)
    # The request's control batch is kept and is one consumers skip.
    control = [b for b in batches_of(log) if read_batch_header(b).is_control]
    assert [control_record_type(b) for b in control] == [CONTROL_LOG_CLEAN]


def test_tombstones_go_only_after_their_delete_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    ops: list[list[Op]] = [[(b"a", b"1"), (b"b", b"1")], [(b"a", None)], [(b"c", b"1")]]
    write_ops(log, ops)
    end = log.log_end_offset
    request_clean(log, CleanRequest(0, end, T0 + 5000, 1000, 1 << 20))
    carry_out(log)
    assert {k: v for _, k, v in records_of(log)} == {b"a": None, b"b": b"1", b"c": b"1"}
    stamped = [b for b in batches_of(log) if read_batch_header(b).attributes & 0x40]
    assert len(stamped) == 1
    assert read_batch_header(stamped[0]).base_timestamp == T0 + 6000
    assert read_batch_header(stamped[0]).attributes & DELETE_HORIZON_FLAG_MASK
    assert log.tombstone_horizon_ms == T0 + 6000
    # Before the horizon a later cleaning keeps the tombstone; at it, the tombstone goes.
    dirty = log.cleaner_checkpoint.cleaned_end
    request_clean(log, CleanRequest(dirty, dirty, T0 + 5999, 1000, 1 << 20))
    carry_out(log)
    assert (b"a", None) in [(k, v) for _, k, v in records_of(log)]
    request_clean(log, CleanRequest(dirty, dirty, T0 + 6000, 1000, 1 << 20))
    carry_out(log)
    assert {k: v for _, k, v in records_of(log)} == {b"b": b"1", b"c": b"1"}
    assert log.tombstone_horizon_ms == -1
    check_contiguous(log)


def test_an_emptied_batch_keeps_its_offset_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    write_ops(log, [[(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], [(b"a", b"2"), (b"b", b"2")]])
    append(log, encode_batch([(b"c", b"2")]))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    first = read_batch_header(batches_of(log)[0])
    assert (first.base_offset, first.last_offset_delta, first.records_count) == (0, 2, 0)
    assert first.compression == 0
    check_contiguous(log)


def test_records_without_a_key_are_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    write_ops(log, [[(b"a", b"1")]])
    append(log, encode_batch([(None, b"x"), (b"b", b"1"), (b"", b"1")]))
    append(log, encode_batch([(b"", b"2")]))  # an empty key is a key like any other
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    assert [(k, v) for _, k, v in records_of(log)] == [(b"a", b"1"), (b"b", b"1"), (b"", b"2")]


def replica_run(directory: Path, segment_bytes: int, ops: list[list[Op]], ends: list[int]):
    """Write `ops`, then clean to each of `ends` in turn (each as many times as the small
    key map needs to get there); the batches of the result."""
    log = open_log(directory, segment_bytes)
    write_ops(log, ops)
    now = T0
    for end in ends:
        for _ in range(50):
            dirty = log.cleaner_checkpoint.cleaned_end
            if dirty >= end:
                break
            now += 1000
            request_clean(log, CleanRequest(dirty, end, now, 1500, 7))
            carry_out(log)
    result = batches_of(log)
    log.close()
    return result


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), cut=st.floats(0.1, 0.9))
def test_replicas_with_other_segment_boundaries_clean_to_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cut: float
) -> None:
    ops = random_ops(seed, batches=30)
    total = sum(len(batch) for batch in ops)
    ends = [int(total * cut), total]
    base = tmp_path_factory.mktemp("replicas")
    # Different segment sizes, a small key map (7 keys): cleanings stop where it fills.
    first = replica_run(base / "a", 400, ops, ends)
    second = replica_run(base / "b", 3000, ops, ends)
    assert first == second
    kept = sum(
        read_batch_header(b).records_count for b in first if not read_batch_header(b).is_control
    )
    assert kept < total, "the cleanings removed records"


def test_a_crash_before_the_swap_marker_keeps_the_old_log(tmp_path: Path) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory)
    write_ops(log, random_ops(2))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    log.flush()
    before = batches_of(log)
    job = log.start_cleaning(log.clean_requests[0], T0, float("inf"))
    job.run()
    (directory / CLEANER_SWAP_FILE).unlink()  # the crash came just before the marker
    reopened = open_log(directory)
    assert batches_of(reopened) == before
    assert not (directory / CLEANER_STAGING_DIR).exists()
    assert len(reopened.clean_requests) == 1, "the request is carried out again"
    carry_out(reopened)
    check_contiguous(reopened)


@pytest.mark.parametrize("moved", [0, 1, 4])
def test_a_crash_after_the_swap_marker_completes_the_swap(tmp_path: Path, moved: int) -> None:
    directory = tmp_path / "p-0"
    reference = open_log(tmp_path / "ref-0")
    log = open_log(directory)
    for target in (reference, log):
        write_ops(target, random_ops(3))
        request_clean(target, CleanRequest(0, target.log_end_offset, T0, 1000, 1 << 20))
    carry_out(reference)
    log.flush()
    job = log.start_cleaning(log.clean_requests[0], T0, float("inf"))
    job.run()
    # The crash came after `moved` staged files were renamed into place.
    staged = sorted((directory / CLEANER_STAGING_DIR).iterdir())
    assert staged
    for path in staged[:moved]:
        os.replace(path, directory / path.name)
    reopened = open_log(directory)
    assert batches_of(reopened) == batches_of(reference)
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert reopened.clean_requests == [], "the request is recorded as carried out"
    assert reopened.cleaner_checkpoint == reference.cleaner_checkpoint


def test_a_reader_holding_a_replaced_segment_reads_the_old_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    write_ops(log, random_ops(4))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    found = log.fetch_slice(0, 1 << 20, log.log_end_offset, True)
    assert found is not None
    fd = os.dup(found.segment.fd)  # what the zero-copy fetch path holds
    before = os.pread(fd, found.length, found.position)
    carry_out(log)
    assert os.pread(fd, found.length, found.position) == before
    assert scan_batches(before, verify_crc=True).error is None
    os.close(fd)


def test_producer_state_is_the_same_after_cleaning_and_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory)
    for seq in range(0, 40, 2):
        batch = encode_batch(
            [(b"k%d" % (seq % 3), b"v"), (b"k%d" % (seq % 3), b"w")],
            producer_id=7,
            producer_epoch=1,
            base_sequence=seq,
        )
        append(log, batch)
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    state = log.producer_state.get(7)
    assert state is not None
    log.flush()
    shutil.rmtree(tmp_path / "copy", ignore_errors=True)
    for path in directory.glob("*.snapshot"):
        path.unlink()  # rebuilt from the batch headers alone
    reopened = open_log(directory)
    again = reopened.producer_state.get(7)
    assert again is not None
    assert again.last_sequence == state.last_sequence == 39


def test_a_clean_request_survives_encoding(tmp_path: Path) -> None:
    request = CleanRequest(5, 90, T0, 1000, 33)
    batch = request.encode_batch()
    header = read_batch_header(batch)
    assert header.is_control and header.producer_id < 0
    assert decode_clean_request(header, batch) == replace(request, offset=0)
    assert control_record_type(batch) == CONTROL_LOG_CLEAN


def test_the_key_scan_finds_records_without_a_key() -> None:
    for gzip in (False, True):
        batch = encode_batch([(b"a", b"1"), (None, b"2"), (b"c", None), (None, None)], gzip=gzip)
        header = read_batch_header(batch)
        assert keyless_records(records_section(batch), header.records_count) == [1, 3]
    batch = encode_batch([(b"a", b"1")])
    assert keyless_records(records_section(batch), 1) == []


def test_clean_batch_keeps_unchanged_batches_byte_for_byte() -> None:
    batch = encode_batch([(b"a", b"1"), (b"b", b"2")], base_offset=10)
    cleaned = clean_batch(batch, {b"a": 10, b"b": 11}, T0, 1000)
    assert not cleaned.changed and cleaned.batch == batch
    cleaned = clean_batch(batch, {b"a": 12}, T0, 1000)
    assert cleaned.changed
    header = read_batch_header(cleaned.batch)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (10, 1, 1)
    assert scan_batches(cleaned.batch, verify_crc=True).error is None


def test_cleanup_policy_values_are_kafkas() -> None:
    for value in ("delete", "compact", "compact,delete", "delete,compact"):
        assert validate_topic_configs({"cleanup.policy": value}) == {"cleanup.policy": value}
    with pytest.raises(ConfigError, match="'compaction'.*cleanup.policy"):
        validate_topic_configs({"cleanup.policy": "compaction"})
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ConfigError, match="delete.retention.ms"):
        validate_topic_configs({"delete.retention.ms": "-1"})


def test_group_replay_reads_a_compacted_offsets_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "__consumer_offsets-0")
    for i in range(30):
        append(log, build_batch([(b"offset-key", b"%d" % i)], T0 + i))
    append(log, build_batch([(b"group-key", b"meta"), (b"gone-key", b"x")], T0))
    append(log, build_batch([(b"gone-key", None)], T0))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 0, 1 << 20))
    carry_out(log)
    assert sum(len(b) for b in batches_of(log)) < 30 * 61 + 400
    replayed = dict(read_partition(log))
    assert replayed == {b"offset-key": b"29", b"group-key": b"meta", b"gone-key": None}
    # At the horizon (delete.retention.ms 0: the next cleaning) the tombstone goes too.
    dirty = log.cleaner_checkpoint.cleaned_end
    request_clean(log, CleanRequest(dirty, dirty, T0, 0, 1 << 20))
    carry_out(log)
    assert dict(read_partition(log)) == {b"offset-key": b"29", b"group-key": b"meta"}


def test_compact_alone_deletes_nothing_by_age_and_compact_delete_does(tmp_path: Path) -> None:
    for delete, expected in ((False, 0), (True, 2)):
        config = LogConfig(segment_bytes=200, retention_ms=1000, compact=True, delete=delete)
        log = PartitionLog.open(tmp_path / f"p-{delete:d}", config, T0)
        for i in range(3):
            append(log, encode_batch([(b"k%d" % i, b"x" * 100)]))
        assert log.enforce_retention(T0 + 10_000) == expected


def test_the_leader_asks_for_a_cleaning_by_ratio_lag_and_tombstone_horizon() -> None:
    plan = CleaningPlan(10, 50, dirty_bytes=100, total_bytes=1000, first_dirty_timestamp=T0)
    assert cleaning_due(plan, 0.1, 2**63 - 1, -1, T0) == 50
    assert cleaning_due(plan, 0.5, 2**63 - 1, -1, T0) is None
    # max.compaction.lag.ms forces it whatever the ratio.
    assert cleaning_due(plan, 0.5, 1000, -1, T0 + 1001) == 50
    assert cleaning_due(plan, 0.5, 1000, -1, T0 + 1000) is None
    # Tombstones past their horizon: a cleaning of the clean region only.
    assert cleaning_due(plan, 0.5, 2**63 - 1, T0, T0) == 10
    nothing = CleaningPlan(10, 10, 0, 1000, -1)
    assert cleaning_due(nothing, 0.0, 1, -1, T0) is None


def test_the_plan_stops_before_records_younger_than_the_compaction_lag(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0", segment_bytes=100_000)
    for i in range(10):
        append(log, encode_batch([(b"k", b"%d" % i)], base_timestamp=T0 + 1000 * i))
    sources = log.source_segments(log.log_end_offset)
    try:
        plan = plan_cleaning(sources, 0, log.log_end_offset, T0 + 4500)
    finally:
        for source in sources:
            source.close()
    assert plan.end_offset == 5, "batches with timestamps after T0 + 4500 stay dirty"
    assert plan.first_dirty_timestamp == T0


def test_transactional_batches_are_kept_as_they_are(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    txn = encode_batch(
        [(b"a", b"1"), (b"a", b"2")],
        attributes=0x10,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
    )
    append(log, txn)
    append(log, build_batch([(b"a", b"3")], T0))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    first = batches_of(log)[0]
    assert first[16:] == txn[16:], "the transactional batch is untouched (bar its epoch)"


def test_compressed_batches_keep_their_codec(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0")
    append(log, encode_batch([(b"a", b"1"), (b"b", b"1")], gzip=True))
    append(log, encode_batch([(b"a", b"2")]))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    first = read_batch_header(batches_of(log)[0])
    assert (first.compression, first.records_count) == (1, 1)
    assert [(k, v) for _, k, v in records_of(log)] == [(b"b", b"1"), (b"a", b"2")]


def test_the_cleaner_reads_batches_larger_than_its_windows(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p-0", segment_bytes=10_000_000)
    sizes = [10, 200_000, 30, 5_000_000, 10]
    for i, size in enumerate(sizes):
        append(log, encode_batch([(b"k%d" % (i % 2), b"x" * size)]))
    (source,) = log.source_segments(log.log_end_offset)
    try:
        offsets = [h.base_offset for h in source.headers()]
        assert offsets == [h.base_offset for h, _ in source.batches()] == list(range(5))
    finally:
        source.close()
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    carry_out(log)
    assert [offset for offset, _, _ in records_of(log)] == [3, 4]


def test_a_segment_truncated_during_the_cleaning_voids_its_result(tmp_path: Path) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory, segment_bytes=100_000)  # one segment: the tail is in it
    write_ops(log, random_ops(5))
    request = request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    append(log, encode_batch([(b"tail", b"1")]))  # not committed yet
    before = batches_of(log)
    job = log.start_cleaning(request, T0, float("inf"))
    job.run()
    # A new leader never had the tail: this replica truncates it, in a segment being cleaned.
    log.truncate_to(request.offset + 1)
    with pytest.raises(LogInvariantError, match="cleaned again"):
        log.finish_cleaning(job)
    assert batches_of(log) == before[:-1]
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert log.clean_requests == [request], "carried out again at the next round"
    carry_out(log)
    assert log.clean_requests == []
    check_contiguous(log)


def test_the_io_bound_holds_the_cleaner_back(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("raftka.log.cleaner.time.sleep", slept.append)
    throttle = Throttle(1000.0)
    throttle(5000)
    assert slept and 4.5 < slept[0] <= 5.0, "5000 bytes at 1000 bytes/s take about 5 s"
    unbounded = Throttle(float("inf"))
    unbounded(10**9)
    assert len(slept) == 1
