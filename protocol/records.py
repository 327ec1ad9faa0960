"""A view of Kafka's v2 record-batch header (magic 2), without I/O or broker state.

Records inside a batch stay opaque: produce validation, offset stamping and log scanning
read only the fixed 61-byte header, so their cost grows with the number of batches, never
with the number of records. The one exception, `record_timestamps`, decodes a single batch
for ListOffsets, which is not on the data path.

Layout (all big-endian, Kafka's `DefaultRecordBatch`)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordsCount int32 | records...

`batchLength` counts the bytes after itself; the CRC-32C covers attributes..end of batch, so
`baseOffset` and `partitionLeaderEpoch` can be rewritten without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final, NamedTuple, cast

import crc32c

# Field offsets inside a batch.
BASE_OFFSET_OFFSET: Final = 0
BATCH_LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
BASE_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
PRODUCER_EPOCH_OFFSET: Final = 51
BASE_SEQUENCE_OFFSET: Final = 53
RECORDS_COUNT_OFFSET: Final = 57
RECORDS_OFFSET: Final = 61

#: Bytes before `batchLength`'s payload starts: baseOffset + batchLength (Kafka's LOG_OVERHEAD).
LOG_OVERHEAD: Final = 12
#: Size of the whole v2 header, i.e. of a batch with no records.
RECORD_BATCH_OVERHEAD: Final = 61
#: Smallest `batchLength` a v2 batch can declare.
MIN_BATCH_LENGTH: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
#: Smallest `batchLength` of any message format (Kafka's LegacyRecord.RECORD_OVERHEAD_V0);
#: anything below is garbage regardless of magic.
MIN_LEGACY_BATCH_LENGTH: Final = 14

MAGIC_V2: Final = 2

# Compression codecs (attributes bits 0-2).
COMPRESSION_MASK: Final = 0x07
COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4

# Attribute flags.
TIMESTAMP_TYPE_MASK: Final = 0x08  # set: LogAppendTime, clear: CreateTime
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

# Kafka error codes raised by validation.
CORRUPT_MESSAGE: Final = 2
MESSAGE_TOO_LARGE: Final = 10
UNSUPPORTED_FOR_MESSAGE_FORMAT: Final = 43
UNSUPPORTED_COMPRESSION_TYPE: Final = 76
INVALID_RECORD: Final = 87

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_crc32c: Final = crc32c.crc32c
_memoryview: Final = memoryview
if _HEADER.size != RECORD_BATCH_OVERHEAD:
    raise ImportError(f"batch header layout of {_HEADER.size} bytes, not {RECORD_BATCH_OVERHEAD}")
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")
_OFFSET_AND_LENGTH: Final = struct.Struct(">qi")

Buffer = bytes | bytearray | memoryview


class BatchHeader(NamedTuple):
    """The decoded 61-byte header of one v2 batch, plus where it starts in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end_position(self) -> int:
        """Position just after this batch in its buffer."""
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)


#: A header from its fields without the NamedTuple's Python-level `__new__` (a header is
#: read for every batch a client sends, and again when it is written).
_new_header: Final = tuple.__new__


