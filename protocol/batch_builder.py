"""Build and decode whole v2 record batches, records included.

The data path never needs this: client batches stay opaque. The broker itself writes
records (consumer-group offsets and metadata in `__consumer_offsets`) and reads them back on
start-up, so it needs Kafka's `DefaultRecord` / `DefaultRecordBatch` encoding: zig-zag varint
framed records and a CRC-32C over attributes..end of batch. Only uncompressed batches are
built; decoding accepts uncompressed batches only (not a hot path, no codecs needed).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c

MAGIC_V2 = 2
RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12
ATTRIBUTES_OFFSET = 21
COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
#: Control record types of transaction markers (Kafka's ControlRecordType).
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_FIELD = struct.Struct(">I")
_OFFSET_AND_LENGTH = struct.Struct(">qi")


class BatchDecodeError(ValueError):
    """A batch whose records cannot be decoded (truncated, bad varint, compressed, bad CRC)."""


class Record(NamedTuple):
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


#: The one-byte varints, made once: most lengths and counts in a frame are below 128.
_SMALL_UVARINTS = tuple(bytes((value,)) for value in range(0x80))


def encode_uvarint(value: int) -> bytes:
    """An unsigned varint (LEB128), as compact lengths in flexible versions use."""
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Kafka's zig-zag varint (a signed varlong; ints use the same encoding)."""
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position); raises BatchDecodeError on a truncated or overlong varint."""
    raw = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise BatchDecodeError("truncated varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise BatchDecodeError("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _encode_blob(blob: bytes | None) -> bytes:
    if blob is None:
        return encode_varint(-1)
    return encode_varint(len(blob)) + blob


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray(b"\x00")  # record attributes: unused
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _encode_blob(key)
    body += _encode_blob(value)
    body += encode_varint(len(headers))
    for name, header_value in headers:
        body += _encode_blob(name.encode())
        body += _encode_blob(header_value)
    return encode_varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] = (),
) -> bytes:
    """One uncompressed v2 batch of (key, value) records, all stamped `timestamp_ms`;
    `headers`, when given, holds each record's header fields in the same order.

    `base_offset` and `partition_leader_epoch` lie outside the CRC; the log rewrites them.
    `transactional` and `control` set those attribute flags (a transaction's data batch, a
    transaction marker).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    fields = headers or [()] * len(records)
    body = b"".join(
        encode_record(i, 0, key, value, fields[i]) for i, (key, value) in enumerate(records)
    )
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(body))
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,  # crc, filled below
        # no compression, CreateTime
        (TRANSACTIONAL_FLAG_MASK if transactional else 0) | (CONTROL_FLAG_MASK if control else 0),
        len(records) - 1,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch[RECORD_BATCH_OVERHEAD:] = body
    crc = crc32c.crc32c(bytes(batch[ATTRIBUTES_OFFSET:]))
    _CRC_FIELD.pack_into(batch, ATTRIBUTES_OFFSET - 4, crc)
    return bytes(batch)


