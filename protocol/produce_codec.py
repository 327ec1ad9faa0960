"""Produce on the wire without kio's generic walk: the request decoded straight from its frame,
the response written straight into one.

Produce is the request a busy producer sends most, so its fixed cost matters. The decoder
reads each field with precompiled `struct` formats and checks every length against the frame
before using it, so it needs no separate bounds walk: malformed input of any kind raises
`FrameError` naming the field, nothing is read past the frame and nothing is allocated for a
length the frame cannot hold. It returns plain mutable classes with kio's field names
(`DecodedHeader`, `ProduceData`, ...) rather than kio's frozen entities, whose construction
cost a few microseconds a request; the unit tests check they hold what kio decodes. Record
batches stay opaque bytes: nothing here is done per record.

The encoder writes a whole response frame (size, header, body) from the broker's per-partition
answers, read through `PartitionAnswer` so this package does not import the broker. It writes
what kio writes for the same response (throttle time 0; on v10+ no current-leader or
node-endpoint tagged fields), which the unit tests check version by version.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias, cast

from raftka.protocol.api import FrameError
from raftka.protocol.api_keys import ApiKey
from raftka.protocol.batch_builder import encode_uvarint
from raftka.protocol.frame_reading import (
    DecodedHeader,
    bad_count,
    bad_length,
    compact_count,
    read_header,
    skip_tagged_fields,
    text,
    truncated,
    uvarint,
)

#: The Produce versions served here: v3 (the first with a transactional id) to v12 (v13
#: names topics by id, a different shape).
FIRST_VERSION: Final = 3
LAST_VERSION: Final = 12
#: Produce v9 and later use compact lengths and tagged fields (KIP-482).
FIRST_FLEXIBLE_VERSION: Final = 9


@dataclass(slots=True, init=False)
class ProducePartitionData:
    index: int
    records: bytes | None

    def __init__(self, index: int, records: bytes | None) -> None:
        self.index = index
        self.records = records


@dataclass(slots=True, init=False)
class ProduceTopicData:
    name: str
    partition_data: tuple[ProducePartitionData, ...]

    def __init__(self, name: str, partition_data: tuple[ProducePartitionData, ...]) -> None:
        self.name = name
        self.partition_data = partition_data


@dataclass(slots=True, init=False)
class ProduceData:
    """A Produce request v3-v12 with kio's field names (`transactional_id` None when
    null; `timeout` as kio gives it, a timedelta, made when asked for: the handler reads
    `timeout_ms`)."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[ProduceTopicData, ...]

    def __init__(
        self,
        transactional_id: str | None,
        acks: int,
        timeout_ms: int,
        topic_data: tuple[ProduceTopicData, ...],
    ) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data

    @property
    def timeout(self) -> datetime.timedelta:
        return _ONE_MS * self.timeout_ms


_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: As a native int: a member of ApiKey (a module that is not compiled) is looked up through
#: EnumType's `__getattr__` hook on every access (Python 3.11).
_API_KEY: Final[int] = int(ApiKey.PRODUCE)

_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_ACKS_TIMEOUT_COUNT: Final = struct.Struct(">hii")  # v3-v8: and the topic count
_INDEX_SIZE: Final = struct.Struct(">ii")  # v3-v8: partition index, records length
_INDEX_BYTE: Final = struct.Struct(">iB")  # v9+: partition index, first byte of the records length
# Their sizes as native ints: a Struct's `.size` is an attribute lookup each time.
_ACKS_TIMEOUT_BYTES: Final[int] = _ACKS_TIMEOUT.size
_ACKS_TIMEOUT_COUNT_BYTES: Final[int] = _ACKS_TIMEOUT_COUNT.size
_INDEX_SIZE_BYTES: Final[int] = _INDEX_SIZE.size
_INDEX_BYTE_BYTES: Final[int] = _INDEX_BYTE.size
_ONE_MS: Final = datetime.timedelta(milliseconds=1)  # a product of it is exact, unlike a float

# The fewest bytes an array element can take, so a count is refused before any loop:
# v3-v8 topic: name length, partition count; partition: index, records length.
_LEGACY_TOPIC_BYTES: Final = 6
_LEGACY_PARTITION_BYTES: Final = 8
# v9+ topic: name length, partition count, tagged fields; partition: index, records
# length, tagged fields.
_COMPACT_TOPIC_BYTES: Final = 3
_COMPACT_PARTITION_BYTES: Final = 6