class InvalidRecords(Exception):
    """Produce records that Kafka would reject; `error_code` is the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def read_batch_header(buf: Buffer, pos: int = 0, position: int = -1) -> BatchHeader:
    """Decode the header at `pos`. Raises struct.error if fewer than 61 bytes remain. Its
    `position` is `pos`, or `position` when given (where the batch lies in another buffer,
    such as its segment file).

    Does not check magic, length or CRC; see `validate_produce_records` and `scan_batches`.
    """
    at = pos if position < 0 else position
    # One concatenation: `(at, *fields)` builds a list and converts it.
    return _new_header(BatchHeader, (at,) + _HEADER.unpack_from(buf, pos))


def stamped_header(
    header: BatchHeader, position: int, base_offset: int, leader_epoch: int
) -> BatchHeader:
    """`header` as it reads once its batch lies at `position`, stamped with `base_offset`
    and `leader_epoch` (both outside the CRC): the header without decoding it again."""
    # The fields as objects and the tuple built at once: compiled, none is unboxed and
    # boxed again, and no slice is made.
    f = cast("tuple[object, ...]", header)
    fields = (
        position, base_offset, f[2], leader_epoch, f[4], f[5], f[6], f[7], f[8], f[9], f[10],
        f[11], f[12], f[13],
    )  # fmt: skip
    return _new_header(BatchHeader, fields)


def moved_header(header: BatchHeader, position: int) -> BatchHeader:
    """`header` as it reads where its batch lies at `position` (of another buffer)."""
    f = cast("tuple[object, ...]", header)
    fields = (
        position, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12],
        f[13],
    )  # fmt: skip
    return _new_header(BatchHeader, fields)


def batch_crc(buf: Buffer, pos: int, size_bytes: int) -> int:
    """CRC-32C of the batch at `pos` as Kafka computes it (attributes..end of batch)."""
    with _memoryview(buf) as view:
        return _crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size_bytes])


def validate_produce_records(
    buf: Buffer,
    max_batch_bytes: int,
    *,
    produce_version: int | None = None,
    restore: bool = False,
) -> list[BatchHeader]:
    """Check the batches of one partition's produce data and return their headers.

    The batches must tile `buf` exactly. For each batch, in Kafka's order: truncation or an
    impossible length -> CORRUPT_MESSAGE; larger than `max_batch_bytes` (message.max.bytes)
    -> MESSAGE_TOO_LARGE; magic other than 2 -> UNSUPPORTED_FOR_MESSAGE_FORMAT; CRC mismatch
    -> CORRUPT_MESSAGE; unknown codec -> UNSUPPORTED_COMPRESSION_TYPE; recordsCount < 1,
    lastOffsetDelta != recordsCount - 1, or maxTimestamp < baseTimestamp -> INVALID_RECORD.

    With `produce_version` (the Produce request's version, i.e. the data came from a client)
    Kafka's ProduceRequest checks apply too: from v3 exactly one batch and magic 2 (both
    INVALID_RECORD), zstd only from v7 (UNSUPPORTED_COMPRESSION_TYPE), and no control
    batches (INVALID_RECORD). An empty `buf` returns [] unless those checks apply.

    With `restore` (a topic in restore mode, batches as `raftka restore` copies them from a
    log) several batches and control batches are allowed, and a batch may span more offsets
    than it holds records (lastOffsetDelta >= recordsCount - 1, as after log compaction).
    """
    view = _memoryview(buf)
    end = len(view)
    headers: list[BatchHeader] = []
    pos = 0
    strict = produce_version is not None and produce_version >= 3 and not restore
    while pos < end:
        remaining = end - pos
        if remaining < RECORD_BATCH_OVERHEAD:
            # Too short for a v2 batch: the first check that fails names what is wrong.
            if remaining < LOG_OVERHEAD:
                raise InvalidRecords(CORRUPT_MESSAGE, f"truncated batch at byte {pos}")
            length = int(_OFFSET_AND_LENGTH.unpack_from(view, pos)[1])
            magic = view[pos + MAGIC_OFFSET] if remaining > MAGIC_OFFSET else -1
            _check_frame(pos, length, magic, remaining, max_batch_bytes, strict)
            raise InvalidRecords(CORRUPT_MESSAGE, f"truncated batch at byte {pos}")
        # The whole header in one read; the checks take its fields (a variable-length tuple
        # type, so that compiled code unboxes only the fields it reads).
        fields = cast("tuple[int, ...]", _HEADER.unpack_from(view, pos))
        size = _check_frame(pos, fields[1], fields[3], remaining, max_batch_bytes, strict)
        if _crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != fields[4]:
            raise InvalidRecords(CORRUPT_MESSAGE, f"CRC mismatch in batch at byte {pos}")
        _check_batch_fields(
            fields[5], fields[6], fields[7], fields[8], fields[12], produce_version, restore
        )
        headers.append(_new_header(BatchHeader, (pos,) + fields))
        pos += size
        if strict and pos < end:
            raise InvalidRecords(
                INVALID_RECORD,
                f"produce v{produce_version} allows exactly one record batch per partition",
            )
    if strict and not headers:
        raise InvalidRecords(
            INVALID_RECORD, f"produce v{produce_version} needs one record batch per partition"
        )
    return headers


def _check_frame(
    pos: int, batch_length: int, magic: int, remaining: int, max_batch_bytes: int, strict: bool
) -> int:
    """The checks of a batch's length and magic, in Kafka's order; its size in bytes."""
    if batch_length < MIN_LEGACY_BATCH_LENGTH:
        raise InvalidRecords(CORRUPT_MESSAGE, f"batch length {batch_length} at byte {pos}")
    size = batch_length + LOG_OVERHEAD
    if size > max_batch_bytes:
        raise InvalidRecords(
            MESSAGE_TOO_LARGE, f"batch of {size} bytes exceeds the limit {max_batch_bytes}"
        )
    if size > remaining:
        raise InvalidRecords(CORRUPT_MESSAGE, f"truncated batch at byte {pos}")
    if magic != MAGIC_V2:
        raise InvalidRecords(
            INVALID_RECORD if strict else UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"magic {magic} is not supported; only record batches with magic 2 are",
        )
    if batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecords(CORRUPT_MESSAGE, f"batch length {batch_length} at byte {pos}")
    return size


def _check_batch_fields(
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    records_count: int,
    produce_version: int | None,
    restore: bool,
) -> None:
    compression = attributes & COMPRESSION_MASK
    if compression > COMPRESSION_ZSTD:
        raise InvalidRecords(UNSUPPORTED_COMPRESSION_TYPE, f"unknown codec {compression}")
    if produce_version is not None:
        if compression == COMPRESSION_ZSTD and produce_version < 7:
            raise InvalidRecords(
                UNSUPPORTED_COMPRESSION_TYPE, f"zstd needs produce v7, got v{produce_version}"
            )
        if attributes & CONTROL_FLAG_MASK and not restore:
            raise InvalidRecords(INVALID_RECORD, "clients may not write control batches")
    if restore:
        # A compacted log keeps batches whose records no longer fill their offset range.
        if records_count < 0 or last_offset_delta < max(0, records_count - 1):
            raise InvalidRecords(
                INVALID_RECORD,
                f"lastOffsetDelta {last_offset_delta} cannot hold recordsCount {records_count}",
            )
    elif records_count < 1:
        raise InvalidRecords(INVALID_RECORD, f"invalid record count {records_count}")
    elif last_offset_delta != records_count - 1:
        raise InvalidRecords(
            INVALID_RECORD,
            f"lastOffsetDelta {last_offset_delta} does not match recordsCount {records_count}",
        )
    if max_timestamp != NO_TIMESTAMP and max_timestamp < base_timestamp:
        raise InvalidRecords(
            INVALID_RECORD, f"maxTimestamp {max_timestamp} < baseTimestamp {base_timestamp}"
        )


def stamp_batches(
    buf: bytearray | memoryview,
    headers: list[BatchHeader],
    first_offset: int,
    leader_epoch: int,
) -> int:
    """Assign consecutive offsets from `first_offset` and set partitionLeaderEpoch, in place.

    Both fields lie outside the CRC. Returns the last offset assigned. `headers` keep their
    old `base_offset`; re-read them if needed.
    """
    offset = first_offset
    pack_offset = _INT64.pack_into
    pack_epoch = _INT32.pack_into
    for header in headers:
        pack_offset(buf, header.position, offset)
        pack_epoch(buf, header.position + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        offset += header.last_offset_delta + 1
    return offset - 1


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int) -> int:
    """Mark the batch as LogAppendTime with maxTimestamp = `timestamp_ms`; recompute the CRC.

    Follows Kafka's `DefaultRecordBatch.setMaxTimestamp`: baseTimestamp and the records are
    left alone (readers take maxTimestamp for every record of a LogAppendTime batch).
    Returns the new CRC.
    """
    pos = header.position
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = batch_crc(buf, pos, header.size_bytes)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
    return crc


class BatchScan(NamedTuple):
    """Result of `scan_batches`: the good prefix of a buffer and why the scan stopped."""

    headers: list[BatchHeader]
    valid_end: int  # position just after the last good batch
    error: str | None  # None: stopped at the end of the buffer or at `max_batches`
    incomplete: bool  # the bytes after valid_end may be the start of a batch cut short


def scan_batches(
    buf: Buffer,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    next_offset: int | None = None,
    max_batches: int = 1 << 62,
) -> BatchScan:
    """Walk batches from `pos` and stop at the first one that is torn or corrupt.

    A batch is good when its length is plausible and lies wholly inside `buf`, its magic is 2,
    its CRC matches (if `verify_crc`), its lastOffsetDelta is not negative and (when
    `next_offset` is given) its base offset does not go back below the previous batch's end.
    `incomplete` is True when the stop is at a batch that merely runs past the end of `buf`:
    a reader of a larger file should fetch more bytes before calling it torn.
    """
    view = _memoryview(buf)
    end = len(view)
    headers: list[BatchHeader] = []
    unpack = _HEADER.unpack_from
    while pos < end and len(headers) < max_batches:
        if end - pos < RECORD_BATCH_OVERHEAD:
            return BatchScan(headers, pos, f"{end - pos} stray bytes at {pos}", True)
        header = _new_header(BatchHeader, (pos, *unpack(view, pos)))
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length < MIN_BATCH_LENGTH:
            return BatchScan(headers, pos, f"batch length {header.batch_length} at {pos}", False)
        if header.magic != MAGIC_V2:
            return BatchScan(headers, pos, f"magic {header.magic} at {pos}", False)
        if header.last_offset_delta < 0:
            return BatchScan(headers, pos, f"negative lastOffsetDelta at {pos}", False)
        if next_offset is not None and header.base_offset < next_offset:
            return BatchScan(headers, pos, f"offset {header.base_offset} at {pos} goes back", False)
        if pos + size > end:
            return BatchScan(headers, pos, f"batch at {pos} runs past the end", True)
        if verify_crc and _crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != header.crc:
            return BatchScan(headers, pos, f"CRC mismatch in batch at {pos}", False)
        headers.append(header)
        next_offset = header.base_offset + header.last_offset_delta + 1
        pos += size
    return BatchScan(headers, pos, None, False)


def iter_batch_headers(buf: Buffer, pos: int = 0) -> Iterator[BatchHeader]:
    """Yield headers of the whole batches from `pos` on, without CRC checks.

    Stops silently at the end or at the first batch that does not fit; use `scan_batches`
    to learn where and why.
    """
    view = _memoryview(buf)
    end = len(view)
    unpack = _HEADER.unpack_from
    while end - pos >= RECORD_BATCH_OVERHEAD:
        header = _new_header(BatchHeader, (pos, *unpack(view, pos)))
        if header.batch_length < MIN_BATCH_LENGTH or pos + header.batch_length + 12 > end:
            return
        yield header
        pos += header.batch_length + LOG_OVERHEAD


# -- Slow path: decoding the records of ONE batch (ListOffsets by timestamp only) ----------


class UnsupportedBatch(Exception):
    """The batch's records cannot be decoded here (unknown codec or malformed records)."""


