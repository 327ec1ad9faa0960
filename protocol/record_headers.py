"""Named header values (and, when asked, the keys) of the records of whole v2 batches, for
brokers that order delivery by them (share groups' priority and fair orders). Reads one
batch at a time; no I/O."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from raftka.protocol.compacted import records_section
from raftka.protocol.records import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    UnsupportedBatch,
    batch_crc,
    read_batch_header,
    read_varint,
)

#: A batch decompresses to at most this much here (a guard against compression bombs).
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


def _skip_bytes(records: bytes, pos: int) -> int:
    length, pos = read_varint(records, pos)
    return pos + max(length, 0)


def header_values(
    batch: bytes,
    names: tuple[bytes, ...],
    with_key: bool = False,
    spans: list[int] | None = None,
) -> Iterator[tuple[int, tuple[bytes | None, ...]]]:
    """(offset, the value of each header of `names`, None where absent) for each data record
    of one whole batch, in offset order; a control batch has none. The last header of a
    name wins. With `with_key`, the record's key follows the header values (None for a null
    key). With `spans`, each record yielded first appends where its bytes lie in the batch
    (start, length), or (0, 0) in a compressed batch, where they lie nowhere in the log.
    Raises UnsupportedBatch when the records cannot be decoded."""
    header = read_batch_header(batch, 0)
    if batch[16] != MAGIC_V2:
        raise UnsupportedBatch(f"message format {batch[16]} has no headers")
    if header.is_control:
        return
    records = records_section(batch, DECOMPRESSED_BYTES_MAX)
    plain = header.compression == COMPRESSION_NONE
    wanted = {name: i for i, name in enumerate(names)}
    pos = 0
    for _ in range(header.records_count):
        length, body = read_varint(records, pos)
        end = body + length
        if length < 1 or end > len(records):
            raise UnsupportedBatch("malformed record length")
        _, field = read_varint(records, body + 1)
        offset_delta, field = read_varint(records, field)
        key_length, key_at = read_varint(records, field)
        field = key_at + max(key_length, 0)
        field = _skip_bytes(records, field)  # value
        count, field = read_varint(records, field)
        values: list[bytes | None] = [None] * len(names)
        for _ in range(max(count, 0)):
            name_length, field = read_varint(records, field)
            name = records[field : field + max(name_length, 0)]
            field += max(name_length, 0)
            value_length, field = read_varint(records, field)
            index = wanted.get(name)
            if index is not None and value_length >= 0:
                values[index] = records[field : field + value_length]
            field += max(value_length, 0)
        if field > end:
            raise UnsupportedBatch("record fields run past the record")
        if with_key:
            values.append(records[key_at : key_at + key_length] if key_length >= 0 else None)
        if spans is not None:
            spans.extend((RECORD_BATCH_OVERHEAD + pos, end - pos) if plain else (0, 0))
        yield header.base_offset + offset_delta, tuple(values)
        pos = end


def whole_batches(chunk: bytes) -> Iterator[bytes]:
    """The whole batches at the start of a log slice, in order (a torn tail is left out)."""
    pos = 0
    while pos + LOG_OVERHEAD <= len(chunk):
        size = LOG_OVERHEAD + int.from_bytes(chunk[pos + 8 : pos + 12], "big", signed=True)
        if size <= LOG_OVERHEAD or pos + size > len(chunk):
            return
        yield chunk[pos : pos + size]
        pos += size


_LENGTH_AT = 8
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_COUNT_AT = 57
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


def record_offset_delta(record: bytes) -> int | None:
    """The offset delta of one whole v2 record (its length varint first), None when the
    bytes are not one whole record."""
    try:
        length, body = read_varint(record, 0)
        if length < 1 or body + length != len(record):
            return None
        _, field = read_varint(record, body + 1)  # timestamp delta
        delta, _ = read_varint(record, field)
    except (IndexError, UnsupportedBatch):
        return None
    return delta


def batch_of_records(header: bytes, records: list[bytes]) -> bytes:
    """A v2 batch holding only `records` (whole uncompressed records of the batch whose
    61-byte header is `header`, in offset order), as Kafka's cleaner leaves a batch: base
    offset, lastOffsetDelta, timestamps, producer fields and each record's offset delta
    kept; batchLength, the record count, the codec bits (none) and the CRC recomputed."""
    section = b"".join(records)
    out = bytearray(header[:RECORD_BATCH_OVERHEAD])
    out += section
    _INT32.pack_into(out, _LENGTH_AT, len(out) - LOG_OVERHEAD)
    attributes = _INT16.unpack_from(out, _ATTRIBUTES_AT)[0] & ~COMPRESSION_MASK
    _INT16.pack_into(out, _ATTRIBUTES_AT, attributes)
    _INT32.pack_into(out, _COUNT_AT, len(records))
    _UINT32.pack_into(out, _CRC_AT, batch_crc(out, 0, len(out)))
    return bytes(out)
