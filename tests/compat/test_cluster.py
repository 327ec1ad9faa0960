"""A 3-broker raftka cluster (real processes, real clients): metadata, replica placement,
leader failover under acks=all, pre-vote against a paused follower, a paused leader, and
consumer groups across a coordinator failover.

Every partition is a Raft group over its replicas; these tests check what Kafka clients see
(Metadata, acks, offsets, committed group offsets) and what lies on disk (the replicas'
segment files hold identical batches).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clients import (
    RawConnection,
    consume,
    create_topic,
    make_consumer,
    make_producer,
    produce,
    wait_until,
)
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from harness import ClusterNode, ClusterProcess

pytestmark = pytest.mark.timeout(240)

INVALID_REPLICATION_FACTOR = 38
FAILOVER_BOUND_S = 3.0


# -- raw Metadata / CreateTopics -----------------------------------------------------------


def raw_metadata(bootstrap: str, topics: list[str] | None = None, timeout: float = 3.0) -> Any:
    """One Metadata v12 request to exactly this broker (no client-side routing or caching)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    wanted = None
    if topics is not None:
        wanted = tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    with RawConnection(bootstrap, timeout=timeout) as conn:
        conn.send_request(
            MetadataRequest(
                topics=wanted,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        return conn.recv_response(MetadataResponse)


def partition_state(bootstrap: str, topic: str, partition: int = 0) -> dict[str, Any]:
    """{leader, epoch, replicas, isr, error} of one partition as `bootstrap` reports it."""
    md = raw_metadata(bootstrap, [topic])
    (t,) = [t for t in md.topics if t.name == topic]
    assert t.error_code == 0, f"{topic} on {bootstrap}: {t.error_code!r}"
    (p,) = [p for p in t.partitions if p.partition_index == partition]
    return {
        "leader": int(p.leader_id),
        "epoch": int(p.leader_epoch),
        "replicas": sorted(int(r) for r in p.replica_nodes),
        "isr": sorted(int(r) for r in p.isr_nodes),
        "error": int(p.error_code),
    }


def state_from_any(nodes: list[ClusterNode], topic: str, partition: int = 0) -> dict[str, Any]:
    """The partition's state from the first of `nodes` that answers with a leader."""
    last: Exception | None = None
    for node in nodes:
        try:
            state = partition_state(node.bootstrap, topic, partition)
            if state["leader"] >= 0:
                return state
        except Exception as exc:  # noqa: BLE001 - the next node may answer
            last = exc
    raise AssertionError(f"no node reports a leader for {topic}-{partition}") from last


def raw_create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> tuple[int, str]:
    """CreateTopics v7 sent to exactly this broker: (error code, error message)."""
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.create_topics.v7.response import CreateTopicsResponse
    from kio.static.primitive import i16, i32

    with RawConnection(bootstrap, timeout=30) as conn:
        conn.send_request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=name,
                        num_partitions=i32(partitions),
                        replication_factor=i16(rf),
                        assignments=(),
                        configs=(),
                    ),
                )
            )
        )
        resp = conn.recv_response(CreateTopicsResponse)
    (result,) = resp.topics
    return int(result.error_code), str(result.error_message)


def raw_describe_quorum(bootstrap: str) -> Any:
    """DescribeQuorum v2 of the metadata log sent to exactly this broker: its partition."""
    from kio.schema.describe_quorum.v2.request import (
        DescribeQuorumRequest,
        PartitionData,
        TopicData,
    )
    from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
    from kio.static.primitive import i32

    with RawConnection(bootstrap, timeout=30) as conn:
        conn.send_request(
            DescribeQuorumRequest(
                topics=(
                    TopicData(
                        topic_name="__cluster_metadata",
                        partitions=(PartitionData(partition_index=i32(0)),),
                    ),
                )
            )
        )
        resp = conn.recv_response(DescribeQuorumResponse)
    assert resp.error_code == 0, resp
    (partition,) = resp.topics[0].partitions
    assert partition.error_code == 0, partition
    return partition


# -- disk and data helpers -----------------------------------------------------------------


def segment_bytes(node: ClusterNode, topic: str, partition: int) -> bytes:
    """The concatenated `*.log` segments of one replica, in offset order."""
    folder = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