#: Largest decompressed size `record_timestamps` accepts (a guard against compression bombs).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


def _decompress_bounded(module: Any, payload: bytes, limit: int) -> bytes:
    # decompress_into fails rather than overrun its buffer; grow it up to the limit.
    size = min(limit, max(64 * 1024, 8 * len(payload)))
    while True:
        out = bytearray(size)
        try:
            written = module.decompress_into(payload, out)
        except Exception as exc:  # cramjam.DecompressionError, also for a short buffer
            if size >= limit:
                raise UnsupportedBatch(f"cannot decompress within {limit} bytes: {exc}") from exc
            size = min(limit, size * 8)
            continue
        return bytes(out[:written])


def _decompress(codec: int, payload: bytes, limit: int) -> bytes:
    import cramjam  # imported lazily: only ListOffsets by timestamp needs it

    if codec == COMPRESSION_NONE:
        return payload
    if codec == COMPRESSION_GZIP:
        return _decompress_bounded(cramjam.gzip, payload, limit)
    if codec == COMPRESSION_SNAPPY:
        # Java clients use xerial's framing ("\x82SNAPPY\0" + 4-byte length-prefixed blocks).
        if payload[:8] == b"\x82SNAPPY\x00":
            out = bytearray()
            pos = 16
            while pos + 4 <= len(payload):
                (block_len,) = struct.unpack_from(">i", payload, pos)
                if block_len < 0 or pos + 4 + block_len > len(payload):
                    raise UnsupportedBatch(f"snappy block of {block_len} bytes at {pos} is torn")
                block = payload[pos + 4 : pos + 4 + block_len]
                if len(out) + cramjam.snappy.decompress_raw_len(block) > limit:
                    raise UnsupportedBatch(f"snappy batch larger than {limit} bytes")
                out += bytes(cramjam.snappy.decompress_raw(block))
                pos += 4 + block_len
            return bytes(out)
        if cramjam.snappy.decompress_raw_len(payload) > limit:
            raise UnsupportedBatch(f"snappy batch larger than {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(payload))
    if codec == COMPRESSION_LZ4:
        return _decompress_bounded(cramjam.lz4, payload, limit)
    if codec == COMPRESSION_ZSTD:
        return _decompress_bounded(cramjam.zstd, payload, limit)
    raise UnsupportedBatch(f"unknown codec {codec}")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it); UnsupportedBatch if malformed."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise UnsupportedBatch("malformed varint")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos  # zig-zag


