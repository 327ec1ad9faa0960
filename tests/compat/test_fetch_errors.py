"""Fetch answers for partitions it cannot serve: an error code and empty records, never null
records (librdkafka then rejects the whole response: "invalid MessageSetSize -1")."""

from __future__ import annotations

import datetime

from clients import RawConnection
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.static.primitive import i8, i32, i64


def test_error_partitions_carry_empty_records(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    wanted = tuple(
        FetchPartition(
            partition=i32(index),
            current_leader_epoch=i32(-1),
            fetch_offset=i64(0),
            last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1),
            partition_max_bytes=i32(1 << 20),
        )
        for index in (0, 7)  # 7 does not exist
    )
    request = FetchRequest(
        replica_id=i32(-1),
        max_wait=datetime.timedelta(0),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(FetchTopic(topic=topic, partitions=wanted),),
        forgotten_topics_data=(),
        rack_id="",
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        response = conn.recv_response(FetchResponse)
    partitions = {int(p.partition_index): p for p in response.responses[0].partitions}
    assert partitions[0].error_code == ErrorCode.none
    assert partitions[7].error_code == ErrorCode.unknown_topic_or_partition
    assert partitions[7].records == b""
    assert partitions[0].records is not None