def wait_replicas_identical(
    cluster: ClusterProcess, topic: str, partition: int, timeout: float = 30.0
) -> bytes:
    """Until every node's segment files for the partition are byte-equal (and non-empty)."""
    sizes: dict[int, int] = {}

    def identical() -> bytes | None:
        blobs = {n.node_id: segment_bytes(n, topic, partition) for n in cluster.nodes}
        sizes.update({k: len(v) for k, v in blobs.items()})
        first = next(iter(blobs.values()))
        return first if first and all(b == first for b in blobs.values()) else None

    try:
        return wait_until(identical, timeout, "identical segment files on all replicas", 0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; segment bytes per node: {sizes}") from None


def read_partition(bootstrap: str, topic: str, partition: int = 0) -> dict[int, bytes]:
    """offset -> value of every committed record, read back through a consumer."""
    got = consume(bootstrap, topic, [partition], start=0, timeout=60)
    return {m.offset(): m.value() for m in got[partition]}


class ContinuousProducer(threading.Thread):
    """acks=all producing `count` records to one partition at about `rate` records/s,
    recording every delivery report (index -> offset, or the error). `finish(stop=True)`
    ends it early: the records sent by then (`sent`) are the ones it checks."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int = 0,
        count: int = 2000,
        rate: float = 250.0,
        **conf: Any,
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partition = partition
        self.count = count
        self.rate = rate
        self.conf = {"acks": "all", "message.timeout.ms": 60000, "linger.ms": 2, **conf}
        self.acked: dict[int, int] = {}
        self.ack_time: dict[int, float] = {}
        self.send_time: dict[int, float] = {}
        self.failed: dict[int, KafkaError] = {}
        self.undelivered = -1
        self.exc: BaseException | None = None
        #: Records handed to the producer so far.
        self.sent = 0
        self._stop_sending = threading.Event()

    @staticmethod
    def value(i: int) -> bytes:
        return b"rec-%06d" % i

    def run(self) -> None:
        try:
            producer = make_producer(self.bootstrap, **self.conf)

            def report(i: int):
                def cb(err: KafkaError | None, msg: Any) -> None:
                    if err is None:
                        self.acked[i] = msg.offset()
                        self.ack_time[i] = time.monotonic()
                    else:
                        self.failed[i] = err

                return cb

            start = time.monotonic()
            for i in range(self.count):
                if self._stop_sending.is_set():
                    break
                while True:
                    try:
                        producer.produce(
                            self.topic,
                            key=b"k",
                            value=self.value(i),
                            partition=self.partition,
                            on_delivery=report(i),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.send_time[i] = time.monotonic()
                self.sent = i + 1
                producer.poll(0)
                pause = start + (i + 1) / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            self.undelivered = producer.flush(90)
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
            self.exc = exc

    def finish(self, timeout: float = 120, stop: bool = False) -> None:
        """Wait for every record sent to be delivered (with `stop`, send no more first)."""
        if stop:
            self._stop_sending.set()
        self.join(timeout)
        assert not self.is_alive(), "producer thread did not finish"
        if self.exc is not None:
            raise self.exc
        assert self.undelivered == 0, f"{self.undelivered} records still undelivered"
        assert not self.failed, f"{len(self.failed)} failed deliveries, e.g. " + str(
            sorted(self.failed.items())[:5]
        )
        assert len(self.acked) == self.sent, (len(self.acked), self.sent)
        assert stop or self.sent == self.count, (self.sent, self.count)


def check_acked_records(
    producer: ContinuousProducer, records: dict[int, bytes], expect_no_duplicates: bool
) -> int:
    """Every acknowledged record sits at its acknowledged offset; returns the duplicates."""
    missing = [
        (i, off, records.get(off))
        for i, off in sorted(producer.acked.items())
        if records.get(off) != producer.value(i)
    ]
    assert not missing, (
        f"{len(missing)} acknowledged records are not at their acknowledged offset "
        f"(index, offset, found): {missing[:10]}"
    )
    ours = Counter(v for v in records.values() if v.startswith(b"rec-"))
    duplicates = sum(n - 1 for n in ours.values() if n > 1)
    if expect_no_duplicates:
        assert duplicates == 0, f"{duplicates} duplicated records with the idempotent producer"
    return duplicates


def wait_new_leader(
    nodes: list[ClusterNode], topic: str, old_leader: int, old_epoch: int, timeout: float
) -> tuple[dict[str, Any], float]:
    """Poll `nodes` until one reports a leader other than `old_leader` with a higher epoch;
    returns (state, seconds waited)."""
    start = time.monotonic()
    seen: list[Any] = []
    while True:
        for node in nodes:
            try:
                state = partition_state(node.bootstrap, topic, 0)
            except Exception as exc:  # noqa: BLE001 - reported on timeout
                seen.append((node.node_id, repr(exc)))
                continue
            seen.append((node.node_id, state["leader"], state["epoch"]))
            if state["leader"] not in (-1, old_leader) and state["epoch"] > old_epoch:
                return state, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(
                f"no new leader for {topic}-0 within {timeout} s "
                f"(old leader {old_leader}, epoch {old_epoch}); last answers {seen[-6:]}"
            )
        time.sleep(0.05)


# -- metadata and topic creation -----------------------------------------------------------


def test_metadata_lists_all_brokers_and_rf3_placement(cluster_factory) -> None:
    cluster = cluster_factory()
    expected = {n.node_id: n.port for n in cluster.nodes}
    controllers = set()
    for node in cluster.nodes:
        md = raw_metadata(node.bootstrap)
        assert {int(b.node_id): int(b.port) for b in md.brokers} == expected, node
        assert all(b.host == "127.0.0.1" for b in md.brokers)
        controllers.add(int(md.controller_id))
    assert len(controllers) == 1 and controllers <= set(expected), controllers

    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=6, replication_factor=3)

    def placed() -> list[dict[str, Any]] | None:
        states = [partition_state(cluster.nodes[0].bootstrap, topic, p) for p in range(6)]
        return states if all(len(s["isr"]) == 3 for s in states) else None

    states = wait_until(placed, 15, "ISR of 3 for every partition")
    for s in states:
        assert s["replicas"] == [1, 2, 3], s
        assert s["isr"] == [1, 2, 3], s
        assert s["leader"] in (1, 2, 3) and s["epoch"] >= 0, s
    leaders = Counter(s["leader"] for s in states)
    print(f"leaders of {topic}: {dict(leaders)}")
    assert len(leaders) > 1, f"all leaders on one broker: {states}"
    # every broker reports the same leaders (after convergence)
    for node in cluster.nodes:
        wait_until(
            lambda node=node: (
                [partition_state(node.bootstrap, topic, p)["leader"] for p in range(6)]
                == [s["leader"] for s in states]
            ),
            10,
            f"node {node.node_id} to report the same leaders",
        )

    # RF larger than the number of brokers is refused.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    bad = f"rf4-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(bad, num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as info:
        futures[bad].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR, info.value

    # RF 1: each broker reports the leaders of partitions it does not host too.
    single = f"rf1-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, single, partitions=3, replication_factor=1)

    def led(node: ClusterNode) -> list[dict[str, Any]] | None:
        found = [partition_state(node.bootstrap, single, p) for p in range(3)]
        return found if all(s["leader"] >= 0 for s in found) else None

    for node in cluster.nodes:
        states = wait_until(
            lambda node=node: led(node),
            10,
            f"node {node.node_id} to report a leader for every partition of {single}",
        )
        for s in states:
            assert s["replicas"] == [s["leader"]], s
    assert len({s["leader"] for s in states}) == 3, f"RF 1 partitions share a broker: {states}"


def test_every_broker_reports_the_leaders_in_sync_replicas(cluster_factory) -> None:
    """Metadata from any broker carries the ISR the partition's leader knows: a killed
    follower leaves it on every broker, not only on the leader, and rejoins it on every
    broker once it has caught up."""
    cluster = cluster_factory()
    topic = f"isr-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    state = wait_until(
        lambda: (s := state_from_any(cluster.nodes, topic)) and len(s["isr"]) == 3 and s,
        15,
        "ISR of 3",
    )
    follower = next(n for n in cluster.nodes if n.node_id != state["leader"])
    survivors = [n for n in cluster.nodes if n is not follower]
    follower.kill()
    without = sorted(n.node_id for n in survivors)
    for node in survivors:
        wait_until(
            lambda node=node: partition_state(node.bootstrap, topic)["isr"] == without,
            30,
            f"node {node.node_id} to report ISR {without} after node {follower.node_id} died",
        )
    follower.start()
    for node in cluster.nodes:
        wait_until(
            lambda node=node: partition_state(node.bootstrap, topic)["isr"] == [1, 2, 3],
            30,
            f"node {node.node_id} to report node {follower.node_id} back in the ISR",
        )


def test_create_topics_on_non_controller_broker(cluster_factory) -> None:
    cluster = cluster_factory()
    controller = int(raw_metadata(cluster.nodes[0].bootstrap).controller_id)
    other = next(n for n in cluster.nodes if n.node_id != controller)
    print(f"controller {controller}; sending CreateTopics to node {other.node_id}")

    topic = f"fwd-{uuid.uuid4().hex[:8]}"
    code, message = raw_create_topic(other.bootstrap, topic, partitions=3, rf=3)
    assert code == 0, (code, message)
    states = wait_until(
        lambda: (
            [partition_state(other.bootstrap, topic, p) for p in range(3)]
            if all(partition_state(other.bootstrap, topic, p)["leader"] >= 0 for p in range(3))
            else None
        ),
        15,
        "leaders for the topic created through a non-controller",
    )
    assert all(s["replicas"] == [1, 2, 3] for s in states), states

    code, message = raw_create_topic(other.bootstrap, f"fwd4-{uuid.uuid4().hex[:8]}", 1, 4)
    assert code == INVALID_REPLICATION_FACTOR, (code, message)

    res = produce(cluster.bootstrap, topic, [{"value": b"x", "partition": p} for p in range(3)])
    assert not res.errors, res.errors

    # DescribeQuorum asked of a broker that is not the controller answers what the controller
    # knows, as Kafka's brokers forward it: every voter's log end, not only this broker's.
    quorum = raw_describe_quorum(other.bootstrap)
    leader = int(quorum.leader_id)
    ends = {int(r.replica_id): int(r.log_end_offset) for r in quorum.current_voters}
    assert sorted(ends) == [1, 2, 3] and all(end > 0 for end in ends.values()), quorum
    assert leader in ends and ends[leader] >= int(quorum.high_watermark) > 0, quorum
    # With the leader's wall-clock times of each voter's last answer and last caught-up
    # moment (Kafka's LastFetchTimestamp and LastCaughtUpTimestamp): the followers answer
    # every tick, so both are recent.
    now_ms = time.time() * 1000
    for replica in quorum.current_voters:
        for stamp in (replica.last_fetch_timestamp, replica.last_caught_up_timestamp):
            assert now_ms - 60_000 < int(stamp) <= now_ms + 1_000, quorum


def test_a_create_topics_sent_while_no_controller_is_elected_completes_once_one_is(
    cluster_factory,
) -> None:
    """While the metadata quorum has no leader, Metadata and DescribeCluster name a live
    broker as the controller (this one), as Kafka's KRaft brokers do, not -1: librdkafka
    told -1 holds an admin request for a controller without asking again, and a CreateTopics
    issued during an election went unanswered for its whole timeout. Sent to a broker, it
    waits there and is run once a controller is elected."""
    cluster = cluster_factory()
    controller = int(raw_metadata(cluster.nodes[0].bootstrap).controller_id)
    survivor = next(n for n in cluster.nodes if n.node_id != controller)
    stopped = [n for n in cluster.nodes if n is not survivor]
    for node in stopped:
        node.stop()
    # Alone, the survivor campaigns and elects nobody.
    wait_until(
        lambda: "no controller at term" in survivor.log_tail(40),
        30,
        f"node {survivor.node_id} to lose the controller",
    )
    seen = wait_until(
        lambda: (md := raw_metadata(survivor.bootstrap, [])).controller_id != controller and md,
        30,
        f"node {survivor.node_id} to drop controller {controller}",
    )
    assert int(seen.controller_id) == survivor.node_id, seen.controller_id
    admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    assert admin.describe_cluster(request_timeout=10).result(timeout=15).controller.id == (
        survivor.node_id
    )

    topic = f"no-controller-{uuid.uuid4().hex[:8]}"
    (future,) = admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=2)],
        request_timeout=60,
        operation_timeout=60,
    ).values()
    wait_until(
        lambda: "waits for the metadata quorum to elect" in survivor.log_tail(40) or future.done(),
        30,
        f"node {survivor.node_id} to hold the CreateTopics for a controller",
    )
    assert not future.done(), future.exception()
    stopped[0].start()
    future.result(timeout=45)
    stopped[1].start()  # its replicas too
    states = _led_partitions(survivor, topic, 2, "created while no controller was elected")
    assert all(len(x["replicas"]) == 2 for x in states), states


def _led_partitions(node: ClusterNode, topic: str, count: int, how: str) -> list[dict[str, Any]]:
    """The states of the topic's `count` partitions as `node` reports them, once each has a
    leader."""
    return wait_until(
        lambda: (
            (s := [partition_state(node.bootstrap, topic, p) for p in range(count)])
            and all(x["leader"] >= 0 for x in s)
            and s
        ),
        30,
        f"leaders for the topic {how}",
    )


def test_a_create_topics_its_controller_appended_but_could_not_commit_is_created(
    cluster_factory,
) -> None:
    """The controller appends a CreateTopics to the metadata log and loses its quorum
    before the entry commits: it steps down and the broker runs the command again at the
    next controller, which (the longest log) commits the former's entry with its own. The
    client is told the topic was created, not that it already exists: the id chosen for
    the request names the topic it finds. Another client's CreateTopics of the same name,
    waiting meanwhile, is told it exists: the new controller decides nothing before it has
    applied the entries of earlier leaders."""
    cluster = cluster_factory()
    controller_id = int(raw_metadata(cluster.nodes[0].bootstrap).controller_id)
    controller = next(n for n in cluster.nodes if n.node_id == controller_id)
    others = [n for n in cluster.nodes if n is not controller]
    admin = AdminClient({"bootstrap.servers": controller.bootstrap})
    assert admin.describe_cluster(request_timeout=10).result(timeout=15).controller.id == (
        controller_id
    )
    for node in others:
        node.pause()
    topic = f"uncommitted-{uuid.uuid4().hex[:8]}"
    (future,) = admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=2)],
        request_timeout=60,
        operation_timeout=60,
    ).values()
    wait_until(
        lambda: (
            "answered NOT_CONTROLLER (this broker lost the controller role)"
            in controller.log_tail(40)
        ),
        30,
        f"node {controller_id} to lose its quorum while the CreateTopics waits to commit",
    )
    assert not future.done(), future.exception()
    second = AdminClient({"bootstrap.servers": controller.bootstrap})
    (late,) = second.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1)],
        request_timeout=60,
        operation_timeout=60,
    ).values()
    wait_until(  # the first command's wait logged it once, the second's makes two
        lambda: (
            controller.log_tail(40).count(
                "CreateTopicCommand waits for the metadata quorum to elect"
            )
            == 2
        ),
        30,
        f"node {controller_id} to hold the second CreateTopics for a controller",
    )
    others[0].resume()
    future.result(timeout=45)
    with pytest.raises(KafkaException) as refused:
        late.result(timeout=45)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, refused.value
    others[1].resume()
    states = _led_partitions(
        controller, topic, 2, "whose creation committed under the next controller"
    )
    assert len(raw_metadata(controller.bootstrap, [topic]).topics[0].partitions) == 2
    assert all(len(x["replicas"]) == 2 for x in states), states


# -- leader failover -----------------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_leader_kill9_failover_loses_no_acked_record(cluster_factory, idempotent: bool) -> None:
    cluster = cluster_factory()
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    before = wait_until(
        lambda: (
            (s := partition_state(cluster.nodes[0].bootstrap, topic)) and len(s["isr"]) == 3 and s
        ),
        15,
        "ISR of 3",
    )
    victim = cluster.node(before["leader"])
    survivors = [n for n in cluster.nodes if n is not victim]

    conf = {"enable.idempotence": True} if idempotent else {}
    producer = ContinuousProducer(cluster.bootstrap, topic, count=2500, rate=250, **conf)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 500, 30, "500 acks before the kill")
    acked_before_kill = len(producer.acked)
    killed_at = time.monotonic()
    victim.kill()
    after, failover_s = wait_new_leader(
        survivors, topic, before["leader"], before["epoch"], timeout=15
    )
    print(
        f"\nfailover ({'idempotent' if idempotent else 'plain'} producer): leader "
        f"{before['leader']} (epoch {before['epoch']}) killed; node {after['leader']} "
        f"(epoch {after['epoch']}) reported as leader after {failover_s:.2f} s"
    )

    producer.finish()
    sent_after = [i for i, t in producer.send_time.items() if t > killed_at]
    assert sent_after, "the producer sent nothing after the kill"
    first_ack_after = min(producer.ack_time[i] for i in sent_after)
    print(
        f"acks before kill {acked_before_kill}; first ack of a record sent after the kill "
        f"{first_ack_after - killed_at:.2f} s after it; all {producer.count} acked"
    )

    victim.start()
    wait_until(
        lambda: len(partition_state(after_leader_node(cluster, after), topic)["isr"]) == 3,
        30,
        "the restarted broker back in the ISR",
    )
    blob = wait_replicas_identical(cluster, topic, 0, timeout=30)
    records = read_partition(cluster.bootstrap, topic)
    duplicates = check_acked_records(producer, records, expect_no_duplicates=idempotent)
    print(
        f"records in partition: {len(records)}; duplicates from retried sends: {duplicates}; "
        f"segment bytes identical on all 3 replicas: {len(blob)}"
    )
    assert failover_s <= FAILOVER_BOUND_S, (
        f"new leader reported after {failover_s:.2f} s (bound {FAILOVER_BOUND_S} s)"
    )


def test_clean_shutdown_hands_leadership_over(cluster_factory) -> None:
    """SIGTERM on a leader moves leadership to a caught-up follower in one election (its
    epoch goes up by exactly one) before the broker exits, and loses nothing acked."""
    cluster = cluster_factory()
    topic = f"handover-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)

    def settled() -> dict[str, Any] | None:
        state = state_from_any(cluster.nodes, topic)
        return state if len(state["isr"]) == 3 else None

    state = wait_until(settled, 15, f"ISR of 3 for {topic}-0")
    values = [b"before-%d" % i for i in range(200)]
    res = produce(cluster.bootstrap, topic, [{"value": v, "partition": 0} for v in values])
    assert not res.errors, res.errors[:3]
    old = cluster.node(state["leader"])
    old.stop()  # SIGTERM; asserts a clean exit
    assert "leadership handed over" in old.log_tail(80), old.log_tail(80)
    survivors = [n for n in cluster.nodes if n is not old]
    new_state, waited = wait_new_leader(survivors, topic, old.node_id, state["epoch"], 10)
    print(f"leader {old.node_id} -> {new_state['leader']} after a clean stop ({waited:.2f} s)")
    assert new_state["epoch"] == state["epoch"] + 1, (state, new_state)
    msgs = consume(survivors[0].bootstrap, topic, [0], start=0, timeout=60)[0]
    assert [m.value() for m in msgs if m.value() is not None][: len(values)] == values


def after_leader_node(cluster: ClusterProcess, state: dict[str, Any]) -> str:
    return cluster.node(state["leader"]).bootstrap


# -- a paused follower (pre-vote) and a paused leader --------------------------------------


def test_paused_follower_rejoins_without_disturbing_leader(cluster_factory) -> None:
    cluster = cluster_factory()
    topic = f"prevote-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    before = wait_until(
        lambda: (
            (s := partition_state(cluster.nodes[0].bootstrap, topic)) and len(s["isr"]) == 3 and s
        ),
        15,
        "ISR of 3",
    )
    leader = cluster.node(before["leader"])
    follower = next(n for n in cluster.nodes if n is not leader)
    others = [n for n in cluster.nodes if n is not follower]
    bootstrap = ",".join(n.bootstrap for n in others)

    producer = ContinuousProducer(bootstrap, topic, count=1500, rate=150)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 100, 30, "100 acks before the pause")
    follower.pause()
    paused_at = time.monotonic()
    acked_at_pause = len(producer.acked)
    time.sleep(5)
    acked_while_paused = len(producer.acked) - acked_at_pause
    during = partition_state(leader.bootstrap, topic)
    follower.resume()
    print(
        f"\nfollower {follower.node_id} paused {time.monotonic() - paused_at:.1f} s; "
        f"{acked_while_paused} acks=all records committed meanwhile; state then {during}"
    )
    assert acked_while_paused > 100, "acks=all writes did not commit on the other two"

    producer.finish()
    # Give a disruptive candidate every chance: several election timeouts.
    time.sleep(3)
    wait_until(
        lambda: partition_state(leader.bootstrap, topic)["isr"] == [1, 2, 3],
        20,
        "the resumed follower back in the ISR",
    )
    for node in cluster.nodes:
        state = partition_state(node.bootstrap, topic)
        assert (state["leader"], state["epoch"]) == (before["leader"], before["epoch"]), (
            f"node {node.node_id} reports {state}; before the pause {before}: the resumed "
            f"follower disturbed the leader"
        )
    wait_replicas_identical(cluster, topic, 0)
    check_acked_records(producer, read_partition(cluster.bootstrap, topic), False)


def test_paused_leader_is_replaced_and_loses_nothing(cluster_factory) -> None:
    cluster = cluster_factory()
    topic = f"stopleader-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    before = wait_until(
        lambda: (
            (s := partition_state(cluster.nodes[0].bootstrap, topic)) and len(s["isr"]) == 3 and s
        ),
        15,
        "ISR of 3",
    )
    old = cluster.node(before["leader"])
    others = [n for n in cluster.nodes if n is not old]

    # A producer that knows every broker, the paused one included, through the whole story.
    producer = ContinuousProducer(cluster.bootstrap, topic, count=2000, rate=200)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 300, 30, "300 acks before the pause")
    old.pause()
    after, took = wait_new_leader(others, topic, before["leader"], before["epoch"], timeout=10)
    print(
        f"\nleader {old.node_id} (epoch {before['epoch']}) paused; node {after['leader']} "
        f"(epoch {after['epoch']}) took over after {took:.2f} s"
    )
    # acks=all produce through the two live brokers succeeds while the old leader sleeps.
    live = ",".join(n.bootstrap for n in others)
    res = produce(
        live,
        topic,
        [{"value": b"during-%d" % i, "partition": 0} for i in range(100)],
        timeout=30,
        acks="all",
    )
    assert not res.errors, res.errors[:5]
    time.sleep(2)
    old.resume()

    producer.finish()
    wait_until(
        lambda: partition_state(old.bootstrap, topic)["leader"] == after["leader"],
        15,
        "the resumed old leader to report the new leader",
    )
    wait_until(
        lambda: partition_state(cluster.node(after["leader"]).bootstrap, topic)["isr"] == [1, 2, 3],
        20,
        "the old leader back in the ISR",
    )
    for node in cluster.nodes:
        state = partition_state(node.bootstrap, topic)
        assert state["leader"] == after["leader"] and state["epoch"] == after["epoch"], (
            node.node_id,
            state,
            after,
        )
    wait_replicas_identical(cluster, topic, 0)
    records = read_partition(cluster.bootstrap, topic)
    duplicates = check_acked_records(producer, records, expect_no_duplicates=False)
    during = {v for v in records.values() if v.startswith(b"during-")}
    assert len(during) == 100, f"{100 - len(during)} records produced during the pause lost"
    for report in res.reports:
        assert records.get(report.offset) == b"during-%d" % report.index
    print(f"records {len(records)}, duplicates from retried sends {duplicates}")


# -- consumer group across a coordinator failover ------------------------------------------


def group_coordinator(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
    return int(desc.coordinator.id)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read by a fresh member-less consumer."""
    c = make_consumer(bootstrap, **{"group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def test_consumer_group_survives_coordinator_kill9(cluster_factory) -> None:
    cluster = cluster_factory()
    topic = f"group-{uuid.uuid4().hex[:8]}"
    partitions = 3
    create_topic(cluster.bootstrap, topic, partitions=partitions, replication_factor=3)
    total = 600
    res = produce(
        cluster.bootstrap,
        topic,
        [{"value": b"g-%d" % i, "partition": i % partitions} for i in range(total)],
        acks="all",
    )
    assert not res.errors

    group = f"grp-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(
        cluster.bootstrap,
        **{
            "group.id": group,
            "enable.partition.eof": False,
            "enable.auto.offset.store": True,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
        },
    )
    seen: list[bytes] = []

    def consume_until(n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < n:
            assert time.monotonic() < deadline, f"consumed {len(seen)} of {n} in {timeout} s"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                if m.error() is None:
                    seen.append(m.value())
                elif m.error().code() not in (KafkaError._PARTITION_EOF,):
                    print(f"consumer error (retried): {m.error()}")

    def commit_with_retry(timeout: float) -> list[TopicPartition]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise
                print(f"commit failed (retrying): {exc}")
                time.sleep(0.5)

    try:
        consumer.subscribe([topic])
        consume_until(300, 60)
        first_commit = {tp.partition: tp.offset for tp in commit_with_retry(30)}
        assert sum(max(o, 0) for o in first_commit.values()) == len(seen), (first_commit, len(seen))

        # precondition: a fresh client reads the commit back before anything fails
        assert committed(cluster.bootstrap, group, topic, partitions) == first_commit
        coordinator = group_coordinator(cluster.bootstrap, group)
        victim = cluster.node(coordinator)
        survivors = ",".join(n.bootstrap for n in cluster.nodes if n is not victim)
        print(f"\ngroup {group}: coordinator node {coordinator}; kill -9; committed {first_commit}")
        victim.kill()
        killed_at = time.monotonic()

        # The committed offsets survive the coordinator's death ...
        answers: list[Any] = []

        def first_commit_readable() -> dict[int, int] | None:
            try:
                c = committed(survivors, group, topic, partitions)
            except KafkaException as exc:
                answers.append(repr(exc))
                return None
            answers.append(c)
            return c if c == first_commit else None

        try:
            after_kill = wait_until(
                first_commit_readable, 30, "the first commit to be readable from the survivors"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; committed offsets read: {answers[-5:]}") from None
        new_coordinator = group_coordinator(survivors, group)
        print(
            f"new coordinator node {new_coordinator} after "
            f"{time.monotonic() - killed_at:.2f} s; committed offsets still {after_kill}"
        )
        assert new_coordinator != coordinator

        # ... and the consumer carries on by itself and can commit again.
        consume_until(total, 90)
        commit_with_retry(30)
        final = {
            tp.partition: tp.offset
            for tp in consumer.committed(
                [TopicPartition(topic, p) for p in range(partitions)], timeout=15
            )
        }
        assert final == {p: total // partitions for p in range(partitions)}, final
        assert set(seen) == {b"g-%d" % i for i in range(total)}, f"{len(set(seen))} distinct"
        print(f"consumed {len(seen)} records ({len(seen) - len(set(seen))} redelivered)")
    finally:
        consumer.close()

    assert committed(survivors, group, topic, partitions) == final
    # A fresh member of the group resumes at the last commit: it sees only new records.
    more = produce(
        survivors,
        topic,
        [{"value": b"late-%d" % i, "partition": i % partitions} for i in range(30)],
        acks="all",
    )
    assert not more.errors
    fresh = make_consumer(survivors, **{"group.id": group, "enable.partition.eof": False})
    got: list[bytes] = []
    try:
        fresh.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            for m in fresh.consume(num_messages=100, timeout=0.5):
                if m.error() is None:
                    got.append(m.value())
        time.sleep(1)
        for m in fresh.consume(num_messages=100, timeout=1):
            if m.error() is None:
                got.append(m.value())
    finally:
        fresh.close()
    assert sorted(got) == sorted(b"late-%d" % i for i in range(30)), (
        f"fresh member read {len(got)} records, e.g. {got[:5]}: it did not resume at the "
        f"last committed offsets"
    )
    cluster.node(coordinator).start()
