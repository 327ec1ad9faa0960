"""The Produce codec agrees with kio on every version it serves, and refuses malformed
frames with FrameError alone.

Requests: frames kio writes (with tagged fields the test adds where Kafka allows them) decode
to what kio decodes: the decoder's plain classes, turned into kio's entities of the version
field by field, equal kio's own. Responses: the bytes equal kio's bytes of the response built as
the Produce handler builds it.
"""

from __future__ import annotations

import datetime
import importlib
import io
import struct
from typing import Any, NamedTuple, cast

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

from raftka.broker.handlers.produce import ProduceAnswers
from raftka.broker.replica import AppendResult
from raftka.protocol import produce_codec
from raftka.protocol.api import (
    FrameError,
    build,
    encode_response,
    request_type,
    response_type,
    schema_module,
)
from raftka.protocol.produce_codec import (
    FIRST_FLEXIBLE_VERSION,
    FIRST_VERSION,
    LAST_VERSION,
    TOPIC_LAYOUTS_MAX,
    PartitionAnswer,
    decode_produce_request,
    encode_produce_response,
)

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Long enough, now and then, for a compact length of more than one varint byte.
NAMES = st.text(max_size=150)
RECORDS = st.none() | st.binary(max_size=300)


# An unknown tagged field set: Produce requests define no tagged fields.
TAGGED = unknown_tags(0, 140)


def _header(version: int, correlation_id: int, client_id: str | None, tags: Any) -> bytes:
    """Request header v1, or v2 with its tagged fields on flexible versions, by hand: kio
    writes no unknown tagged fields."""
    out = struct.pack(">hhi", 0, version, correlation_id)
    if client_id is None:
        out += b"\xff\xff"
    else:
        encoded = client_id.encode()
        out += struct.pack(">h", len(encoded)) + encoded
    if version >= FIRST_FLEXIBLE_VERSION:
        out += tagged(tags)
    return out


@st.composite
def produce_requests(draw: st.DrawFn, version: int) -> Any:
    module = schema_module(request_type(0, version))  # type: ignore[arg-type]
    topics = draw(
        st.lists(
            st.tuples(NAMES, st.lists(st.tuples(INT32, RECORDS), max_size=4)),
            max_size=4,
        )
    )
    return module.ProduceRequest(
        transactional_id=draw(st.none() | NAMES),
        acks=draw(INT16),
        timeout=datetime.timedelta(milliseconds=draw(INT32)),
        topic_data=tuple(
            module.TopicProduceData(
                name=name,
                partition_data=tuple(
                    module.PartitionProduceData(index=index, records=records)
                    for index, records in partitions
                ),
            )
            for name, partitions in topics
        ),
    )


@st.composite
def frames(draw: st.DrawFn) -> tuple[int, bytes]:
    """(version, frame) of a random Produce request, its body written by kio, with no
    tagged fields: kio refuses unknown ones, where Kafka skips them."""
    version = draw(st.sampled_from(VERSIONS))
    request = draw(produce_requests(version))
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    header = _header(version, draw(INT32), draw(st.none() | NAMES), [])
    return version, header + buf.getvalue()


def _decode_as_kio(frame: bytes, version: int) -> tuple[Any, Any]:
    """`decode_produce_request`, its result rebuilt as kio's entities of `version` (each
    field as decoded, so any difference shows in the comparison with kio's decoding)."""
    header, request = decode_produce_request(frame, version)
    header_type = RequestHeaderV1 if version < FIRST_FLEXIBLE_VERSION else RequestHeaderV2
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    for entity in (header, request, *request.topic_data):
        assert type(entity).__slots__  # plain slotted classes, nothing copied per field
    kio_request = module.ProduceRequest(
        transactional_id=request.transactional_id,
        acks=request.acks,
        timeout=request.timeout,
        topic_data=tuple(
            module.TopicProduceData(
                name=topic.name,
                partition_data=tuple(
                    module.PartitionProduceData(index=p.index, records=p.records)
                    for p in topic.partition_data
                ),
            )
            for topic in request.topic_data
        ),
    )
    kio_header = header_type(
        request_api_key=header.request_api_key,
        request_api_version=header.request_api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
    )
    return kio_header, kio_request


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_a_request_decodes_as_kio_decodes_it(version_frame: tuple[int, bytes]) -> None:
    version, frame = version_frame
    header, request = _decode_as_kio(frame, version)
    kio_header, kio_request = kio_decode(frame)
    assert (header, request) == (kio_header, kio_request)
    assert type(header) is type(kio_header) and type(request) is type(kio_request)
    for topic, kio_topic in zip(request.topic_data, kio_request.topic_data, strict=True):
        assert type(topic) is type(kio_topic)
        for partition in topic.partition_data:
            assert partition.records is None or type(partition.records) is bytes


