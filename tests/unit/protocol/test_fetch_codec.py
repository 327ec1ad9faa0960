"""The hand-written Fetch codec agrees with kio on every version it serves.

Responses: the encoder writes what kio's writer writes, and leaves to kio the responses it does
not write (v12 tagged fields). Requests: frames kio writes (with a cluster id on v12, and
unknown tagged fields the test adds where Kafka allows them) decode to what kio decodes, the
decoder's plain classes turned into kio's entities of the version field by field; every
truncation and any mutation is refused with FrameError or decoded as kio decodes it.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from codec_checks import (
    assert_refused_or_decoded_as_kio,
    kio_decode,
    mutate,
    tagged,
    unknown_tags,
    uvarint,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer

from raftka.protocol.api import (
    FrameError,
    encode_response,
    request_type,
    response_type,
    schema_module,
)
from raftka.protocol.fetch_codec import (
    FIRST_FLEXIBLE_VERSION,
    FIRST_VERSION,
    LAST_VERSION,
    FetchAnswer,
    FetchedPartition,
    FetchedTopic,
    decode_fetch_request,
    encode_fetch_response,
)

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
INT8 = st.integers(-(2**7), 2**7 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Long enough, now and then, for a compact length of more than one varint byte.
NAMES = st.text(max_size=150)
RECORDS = st.none() | st.binary(max_size=300)
ERRORS = st.sampled_from(list(ErrorCode))


def kio_frame(correlation_id: int, response: Any) -> bytes:
    """The frame as kio's writer alone writes it."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_type = response.__header_schema__
    entity_writer(header_type)(buf, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    frame = bytearray(buf.getvalue())
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


@st.composite
def fetch_responses(draw: st.DrawFn, version: int, tagged: bool = False) -> Any:
    module = schema_module(response_type(1, version))

    def partition() -> Any:
        values: dict[str, Any] = {
            "partition_index": draw(INT32),
            "error_code": draw(ERRORS),
            "high_watermark": draw(INT64),
            "last_stable_offset": draw(INT64),
            "aborted_transactions": draw(
                st.none()
                | st.lists(
                    st.builds(module.AbortedTransaction, producer_id=INT64, first_offset=INT64),
                    max_size=3,
                ).map(tuple)
            ),
            "records": draw(RECORDS),
        }
        if version >= 5:
            values["log_start_offset"] = draw(INT64)
        if version >= 11:
            values["preferred_read_replica"] = draw(INT32)
        if tagged and draw(st.booleans()):
            values["current_leader"] = module.LeaderIdAndEpoch(
                leader_id=draw(INT32), leader_epoch=draw(INT32)
            )
        return module.PartitionData(**values)

    topics = tuple(
        module.FetchableTopicResponse(
            topic=draw(NAMES),
            partitions=tuple(partition() for _ in range(draw(st.integers(0, 4)))),
        )
        for _ in range(draw(st.integers(0, 3)))
    )
    values: dict[str, Any] = {
        "throttle_time": datetime.timedelta(milliseconds=draw(st.integers(0, 2**31 - 1))),
        "responses": topics,
    }
    if version >= 7:
        values["error_code"] = draw(ERRORS)
        values["session_id"] = draw(INT32)
    return module.FetchResponse(**values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), INT32)
def test_every_version_is_written_as_kio_writes_it(data: st.DataObject, correlation_id: int):
    for version in VERSIONS:
        response = data.draw(fetch_responses(version))
        assert type(response) is response_type(1, version)
        expected = kio_frame(correlation_id, response)
        assert encode_fetch_response(correlation_id, response) == expected, version
        assert encode_response(correlation_id, response) == expected, version


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fetch_responses(LAST_VERSION, tagged=True), INT32)
def test_a_partition_with_a_tagged_field_is_left_to_kio(response: Any, correlation_id: int):
    tagged = any(
        p.current_leader.leader_id != -1 or p.current_leader.leader_epoch != -1
        for t in response.responses
        for p in t.partitions
    )
    fast = encode_fetch_response(correlation_id, response)
    assert (fast is None) == tagged
    assert encode_response(correlation_id, response) == kio_frame(correlation_id, response)


