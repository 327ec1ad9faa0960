"""DeleteRecords holds across a leader change: followers raise their log start to the
leader's, and DeleteRecords answers once the live replicas' log starts reached the offset,
so a new leader serves nothing below it (ListOffsets EARLIEST, a consumer from the
beginning). Past the request's timeout it answers REQUEST_TIMED_OUT."""

from __future__ import annotations

import datetime
import uuid

import pytest
from clients import (
    RawConnection,
    consume,
    create_topic,
    make_producer,
    wait_until,
    watermarks,
)
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient
from test_cluster import partition_state, wait_new_leader

pytestmark = pytest.mark.timeout(120)

RECORDS = 100
DELETE_BEFORE = 60
BATCH = 7  # 60 lies inside the batch [56, 62]
REQUEST_TIMED_OUT = 7


def raw_delete_records(bootstrap: str, topic: str, offset: int, timeout_ms: int) -> tuple[int, int]:
    """DeleteRecords v2 for partition 0 sent to exactly this broker: (error code, low
    watermark)."""
    from kio.schema.delete_records.v2.request import (
        DeleteRecordsPartition,
        DeleteRecordsRequest,
        DeleteRecordsTopic,
    )
    from kio.schema.delete_records.v2.response import DeleteRecordsResponse
    from kio.static.primitive import i32Timedelta

    request = DeleteRecordsRequest(
        topics=(
            DeleteRecordsTopic(
                name=topic,
                partitions=(DeleteRecordsPartition(partition_index=0, offset=offset),),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        answer = conn.recv_response(DeleteRecordsResponse)
    (p,) = answer.topics[0].partitions
    return int(p.error_code), int(p.low_watermark)


def test_deleted_records_stay_deleted_after_the_leader_is_killed(cluster_factory) -> None:
    cluster = cluster_factory()
    topic = f"delrec-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    before = wait_until(
        lambda: (
            (s := partition_state(cluster.nodes[0].bootstrap, topic)) and len(s["isr"]) == 3 and s
        ),
        15,
        "ISR of 3",
    )
    producer = make_producer(cluster.bootstrap, acks="all", linger_ms=50)
    for start in range(0, RECORDS, BATCH):
        for i in range(start, min(start + BATCH, RECORDS)):
            producer.produce(topic, value=b"r%d" % i, partition=0)
        assert producer.flush(30) == 0
    # With no time to wait, the followers cannot have raised their log starts yet: the
    # answer is REQUEST_TIMED_OUT, and the deletion still proceeds on the leader.
    leader_bootstrap = cluster.node(before["leader"]).bootstrap
    assert raw_delete_records(leader_bootstrap, topic, 30, timeout_ms=0) == (REQUEST_TIMED_OUT, -1)
    assert watermarks(leader_bootstrap, topic, 0, timeout=15) == (30, RECORDS)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = TopicPartition(topic, 0, DELETE_BEFORE)
    deleted = admin.delete_records([wanted], operation_timeout=20)[wanted].result(timeout=30)
    assert deleted.low_watermark == DELETE_BEFORE

    # Right after the answer (no waiting for a heartbeat), the leader dies.
    victim = cluster.node(before["leader"])
    survivors = [n for n in cluster.nodes if n is not victim]
    victim.kill()
    after, _ = wait_new_leader(survivors, topic, before["leader"], before["epoch"], timeout=15)
    new_leader = cluster.node(after["leader"])

    low, high = watermarks(new_leader.bootstrap, topic, 0, timeout=15)
    assert (low, high) == (DELETE_BEFORE, RECORDS), (
        f"node {after['leader']} now leads with log start {low}: records below "
        f"{DELETE_BEFORE} came back"
    )
    bootstrap = ",".join(n.bootstrap for n in survivors)
    got = consume(bootstrap, topic, [0], start=OFFSET_BEGINNING, timeout=30)[0]
    assert [m.offset() for m in got] == list(range(DELETE_BEFORE, RECORDS))
    assert [m.value() for m in got] == [b"r%d" % i for i in range(DELETE_BEFORE, RECORDS)]
