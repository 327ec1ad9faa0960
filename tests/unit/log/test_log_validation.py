"""Checks of produced batches by their bytes alone (`log/validation.py`)."""

from __future__ import annotations

import pytest

from raftka.log.validation import (
    RECOMPRESS_IN_THREAD_BYTES,
    codec_differs,
    keyless_records_of,
    validated_and_recompressed,
    validated_keyless_records,
    worth_a_thread,
)
from raftka.protocol.batch_builder import build_batch, decode_batch
from raftka.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    InvalidRecords,
    read_batch_header,
    validate_produce_records,
)

PRODUCE_VERSION = 9


def test_keyless_records_are_found_by_their_index() -> None:
    batch = build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")], 0)
    headers = validate_produce_records(batch, 1 << 20, produce_version=PRODUCE_VERSION)
    assert keyless_records_of(batch, headers) == [1, 3]
    assert validated_keyless_records(batch, 1 << 20, PRODUCE_VERSION) == [1, 3]


def test_codec_and_thread_decisions_read_the_attributes_only() -> None:
    small = build_batch([(b"k", b"v")], 0)
    assert not codec_differs(small, None)
    assert not codec_differs(small, COMPRESSION_NONE)
    assert codec_differs(small, COMPRESSION_GZIP)
    assert not codec_differs(b"short", COMPRESSION_GZIP)
    assert not worth_a_thread(small)
    assert not worth_a_thread(b"short")
    large = build_batch([(b"k", b"v" * (RECOMPRESS_IN_THREAD_BYTES + 1))], 0)
    assert worth_a_thread(large)


def test_recompression_keeps_the_records_and_validates_first() -> None:
    batch = build_batch([(b"k%d" % i, b"v" * 100) for i in range(10)], 0)
    gzipped = validated_and_recompressed(batch, COMPRESSION_GZIP, None, 1 << 20, PRODUCE_VERSION)
    assert read_batch_header(gzipped).attributes & COMPRESSION_MASK == COMPRESSION_GZIP
    back = validated_and_recompressed(gzipped, COMPRESSION_NONE, None, 1 << 20, PRODUCE_VERSION)
    assert [(r.key, r.value) for r in decode_batch(back)] == [
        (r.key, r.value) for r in decode_batch(batch)
    ]
    with pytest.raises(InvalidRecords):
        validated_and_recompressed(batch[:-1], COMPRESSION_GZIP, None, 1 << 20, PRODUCE_VERSION)