def _flexible_frame(version: int, request: Any, header_tags: Any, draw_tags: st.DrawFn) -> bytes:
    """A flexible request written field by field, with unknown tagged fields at every level
    where Kafka allows them; with none it is byte for byte what kio writes."""

    def compact(value: bytes | None) -> bytes:
        return b"\0" if value is None else uvarint(len(value) + 1) + value

    tid = request.transactional_id
    out = compact(None if tid is None else tid.encode())
    out += struct.pack(">hi", request.acks, request.timeout // datetime.timedelta(milliseconds=1))
    out += uvarint(len(request.topic_data) + 1)
    for topic in request.topic_data:
        out += compact(topic.name.encode()) + uvarint(len(topic.partition_data) + 1)
        for partition in topic.partition_data:
            out += struct.pack(">i", partition.index) + compact(partition.records)
            out += tagged(draw_tags(TAGGED))
        out += tagged(draw_tags(TAGGED))
    out += tagged(draw_tags(TAGGED))
    return _header(version, 11, "client", header_tags) + out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_unknown_tagged_fields_are_skipped_at_every_level(data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(range(FIRST_FLEXIBLE_VERSION, LAST_VERSION + 1)))
    request = data.draw(produce_requests(version))
    frame = _flexible_frame(version, request, data.draw(TAGGED), data.draw)
    header, decoded = _decode_as_kio(frame, version)
    untagged = _flexible_frame(version, request, [], lambda _: [])
    assert (header, decoded) == kio_decode(untagged)
    assert decoded == request


@settings(deadline=None)
@given(frames())
def test_the_test_writer_writes_what_kio_writes(version_frame: tuple[int, bytes]) -> None:
    version, frame = version_frame
    if version < FIRST_FLEXIBLE_VERSION:
        return
    header, request = kio_decode(frame)
    written = _flexible_frame(version, request, [], lambda _: [])
    kio_body = io.BytesIO()
    entity_writer(type(request))(kio_body, request)
    assert written.endswith(kio_body.getvalue())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_every_truncation_is_refused(version_frame: tuple[int, bytes]) -> None:
    version, frame = version_frame
    for end in range(len(frame)):
        with pytest.raises(FrameError):
            decode_produce_request(frame[:end], version)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(), st.data())
def test_a_mutated_frame_is_refused_or_decoded_as_kio_decodes_it(
    version_frame: tuple[int, bytes], data: st.DataObject
) -> None:
    version, frame = version_frame
    assert_refused_or_decoded_as_kio(
        mutate(frame, data), lambda mutated: _decode_as_kio(mutated, version)
    )


def _legacy_v8(count_format: str, *fields: Any) -> bytes:
    header = struct.pack(">hhih", 0, 8, 1, -1)
    return header + struct.pack(count_format, *fields)