def record_timestamps(
    batch: Buffer, max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[int, int]]:
    """Yield (offset, timestamp) of each record in one whole batch, in order.

    For a LogAppendTime batch every record carries maxTimestamp, as in Kafka. Raises
    UnsupportedBatch (possibly after yielding some records) if the records cannot be
    decoded or would decompress to more than `max_decompressed_bytes`.
    """
    header = read_batch_header(batch, 0)
    if header.is_log_append_time:
        for i in range(header.records_count):
            yield header.base_offset + i, header.max_timestamp
        return
    payload = bytes(batch[RECORDS_OFFSET : header.size_bytes])
    try:
        records = _decompress(header.compression, payload, max_decompressed_bytes)
    except UnsupportedBatch:
        raise
    except Exception as exc:  # cramjam raises its own error types
        raise UnsupportedBatch(f"cannot decompress: {exc}") from exc
    pos = 0
    for _ in range(min(header.records_count, len(records))):
        length, body = read_varint(records, pos)
        if length < 0 or body + length > len(records):
            raise UnsupportedBatch("malformed record length")
        field = body + 1  # skip the record's attributes byte
        timestamp_delta, field = read_varint(records, field)
        offset_delta, field = read_varint(records, field)
        yield header.base_offset + offset_delta, header.base_timestamp + timestamp_delta
        pos = body + length
