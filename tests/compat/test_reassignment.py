"""Replica reassignment on a 4-broker cluster with real clients: a partition on {1,2,3} moves
to {2,3,4} (through the Java Admin's alterPartitionReassignments) while an idempotent acks=all
producer and a group consumer run, losing and duplicating nothing; a move is cancelled; bad
requests get Kafka's errors."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from brokers import Brokers
from clients import (
    RawConnection,
    consume,
    make_consumer,
    make_producer,
    retry_retriable,
    run_raftka,
    wait_until,
)
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from harness import ClusterProcess
from test_cluster import ContinuousProducer, check_acked_records, raw_metadata

# One worker runs the module: its tests share one 4-broker cluster.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("reassignment")]

THROTTLE_BYTES_PER_S = 20_000
CONFIG = {
    "auto.leader.rebalance.enable": "false",
    "log.segment.bytes": "1048576",
}


@pytest.fixture(scope="module")
def cluster(module_brokers: Brokers) -> ClusterProcess:
    return module_brokers.cluster(4, CONFIG, name="reassign")


def create_on(
    cluster: ClusterProcess, replicas: list[int], configs: dict[str, str] | None = None
) -> str:
    topic = f"move-{uuid.uuid4().hex[:8]}"
    # Raw CreateTopics: confluent-kafka 2.16 refuses a NewTopic with a replica assignment.
    from kio.schema.create_topics.v7.request import (
        CreatableReplicaAssignment,
        CreatableTopic,
        CreatableTopicConfig,
        CreateTopicsRequest,
    )
    from kio.schema.create_topics.v7.response import CreateTopicsResponse
    from kio.static.primitive import i16, i32

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
                configs=tuple(
                    CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
                ),
            ),
        )
    )

    def send() -> CreateTopicsResponse:
        with RawConnection(cluster.nodes[0].bootstrap, timeout=30) as conn:
            conn.send_request(request)
            return conn.recv_response(CreateTopicsResponse)

    (result,) = retry_retriable(send).topics
    assert result.error_code == 0, result
    wait_until(
        lambda: sorted(partition_state(cluster, topic)["isr"]) == sorted(replicas),
        30,
        f"{topic}-0 in sync on {replicas}",
    )
    return topic


def partition_state(cluster: ClusterProcess, topic: str) -> dict[str, Any]:
    """Leader, replicas (in order) and ISR of partition 0 from the first broker answering
    with a leader."""
    for node in cluster.running():
        try:
            md = raw_metadata(node.bootstrap, [topic])
        except Exception:  # noqa: BLE001 - the next broker may answer
            continue
        (t,) = [t for t in md.topics if t.name == topic]
        if not t.partitions or int(t.partitions[0].leader_id) < 0:
            continue
        p = t.partitions[0]
        return {
            "leader": int(p.leader_id),
            "replicas": [int(r) for r in p.replica_nodes],
            "isr": [int(r) for r in p.isr_nodes],
        }
    return {"leader": -1, "replicas": [], "isr": []}


def partition_dir(cluster: ClusterProcess, node_id: int, topic: str) -> Path:
    return Path(cluster.node(node_id).data_dir) / f"{topic}-0"


def moving(java_tool: Any, cluster: ClusterProcess, topic: str) -> list[dict]:
    return [
        r for r in java_tool.json("list-reassignments", cluster.bootstrap) if r["topic"] == topic
    ]


class GroupConsumer(threading.Thread):
    """A group member reading `topic` from the start until stopped; keeps every value."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = make_consumer(
            bootstrap, **{"group.id": f"g-{topic}", "enable.partition.eof": False}
        )
        self.topic = topic
        self.values: list[bytes] = []
        self.stop = threading.Event()
        self.exc: BaseException | None = None

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self.stop.is_set():
                msg = self.consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.values.append(msg.value())
            self.consumer.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.exc = exc


