"""Records of compacted topics: the key scan of KIP-467 and the cleaner's batch rewrite.

Both decode the records of one v2 batch (decompressing it if needed); neither is on the data
path of a topic that is not compacted. A rewritten batch keeps its base offset, its
lastOffsetDelta (so the offsets of the log stay contiguous), its partitionLeaderEpoch, its
producer id, epoch and base sequence, and each kept record keeps its offset delta; only the
records, the record count, the codec bits of an emptied batch, the delete-horizon flag and
baseTimestamp (KIP-534), batchLength and the CRC change. Pure functions without I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import NamedTuple

from raftka.protocol.recompress import compress_records
from raftka.protocol.records import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    MAX_DECOMPRESSED_BYTES,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    Buffer,
    UnsupportedBatch,
    _decompress,
    batch_crc,
    read_batch_header,
    read_varint,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")
_CRC_OFFSET = 17


class RecordView(NamedTuple):
    """Where one record lies in an (uncompressed) records section, and what the cleaner
    needs of it."""

    start: int  # its length varint
    end: int
    attributes_at: int  # its attributes byte, where the record body starts
    rest_at: int  # just after its offset delta: key, value and headers follow
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    is_tombstone: bool  # its value is null


def records_section(batch: Buffer, max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The uncompressed records section of one whole batch; UnsupportedBatch if it cannot
    be decompressed within the bound."""
    header = read_batch_header(batch, 0)
    payload = bytes(memoryview(batch)[RECORDS_OFFSET : header.size_bytes])
    if header.compression == COMPRESSION_NONE:
        return payload
    try:
        return _decompress(header.compression, payload, max_decompressed_bytes)
    except UnsupportedBatch:
        raise
    except Exception as exc:  # cramjam raises its own error types
        raise UnsupportedBatch(f"cannot decompress: {exc}") from exc


def _record_span(records: bytes, pos: int, end: int) -> tuple[int, int]:
    """Where the record at `pos` starts its body (after the length) and ends."""
    length, body = read_varint(records, pos)
    record_end = body + length
    if length < 1 or record_end > end:
        raise UnsupportedBatch("malformed record length")
    return body, record_end


def _check_filled(pos: int, end: int, count: int) -> None:
    if pos != end:
        raise UnsupportedBatch(f"{end - pos} bytes after the batch's {count} records")


def walk_records(records: bytes, count: int) -> list[RecordView]:
    """The `count` records of an uncompressed records section, in order. Raises
    UnsupportedBatch when they do not fill it exactly."""
    found: list[RecordView] = []
    pos = 0
    end = len(records)
    for _ in range(count):
        body, record_end = _record_span(records, pos, end)
        timestamp_delta, field = read_varint(records, body + 1)
        offset_delta, rest = read_varint(records, field)
        key_length, field = read_varint(records, rest)
        key: bytes | None = None
        if key_length >= 0:
            key = records[field : field + key_length]
            field += key_length
        value_length, field = read_varint(records, field)
        if field > record_end:
            raise UnsupportedBatch("record fields run past the record")
        found.append(
            RecordView(
                pos, record_end, body, rest, timestamp_delta, offset_delta, key, value_length < 0
            )
        )
        pos = record_end
    _check_filled(pos, end, count)
    return found


def keyless_records(records: bytes, count: int) -> list[int]:
    """Indexes of the records without a key in an uncompressed records section (KIP-467).

    Walks only the length, timestamp, offset and key-length varints of each record; raises
    UnsupportedBatch when the records do not fill the section.
    """
    missing: list[int] = []
    pos = 0
    end = len(records)
    for index in range(count):
        body, record_end = _record_span(records, pos, end)
        _, field = read_varint(records, body + 1)
        _, field = read_varint(records, field)
        key_length, _ = read_varint(records, field)
        if key_length < 0:
            missing.append(index)
        pos = record_end
    _check_filled(pos, end, count)
    return missing


def _encode_varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


class CleanedBatch(NamedTuple):
    """What `clean_batch` made of one batch."""

    batch: bytes  # the same bytes when nothing changed
    changed: bool
    tombstone_horizon_ms: int  # delete horizon of the tombstones it still holds, else -1


def clean_batch(
    batch: Buffer,
    latest_offsets: Mapping[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> CleanedBatch:
    """One whole data batch as Kafka's cleaner leaves it at time `now_ms`.

    A record goes when it has no key, when `latest_offsets` maps its key to a later offset
    (a newer value exists), or when it is a tombstone whose batch's delete horizon has
    passed. Tombstones that stay in a batch without a delete horizon get one:
    `now_ms + delete_retention_ms`, stored as baseTimestamp with the delete-horizon flag,
    the records' timestamp deltas rebased on it so their timestamps do not change. A batch
    that loses every record stays as its header (record count 0, no codec). Control and
    transactional batches are returned unchanged. Deterministic: the same inputs give the
    same bytes. UnsupportedBatch when the records cannot be decoded.
    """
    header = read_batch_header(batch, 0)
    unchanged = CleanedBatch(bytes(batch), False, -1)
    if header.is_control or header.is_transactional or header.records_count == 0:
        return unchanged
    records = records_section(batch, max_decompressed_bytes)
    views = walk_records(records, header.records_count)
    has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG_MASK)
    horizon = header.base_timestamp if has_horizon else -1
    kept: list[RecordView] = []
    tombstones = False
    for view in views:
        if view.key is None:
            continue
        latest = latest_offsets.get(view.key)
        if latest is not None and latest > header.base_offset + view.offset_delta:
            continue
        if view.is_tombstone:
            if has_horizon and now_ms >= horizon:
                continue
            tombstones = True
        kept.append(view)
    stamp_horizon = tombstones and not has_horizon
    if len(kept) == len(views) and not stamp_horizon:
        return CleanedBatch(bytes(batch), False, horizon if tombstones else -1)
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    if not kept:
        attributes &= ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG_MASK)
        section = b""
    else:
        if stamp_horizon:
            base_timestamp = now_ms + delete_retention_ms
            attributes |= DELETE_HORIZON_FLAG_MASK
            horizon = base_timestamp
        parts = []
        for view in kept:
            if base_timestamp == header.base_timestamp:
                parts.append(records[view.start : view.end])
                continue
            delta = header.base_timestamp + view.timestamp_delta - base_timestamp
            body = (
                records[view.attributes_at : view.attributes_at + 1]
                + _encode_varint(delta)
                + _encode_varint(view.offset_delta)
                + records[view.rest_at : view.end]
            )
            parts.append(_encode_varint(len(body)) + body)
        plain = b"".join(parts)
        codec = header.compression
        section = plain if codec == COMPRESSION_NONE else compress_records(codec, plain)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(section))
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        attributes,
        header.last_offset_delta,
        base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    out[RECORD_BATCH_OVERHEAD:] = section
    _UINT32.pack_into(out, _CRC_OFFSET, batch_crc(out, 0, len(out)))
    return CleanedBatch(bytes(out), True, horizon if tombstones else -1)
