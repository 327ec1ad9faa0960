"""Named header values (and, when asked, the keys) of the records of whole v2 batches, for
brokers that order delivery by them (share groups' priority and fair orders). Reads one
batch at a time; no I/O."""

from __future__ import annotations

from collections.abc import Iterator

from raftka.protocol.compacted import records_section
from raftka.protocol.records import (
    LOG_OVERHEAD,
    MAGIC_V2,
    UnsupportedBatch,
    read_batch_header,
    read_varint,
)

#: A batch decompresses to at most this much here (a guard against compression bombs).
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


def _skip_bytes(records: bytes, pos: int) -> int:
    length, pos = read_varint(records, pos)
    return pos + max(length, 0)


def header_values(
    batch: bytes, names: tuple[bytes, ...], with_key: bool = False
) -> Iterator[tuple[int, tuple[bytes | None, ...]]]:
    """(offset, the value of each header of `names`, None where absent) for each data record
    of one whole batch, in offset order; a control batch has none. The last header of a
    name wins. With `with_key`, the record's key follows the header values (None for a null
    key). Raises UnsupportedBatch when the records cannot be decoded."""
    header = read_batch_header(batch, 0)
    if batch[16] != MAGIC_V2:
        raise UnsupportedBatch(f"message format {batch[16]} has no headers")
    if header.is_control:
        return
    records = records_section(batch, DECOMPRESSED_BYTES_MAX)
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