def test_move_to_a_new_broker_under_load_loses_and_duplicates_nothing(
    cluster: ClusterProcess, java_tool: Any
) -> None:
    topic = create_on(cluster, [1, 2, 3])
    producer = ContinuousProducer(
        cluster.bootstrap, topic, count=3000, rate=250, **{"enable.idempotence": True}
    )
    consumer = GroupConsumer(cluster.bootstrap, topic)
    consumer.start()
    producer.start()
    wait_until(lambda: len(producer.acked) > 300, 30, "the producer under way")

    answer = java_tool.json("reassign", cluster.bootstrap, f"{topic}:0=2,3,4")
    assert answer == [{"topic": topic, "partition": 0, "error": None, "message": None}]
    listed = moving(java_tool, cluster, topic)
    if listed:  # it may already be over
        assert listed[0]["replicas"][:3] == [2, 3, 4] and listed[0]["adding"] == [4]
        assert listed[0]["removing"] == [1]
    wait_until(lambda: not moving(java_tool, cluster, topic), 60, "the reassignment to finish")

    producer.finish()
    wait_until(
        lambda: len(set(consumer.values)) >= producer.count, 60, "the group to read every record"
    )
    consumer.stop.set()
    consumer.join(30)
    assert consumer.exc is None, consumer.exc
    records = {offset: producer.value(i) for i, offset in producer.acked.items()}
    check_acked_records(producer, records, expect_no_duplicates=True)
    assert sorted(consumer.values) == sorted(producer.value(i) for i in range(producer.count))

    state = wait_until(
        lambda: (
            (s := partition_state(cluster, topic))["replicas"] == [2, 3, 4]
            and sorted(s["isr"]) == [2, 3, 4]
            and s
        ),
        30,
        "Metadata to list replicas [2, 3, 4], all in sync",
    )
    assert state["leader"] in (2, 3, 4)
    wait_until(
        lambda: not partition_dir(cluster, 1, topic).exists(), 30, "broker 1 to drop its copy"
    )
    segments = list(partition_dir(cluster, 4, topic).glob("*.log"))
    assert sum(s.stat().st_size for s in segments) > 3000 * 10, "broker 4 holds the data"