def decode_produce_request(frame: bytes, version: int) -> tuple[DecodedHeader, ProduceData]:
    """The request header and the Produce request of a frame (without its size prefix),
    holding what kio decodes from it; `records` are the batch
    bytes as sent (None when null). Unknown tagged fields are skipped and trailing bytes
    after the body ignored, as Kafka does (kio refuses unknown tagged fields). Raises
    FrameError for anything malformed, and for a frame that is not a Produce
    request of `version` (FIRST_VERSION to LAST_VERSION).
    """
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise FrameError(f"Produce v{version} is not decoded here")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    header, pos = read_header(frame, _API_KEY, "Produce", version, flexible)
    end = len(frame)
    if not flexible:
        return header, _legacy_body(frame, pos, end)
    return header, _compact_body(frame, pos, end)


def _legacy_body(frame: bytes, pos: int, end: int) -> ProduceData:
    """A v3-v8 body: int16 string lengths, int32 array and bytes lengths, -1 for null."""
    if pos + 2 > end:
        raise truncated("transactional_id", pos, end)
    (length,) = _INT16.unpack_from(frame, pos)
    pos += 2
    if length == -1:
        transactional_id = None
    elif 0 <= length <= end - pos:
        transactional_id = text(frame, pos, pos + length, "transactional_id")
        pos += length
    else:
        raise bad_length("transactional_id", length, pos, end)
    if pos + _ACKS_TIMEOUT_COUNT_BYTES > end:
        raise truncated("acks, timeout_ms and topic_data", pos, end)
    acks, timeout_ms, topic_count = _ACKS_TIMEOUT_COUNT.unpack_from(frame, pos)
    pos += _ACKS_TIMEOUT_COUNT_BYTES
    if not 0 <= topic_count <= (end - pos) // _LEGACY_TOPIC_BYTES:
        raise bad_count("topic_data", topic_count, pos, end)
    topics: list[ProduceTopicData] = []
    for _ in range(topic_count):
        if pos + 2 > end:
            raise truncated("topic name", pos, end)
        (length,) = _INT16.unpack_from(frame, pos)
        pos += 2
        if not 0 <= length <= end - pos:
            raise bad_length("topic name", length, pos, end)
        name = text(frame, pos, pos + length, "topic name")
        pos += length
        if pos + 4 > end:
            raise truncated("partition_data", pos, end)
        (partition_count,) = _INT32.unpack_from(frame, pos)
        pos += 4
        if not 0 <= partition_count <= (end - pos) // _LEGACY_PARTITION_BYTES:
            raise bad_count("partition_data", partition_count, pos, end)
        partitions: list[ProducePartitionData] = []
        for _ in range(partition_count):
            if pos + _INDEX_SIZE_BYTES > end:
                raise truncated("partition", pos, end)
            index, size = _INDEX_SIZE.unpack_from(frame, pos)
            pos += _INDEX_SIZE_BYTES
            if size == -1:
                records = None
            elif 0 <= size <= end - pos:
                records = frame[pos : pos + size]
                pos += size
            else:
                raise bad_length("records", size, pos, end)
            partitions.append(ProducePartitionData(index, records))
        topics.append(ProduceTopicData(name, tuple(partitions)))
    return ProduceData(transactional_id, acks, timeout_ms, tuple(topics))


