"""The hand-written Fetch response encoder writes what kio's writer writes, on every version
it serves, and leaves to kio the responses it does not write (v12 tagged fields)."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from raftka.protocol.api import encode_response, response_type, schema_module
from raftka.protocol.fetch_codec import FIRST_VERSION, LAST_VERSION, encode_fetch_response

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
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
