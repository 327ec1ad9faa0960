"""header_values: the named headers of each record of a whole v2 batch and where each record
lies in it; batch_of_records: a batch of some of its records."""

from __future__ import annotations

from batches import encode_batch

from raftka.protocol.record_headers import (
    batch_of_records,
    header_values,
    record_offset_delta,
    whole_batches,
)
from raftka.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    batch_crc,
    read_batch_header,
)

NAMES = (b"priority", b"deliver-at-ms")


def test_each_record_gives_its_named_headers_and_none_where_absent() -> None:
    batch = encode_batch(
        [(b"k", b"v0"), (None, b"v1"), (b"k", None)],
        base_offset=40,
        headers=[
            [("priority", b"7"), ("other", b"x")],
            [],
            [("deliver-at-ms", b"1700000000123"), ("priority", b"1"), ("priority", b"-2")],
        ],
    )
    assert list(header_values(batch, NAMES)) == [
        (40, (b"7", None)),
        (41, (None, None)),
        (42, (b"-2", b"1700000000123")),
    ]


def test_compressed_batches_are_read_too() -> None:
    batch = encode_batch(
        [(None, b"a" * 100)] * 3,
        gzip=True,
        headers=[[("priority", str(i).encode())] for i in range(3)],
    )
    assert [v[0] for _, v in header_values(batch, NAMES)] == [b"0", b"1", b"2"]


def test_a_control_batch_has_no_records_to_order() -> None:
    control = encode_batch([(b"\x00\x00\x00\x00", b"")], attributes=0x20)
    assert list(header_values(control, NAMES)) == []


def test_whole_batches_leaves_out_a_torn_tail() -> None:
    a, b = encode_batch(count=2), encode_batch(count=3, base_offset=2)
    assert list(whole_batches(a + b + b[:20])) == [a, b]


def test_with_key_the_record_key_follows_the_header_values() -> None:
    batch = encode_batch(
        [(b"tenant-a", b"v0"), (None, b"v1"), (b"", b"v2")],
        base_offset=7,
        headers=[[("priority", b"1")], [], []],
    )
    assert list(header_values(batch, NAMES, with_key=True)) == [
        (7, (b"1", None, b"tenant-a")),
        (8, (None, None, None)),
        (9, (None, None, b"")),
    ]


def test_spans_locate_each_record_of_an_uncompressed_batch_and_none_of_a_compressed_one() -> None:
    headers = [[("priority", str(i).encode())] for i in range(4)]
    plain = encode_batch([(None, b"v" * (i + 1)) for i in range(4)], base_offset=9, headers=headers)
    spans: list[int] = []
    assert [o for o, _ in header_values(plain, NAMES, spans=spans)] == [9, 10, 11, 12]
    starts, lengths = spans[0::2], spans[1::2]
    assert starts[0] == RECORD_BATCH_OVERHEAD
    assert [s + n for s, n in zip(starts, lengths, strict=True)] == [*starts[1:], len(plain)]
    assert [
        record_offset_delta(plain[s : s + n]) for s, n in zip(starts, lengths, strict=True)
    ] == [
        0,
        1,
        2,
        3,
    ]
    packed = encode_batch([(None, b"v")] * 4, gzip=True, headers=headers)
    spans = []
    assert len(list(header_values(packed, NAMES, spans=spans))) == 4
    assert spans == [0] * 8


def test_a_batch_of_some_records_keeps_their_offsets_and_the_batch_fields() -> None:
    batch = encode_batch(
        [(b"k%d" % i, b"value %d" % i) for i in range(6)],
        base_offset=100,
        producer_id=7,
        producer_epoch=2,
        base_sequence=30,
        headers=[[("priority", str(9 - i).encode())] for i in range(6)],
    )
    spans: list[int] = []
    list(header_values(batch, NAMES, spans=spans))
    keep = [1, 4, 5]
    subset = batch_of_records(
        batch[:RECORD_BATCH_OVERHEAD],
        [batch[spans[2 * i] : spans[2 * i] + spans[2 * i + 1]] for i in keep],
    )
    header, original = read_batch_header(subset), read_batch_header(batch)
    assert header.size_bytes == len(subset) < len(batch)
    assert header.records_count == 3
    assert batch_crc(subset, 0, len(subset)) == header.crc, "the CRC covers the new records"
    for field in ("base_offset", "last_offset_delta", "producer_id", "producer_epoch"):
        assert getattr(header, field) == getattr(original, field), field
    assert header.base_sequence == original.base_sequence
    assert list(header_values(subset, NAMES)) == [
        (101, (b"8", None)),
        (104, (b"5", None)),
        (105, (b"4", None)),
    ]


def test_a_record_offset_delta_is_none_for_bytes_that_are_not_one_record() -> None:
    batch = encode_batch([(None, b"abc")] * 2)
    spans: list[int] = []
    list(header_values(batch, NAMES, spans=spans))
    one = batch[spans[2] : spans[2] + spans[3]]
    assert record_offset_delta(one) == 1
    assert record_offset_delta(one[:-1]) is None
    assert record_offset_delta(one + b"\x00") is None
    assert record_offset_delta(b"") is None
