"""The many-connections load's pure parts: the Produce frames it stamps decode as the broker
decodes requests, the error code is read where kio writes it, the Produce version it picks,
and how connections and their answers are counted (no broker)."""

from __future__ import annotations

import os
import resource
from array import array
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from raftka.broker.tools.bench_conn_runs import connection_targets, steady_requests_of
from raftka.broker.tools.bench_connections import (
    check_descriptors,
    open_file_limit_of,
    raise_open_file_limit,
)
from raftka.broker.tools.bench_frames import (
    FrameBuildError,
    ProduceTemplate,
    api_versions_ranges,
    decode_produce_response,
    produce_version,
    response_error_code,
)
from raftka.broker.tools.bench_workers import LATENCY_HEADER
from raftka.protocol.api import (
    build,
    decode_request,
    encode_response,
    read_prefix,
    response_type,
    schema_module,
)
from raftka.protocol.batch_builder import decode_batch
from raftka.protocol.records import validate_produce_records

LONG_TOPIC = "t" * 200  # its compact string length takes two varint bytes


@pytest.mark.parametrize("version", [3, 7, 8, 9, 10, 12])
@pytest.mark.parametrize("topic", ["bench", LONG_TOPIC])
def test_a_stamped_frame_decodes_as_the_broker_decodes_requests(version: int, topic: str) -> None:
    template = ProduceTemplate.build(version, topic, 3, -1, 100, timeout_ms=1500)
    prefix_value = LATENCY_HEADER.pack(1_700_000_000_123_456_789, 42)
    frame = template.stamp(12345, 1_700_000_000_123, prefix_value)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    body = bytes(frame[4:])
    prefix = read_prefix(body)
    assert (prefix.api_key, prefix.api_version, prefix.correlation_id) == (0, version, 12345)
    header, request = decode_request(body, prefix)
    assert header.client_id == "raftka-bench-connections"
    assert request.acks == -1 and request.timeout == timedelta(milliseconds=1500)
    ((topic_data,),) = [request.topic_data]
    assert topic_data.name == topic
    (partition,) = topic_data.partition_data
    assert partition.index == 3
    # The broker's own checks: CRC, sizes, one batch from v3.
    validate_produce_records(partition.records, 1_000_000, produce_version=version)
    (record,) = decode_batch(partition.records)
    assert record.timestamp_ms == 1_700_000_000_123
    assert len(record.value) == 100 and record.value.startswith(prefix_value)
    # Stamping again changes only what it stamps.
    again = template.stamp(1, 0, b"")
    assert len(again) == len(frame) and again != frame


@pytest.mark.parametrize("version", [3, 8, 9, 12])
@pytest.mark.parametrize("topic", ["bench", LONG_TOPIC])
def test_the_error_code_is_read_where_kio_writes_it(version: int, topic: str) -> None:
    template = ProduceTemplate.build(version, topic, 0, 1, 16)
    entity = response_type(0, version)
    nested = schema_module(entity)
    response = build(
        entity,
        responses=(
            build(
                nested.TopicProduceResponse,
                name=topic,
                partition_responses=(
                    build(
                        nested.PartitionProduceResponse,
                        index=i32(0),
                        error_code=ErrorCode.not_leader_or_follower,
                        base_offset=i64(-1),
                        record_errors=(),
                    ),
                ),
            ),
        ),
        throttle_time=timedelta(0),
    )
    frame = encode_response(77, response)[4:]
    assert response_error_code(frame, template) == ErrorCode.not_leader_or_follower.value
    decoded = decode_produce_response(frame, version)
    assert decoded.responses[0].partition_responses[0].error_code == (
        ErrorCode.not_leader_or_follower
    )


def test_produce_version_prefers_v9_and_refuses_what_it_cannot_send() -> None:
    assert produce_version(3, 9) == 9
    assert produce_version(3, 13) == 9
    assert produce_version(3, 8) == 8
    assert produce_version(10, 13) == 12
    with pytest.raises(FrameBuildError):
        produce_version(13, 13)
    with pytest.raises(FrameBuildError):
        produce_version(0, 2)


def test_api_versions_ranges_of_an_answer() -> None:
    entity = response_type(18, 3)
    nested = schema_module(entity)
    keys = (
        build(nested.ApiVersion, api_key=i16(0), min_version=i16(3), max_version=i16(9)),
        build(nested.ApiVersion, api_key=i16(18), min_version=i16(0), max_version=i16(3)),
    )
    answer = build(entity, error_code=ErrorCode.none, api_keys=keys, throttle_time=timedelta(0))
    assert api_versions_ranges(encode_response(5, answer)[4:]) == {0: (3, 9), 18: (0, 3)}
    refused = build(
        entity, error_code=ErrorCode.unsupported_version, api_keys=keys, throttle_time=timedelta(0)
    )
    with pytest.raises(FrameBuildError):
        api_versions_ranges(encode_response(5, refused)[4:])


def test_connections_go_round_the_partitions_to_their_leaders() -> None:
    leaders = {1: ("h", 2), 0: ("h", 1)}
    assert connection_targets(leaders, 5) == [
        (0, "h", 1),
        (1, "h", 2),
        (0, "h", 1),
        (1, "h", 2),
        (0, "h", 1),
    ]


def test_steady_requests_count_answers_inside_the_part_and_latency_after_warmup() -> None:
    ms = 1_000_000
    results = [
        {
            "send_ns": array("q", [0, 1000 * ms, 2000 * ms]),
            "latency_us": array("q", [1_000, 2_000, 1_500_000]),
            "answer_ns": array("q", [1 * ms, 1002 * ms, 3500 * ms]),
        }
    ]
    steady = steady_requests_of(results, 1000 * ms, 2.0)
    assert steady["latency_ms"]["count"] == 2 and steady["latency_ms"]["max"] == 1500.0
    assert steady["answered_per_s"] == 0.5  # only the answer at 1002 ms is inside [1, 3) s


def test_open_file_limits() -> None:
    soft = raise_open_file_limit(64)
    assert soft >= 64
    assert open_file_limit_of(os.getpid()) == soft
    assert open_file_limit_of(2**31 - 1) is None


def test_descriptor_limits_that_would_stop_the_connections_are_named() -> None:
    assert check_descriptors(10, (os.getpid(),)) == []
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard >= 10**8:
        pytest.skip("no hard limit below 10^8 descriptors here")
    (mine, broker) = check_descriptors(10**8, (os.getpid(),), 10**8)
    assert "this process may open" in mine and "--producers" in mine
    assert f"broker process {os.getpid()}" in broker
