"""The v2 record-batch header view: parsing, validation error codes, stamping, scanning."""

from __future__ import annotations

import struct

import pytest
from batches import encode_batch

from raftka.protocol import records as r


def test_header_parse() -> None:
    batch = encode_batch(count=3, base_timestamp=1000, timestamps=[1000, 1500, 1200])
    header = r.read_batch_header(batch)
    assert header.position == 0
    assert header.base_offset == 0
    assert header.size_bytes == len(batch)
    assert header.magic == 2
    assert header.records_count == 3
    assert header.last_offset_delta == 2
    assert header.base_timestamp == 1000
    assert header.max_timestamp == 1500
    assert header.compression == r.COMPRESSION_NONE
    assert not header.is_control and not header.is_transactional
    assert not header.is_log_append_time
    assert header.crc == r.batch_crc(batch, 0, len(batch))


def test_validate_returns_positions_of_every_batch() -> None:
    a, b = encode_batch(count=2), encode_batch(count=5, gzip=True)
    headers = r.validate_produce_records(a + b, 1 << 20)
    assert [h.position for h in headers] == [0, len(a)]
    assert headers[1].compression == r.COMPRESSION_GZIP
    assert r.validate_produce_records(b"", 1 << 20) == []


def _error(buf: bytes, max_bytes: int = 1 << 20, **kwargs: int) -> int:
    with pytest.raises(r.InvalidRecords) as info:
        r.validate_produce_records(buf, max_bytes, **kwargs)
    return info.value.error_code


