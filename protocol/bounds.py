"""Check a request's lengths (and nulls) against the frame before kio decodes it.

kio's native reader trusts length prefixes: an array that claims billions of elements makes
it reserve memory for them and the process aborts, which no exception handler can catch. This
walk follows the same schema as kio but only reads lengths and skips payloads, so a frame is
handed to kio only once every array, string and bytes field fits inside it. It also refuses a
null array where the schema allows none, as Kafka's parser does (kio would yield None). It
does no per-record work: record batches are skipped by their length.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

_FIXED_SIZES = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_VARIABLE = ("string", "bytes", "records")


class BoundsError(ValueError):
    """A length that does not fit in the frame, or a frame that ends too early."""


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise BoundsError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise BoundsError("varint longer than 10 bytes")


def _need(pos: int, size: int, end: int) -> int:
    if size < 0 or pos + size > end:
        raise BoundsError(f"{size} bytes needed at {pos}, the frame ends at {end}")
    return pos + size


# A field plan: (kind, schema type, nested entity, nullable, tag); kinds below.
_PRIMITIVE, _PRIMITIVE_ARRAY, _ENTITY, _ENTITY_ARRAY = range(4)


@cache
def _plan(entity_type: Any) -> tuple[tuple[tuple[Any, ...], ...], dict[int, tuple[Any, ...]]]:
    """(regular field plans in order, tagged field plans by tag) of an entity class."""
    regular = []
    tagged = {}
    for f in fields(entity_type):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            step: tuple[Any, ...] = (_ENTITY_ARRAY, None, kind.type_, is_optional(f))
        elif isinstance(kind, EntityField):
            step = (_ENTITY, None, kind.type_, is_optional(f))
        elif isinstance(kind, PrimitiveTupleField):
            step = (_PRIMITIVE_ARRAY, get_schema_field_type(f), None, is_optional(f))
        else:
            step = (_PRIMITIVE, get_schema_field_type(f), None, is_optional(f))
        tag = get_field_tag(f)
        if tag is None:
            regular.append(step)
        else:
            # A tagged field's presence is its tag: its value carries no null marker.
            tagged[int(tag)] = (*step[:3], False)
    return tuple(regular), tagged


def _primitive(buf: memoryview, pos: int, end: int, kafka_type: str, flexible: bool) -> int:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _need(pos, size, end)
    if kafka_type not in _VARIABLE:
        raise BoundsError(f"unknown schema type {kafka_type}")
    if flexible:
        length, pos = _uvarint(buf, pos, end)
        return pos if length == 0 else _need(pos, length - 1, end)
    if kafka_type == "string":
        _need(pos, 2, end)
        (length,) = _INT16.unpack_from(buf, pos)
        pos += 2
    else:
        _need(pos, 4, end)
        (length,) = _INT32.unpack_from(buf, pos)
        pos += 4
    return pos if length == -1 else _need(pos, length, end)


def _array_length(buf: memoryview, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        count -= 1
    else:
        _need(pos, 4, end)
        (count,) = _INT32.unpack_from(buf, pos)
        pos += 4
    if count > end - pos:
        raise BoundsError(f"an array of {count} elements cannot fit in {end - pos} bytes")
    return count, pos


def _step(buf: memoryview, pos: int, end: int, step: tuple[Any, ...], flexible: bool) -> int:
    kind, kafka_type, nested, nullable = step
    if kind == _PRIMITIVE:
        return _primitive(buf, pos, end, kafka_type, flexible)
    if kind == _ENTITY:
        if nullable:
            _need(pos, 1, end)
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:  # int8 -1: null (KIP-893)
                return pos
        return check_entity(buf, pos, end, nested)
    count, pos = _array_length(buf, pos, end, flexible)
    if count < 0 and not nullable:
        raise BoundsError("null array where the schema allows none")
    if kind == _PRIMITIVE_ARRAY:
        size = _FIXED_SIZES.get(kafka_type)
        if size is not None:
            return _need(pos, max(count, 0) * size, end)
        for _ in range(count):
            pos = _primitive(buf, pos, end, kafka_type, flexible)
        return pos
    for _ in range(count):
        pos = check_entity(buf, pos, end, nested)
    return pos


def check_entity(buf: memoryview, pos: int, end: int, entity_type: Any) -> int:
    """Walk one encoded entity at `pos`; returns where it ends. Raises BoundsError."""
    flexible = entity_type.__flexible__
    regular, tagged = _plan(entity_type)
    for step in regular:
        pos = _step(buf, pos, end, step, flexible)
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise BoundsError(f"{count} tagged fields cannot fit in {end - pos} bytes")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            field_end = _need(pos, size, end)
            tagged_step = tagged.get(tag)
            if tagged_step is not None:
                _step(buf, pos, field_end, tagged_step, flexible)
            pos = field_end
    return pos


def check_request(frame: bytes | memoryview, body_type: Any) -> None:
    """Walk a request frame (header v1 or v2, then the body). Raises BoundsError."""
    with memoryview(frame) as buf:
        end = len(buf)
        pos = _need(0, 8, end)  # api key, api version, correlation id
        pos = _primitive(buf, pos, end, "string", False)  # client id: always a legacy string
        if body_type.__flexible__:
            count, pos = _uvarint(buf, pos, end)
            for _ in range(count):
                _tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                pos = _need(pos, size, end)
        check_entity(buf, pos, end, body_type)
