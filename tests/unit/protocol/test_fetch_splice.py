"""Spliced Fetch frames read byte for byte like plainly encoded ones; slices match reads."""

from __future__ import annotations

import datetime
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from batches import encode_batch
from kio.schema.errors import ErrorCode

from raftka.log import LogConfig, PartitionLog
from raftka.protocol.api import build, encode_response, response_type, schema_module
from raftka.protocol.records import validate_produce_records
from raftka.protocol.splice import (
    FileRange,
    Splices,
    encode_spliced_response,
    frame_bytes,
)

NOW = 1_700_000_000_000
FETCH_KEY = 1


def fetch_response(version: int, records: list[list[bytes]]) -> Any:
    """A Fetch response with one topic per entry of `records`, one partition per bytes."""
    entity = response_type(FETCH_KEY, version)
    module = schema_module(entity)
    topics = []
    for t, partition_records in enumerate(records):
        partitions = tuple(
            build(
                module.PartitionData,
                partition_index=p,
                error_code=ErrorCode.none,
                high_watermark=1000 + p,
                last_stable_offset=1000 + p,
                log_start_offset=0,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=data,
            )
            for p, data in enumerate(partition_records)
        )
        topics.append(
            build(
                module.FetchableTopicResponse,
                topic=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=partitions,
            )
        )
    return build(
        entity,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
    )


@pytest.fixture
def segment_file(tmp_path: Path) -> tuple[int, bytes]:
    content = random.Random(7).randbytes(300_000)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDONLY)
    yield fd, content
    os.close(fd)


# Lengths around the one-byte / two-byte uvarint boundary and large ranges.
RANGES = [[(0, 126), (200, 127), (1000, 20_000)], [(50_000, 250_000), (3, 0)]]


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_spliced_frame_equals_plain_frame(version: int, segment_file: tuple[int, bytes]) -> None:
    fd, content = segment_file
    splices = Splices()
    placeholders = [
        [splices.placeholder(FileRange(os.dup(fd), pos, length)) for pos, length in topic]
        for topic in RANGES
    ]
    plain = [[content[pos : pos + length] for pos, length in topic] for topic in RANGES]
    pieces = encode_spliced_response(42, fetch_response(version, placeholders), splices)
    expected = encode_response(42, fetch_response(version, plain))
    assert frame_bytes(pieces) == expected
    # Every range travels as a range, not as bytes.
    assert sum(isinstance(p, FileRange) for p in pieces) == 5
    assert int.from_bytes(expected[:4], "big") == len(expected) - 4
    splices.close()


def test_records_containing_a_placeholder_fall_back_to_plain_bytes(
    segment_file: tuple[int, bytes],
) -> None:
    fd, content = segment_file
    splices = Splices()
    marker = splices.placeholder(FileRange(os.dup(fd), 10, 40_000))
    # Another partition's inline records happen to hold the marker.
    response = fetch_response(12, [[marker, b"xx" + marker + b"yy"]])
    pieces = encode_spliced_response(1, response, splices)
    expected = encode_response(
        1, fetch_response(12, [[content[10:40_010], b"xx" + marker + b"yy"]])
    )
    assert pieces == [expected]


def test_file_range_reads_after_the_file_is_deleted(tmp_path: Path) -> None:
    path = tmp_path / "gone.log"
    path.write_bytes(b"abcdefgh")
    fd = os.open(path, os.O_RDONLY)
    file_range = FileRange(os.dup(fd), 2, 4)
    os.close(fd)
    path.unlink()
    assert file_range.read() == b"cdef"
    file_range.close()
    assert file_range.fd == -1


def test_fetch_slice_covers_exactly_what_read_returns(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "t-0", LogConfig(segment_bytes=20_000, index_interval_bytes=300), NOW
    )
    rng = random.Random(3)
    for _ in range(200):
        batch = encode_batch(count=rng.randint(1, 5), value_size=rng.randint(10, 400))
        log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW)
    assert len(log.segments) > 3
    end = log.log_end_offset
    for _ in range(400):
        offset = rng.randrange(0, end + 1)
        max_bytes = rng.choice([0, 1, 100, 1000, 5000, 50_000])
        max_offset = rng.randrange(offset, end + 1)
        one = rng.random() < 0.5
        expected = log.read(offset, max_bytes, max_offset, one)
        found = log.fetch_slice(offset, max_bytes, max_offset, one)
        if found is None:
            assert expected == b"", (offset, max_bytes, max_offset, one)
        else:
            data = found.segment.pread(found.length, found.position)
            assert data == expected, (offset, max_bytes, max_offset)
    log.close()
