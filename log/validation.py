"""Checks of produced record batches that depend only on their bytes and the topic's log
config: records without a key on compacted topics (KIP-467), recompression into a topic's
`compression.type`, and whether either is worth a worker thread.

Every function here takes plain values (bytes, ints), so the heavy ones can run in a worker
thread while the event loop serves other requests.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from raftka.protocol.compacted import keyless_records, records_section
from raftka.protocol.recompress import recompress_batch
from raftka.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_ZSTD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    InvalidRecords,
    UnsupportedBatch,
    validate_produce_records,
)

#: Batches whose records are larger than this are recompressed (or scanned for keys) in a
#: worker thread, so the event loop keeps serving meanwhile; smaller ones cost less than
#: the hand-over.
RECOMPRESS_IN_THREAD_BYTES = 64 * 1024
#: A compressed records section is taken to hold this many times its size of records.
_ASSUMED_COMPRESSION_RATIO = 4
#: The low byte of a batch's int16 attributes: the codec, transactional and control flags.
ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1

#: Codec → the topic config of its level (KIP-390).
LEVEL_CONFIGS = {
    COMPRESSION_GZIP: "compression.gzip.level",
    COMPRESSION_LZ4: "compression.lz4.level",
    COMPRESSION_ZSTD: "compression.zstd.level",
}


def worth_a_thread(records: bytes) -> bool:
    """Whether recompressing (or scanning) the batch in `records` is worth a worker thread;
    never for records too short to hold a batch header, which validation refuses."""
    size = len(records)
    if size < RECORD_BATCH_OVERHEAD:
        return False
    if records[ATTRIBUTES_LOW_BYTE] & COMPRESSION_MASK:
        size *= _ASSUMED_COMPRESSION_RATIO
    return size > RECOMPRESS_IN_THREAD_BYTES


def codec_differs(records: bytes, codec: int | None) -> bool:
    """Whether the batch in `records` must be recompressed into `codec` (one byte read)."""
    return (
        codec is not None
        and len(records) >= RECORD_BATCH_OVERHEAD
        and records[ATTRIBUTES_LOW_BYTE] & COMPRESSION_MASK != codec
    )


def keyless_records_of(records: bytes, headers: Sequence[BatchHeader]) -> list[int]:
    """KIP-467: the indexes (in their batch) of the records without a key; InvalidRecords
    when the records cannot be read. Compressed batches are decompressed for the scan, as
    Kafka does."""
    view = memoryview(records)
    missing: list[int] = []
    try:
        for header in headers:
            batch = view[header.position : header.end_position]
            missing += keyless_records(records_section(batch), header.records_count)
    except UnsupportedBatch as exc:
        raise InvalidRecords(ErrorCode.invalid_record, f"records cannot be read: {exc}") from None
    return missing


def validated_keyless_records(records: bytes, max_batch_bytes: int, version: int) -> list[int]:
    """`keyless_records_of` after Produce's validation (raises InvalidRecords)."""
    headers = validate_produce_records(records, max_batch_bytes, produce_version=version)
    return keyless_records_of(records, headers)


def validated_and_recompressed(
    records: bytes, codec: int, level: int | None, max_batch_bytes: int, version: int
) -> bytes:
    """The produced batch with its records in `codec`; raises InvalidRecords (validated
    first, so a batch Kafka refuses gets the same error as on a `producer` topic)."""
    validate_produce_records(records, max_batch_bytes, produce_version=version)
    return recompress_batch(records, codec, level)


def keyless_refusal_message(partition_name: str) -> str:
    """Kafka's message refusing records without a key for a compacted topic."""
    return f"Compacted topic cannot accept message without key in topic partition {partition_name}"