@st.composite
def fetch_answers(draw: st.DrawFn, version: int) -> FetchAnswer:
    """What the Fetch handler answers: plain objects, records never null, no throttle."""
    module = schema_module(response_type(1, version))

    def partition() -> FetchedPartition:
        p = FetchedPartition(draw(INT32))
        p.error_code = draw(ERRORS)
        p.high_watermark = draw(INT64)
        p.last_stable_offset = draw(INT64)
        if version >= 5:
            p.log_start_offset = draw(INT64)
        p.aborted_transactions = draw(
            st.none()
            | st.lists(
                st.builds(module.AbortedTransaction, producer_id=INT64, first_offset=INT64),
                max_size=3,
            ).map(tuple)
        )
        if version >= 11:
            p.preferred_read_replica = draw(INT32)
        p.records = draw(st.binary(max_size=300))
        return p

    topics = [
        FetchedTopic(
            draw(NAMES),
            None,
            [partition() for _ in range(draw(st.integers(0, 4)))],
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    if version >= 7:
        return FetchAnswer(version, draw(ERRORS), draw(INT32), topics)
    return FetchAnswer(version, 0, 0, topics)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), INT32)
def test_the_handlers_answer_is_written_as_kio_writes_its_entity(
    data: st.DataObject, correlation_id: int
):
    """The plain answer, its kio entity (for what needs one) and the frames of both agree."""
    for version in VERSIONS:
        answer = data.draw(fetch_answers(version))
        entity = answer.entity(schema_module(response_type(1, version)))
        assert type(entity) is response_type(1, version)
        assert entity.throttle_time == datetime.timedelta(0)
        partitions = [p for t in answer.responses for p in t.partitions]
        assert [p for t in entity.responses for p in t.partitions] == [
            schema_module(type(entity)).PartitionData(
                **{
                    name: getattr(p, name)
                    for name in (
                        "partition_index",
                        "error_code",
                        "high_watermark",
                        "last_stable_offset",
                        "aborted_transactions",
                        "records",
                    )
                },
                **({"log_start_offset": p.log_start_offset} if version >= 5 else {}),
                **({"preferred_read_replica": p.preferred_read_replica} if version >= 11 else {}),
            )
            for p in partitions
        ], version
        assert [t.topic for t in entity.responses] == [t.topic for t in answer.responses]
        assert answer.encode(correlation_id) == kio_frame(correlation_id, entity), version


# -- requests ---------------------------------------------------------------------------------


# Unknown tagged fields of the request header (Fetch v12 defines none there).
UNKNOWN_TAGS = unknown_tags(0, 40)


@st.composite
def fetch_requests(draw: st.DrawFn, version: int) -> Any:
    module = schema_module(request_type(1, version))

    def partition() -> Any:
        values: dict[str, Any] = {
            "partition": draw(INT32),
            "fetch_offset": draw(INT64),
            "partition_max_bytes": draw(INT32),
        }
        if version >= 5:
            values["log_start_offset"] = draw(INT64)
        if version >= 9:
            values["current_leader_epoch"] = draw(INT32)
        if version >= 12:
            values["last_fetched_epoch"] = draw(INT32)
        return module.FetchPartition(**values)

    values: dict[str, Any] = {
        "replica_id": draw(INT32),
        "max_wait": datetime.timedelta(milliseconds=draw(INT32)),
        "min_bytes": draw(INT32),
        "max_bytes": draw(INT32),
        "isolation_level": draw(INT8),
        "topics": tuple(
            module.FetchTopic(
                topic=draw(NAMES),
                partitions=tuple(partition() for _ in range(draw(st.integers(0, 3)))),
            )
            for _ in range(draw(st.integers(0, 3)))
        ),
    }
    if version >= 7:
        values["session_id"] = draw(INT32)
        values["session_epoch"] = draw(INT32)
        values["forgotten_topics_data"] = tuple(
            module.ForgottenTopic(
                topic=draw(NAMES), partitions=tuple(draw(st.lists(INT32, max_size=3)))
            )
            for _ in range(draw(st.integers(0, 2)))
        )
    if version >= 11:
        values["rack_id"] = draw(NAMES)
    if version >= 12:
        values["cluster_id"] = draw(st.none() | NAMES)
    return module.FetchRequest(**values)


