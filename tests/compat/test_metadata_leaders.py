"""Which leader a broker names for a partition it does not host, while that partition's
leader is out of touch for a moment (paused, as a loaded machine pauses it).

librdkafka keeps, per partition, the Metadata answer with the newest leader epoch
(KIP-320), an answer with epoch -1 always, and its admin client takes a cached leader -1 as
final: DeleteRecords answers "No leaders found" (_NOENT) without asking Metadata again. So a
broker must not forget a leader because the leader was slow to answer it: the leader it
named stands until a newer epoch or the leader says it no longer leads.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import RawConnection, make_producer, retry_retriable, wait_until
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from harness import ClusterProcess
from test_cluster import raw_metadata

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("metadata_leaders")]

#: Longer than a broker waits for another's answer about the partitions it leads (2 s),
#: shorter than an election timeout would matter: the partition has one replica.
LEADER_OUT_OF_TOUCH_S = 4.0


@pytest.fixture(scope="module")
def cluster(module_brokers: Brokers) -> ClusterProcess:
    return module_brokers.cluster(3, name="leaders")


def create_on(cluster: ClusterProcess, replicas: list[int]) -> str:
    """A one-partition topic on exactly `replicas` (raw CreateTopics: confluent-kafka
    refuses a NewTopic with a replica assignment)."""
    from kio.schema.create_topics.v7.request import (
        CreatableReplicaAssignment,
        CreatableTopic,
        CreateTopicsRequest,
    )
    from kio.schema.create_topics.v7.response import CreateTopicsResponse
    from kio.static.primitive import i16, i32

    topic = f"leaders-{uuid.uuid4().hex[:8]}"
    assignment = CreatableReplicaAssignment(
        partition_index=i32(0), broker_ids=tuple(i32(r) for r in replicas)
    )
    request = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=topic,
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                assignments=(assignment,),
                configs=(),
            ),
        )
    )

    def send() -> CreateTopicsResponse:
        with RawConnection(cluster.nodes[0].bootstrap, timeout=30) as conn:
            conn.send_request(request)
            return conn.recv_response(CreateTopicsResponse)

    (result,) = retry_retriable(send).topics
    assert result.error_code == 0, result
    return topic


def named_leader(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(error code, leader id, leader epoch) of partition 0 in this broker's Metadata."""
    md: Any = raw_metadata(bootstrap, [topic])
    (t,) = [t for t in md.topics if t.name == topic]
    (p,) = t.partitions
    return int(p.error_code), int(p.leader_id), int(p.leader_epoch)


def test_a_new_partitions_leader_is_named_by_every_broker_once_the_leader_knows(
    cluster: ClusterProcess,
) -> None:
    """The first answer a broker not hosting the partition gives after its leader was
    elected names that leader, not -1 until its next look at the other brokers."""
    topic = create_on(cluster, [1])
    leader = cluster.node(1)
    _, _, epoch = wait_until(
        lambda: (answer := named_leader(leader.bootstrap, topic))[1] == 1 and answer,
        30,
        "broker 1 to lead the new partition",
    )
    for node in (cluster.node(2), cluster.node(3)):
        assert named_leader(node.bootstrap, topic) == (0, 1, epoch), node


def test_a_leader_out_of_touch_for_a_moment_is_still_named_and_delete_records_reaches_it(
    cluster: ClusterProcess,
) -> None:
    """Brokers 2 and 3 host nothing of the topic: they name the leader the leader told them
    of. While that leader (broker 1, the only replica) does not answer for longer than they
    wait for it, they still name it with the same epoch; DeleteRecords asked of broker 3
    then finds the leader, and deletes once the leader is back."""
    topic = create_on(cluster, [1])
    producer = make_producer(cluster.nodes[0].bootstrap, acks="all")
    for i in range(10):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    others = [cluster.node(2), cluster.node(3)]
    _, _, epoch = wait_until(
        lambda: (answer := named_leader(others[0].bootstrap, topic))[1] == 1 and answer,
        30,
        "broker 2 to name broker 1 as the leader",
    )
    wait_until(
        lambda: named_leader(others[1].bootstrap, topic) == (0, 1, epoch),
        30,
        "broker 3 to name broker 1 as the leader",
    )
    leader = cluster.node(1)
    answers = set()
    leader.pause()
    try:
        until = time.monotonic() + LEADER_OUT_OF_TOUCH_S
        while time.monotonic() < until:
            answers.update((n.node_id, named_leader(n.bootstrap, topic)) for n in others)
            time.sleep(0.2)
        # Its first Metadata request goes to its bootstrap broker, the only one it knows.
        admin = AdminClient({"bootstrap.servers": others[1].bootstrap})
        deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
        time.sleep(1)  # the lookup done, the request waits for the paused leader
    finally:
        leader.resume()
    assert answers == {(2, (0, 1, epoch)), (3, (0, 1, epoch))}, answers
    assert next(iter(deleted.values())).result(30).low_watermark == 4
