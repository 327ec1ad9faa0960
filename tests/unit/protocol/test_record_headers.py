"""header_values: the named headers of each record of a whole v2 batch."""

from __future__ import annotations

from batches import encode_batch

from raftka.protocol.record_headers import header_values, whole_batches

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