def _compact_body(frame: bytes, pos: int, end: int) -> ProduceData:
    """A v9+ body: unsigned varint lengths of length + 1 (0 for null), tagged fields at the
    end of every structure."""
    if pos < end and frame[pos] < 0x80:
        length = frame[pos] - 1
        pos += 1
    else:
        length, pos = uvarint(frame, pos, end, "transactional_id")
        length -= 1
    if length == -1:
        transactional_id = None
    elif length <= end - pos:
        transactional_id = text(frame, pos, pos + length, "transactional_id")
        pos += length
    else:
        raise bad_length("transactional_id", length, pos, end)
    if pos + _ACKS_TIMEOUT_BYTES > end:
        raise truncated("acks and timeout_ms", pos, end)
    # Read byte by byte: natively, where `_ACKS_TIMEOUT.unpack_from` is a method call.
    acks = frame[pos] << 8 | frame[pos + 1]
    if acks >= 0x8000:
        acks -= 0x10000
    timeout_ms = frame[pos + 2] << 24 | frame[pos + 3] << 16 | frame[pos + 4] << 8 | frame[pos + 5]
    if timeout_ms >= 0x80000000:
        timeout_ms -= 0x100000000
    pos += _ACKS_TIMEOUT_BYTES
    topic_count, pos = compact_count(frame, pos, end, "topic_data", _COMPACT_TOPIC_BYTES)
    topics: list[ProduceTopicData] = []
    for _ in range(topic_count):
        if pos < end and frame[pos] < 0x80:
            length = frame[pos] - 1
            pos += 1
        else:
            length, pos = uvarint(frame, pos, end, "topic name")
            length -= 1
        if not 0 <= length <= end - pos:
            raise bad_length("topic name", length, pos, end)
        name = text(frame, pos, pos + length, "topic name")
        pos += length
        partition_count, pos = compact_count(
            frame, pos, end, "partition_data", _COMPACT_PARTITION_BYTES
        )
        partitions: list[ProducePartitionData] = []
        for _ in range(partition_count):
            if pos + _INDEX_BYTE_BYTES > end:
                raise truncated("partition", pos, end)
            index, size = cast("tuple[int, int]", _INDEX_BYTE.unpack_from(frame, pos))
            pos += _INDEX_BYTE_BYTES
            if size < 0x80:
                size -= 1
            elif pos < end and frame[pos] < 0x80:  # a batch of 127 B to 16 KiB, the usual
                size = (size & 0x7F | frame[pos] << 7) - 1
                pos += 1
            else:
                size, pos = uvarint(frame, pos - 1, end, "records")
                size -= 1
            if size == -1:
                records = None
            elif size <= end - pos:
                records = frame[pos : pos + size]
                pos += size
            else:
                raise bad_length("records", size, pos, end)
            if pos < end and frame[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(frame, pos, end, "partition_data")
            partitions.append(ProducePartitionData(index, records))
        if pos < end and frame[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos, end, "topic_data")
        topics.append(ProduceTopicData(name, tuple(partitions)))
    if pos < end and frame[pos] == 0:
        pos += 1
    else:
        pos = skip_tagged_fields(frame, pos, end, "ProduceRequest")
    return ProduceData(transactional_id, acks, timeout_ms, tuple(topics))


class PartitionAnswer(Protocol):
    """One partition's answer to a Produce request, as the broker's replica manager gives
    it (`AppendResult`): the fields of Kafka's PartitionProduceResponse."""

    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def base_offset(self) -> int: ...
    #: The leader's append time on a LogAppendTime topic; None (or -1) otherwise.
    @property
    def log_append_time_ms(self) -> int | None: ...
    @property
    def log_start_offset(self) -> int: ...
    #: (index of the record in its batch, message) of each record refused.
    @property
    def record_errors(self) -> Sequence[tuple[int, str | None]]: ...


#: Per topic, in the request's order: its name and (partition index, answer) pairs.
TopicAnswers: TypeAlias = Sequence[tuple[str, Sequence[tuple[int, PartitionAnswer]]]]

_SIZE_CORRELATION: Final = struct.Struct(">ii")
_SIZE_CORRELATION_BYTES: Final[int] = _SIZE_CORRELATION.size
_INT16_LENGTH: Final = struct.Struct(">h")
_INT32_COUNT: Final = struct.Struct(">i")
_NULL_INT16_STRING: Final = b"\xff\xff"
# index, error_code, base_offset, log_append_time_ms (v2+), log_start_offset (v5+)
_PARTITION_V3: Final = struct.Struct(">ihqq")
_PARTITION_V5: Final = struct.Struct(">ihqqq")
_BATCH_INDEX: Final = struct.Struct(">i")
_THROTTLE_TIME: Final = struct.Struct(">i")
_NO_THROTTLE: Final = _THROTTLE_TIME.pack(0)
# v8: no record errors (empty array), no error message (null string).
_NO_RECORD_ERRORS_V8: Final = b"\x00\x00\x00\x00\xff\xff"
# v9+: an empty compact array, a null compact string, no tagged fields.
_NO_RECORD_ERRORS_COMPACT: Final = b"\x01\x00\x00"
# v9+, after the one partition of a one-partition response: no record errors, no error
# message and the partition's tagged fields, the topic's, throttle_time_ms 0, the body's.
_ONE_PARTITION_END: Final = _NO_RECORD_ERRORS_COMPACT + b"\x00" + _NO_THROTTLE + b"\x00"
#: topic name -> how a one-partition response for it is packed (`_one_partition_layout`);
#: cleared past TOPIC_LAYOUTS_MAX.
_ONE_PARTITION_LAYOUTS: Final[dict[str, tuple[struct.Struct, bytes, int]]] = {}
TOPIC_LAYOUTS_MAX: Final = 4096


def encode_produce_response(correlation_id: int, version: int, answers: TopicAnswers) -> bytes:
    """A whole Produce response frame of `version` (FIRST_VERSION to LAST_VERSION): its size
    prefix, the response header (v0, or v1 with tagged fields on v9+) and the body, with
    throttle_time_ms 0. Fields a version lacks are left out (log_start_offset before v5,
    record errors and error_message before v8); a negative or None append time is written
    as -1, Kafka's "none". Raises ValueError for a version not served here.
    """
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Produce v{version} is not encoded here")
    if version >= FIRST_FLEXIBLE_VERSION:
        return _compact_response(correlation_id, answers)
    out = bytearray(_SIZE_CORRELATION_BYTES)
    out += _INT32_COUNT.pack(len(answers))
    with_start_offset = version >= 5
    with_record_errors = version >= 8
    for name, partitions in answers:
        encoded = name.encode()
        out += _INT16_LENGTH.pack(len(encoded))
        out += encoded
        out += _INT32_COUNT.pack(len(partitions))
        for index, answer in partitions:
            append_time_ms = answer.log_append_time_ms
            if append_time_ms is None or append_time_ms < 0:
                append_time_ms = -1
            if with_start_offset:
                out += _PARTITION_V5.pack(
                    index,
                    answer.error_code,
                    answer.base_offset,
                    append_time_ms,
                    answer.log_start_offset,
                )
            else:
                out += _PARTITION_V3.pack(
                    index, answer.error_code, answer.base_offset, append_time_ms
                )
            if not with_record_errors:
                continue
            record_errors = answer.record_errors
            message = answer.error_message
            if not record_errors and message is None:
                out += _NO_RECORD_ERRORS_V8
                continue
            out += _INT32_COUNT.pack(len(record_errors))
            for batch_index, record_message in record_errors:
                out += _BATCH_INDEX.pack(batch_index)
                _legacy_nullable_string(out, record_message)
            _legacy_nullable_string(out, message)
    out += _NO_THROTTLE
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


def _compact_response(correlation_id: int, answers: TopicAnswers) -> bytes:
    """Produce response v9+: compact lengths, a tagged field set after every structure,
    all of them empty."""
    out = bytearray(_SIZE_CORRELATION_BYTES)
    out += b"\x00"  # the response header's tagged fields
    out += encode_uvarint(len(answers) + 1)
    for name, partitions in answers:
        encoded = name.encode()
        out += encode_uvarint(len(encoded) + 1)
        out += encoded
        out += encode_uvarint(len(partitions) + 1)
        for index, answer in partitions:
            append_time_ms = answer.log_append_time_ms
            if append_time_ms is None or append_time_ms < 0:
                append_time_ms = -1
            out += _PARTITION_V5.pack(
                index,
                answer.error_code,
                answer.base_offset,
                append_time_ms,
                answer.log_start_offset,
            )
            record_errors = answer.record_errors
            message = answer.error_message
            if not record_errors and message is None:
                out += _NO_RECORD_ERRORS_COMPACT
                continue
            out += encode_uvarint(len(record_errors) + 1)
            for batch_index, record_message in record_errors:
                out += _BATCH_INDEX.pack(batch_index)
                _compact_nullable_string(out, record_message)
                out += b"\x00"  # the record error's tagged fields
            _compact_nullable_string(out, message)
            out += b"\x00"  # the partition's tagged fields (no current leader)
        out += b"\x00"  # the topic's tagged fields
    out += _NO_THROTTLE
    out += b"\x00"  # the body's tagged fields (no node endpoints)
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


def encode_one_partition_response(
    correlation_id: int,
    name: str,
    index: int,
    error_code: int,
    base_offset: int,
    log_append_time_ms: int | None,
    log_start_offset: int,
) -> bytes:
    """A Produce response v9+ (`encode_produce_response`) of one topic's one partition with
    no record errors and no message, as most Produce requests (one record batch of one
    partition) are answered: packed whole, in one call, by its topic's layout."""
    layout = _ONE_PARTITION_LAYOUTS.get(name)
    if layout is None:
        layout = _one_partition_layout(name)
        if len(_ONE_PARTITION_LAYOUTS) >= TOPIC_LAYOUTS_MAX:
            _ONE_PARTITION_LAYOUTS.clear()
        _ONE_PARTITION_LAYOUTS[name] = layout
    packer, topic_part, size = layout
    if log_append_time_ms is None or log_append_time_ms < 0:
        log_append_time_ms = -1
    return packer.pack(
        size,
        correlation_id,
        topic_part,
        index,
        error_code,
        base_offset,
        log_append_time_ms,
        log_start_offset,
        _ONE_PARTITION_END,
    )


def _one_partition_layout(name: str) -> tuple[struct.Struct, bytes, int]:
    """A one-partition response for topic `name`: its Struct (size and correlation id, the
    bytes up to the partition's fields, the partition's fields, the rest), those bytes (the
    header's tagged fields, one topic, its name, one partition) and its size field."""
    encoded = name.encode()
    topic_part = b"\x00\x02" + encode_uvarint(len(encoded) + 1) + encoded + b"\x02"
    packer = struct.Struct(f">ii{len(topic_part)}sihqqq{len(_ONE_PARTITION_END)}s")
    return packer, topic_part, packer.size - 4


def _legacy_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _NULL_INT16_STRING
        return
    encoded = value.encode()
    out += _INT16_LENGTH.pack(len(encoded))
    out += encoded


def _compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\x00"
        return
    encoded = value.encode()
    out += encode_uvarint(len(encoded) + 1)
    out += encoded