def _header(version: int, correlation_id: int, client_id: str | None) -> bytes:
    header_type = RequestHeaderV2 if version >= FIRST_FLEXIBLE_VERSION else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_type)(
        buf,
        header_type(
            request_api_key=1,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    return buf.getvalue()


@st.composite
def request_frames(draw: st.DrawFn) -> tuple[int, bytes]:
    """(version, frame) of a random Fetch request written by kio."""
    version = draw(st.sampled_from(VERSIONS))
    request = draw(fetch_requests(version))
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    return version, _header(version, draw(INT32), draw(st.none() | NAMES)) + buf.getvalue()


def _decode_as_kio(frame: bytes, version: int) -> tuple[Any, Any]:
    """`decode_fetch_request`, its result rebuilt as kio's entities of `version` from the
    fields the version has (so any difference shows in the comparison with kio's)."""
    header, request = decode_fetch_request(frame, version)
    for entity in (header, request, *request.topics, *request.forgotten_topics_data):
        assert type(entity).__slots__  # plain slotted classes, nothing copied per field
    module = schema_module(request_type(1, version))

    def partition(p: Any) -> Any:
        values = {
            "partition": p.partition,
            "fetch_offset": p.fetch_offset,
            "partition_max_bytes": p.partition_max_bytes,
        }
        if version >= 5:
            values["log_start_offset"] = p.log_start_offset
        else:
            assert p.log_start_offset == -1
        if version >= 9:
            values["current_leader_epoch"] = p.current_leader_epoch
        else:
            assert p.current_leader_epoch == -1
        if version >= 12:
            values["last_fetched_epoch"] = p.last_fetched_epoch
        else:
            assert p.last_fetched_epoch == -1
        return module.FetchPartition(**values)

    values: dict[str, Any] = {
        "replica_id": request.replica_id,
        "max_wait": request.max_wait,
        "min_bytes": request.min_bytes,
        "max_bytes": request.max_bytes,
        "isolation_level": request.isolation_level,
        "topics": tuple(
            module.FetchTopic(topic=t.topic, partitions=tuple(partition(p) for p in t.partitions))
            for t in request.topics
        ),
    }
    if version >= 7:
        values["session_id"] = request.session_id
        values["session_epoch"] = request.session_epoch
        values["forgotten_topics_data"] = tuple(
            module.ForgottenTopic(topic=t.topic, partitions=t.partitions)
            for t in request.forgotten_topics_data
        )
    else:
        assert (request.session_id, request.session_epoch) == (0, -1)
        assert request.forgotten_topics_data == ()
    if version >= 11:
        values["rack_id"] = request.rack_id
    else:
        assert request.rack_id == ""
    if version >= 12:
        values["cluster_id"] = request.cluster_id
    else:
        assert request.cluster_id is None
    header_type = RequestHeaderV2 if version >= FIRST_FLEXIBLE_VERSION else RequestHeaderV1
    kio_header = header_type(
        request_api_key=header.request_api_key,
        request_api_version=header.request_api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
    )
    return kio_header, module.FetchRequest(**values)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_frames())
def test_a_request_decodes_as_kio_decodes_it(version_frame: tuple[int, bytes]) -> None:
    version, frame = version_frame
    assert _decode_as_kio(frame, version) == kio_decode(frame)


def _flexible_body(request: Any, draw_tags: Any) -> bytes:
    """A Fetch v12 body written field by field, with the tagged fields `draw_tags` gives
    after every structure Kafka allows them (the body's beside its cluster id, tag 0); with
    none it is byte for byte what kio writes."""

    def compact(value: str) -> bytes:
        encoded = value.encode()
        return uvarint(len(encoded) + 1) + encoded

    out = struct.pack(
        ">iiiibii",
        request.replica_id,
        round(request.max_wait.total_seconds() * 1000),
        request.min_bytes,
        request.max_bytes,
        request.isolation_level,
        request.session_id,
        request.session_epoch,
    )
    out += uvarint(len(request.topics) + 1)
    for topic in request.topics:
        out += compact(topic.topic) + uvarint(len(topic.partitions) + 1)
        for p in topic.partitions:
            out += struct.pack(
                ">iiqiqi",
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes,
            )
            out += tagged(draw_tags(UNKNOWN_TAGS))
        out += tagged(draw_tags(UNKNOWN_TAGS))
    out += uvarint(len(request.forgotten_topics_data) + 1)
    for topic in request.forgotten_topics_data:
        out += compact(topic.topic) + uvarint(len(topic.partitions) + 1)
        out += struct.pack(f">{len(topic.partitions)}i", *topic.partitions)
        out += tagged(draw_tags(UNKNOWN_TAGS))
    out += compact(request.rack_id)
    body_tags = [(tag, value) for tag, value in draw_tags(UNKNOWN_TAGS) if tag != 0]
    if request.cluster_id is not None:
        body_tags.insert(0, (0, compact(request.cluster_id)))
    return out + tagged(body_tags)


@settings(deadline=None)
@given(fetch_requests(LAST_VERSION))
def test_the_test_writer_writes_what_kio_writes(request: Any) -> None:
    kio_body = io.BytesIO()
    entity_writer(type(request))(kio_body, request)
    assert _flexible_body(request, lambda _: []) == kio_body.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_unknown_tagged_fields_are_skipped_at_every_level(data: st.DataObject) -> None:
    """Kafka skips tagged fields it does not know (KIP-482); kio refuses them, so the frame
    with them decodes as kio decodes the frame without them."""
    request = data.draw(fetch_requests(LAST_VERSION))
    header = _header(LAST_VERSION, data.draw(INT32), data.draw(st.none() | NAMES))
    plain = header + _flexible_body(request, lambda _: [])
    # A kio header ends with its empty tagged field set.
    with_tags = header[:-1] + tagged(data.draw(UNKNOWN_TAGS)) + _flexible_body(request, data.draw)
    header_decoded, decoded = _decode_as_kio(with_tags, LAST_VERSION)
    assert (header_decoded, decoded) == kio_decode(plain)
    assert decoded == request


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_frames())
def test_every_truncation_is_refused(version_frame: tuple[int, bytes]) -> None:
    version, frame = version_frame
    for end in range(len(frame)):
        with pytest.raises(FrameError):
            decode_fetch_request(frame[:end], version)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_frames(), st.data())