@pytest.mark.parametrize(
    ("frame", "version", "message"),
    [
        # transactional_id null, acks, timeout, then 2^31 - 1 topics in a few bytes
        (_legacy_v8(">hhii", -1, 1, 1000, 2**31 - 1), 8, "topic_data .* 2147483647 elements"),
        (_legacy_v8(">hhii", -1, 1, 1000, -1), 8, "topic_data .* -1 elements"),
        (_legacy_v8(">hhiihi", -1, 1, 1000, 1, 0, 2**31 - 1), 8, "partition_data"),
        (_legacy_v8(">hhiihiii", -1, 1, 1000, 1, 0, 1, 0, 2**31 - 1), 8, "records .* bytes"),
        (_legacy_v8(">hhiihiii", -1, 1, 1000, 1, 0, 1, 0, -2), 8, "records .* -2 bytes"),
        (_legacy_v8(">hhiihi", -1, 1, 1000, 1, -1, 0), 8, "topic name .* -1 bytes"),
        (_legacy_v8(">h", 32767), 8, "transactional_id .* 32767 bytes"),
        (_legacy_v8(">h", -2), 8, "transactional_id .* -2 bytes"),
        (struct.pack(">hhih", 0, 8, 1, 2000), 8, "client_id .* 2000 bytes"),
        (struct.pack(">hhih", 0, 8, 1, -3), 8, "client_id .* -3 bytes"),
        (struct.pack(">hhi", 0, 8, 1), 8, "shorter than a request header"),
        # v9: a 5-byte varint of 2^35 - 1 topics, then a 6-byte varint
        (
            struct.pack(">hhihb", 0, 9, 1, -1, 0) + b"\0\0\1\0\0\0\0" + b"\xff" * 4 + b"\x7f",
            9,
            "topic_data",
        ),
        (
            struct.pack(">hhihb", 0, 9, 1, -1, 0) + b"\0\0\1\0\0\0\0" + b"\x80" * 5 + b"\x01",
            9,
            "longer than 5 bytes",
        ),
        (struct.pack(">hhih", 0, 9, 1, -1) + b"\xff\xff\xff\xff\x0f", 9, "tagged fields"),
        (struct.pack(">hhih", 0, 9, 1, -1) + b"\x01\x00\xff\xff\xff\x7f", 9, "tagged field"),
        (struct.pack(">hhihb", 0, 9, 1, -1, 0) + b"\xff\xff\xff\x7f", 9, "transactional_id"),
        (struct.pack(">hhihb", 0, 9, 1, -1, 0) + b"\0\0\1\0\0\0\0\0", 9, "topic_data .* -1"),
        (
            struct.pack(">hhihb", 0, 9, 1, -1, 0) + b"\0\0\1\0\0\0\0\2\0\1\0\0",
            9,
            "topic name .* -1 bytes",
        ),
        (struct.pack(">hhih", 0, 8, 1, 2) + b"\xc3\x28", 8, "client_id at 10 is not UTF-8"),
        (struct.pack(">hhih", 0, 2, 1, -1), 2, "Produce v2 is not decoded here"),
        (struct.pack(">hhih", 1, 9, 1, -1), 9, "api key 1 v9 is not Produce v9"),
        (struct.pack(">hhih", 0, 9, 1, -1), 8, "api key 0 v9 is not Produce v8"),
    ],
)
def test_a_malformed_frame_is_refused_by_name(frame: bytes, version: int, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_produce_request(frame, version)


class Answer(NamedTuple):
    error_code: int
    error_message: str | None
    base_offset: int
    log_append_time_ms: int | None
    log_start_offset: int
    record_errors: tuple[tuple[int, str | None], ...]


ANSWERS = st.builds(
    Answer,
    error_code=st.sampled_from(list(ErrorCode)),
    error_message=st.none() | NAMES,
    base_offset=INT64,
    # None, Kafka's -1, or a wall time up to the year 2100
    log_append_time_ms=st.none() | st.just(-1) | st.integers(0, 4_102_444_800_000),
    log_start_offset=INT64,
    record_errors=st.lists(st.tuples(INT32, st.none() | NAMES), max_size=3).map(tuple),
)
TOPIC_ANSWERS = st.lists(
    st.tuples(NAMES, st.lists(st.tuples(INT32, ANSWERS), max_size=4)), max_size=4
)


def _append_time(ms: int | None) -> datetime.datetime | None:
    if ms is None or ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _reference_response(
    correlation_id: int, version: int, answers: list[tuple[str, list[tuple[int, Any]]]]
) -> bytes:
    """The response as the Produce handler builds it with kio (handlers/produce.py
    `_response`), encoded by kio; but record errors are built only for versions that have
    them (the handler builds them first, which fails before v8 if there are any)."""
    entity = response_type(0, version)
    module = schema_module(entity)
    with_record_errors = hasattr(module, "BatchIndexAndErrorMessage")
    topic_responses = []
    for name, partition_answers in answers:
        responses = []
        for index, answer in partition_answers:
            record_errors = tuple(
                build(
                    module.BatchIndexAndErrorMessage,
                    batch_index=batch_index,
                    batch_index_error_message=message,
                )
                for batch_index, message in answer.record_errors
                if with_record_errors
            )
            responses.append(
                build(
                    module.PartitionProduceResponse,
                    index=index,
                    error_code=answer.error_code,
                    error_message=answer.error_message,
                    base_offset=answer.base_offset,
                    log_append_time=_append_time(answer.log_append_time_ms),
                    log_start_offset=answer.log_start_offset,
                    record_errors=record_errors,
                )
            )
        topic_responses.append(
            build(module.TopicProduceResponse, name=name, partition_responses=tuple(responses))
        )
    response = build(entity, responses=tuple(topic_responses), throttle_time=datetime.timedelta(0))
    return encode_response(correlation_id, response)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VERSIONS), INT32, TOPIC_ANSWERS)