def test_cancel_moves_back_and_drops_the_new_copy(cluster: ClusterProcess, java_tool: Any) -> None:
    topic = create_on(cluster, [1, 2, 3])
    producer = make_producer(cluster.bootstrap, acks="all", linger_ms=5)
    # More than one append's worth (1 MiB): after the first, the learner waits for tokens.
    for i in range(2500):
        producer.produce(topic, value=b"%04d" % i + b"x" * 1000, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    # --throttle sets the dynamic leader.replication.throttled.rate and marks the leader
    # replicas: they send to broker 4 at most that, so the move is under way when cancelled.
    started = raftka(
        cluster,
        "partitions",
        "reassign",
        f"{topic}:0=1,2,4",
        "--throttle",
        str(THROTTLE_BYTES_PER_S),
    )
    assert started["reassignments"] == [{"topic": topic, "partition": 0, "replicas": [1, 2, 4]}]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource("broker", "3")
    described = admin.describe_configs([resource])[resource].result(30)
    rate = described["leader.replication.throttled.rate"]
    # DYNAMIC_DEFAULT_BROKER_CONFIG: the CLI sets the cluster-wide default.
    assert (rate.value, rate.source) == (str(THROTTLE_BYTES_PER_S), 3), rate
    listed = raftka(cluster, "partitions", "reassignments")["reassignments"]
    assert {
        "topic": topic,
        "partition": 0,
        "replicas": [1, 2, 4, 3],
        "adding": [4],
        "removing": [3],
    } in listed, listed
    wait_until(lambda: partition_dir(cluster, 4, topic).exists(), 30, "broker 4 to host a copy")
    raftka(cluster, "partitions", "reassign", "--cancel", f"{topic}:0")
    assert not moving(java_tool, cluster, topic), "a cancelled move is not listed"
    wait_until(
        lambda: partition_state(cluster, topic)["replicas"] == [1, 2, 3],
        60,
        "Metadata to list the original replicas [1, 2, 3] again",
    )
    wait_until(
        lambda: not partition_dir(cluster, 4, topic).exists(), 30, "broker 4 to drop its copy"
    )


def raftka(cluster: ClusterProcess, *args: str) -> dict[str, Any]:
    result = run_raftka(*args, "--bootstrap-servers", cluster.bootstrap, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bad_requests_get_kafkas_errors(cluster: ClusterProcess, java_tool: Any) -> None:
    topic = create_on(cluster, [1, 2, 3])
    items = ";".join(
        [
            f"{topic}:0=cancel",
            f"{topic}:0=1,1,2",
            f"{topic}:7=1,2,3",
            "no-such-topic:0=1,2,3",
        ]
    )
    answers = java_tool.json("reassign", cluster.bootstrap, items)
    errors = {(a["topic"], a["partition"]): a["error"] for a in answers}
    assert errors == {
        (topic, 0): "INVALID_REPLICA_ASSIGNMENT",  # the last item for a partition wins
        (topic, 7): "UNKNOWN_TOPIC_OR_PARTITION",
        ("no-such-topic", 0): "UNKNOWN_TOPIC_OR_PARTITION",
    }, answers
    (cancel,) = java_tool.json("reassign", cluster.bootstrap, f"{topic}:0=cancel")
    assert cancel["error"] == "NO_REASSIGNMENT_IN_PROGRESS", cancel
    (unknown,) = java_tool.json("reassign", cluster.bootstrap, f"{topic}:0=1,2,9")
    assert unknown["error"] == "INVALID_REPLICA_ASSIGNMENT", unknown
    assert "9" in unknown["message"]
    assert partition_state(cluster, topic)["replicas"] == [1, 2, 3]
    assert not moving(java_tool, cluster, topic)
    result = run_raftka(
        "partitions", "reassign", f"{topic}:0=1,2,9", "--bootstrap-servers", cluster.bootstrap
    )
    assert result.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in result.stderr, result


def test_a_broker_down_during_the_move_drops_its_copy_when_it_restarts(
    cluster: ClusterProcess, java_tool: Any
) -> None:
    topic = create_on(cluster, [1, 2, 3])
    producer = make_producer(cluster.bootstrap, acks="all")
    for i in range(200):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    node = cluster.node(3)
    node.stop()
    try:
        (answer,) = java_tool.json("reassign", cluster.bootstrap, f"{topic}:0=1,2,4")
        assert answer["error"] is None, answer
        wait_until(lambda: not moving(java_tool, cluster, topic), 60, "the move without broker 3")
        assert partition_dir(cluster, 3, topic).exists(), "broker 3 was down: its copy is there"
    finally:
        node.start()
    wait_until(
        lambda: not partition_dir(cluster, 3, topic).exists(),
        30,
        "restarted broker 3 to delete the copy it is no longer a replica of",
    )
    assert partition_state(cluster, topic)["replicas"] == [1, 2, 4]


def test_a_move_goes_on_after_its_leader_is_killed(cluster: ClusterProcess) -> None:
    topic = create_on(cluster, [1, 2, 3])
    producer = make_producer(cluster.bootstrap, acks="all", linger_ms=5)
    values = [b"%05d" % i + b"y" * 1000 for i in range(1500)]
    for value in values:
        producer.produce(topic, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    # Throttled: the learner gets its first append, then waits while its leader is killed.
    raftka(cluster, "partitions", "reassign", f"{topic}:0=1,2,4", "--throttle", "200000")
    wait_until(lambda: partition_dir(cluster, 4, topic).exists(), 30, "broker 4 to host a copy")
    leader = partition_state(cluster, topic)["leader"]
    node = cluster.node(leader)
    node.kill()
    try:
        wait_until(
            lambda: partition_state(cluster, topic)["leader"] not in (-1, leader),
            30,
            f"a new leader after killing {leader}",
        )
        if leader == 4:
            node.start()  # the learner itself: it catches up again after its restart
        wait_until(
            lambda: partition_state(cluster, topic)["replicas"] == [1, 2, 4],
            60,
            "the new leader to finish the move",
        )
    finally:
        if not node.is_running():
            node.start()
    got = consume(cluster.bootstrap, topic, [0], start=0, timeout=60)[0]
    assert [m.value() for m in got if m.value()] == values
    wait_until(
        lambda: not partition_dir(cluster, 3, topic).exists(), 30, "broker 3 to drop its copy"
    )


def test_a_new_replica_starts_at_the_leaders_log_start(
    cluster: ClusterProcess, java_tool: Any
) -> None:
    """Records below the log start are gone; the leader cannot send them, so it sends the
    new copy a snapshot, which restarts its log where the leader's starts (here at a batch
    boundary, as retention leaves it)."""
    topic = create_on(cluster, [1, 2, 3])
    producer = make_producer(cluster.bootstrap, acks="all")
    for i in range(60):
        producer.produce(topic, value=b"r%d" % i, partition=0)
        assert producer.flush(30) == 0  # one batch per record: offset 40 starts a batch
    assert delete_records(cluster, topic, 40) == 40
    (answer,) = java_tool.json("reassign", cluster.bootstrap, f"{topic}:0=1,2,4")
    assert answer["error"] is None, answer
    wait_until(lambda: not moving(java_tool, cluster, topic), 60, "the move to finish")
    segments = sorted(p.name for p in partition_dir(cluster, 4, topic).glob("*.log"))
    assert segments[0] == "00000000000000000040.log", segments
    got = consume(cluster.bootstrap, topic, [0], start=40, timeout=60)[0]
    assert [m.value() for m in got] == [b"r%d" % i for i in range(40, 60)]


def delete_records(cluster: ClusterProcess, topic: str, before: int) -> int:
    """DeleteRecords of partition 0 below `before`, asked once; the low watermark answered."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, before)])
    return int(next(iter(deleted.values())).result(30).low_watermark)


def batch_bounds(directory: Path) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in a partition folder's segments."""
    bounds = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 27 <= len(data):
            base = int.from_bytes(data[position : position + 8], "big")
            length = int.from_bytes(data[position + 8 : position + 12], "big")
            delta = int.from_bytes(data[position + 23 : position + 27], "big")
            bounds.append((base, base + delta))
            position += 12 + length
    return bounds


def test_a_new_replica_starts_at_the_batch_holding_a_log_start_inside_it(
    cluster: ClusterProcess, java_tool: Any
) -> None:
    """DeleteRecords may leave the leader's log start inside a batch; batches travel whole, so
    the new copy starts at that batch's base offset and consumers read from the log start."""
    topic = create_on(cluster, [1, 2, 3])
    producer = make_producer(cluster.bootstrap, acks="all", linger_ms=50)
    for round_ in range(10):
        for i in range(5):
            producer.produce(topic, value=b"r%d" % (round_ * 5 + i), partition=0)
        assert producer.flush(30) == 0
    leader = partition_state(cluster, topic)["leader"]
    bounds = batch_bounds(partition_dir(cluster, leader, topic))
    base, last = next((b, e) for b, e in bounds if e > b and b >= 10)
    inside = base + 1
    assert delete_records(cluster, topic, inside) == inside
    kept = [leader, next(r for r in (1, 2, 3) if r != leader), 4]
    (answer,) = java_tool.json(
        "reassign", cluster.bootstrap, f"{topic}:0={','.join(map(str, kept))}"
    )
    assert answer["error"] is None, answer
    wait_until(lambda: not moving(java_tool, cluster, topic), 60, "the move to finish")
    # Then come the move's own control batches.
    copy = batch_bounds(partition_dir(cluster, 4, topic))
    expected = [b for b in bounds if b[1] >= inside]
    assert copy[: len(expected)] == expected, (copy, bounds, inside)
    got = consume(cluster.bootstrap, topic, [0], start=inside, timeout=60)[0]
    assert [m.value() for m in got] == [b"r%d" % i for i in range(inside, 50)]
