"""DeleteRecords holds across a leader change: followers raise their log start to the
leader's, and DeleteRecords answers once the live replicas' log starts reached the offset,
so a new leader serves nothing below it (ListOffsets EARLIEST, a consumer from the
beginning)."""

from __future__ import annotations

import uuid

import pytest
from clients import consume, create_topic, make_producer, wait_until, watermarks
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient
from test_cluster import partition_state, wait_new_leader

pytestmark = pytest.mark.timeout(120)

RECORDS = 100
DELETE_BEFORE = 60
BATCH = 7  # 60 lies inside the batch [56, 62]


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
