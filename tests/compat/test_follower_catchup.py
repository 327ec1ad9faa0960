"""A follower that falls behind the leader's log start catches up by snapshot: while it is
stopped, retention deletes segments on the leader; restarted, it restarts its log at the
leader's log start, and once it leads, consumers read everything from there."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from clients import create_topic, produce, wait_until, watermarks
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from harness import ClusterNode
from test_cluster import raw_metadata, read_partition, state_from_any

pytestmark = pytest.mark.timeout(180)

RECORDS = 40
VALUE_BYTES = 700  # with segment.bytes=1024 every batch (one record) gets its own segment
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELECTION_NOT_NEEDED = 84


def segment_bases(node: ClusterNode, topic: str) -> list[int]:
    folder = Path(node.data_dir) / f"{topic}-0"
    return sorted(int(p.stem) for p in folder.glob("*.log"))


def _elected(admin: AdminClient, tp: TopicPartition) -> bool:
    """One preferred election of `tp`: True once done (or not needed), False while the
    preferred replica is not yet in sync; any other answer fails."""
    (error,) = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=35).values()
    if isinstance(error, KafkaException):
        error = error.args[0]
    if error is None or error.code() == ELECTION_NOT_NEEDED:
        return True
    if error.code() == PREFERRED_LEADER_NOT_AVAILABLE:
        return False
    raise AssertionError(f"ElectLeaders of {tp.topic}-{tp.partition} answered {error}")


def test_follower_below_the_leader_log_start_catches_up_by_snapshot(cluster_factory) -> None:
    cluster = cluster_factory(
        config={"log.retention.check.interval.ms": "300", "auto.leader.rebalance.enable": "false"}
    )
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    create_topic(
        cluster.bootstrap,
        topic,
        partitions=1,
        replication_factor=3,
        config={"segment.bytes": "1024", "retention.bytes": "3000"},
    )
    state = wait_until(
        lambda: (s := state_from_any(cluster.running(), topic)) and len(s["isr"]) == 3 and s,
        30,
        f"ISR of 3 for {topic}",
    )
    # The replica that falls behind is the preferred one, so ElectLeaders can later hand it
    # leadership; if it leads now, stopping it moves leadership away first.
    (described,) = [t for t in raw_metadata(cluster.bootstrap, [topic]).topics]
    preferred = int(described.partitions[0].replica_nodes[0])
    lagging = cluster.node(preferred)
    lagging.stop()
    wait_until(
        lambda: state_from_any(cluster.running(), topic)["leader"] not in (-1, preferred),
        30,
        f"leadership of {topic} away from the stopped broker {preferred}",
    )
    del state

    values = [f"{i:04d}".encode() + b"v" * VALUE_BYTES for i in range(RECORDS)]
    result = produce(
        cluster.bootstrap,
        topic,
        [{"value": v, "partition": 0} for v in values],
        acks="all",
        batch_num_messages=1,
        linger_ms=0,
        max_in_flight=1,
    )
    offsets = {r.offset: values[r.index] for r in result.reports}
    assert all(r.error is None for r in result.reports), result.reports
    low = wait_until(
        lambda: (w := watermarks(cluster.bootstrap, topic)) and w[0] >= 10 and w[0],
        30,
        "retention to delete at least 10 segments on the leader",
    )

    lagging.start()
    wait_until(
        lambda: lagging.node_id in state_from_any(cluster.running(), topic)["isr"],
        30,
        f"broker {lagging.node_id} back in the ISR of {topic}",
    )
    # It did not copy the deleted records: its log starts at the leader's log start.
    assert segment_bases(lagging, topic)[0] >= low

    # Prove it holds the data: make it the leader and read everything from its log start.
    # A restarted broker that has not yet heard the leader's view lists the whole replica set
    # in sync, so the ISR above may come from it before the leader counts the replica; the
    # leader then refuses with PREFERRED_LEADER_NOT_AVAILABLE, as Kafka would, and the
    # election is asked again, as an operator would.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(
        lambda: _elected(admin, TopicPartition(topic, 0)),
        60,
        f"ElectLeaders to hand {topic} to broker {preferred}",
    )
    wait_until(
        lambda: state_from_any(cluster.running(), topic)["leader"] == preferred,
        30,
        f"broker {preferred} to lead {topic}",
    )
    start = watermarks(cluster.bootstrap, topic)[0]
    assert start >= low
    got = read_partition(cluster.bootstrap, topic)
    assert min(got) == start
    assert got == {o: v for o, v in offsets.items() if o >= start}
