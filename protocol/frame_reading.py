"""Reading a request frame field by field, every length checked against the frame before it
is used: what the hand-written request decoders (`produce_codec`, `fetch_codec`) share.

Every malformed input raises `FrameError` naming the field and where it is; nothing is read
past the frame and nothing is allocated for a length the frame cannot hold.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, cast

from raftka.protocol.api import FrameError

_HEADER: Final = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_HEADER_BYTES: Final[int] = _HEADER.size


@dataclass(slots=True, init=False)
class DecodedHeader:
    """A request header v1/v2 as decoded here, with kio's field names (tagged fields are
    skipped: Kafka defines none for requests)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None

    def __init__(
        self,
        request_api_key: int,
        request_api_version: int,
        correlation_id: int,
        client_id: str | None,
    ) -> None:
        self.request_api_key = request_api_key
        self.request_api_version = request_api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def uvarint(frame: bytes, pos: int, end: int, field: str) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint of at most 5 bytes, as Kafka's
    ByteUtils.readUnsignedVarint reads them."""
    value = shift = 0
    while pos < end:
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError(f"the varint length of {field} at {pos - 5} is longer than 5 bytes")
    raise truncated(field, pos, end)


def compact_length(frame: bytes, pos: int, end: int, field: str) -> tuple[int, int]:
    """(length, position after it) of a compact length or count: an unsigned varint of the
    length + 1, so -1 is null."""
    if pos < end and frame[pos] < 0x80:
        return frame[pos] - 1, pos + 1
    value, pos = uvarint(frame, pos, end, field)
    return value - 1, pos


def compact_count(frame: bytes, pos: int, end: int, field: str, least: int) -> tuple[int, int]:
    """(element count, position after it) of a non-nullable compact array whose elements
    take at least `least` bytes each."""
    count, pos = compact_length(frame, pos, end, field)
    if not 0 <= count <= (end - pos) // least:
        raise bad_count(field, count, pos, end)
    return count, pos


def skip_tagged_fields(frame: bytes, pos: int, end: int, where: str) -> int:
    """The position after a tagged field set whose every field is skipped by its size (one
    the request does not define, or one it defines that the broker does not read)."""
    count, pos = uvarint(frame, pos, end, f"tagged fields of {where}")
    if count > (end - pos) // 2:  # a tag and a size take a byte each at least
        raise bad_count(f"tagged fields of {where}", count, pos, end)
    for _ in range(count):
        _tag, pos = uvarint(frame, pos, end, f"a tag of {where}")
        size, pos = uvarint(frame, pos, end, f"a tagged field size of {where}")
        if size > end - pos:
            raise bad_length(f"a tagged field of {where}", size, pos, end)
        pos += size
    return pos


def text(frame: bytes, start: int, stop: int, field: str) -> str:
    try:
        return frame[start:stop].decode()
    except UnicodeDecodeError:
        raise FrameError(f"{field} at {start} is not UTF-8") from None


def truncated(field: str, pos: int, end: int) -> FrameError:
    return FrameError(f"the frame ends at {end}, in the middle of {field} at {pos}")


def bad_length(field: str, length: int, pos: int, end: int) -> FrameError:
    return FrameError(f"{field} at {pos} claims {length} bytes, {end - pos} are left")


def bad_count(field: str, count: int, pos: int, end: int) -> FrameError:
    return FrameError(f"{field} at {pos} claims {count} elements, {end - pos} bytes are left")


def read_header(
    frame: bytes, api_key: int, api_name: str, version: int, flexible: bool
) -> tuple[DecodedHeader, int]:
    """The request header (v1, or v2 when `flexible`) of a frame that must be `api_name`
    (`api_key`) of `version`, and the position of the body after it."""
    end = len(frame)
    if end < _HEADER_BYTES:
        raise FrameError(f"frame of {end} bytes is shorter than a request header")
    # Typed, so that compiled code compares native ints instead of boxed ones.
    key, api_version, correlation_id, length = cast(
        "tuple[int, int, int, int]", _HEADER.unpack_from(frame, 0)
    )
    if key != api_key or api_version != version:
        raise FrameError(f"api key {key} v{api_version} is not {api_name} v{version}")
    pos = _HEADER_BYTES
    if length == -1:
        client_id = None
    elif 0 <= length <= end - pos:
        client_id = text(frame, pos, pos + length, "client_id")
        pos += length
    else:
        raise bad_length("client_id", length, pos, end)
    header = DecodedHeader(key, api_version, correlation_id, client_id)
    if flexible:
        if pos < end and frame[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos, end, "request header")
    return header, pos
