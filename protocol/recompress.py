"""Rewrite one v2 record batch with another codec, as Kafka does for a topic whose
`compression.type` is a codec (gzip, snappy, lz4, zstd or uncompressed).

Only the records section changes: it is decompressed (bounded, against compression bombs),
its records are walked to check that `recordsCount` of them fill it exactly, and it is
compressed again. The header keeps every field (base offset, lastOffsetDelta, timestamps,
producer id, epoch and base sequence, transactional and timestamp-type flags) except the
codec bits of the attributes, `batchLength` and the CRC-32C, which are rebuilt. Record
offsets and timestamps are deltas from the header, so the records bytes need no change.

Pure functions without I/O; the produce handler runs large batches in a worker thread.
"""

from __future__ import annotations

import struct

from raftka.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    INVALID_RECORD,
    LOG_OVERHEAD,
    MAX_DECOMPRESSED_BYTES,
    RECORDS_OFFSET,
    Buffer,
    InvalidRecords,
    UnsupportedBatch,
    _decompress,
    batch_crc,
    read_batch_header,
    read_varint,
)

#: Topic `compression.type` values → codec ids; `producer` keeps the producer's codec.
TOPIC_CODECS: dict[str, int] = {
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}
CODEC_NAMES: dict[int, str] = {codec: name for name, codec in TOPIC_CODECS.items()}
CODEC_NAMES[COMPRESSION_NONE] = "none"

#: Kafka's default levels (KIP-390): gzip's -1 (zlib's default, 6), lz4's 9 (which Kafka
#: maps to LZ4's fast compressor; other levels use its high-compression one), zstd's 3.
GZIP_DEFAULT_LEVEL = -1
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3
_ZLIB_DEFAULT_LEVEL = 6

#: xerial's snappy stream framing, as the Java client writes it: magic, version 1,
#: compatible version 1, then blocks of at most 32 KiB input, each with an int32 length.
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


def compress_records(codec: int, records: bytes, level: int | None = None) -> bytes:
    """The records section `records` (uncompressed) in `codec`'s framing as Kafka writes it,
    at `level` (gzip, lz4 and zstd; None: Kafka's default), within Kafka's ranges."""
    import cramjam  # imported lazily: topics with compression.type=producer never need it

    if codec == COMPRESSION_NONE:
        return records
    if codec == COMPRESSION_GZIP:
        if level is None or level == GZIP_DEFAULT_LEVEL:
            level = _ZLIB_DEFAULT_LEVEL
        return bytes(cramjam.gzip.compress(records, level=level))
    if codec == COMPRESSION_SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(records)
        for start in range(0, len(records), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        # An LZ4 frame of independent 64 KiB blocks: Kafka's reader refuses linked ones.
        lz4_level = 0 if level is None or level == LZ4_DEFAULT_LEVEL else level
        compressor = cramjam.lz4.Compressor(
            level=lz4_level, content_checksum=False, block_linked=False
        )
        compressor.compress(records)
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.zstd.compress(records, level=zstd_level))
    raise ValueError(f"unknown codec {codec}")


def _check_records(records: bytes, records_count: int, base_offset: int) -> None:
    """INVALID_RECORD unless exactly `records_count` length-prefixed records fill `records`."""
    pos = 0
    end = len(records)
    for index in range(records_count):
        try:
            length, body = read_varint(records, pos)
        except UnsupportedBatch:
            length, body = -1, pos
        if length < 0 or body + length > end:
            raise InvalidRecords(
                INVALID_RECORD,
                f"record {index} of the batch at offset {base_offset} is truncated: the "
                f"batch declares {records_count} records",
            )
        pos = body + length
    if pos != end:
        raise InvalidRecords(
            INVALID_RECORD,
            f"the batch at offset {base_offset} holds {end - pos} bytes after its "
            f"{records_count} declared records",
        )


def recompress_batch(
    batch: Buffer,
    codec: int,
    level: int | None = None,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """The one whole batch `batch` with its records in `codec` (at `level`, see
    `compress_records`).

    A control batch, or one already in `codec`, is returned as is (the same bytes). Raises
    InvalidRecords (INVALID_RECORD) when the records cannot be decompressed within
    `max_decompressed_bytes` or do not match the header's record count. Does not check the
    CRC or the header; validate the batch first (`validate_produce_records`).
    """
    header = read_batch_header(batch, 0)
    if header.compression == codec or header.is_control:
        return bytes(batch)
    payload = bytes(memoryview(batch)[RECORDS_OFFSET : header.size_bytes])
    try:
        records = _decompress(header.compression, payload, max_decompressed_bytes)
    except UnsupportedBatch as exc:
        raise InvalidRecords(
            INVALID_RECORD,
            f"the {CODEC_NAMES.get(header.compression, header.compression)} records of the "
            f"batch at offset {header.base_offset} cannot be decompressed: {exc}",
        ) from None
    except Exception as exc:  # cramjam raises its own error types
        raise InvalidRecords(
            INVALID_RECORD,
            f"the {CODEC_NAMES.get(header.compression, header.compression)} records of the "
            f"batch at offset {header.base_offset} cannot be decompressed: {exc}",
        ) from None
    _check_records(records, header.records_count, header.base_offset)
    compressed = compress_records(codec, records, level)
    out = bytearray(RECORDS_OFFSET + len(compressed))
    out[:RECORDS_OFFSET] = memoryview(batch)[:RECORDS_OFFSET]
    out[RECORDS_OFFSET:] = compressed
    _INT32.pack_into(out, BATCH_LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    _INT16.pack_into(out, ATTRIBUTES_OFFSET, attributes)
    _UINT32.pack_into(out, CRC_OFFSET, batch_crc(out, 0, len(out)))
    return bytes(out)
