"""__consumer_offsets record formats, Kafka's partition rule, and whole-batch building."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftka.broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_key,
    java_string_hashcode,
    partition_for_group,
)
from raftka.broker.groups.store import read_partition
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.batch_builder import (
    BatchDecodeError,
    build_batch,
    decode_batch,
    decode_varint,
    encode_varint,
)
from raftka.protocol.records import read_batch_header, validate_produce_records


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("hello", 99162322), ("test", 3556498), ("polygenelubricants", -2147483648)],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_group_follows_kafka() -> None:
    assert partition_for_group("test", 50) == 3556498 % 50
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka, not an overflow.
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("émoji-☃", 50) == abs(java_string_hashcode("émoji-☃")) % 50


def test_offset_records_match_kafkas_bytes() -> None:
    key = OffsetKey("g", "t", 3).encode()
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = OffsetValue(42, 5, "m", 1000).encode()
    assert value == (
        b"\x00\x03"
        + (42).to_bytes(8, "big")
        + (5).to_bytes(4, "big")
        + b"\x00\x01m"
        + (1000).to_bytes(8, "big")
    )
    assert decode_key(key) == OffsetKey("g", "t", 3)
    assert OffsetValue.decode(value) == OffsetValue(42, 5, "m", 1000)


def test_older_offset_value_versions_decode() -> None:
    v1 = b"\x00\x01" + (7).to_bytes(8, "big") + b"\x00\x00" + (9).to_bytes(8, "big")
    v1 += (99).to_bytes(8, "big")  # expireTimestamp, ignored
    assert OffsetValue.decode(v1) == OffsetValue(7, -1, "", 9)


def test_group_metadata_round_trip() -> None:
    value = GroupMetadataValue(
        "consumer",
        4,
        "range",
        "m1",
        123,
        (
            MemberRecord("m1", None, "c1", "/h", 300, 10, b"sub", b"asg"),
            MemberRecord("m2", "inst", "c2", "/h2", 301, 11, b"", b""),
        ),
    )
    assert GroupMetadataValue.decode(value.encode()) == value
    assert decode_key(GroupMetadataKey("g").encode()) == GroupMetadataKey("g")


def test_unknown_key_version_is_an_error() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x09\x00\x01g")
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x05g")  # truncated


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))


records_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary())),
    min_size=1,
    max_size=20,
)


@given(records_strategy, st.integers(min_value=0, max_value=2**40))
def test_built_batches_are_valid_and_decode_back(
    records: list[tuple[bytes | None, bytes | None]], timestamp: int
) -> None:
    batch = build_batch(records, timestamp, base_offset=100)
    (header,) = validate_produce_records(batch, 1 << 30, produce_version=9)
    assert header.records_count == len(records)
    assert header.base_offset == 100 and header.max_timestamp == timestamp
    decoded = decode_batch(batch)
    assert [(r.key, r.value) for r in decoded] == records
    assert [r.offset for r in decoded] == list(range(100, 100 + len(records)))


def test_corrupt_batches_are_rejected() -> None:
    batch = bytearray(build_batch([(b"k", b"v")], 1))
    batch[-1] ^= 0xFF
    with pytest.raises(BatchDecodeError):
        decode_batch(batch)
    with pytest.raises(BatchDecodeError):
        decode_batch(batch[:40])
    assert read_batch_header(batch).magic == 2


def test_replay_reads_every_batch_of_a_partition_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-1", LogConfig(segment_bytes=300), 1)
    records = [
        (OffsetKey("g", "t", i).encode(), OffsetValue(i, -1, "", 1).encode()) for i in range(5)
    ]
    expected: list[tuple[bytes, bytes | None]] = []
    for i in range(8):  # several segments
        batch = bytearray(build_batch(records[: 1 + i % 5], 1))
        log.append(batch, validate_produce_records(batch, 1 << 20), 0, 1)
        expected += records[: 1 + i % 5]
    tombstone = bytearray(build_batch([(records[0][0], None)], 1))
    log.append(tombstone, validate_produce_records(tombstone, 1 << 20), 0, 1)
    expected.append((records[0][0], None))
    assert len(log.segments) > 1
    assert list(read_partition(log)) == expected
    log.close()