def _read_blob(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise BatchDecodeError("record field runs past the end of its batch")
    return bytes(buf[pos:end]), end


def decode_batch(batch: bytes | memoryview, *, check_crc: bool = True) -> list[Record]:
    """The records of one uncompressed v2 batch (exactly one batch, header included)."""
    view = memoryview(batch)
    if len(view) < RECORD_BATCH_OVERHEAD:
        raise BatchDecodeError(f"batch of {len(view)} bytes is shorter than its header")
    (
        base_offset,
        batch_length,
        _epoch,
        magic,
        crc,
        attributes,
        _last_offset_delta,
        base_timestamp,
        _max_timestamp,
        _producer_id,
        _producer_epoch,
        _base_sequence,
        count,
    ) = _HEADER.unpack_from(view, 0)
    if magic != MAGIC_V2:
        raise BatchDecodeError(f"magic {magic} is not supported")
    end = batch_length + LOG_OVERHEAD
    if end > len(view) or end < RECORD_BATCH_OVERHEAD:
        raise BatchDecodeError(f"batch length {batch_length} does not fit its buffer")
    view = view[:end]
    if check_crc and crc32c.crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
        raise BatchDecodeError("CRC mismatch")
    if attributes & COMPRESSION_MASK:
        raise BatchDecodeError(f"compressed batches (codec {attributes & COMPRESSION_MASK})")
    records: list[Record] = []
    pos = RECORD_BATCH_OVERHEAD
    for _ in range(count):
        length, pos = decode_varint(view, pos)
        record_end = pos + length
        if length < 1 or record_end > end:
            raise BatchDecodeError("record runs past the end of its batch")
        pos += 1  # attributes
        timestamp_delta, pos = decode_varint(view, pos)
        offset_delta, pos = decode_varint(view, pos)
        key, pos = _read_blob(view, pos)
        value, pos = _read_blob(view, pos)
        header_count, pos = decode_varint(view, pos)
        headers = []
        for _ in range(max(header_count, 0)):
            name, pos = _read_blob(view, pos)
            header_value, pos = _read_blob(view, pos)
            headers.append(((name or b"").decode(errors="replace"), header_value))
        if pos != record_end:
            raise BatchDecodeError("record length does not match its fields")
        records.append(
            Record(
                base_offset + offset_delta,
                base_timestamp + timestamp_delta,
                key,
                value,
                tuple(headers),
            )
        )
    return records


def iter_batches(buf: bytes | memoryview) -> Iterator[tuple[int, memoryview]]:
    """(attributes, batch bytes) of each whole batch in `buf`; a truncated tail is ignored."""
    view = memoryview(buf)
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        _, batch_length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + batch_length
        if batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or end > len(view):
            return
        attributes = struct.unpack_from(">h", view, pos + ATTRIBUTES_OFFSET)[0]
        yield attributes, view[pos:end]
        pos = end


def is_control_batch(attributes: int) -> bool:
    return bool(attributes & CONTROL_FLAG_MASK)


def control_key(control_type: int) -> bytes:
    """The key of a control record: version 0 and the control type."""
    return _CONTROL_KEY.pack(0, control_type)


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker: a transactional control batch of one record whose key is
    (version 0, COMMIT or ABORT) and whose value is (version 0, `coordinator_epoch`), with
    base sequence -1, as Kafka's EndTransactionMarker."""
    control_type = CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT
    return build_batch(
        [(control_key(control_type), _END_TXN_MARKER_VALUE.pack(0, coordinator_epoch))],
        timestamp_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


def _first_control_record(batch: bytes | memoryview) -> tuple[int, bytes | None] | None:
    """(control type, value) of a control batch's first record, or None when it has no
    control key or cannot be decoded (e.g. it is compressed)."""
    try:
        records = decode_batch(batch, check_crc=False)
    except ValueError:
        return None
    if not records or records[0].key is None or len(records[0].key) != _CONTROL_KEY.size:
        return None
    return int(_CONTROL_KEY.unpack(records[0].key)[1]), records[0].value


def control_record_type(batch: bytes | memoryview) -> int | None:
    """The control type (Kafka's ControlRecordType: 0 ABORT, 1 COMMIT, 2 LEADER_CHANGE, 6
    KRAFT_VOTERS, ...) of one control batch, or None when its first record has no control
    key (or the batch cannot be decoded, e.g. it is compressed)."""
    found = _first_control_record(batch)
    return None if found is None else found[0]


def end_txn_marker(batch: bytes | memoryview) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a transaction marker (a COMMIT or ABORT control
    batch), decoded once; the epoch is -1 when its value is unreadable. None for any other
    control batch or an undecodable one."""
    found = _first_control_record(batch)
    if found is None or found[0] not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    control_type, value = found
    if value is None or len(value) < _END_TXN_MARKER_VALUE.size:
        return control_type, -1
    return control_type, int(_END_TXN_MARKER_VALUE.unpack_from(value)[1])