def _patch(batch: bytes, offset: int, fmt: str, value: int, fix_crc: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        struct.pack_into(">I", buf, r.CRC_OFFSET, r.batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_truncated_and_garbage_are_corrupt() -> None:
    batch = encode_batch(count=2)
    assert _error(batch[:-1]) == r.CORRUPT_MESSAGE
    assert _error(batch[:5]) == r.CORRUPT_MESSAGE
    assert _error(batch + b"\x00" * 7) == r.CORRUPT_MESSAGE
    assert _error(_patch(batch, r.BATCH_LENGTH_OFFSET, ">i", 3, False)) == r.CORRUPT_MESSAGE
    assert _error(_patch(batch, r.BATCH_LENGTH_OFFSET, ">i", 30, False)) == r.CORRUPT_MESSAGE


def test_crc_mismatch_is_corrupt() -> None:
    batch = bytearray(encode_batch(count=2))
    batch[-1] ^= 0xFF
    assert _error(bytes(batch)) == r.CORRUPT_MESSAGE


def test_bad_magic() -> None:
    batch = _patch(encode_batch(), r.MAGIC_OFFSET, ">b", 1, False)
    assert _error(batch) == r.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert _error(batch, produce_version=9) == r.INVALID_RECORD


def test_too_large() -> None:
    batch = encode_batch(count=10, value_size=100)
    assert _error(batch, max_bytes=len(batch) - 1) == r.MESSAGE_TOO_LARGE
    assert r.validate_produce_records(batch, len(batch))


def test_invalid_record_fields() -> None:
    batch = encode_batch(count=3)
    assert _error(_patch(batch, r.RECORDS_COUNT_OFFSET, ">i", 0)) == r.INVALID_RECORD
    assert _error(_patch(batch, r.LAST_OFFSET_DELTA_OFFSET, ">i", 5)) == r.INVALID_RECORD
    early = _patch(batch, r.MAX_TIMESTAMP_OFFSET, ">q", 5)
    assert _error(early) == r.INVALID_RECORD
    unknown_codec = _patch(batch, r.ATTRIBUTES_OFFSET, ">h", 6)
    assert _error(unknown_codec) == r.UNSUPPORTED_COMPRESSION_TYPE


def test_produce_request_rules() -> None:
    one, two = encode_batch(), encode_batch()
    assert _error(one + two, produce_version=3) == r.INVALID_RECORD
    assert len(r.validate_produce_records(one + two, 1 << 20, produce_version=2)) == 2
    assert _error(b"", produce_version=3) == r.INVALID_RECORD
    zstd = _patch(one, r.ATTRIBUTES_OFFSET, ">h", r.COMPRESSION_ZSTD)
    assert _error(zstd, produce_version=6) == r.UNSUPPORTED_COMPRESSION_TYPE
    control = encode_batch(attributes=r.CONTROL_FLAG_MASK)
    assert _error(control, produce_version=9) == r.INVALID_RECORD


def test_stamp_batches_leaves_crc_valid() -> None:
    buf = bytearray(encode_batch(count=3) + encode_batch(count=2))
    headers = r.validate_produce_records(buf, 1 << 20)
    assert r.stamp_batches(buf, headers, 100, 7) == 104
    stamped = r.validate_produce_records(buf, 1 << 20)
    assert [(h.base_offset, h.partition_leader_epoch) for h in stamped] == [(100, 7), (103, 7)]


def test_set_log_append_time() -> None:
    buf = bytearray(encode_batch(count=2, base_timestamp=50))
    (header,) = r.validate_produce_records(buf, 1 << 20)
    r.set_log_append_time(buf, header, 12345)
    (after,) = r.validate_produce_records(buf, 1 << 20)  # CRC recomputed
    assert after.is_log_append_time
    assert after.max_timestamp == 12345
    assert after.base_timestamp == 50
    assert list(r.record_timestamps(buf)) == [(0, 12345), (1, 12345)]


def test_scan_stops_at_torn_or_corrupt_batch() -> None:
    a, b = encode_batch(count=2), encode_batch(base_offset=2, count=2)
    whole = a + b
    scan = r.scan_batches(whole)
    assert scan.error is None and scan.valid_end == len(whole) and len(scan.headers) == 2
    torn = r.scan_batches(whole[:-3])
    assert torn.valid_end == len(a) and torn.incomplete and len(torn.headers) == 1
    flipped = bytearray(whole)
    flipped[-1] ^= 1
    bad = r.scan_batches(bytes(flipped))
    assert bad.valid_end == len(a) and not bad.incomplete and "CRC" in (bad.error or "")
    backwards = r.scan_batches(a + a)
    assert backwards.valid_end == len(a) and backwards.error
    assert [h.position for h in r.iter_batch_headers(whole[:-3])] == [0]


def test_record_timestamps_plain_and_gzip() -> None:
    ts = [10, 30, 20]
    for gzip in (False, True):
        batch = encode_batch(count=3, base_offset=5, timestamps=ts, gzip=gzip)
        assert list(r.record_timestamps(batch)) == [(5, 10), (6, 30), (7, 20)]


def test_record_timestamps_refuses_compression_bombs() -> None:
    batch = encode_batch(count=50, value_size=10_000, gzip=True)
    assert len(list(r.record_timestamps(batch))) == 50
    with pytest.raises(r.UnsupportedBatch):
        list(r.record_timestamps(batch, max_decompressed_bytes=100_000))


def test_a_header_stamped_or_moved_without_decoding_reads_as_the_bytes_do() -> None:
    """`stamped_header` and `moved_header` give what `read_batch_header` reads from the
    batch once it is stamped (offset and epoch) and placed after other bytes."""
    batch = encode_batch(
        [(b"k", b"v"), (None, b"w")], producer_id=12, producer_epoch=3, base_sequence=40
    )
    (checked,) = r.validate_produce_records(batch, 1 << 20)
    placed = bytearray(b"x" * 17) + batch
    r.stamp_batches(placed, [checked._replace(position=17)], 5_000_000_000, 9)
    stored = r.read_batch_header(placed, 17)
    assert r.stamped_header(checked, 17, 5_000_000_000, 9) == stored
    assert type(r.stamped_header(checked, 17, 5_000_000_000, 9)) is r.BatchHeader
    assert r.moved_header(stored, 4096) == r.read_batch_header(placed, 17, 4096)
    assert r.moved_header(stored, 4096).producer_id == 12