def test_a_mutated_frame_is_refused_or_decoded_as_kio_decodes_it(
    version_frame: tuple[int, bytes], data: st.DataObject
) -> None:
    version, frame = version_frame
    assert_refused_or_decoded_as_kio(
        mutate(frame, data),
        lambda mutated: _decode_as_kio(mutated, version),
        _kafka_accepts_a_null_cluster_id,
    )


def _kafka_accepts_a_null_cluster_id(kio_refusal: str, decoded: tuple[Any, Any]) -> bool:
    """kio refuses a null ClusterId (the tagged field 0 of Fetch v12+), which Kafka's schema
    makes nullable (`nullableVersions: 12+`): `test_a_null_cluster_id_is_accepted`."""
    return "Unexpectedly read null" in kio_refusal and decoded[1].cluster_id is None


def test_a_null_cluster_id_is_accepted() -> None:
    """FetchRequest's ClusterId is nullable from v12 (`"nullableVersions": "12+"` in Kafka's
    FetchRequest.json), written null as a compact string of length -1 (a 0 byte)."""
    module = schema_module(request_type(1, LAST_VERSION))
    request = module.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            module.FetchTopic(
                topic="t",
                partitions=(
                    module.FetchPartition(
                        partition=0,
                        fetch_offset=5,
                        partition_max_bytes=1024,
                        log_start_offset=-1,
                        current_leader_epoch=-1,
                        last_fetched_epoch=-1,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
        cluster_id="c",
    )
    frame = _header(LAST_VERSION, 7, None) + _flexible_body(request, lambda _: [])
    # The body ends with its tagged fields: one (tag 0, 2 bytes: the compact string "c").
    assert frame.endswith(b"\x01\x00\x02\x02c")
    null_frame = frame[: -len(b"\x01\x00\x02\x02c")] + b"\x01\x00\x01\x00"
    with pytest.raises(FrameError, match="Unexpectedly read null"):
        kio_decode(null_frame)  # kio's own refusal, not Kafka's
    _, decoded = decode_fetch_request(null_frame, LAST_VERSION)
    assert decoded.cluster_id is None
    assert _decode_as_kio(null_frame, LAST_VERSION)[1] == dataclasses.replace(
        request, cluster_id=None
    )
