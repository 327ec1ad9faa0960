"""Hand-built Kafka frames for the many-connections load: a Produce request of one record to
one partition, built once with kio, then stamped per request (correlation id, timestamps,
the value's first bytes, the batch CRC) without encoding anything again; where a Produce
response's error code lies; and the Produce versions a broker's ApiVersions answer allows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import timedelta
from io import BytesIO
from typing import Any

import crc32c
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from raftka.protocol.api import build, request_type, response_type, schema_module
from raftka.protocol.batch_builder import ATTRIBUTES_OFFSET, build_batch, encode_uvarint

PRODUCE_KEY = 0
API_VERSIONS_KEY = 18
# v9 is the first flexible Produce; v13 names topics by id, which this load does not know.
PREFERRED_PRODUCE_VERSION = 9
PRODUCE_VERSION_MAX = 12
PRODUCE_VERSION_MIN = 3  # the first that carries v2 record batches
CLIENT_ID = "raftka-bench-connections"

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_TIMESTAMPS = struct.Struct(">qq")  # firstTimestamp, maxTimestamp
_CRC = struct.Struct(">I")
_ERROR_CODE = struct.Struct(">h")
CORRELATION_ID_AT = 8  # size (4), api key (2), api version (2)
FIRST_TIMESTAMP_IN_BATCH = 27
CRC_IN_BATCH = ATTRIBUTES_OFFSET - 4


class FrameBuildError(ValueError):
    """The broker offers no Produce version this load can send, or a frame is not as built."""


def encode_frame(header: Any, body: Any) -> bytes:
    """A request frame: size prefix, then `header` and `body` written by kio."""
    buf = BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(type(header))(buf, header)
    entity_writer(type(body))(buf, body)
    frame = bytearray(buf.getvalue())
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def produce_version(broker_min: int, broker_max: int) -> int:
    """The Produce version to send to a broker that serves broker_min..broker_max: v9 when
    it can, else the newest both sides know."""
    if broker_min <= PREFERRED_PRODUCE_VERSION <= broker_max:
        return PREFERRED_PRODUCE_VERSION
    version = min(broker_max, PRODUCE_VERSION_MAX)
    if version < max(broker_min, PRODUCE_VERSION_MIN):
        raise FrameBuildError(
            f"broker serves Produce v{broker_min}-v{broker_max}; this load sends "
            f"v{PRODUCE_VERSION_MIN}-v{PRODUCE_VERSION_MAX}"
        )
    return version


def api_versions_ranges(response_frame: bytes) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from an ApiVersions v3 response frame (without its size prefix);
    FrameBuildError if it carries an error."""
    entity = response_type(API_VERSIONS_KEY, 3)
    response, _ = entity_reader(entity)(response_frame, 4)  # response header v0: correlation id
    if response.error_code != 0:
        raise FrameBuildError(f"ApiVersions v3 answered with error {response.error_code}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


@dataclass(frozen=True, slots=True)
class ProduceTemplate:
    """A Produce request frame of one record of `value_size` bytes to one partition.

    `stamp(correlation_id, timestamp_ms, prefix)` returns a frame ready to send: the request
    as kio encoded it, with the correlation id, the batch's timestamps and the value's first
    bytes replaced, and the batch CRC computed again over what changed.
    """

    version: int
    frame: bytes
    batch_at: int
    batch_size: int
    value_at: int
    error_code_at: int  # in the response frame, after its size prefix

    @classmethod
    def build(
        cls,
        version: int,
        topic: str,
        partition: int,
        acks: int,
        value_size: int,
        timeout_ms: int = 30_000,
    ) -> ProduceTemplate:
        entity = request_type(PRODUCE_KEY, version)
        if entity is None:
            raise FrameBuildError(f"no Produce v{version} schema")
        nested = schema_module(entity)
        batch = build_batch([(None, b"\0" * value_size)], 0)
        body = build(
            entity,
            transactional_id=None,
            acks=acks,
            timeout=timedelta(milliseconds=timeout_ms),
            topic_data=(
                build(
                    nested.TopicProduceData,
                    name=topic,
                    partition_data=(
                        build(nested.PartitionProduceData, index=partition, records=batch),
                    ),
                ),
            ),
        )
        header_type = RequestHeaderV2 if entity.__flexible__ else RequestHeaderV1
        header = header_type(
            request_api_key=i16(PRODUCE_KEY),
            request_api_version=i16(version),
            correlation_id=i32(0),
            client_id=CLIENT_ID,
        )
        frame = encode_frame(header, body)
        batch_at = frame.rfind(batch)
        if batch_at < 0:
            raise FrameBuildError("the record batch is not in the encoded request")
        # The record ends with its value, then a varint 0 for no headers.
        value_at = batch_at + len(batch) - 1 - value_size
        return cls(version, frame, batch_at, len(batch), value_at, error_code_at(version, topic))

    def stamp(self, correlation_id: int, timestamp_ms: int, prefix: bytes) -> bytearray:
        frame = bytearray(self.frame)
        _CORRELATION_ID.pack_into(frame, CORRELATION_ID_AT, correlation_id)
        at = self.batch_at
        _TIMESTAMPS.pack_into(frame, at + FIRST_TIMESTAMP_IN_BATCH, timestamp_ms, timestamp_ms)
        frame[self.value_at : self.value_at + len(prefix)] = prefix
        end = at + self.batch_size
        _CRC.pack_into(frame, at + CRC_IN_BATCH, crc32c.crc32c(frame[at + ATTRIBUTES_OFFSET : end]))
        return frame


def error_code_at(version: int, topic: str) -> int:
    """Where the error code of the one partition of a Produce response to a one-topic,
    one-partition request lies, counted from the correlation id (the frame after its size)."""
    name = topic.encode()
    if version >= 9:  # flexible: header tagged fields, compact arrays and strings
        return 4 + 1 + 1 + len(encode_uvarint(len(name) + 1)) + len(name) + 1 + 4
    return 4 + 4 + 2 + len(name) + 4 + 4


def response_error_code(response_frame: bytes | bytearray, template: ProduceTemplate) -> int:
    """The partition error code of a Produce response frame (without its size prefix)."""
    return int(_ERROR_CODE.unpack_from(response_frame, template.error_code_at)[0])


def decode_produce_response(response_frame: bytes, version: int) -> Any:
    """The whole Produce response, decoded by kio (to check the fast reading against)."""
    entity = response_type(PRODUCE_KEY, version)
    header_size = 5 if version >= 9 else 4
    response, _ = entity_reader(entity)(response_frame, header_size)
    return response