def test_a_response_is_what_kio_writes(
    version: int, correlation_id: int, answers: list[tuple[str, list[tuple[int, Answer]]]]
) -> None:
    assert encode_produce_response(correlation_id, version, answers) == _reference_response(
        correlation_id, version, answers
    )


def test_the_brokers_append_results_are_answers() -> None:
    appended = AppendResult(base_offset=41, log_start_offset=3, log_append_time_ms=1_700_000)
    refused = AppendResult(
        ErrorCode.invalid_record, "one bad record", record_errors=((2, "no key"),)
    )
    typed: list[tuple[int, PartitionAnswer]] = [(0, appended), (1, refused)]
    answers = [("orders", typed)]
    for version in VERSIONS:
        assert encode_produce_response(5, version, answers) == _reference_response(
            5, version, answers
        )


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(VERSIONS), INT32, NAMES, INT32, ANSWERS)
def test_a_response_of_one_partition_is_what_kio_writes(
    version: int, correlation_id: int, name: str, index: int, answer: Answer
) -> None:
    """Most responses answer one batch of one partition."""
    answers = [(name, [(index, answer)])]
    assert encode_produce_response(correlation_id, version, answers) == _reference_response(
        correlation_id, version, answers
    )


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(VERSIONS), INT32, NAMES, INT32, ANSWERS)
def test_the_produce_handlers_answer_of_one_partition_is_what_kio_writes(
    version: int, correlation_id: int, name: str, index: int, answer: Answer
) -> None:
    """The Produce handler's answer (`ProduceAnswers`) writes a one-partition response
    itself, from the broker's own append result."""
    result = AppendResult(
        ErrorCode(answer.error_code),
        answer.error_message,
        answer.base_offset,
        answer.log_append_time_ms,
        answer.log_start_offset,
        tuple((i, m) for i, m in answer.record_errors if m is not None),
    )
    answers = [(name, [(index, result)])]
    typed: list[tuple[str, list[tuple[int, PartitionAnswer]]]] = [(name, [(index, result)])]
    assert ProduceAnswers(version, answers).encode(correlation_id) == _reference_response(
        correlation_id, version, typed
    )


def test_the_topic_names_remembered_for_responses_are_bounded() -> None:
    appended = AppendResult(base_offset=7, log_start_offset=0)
    names = [f"topic-{n}" for n in range(TOPIC_LAYOUTS_MAX + 10)]
    for name in names + names[:3]:
        answers = [(name, [(0, appended)])]
        assert ProduceAnswers(LAST_VERSION, answers).encode(1) == _reference_response(
            1, LAST_VERSION, [(name, [(0, cast(PartitionAnswer, appended))])]
        )
    assert len(produce_codec._ONE_PARTITION_LAYOUTS) <= TOPIC_LAYOUTS_MAX


def test_a_version_not_served_is_refused() -> None:
    with pytest.raises(ValueError, match="Produce v13 is not encoded here"):
        encode_produce_response(1, 13, [])
