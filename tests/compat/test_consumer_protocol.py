"""The consumer group protocol (KIP-848, `group.protocol=consumer`) with librdkafka, and its
errors on the wire.

One broker with a short consumer heartbeat interval serves the module. Consumers run in the
test's thread, polled in turn; waits are bounded polls.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from brokers import Brokers
from clients import RawConnection, make_producer, retry_retriable, wait_until
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess

HEARTBEAT_INTERVAL_MS = 300
PARTITIONS = 6
WAIT_S = 30.0
COMMIT_ATTEMPTS = 20


@pytest.fixture(scope="module")
def kip848_broker(module_brokers: Brokers) -> BrokerProcess:
    """A broker with a short consumer heartbeat interval."""
    config = {
        "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
        "group.consumer.session.timeout.ms": "6000",
        "offsets.topic.num.partitions": "3",
    }
    return module_brokers.broker(config, name="kip848")


class GroupConsumer:
    """A `group.protocol=consumer` consumer that commits synchronously after processing
    each batch, and records every record and assignment change it sees."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "client.id": name,
            }
        )
        self.seen: list[str] = []
        self.commit_errors: list[str] = []
        self.stale_commits = 0
        self.revoked: list[int] = []
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _c, _ps: None,
            on_revoke=lambda _c, ps: self.revoked.extend(p.partition for p in ps),
        )

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def poll_once(self) -> None:
        batch = self.consumer.consume(num_messages=100, timeout=0.05)
        records = [m for m in batch if m.error() is None]
        for m in records:
            self.seen.append(m.value().decode())
        if records:
            self.commit()

    def commit(self) -> None:
        """Commit what was consumed. A commit racing the heartbeat answer that moves the
        member to a new epoch gets STALE_MEMBER_EPOCH, as from Kafka: it is retried with the
        new epoch, as Kafka's Java consumer does (no poll in between, so the partitions are
        still the member's)."""
        for _ in range(COMMIT_ATTEMPTS):
            try:
                self.consumer.commit(asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                    self.commit_errors.append(str(exc))
                    return
                self.stale_commits += 1
                time.sleep(0.05)
        self.commit_errors.append(f"still STALE_MEMBER_EPOCH after {COMMIT_ATTEMPTS} attempts")

    def close(self) -> None:
        self.consumer.close()


class Producing:
    """Produces numbered records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = make_producer(bootstrap, acks="all")
        self.topic = topic
        self.sent: list[str] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = str(i)

            def report(err: Any, _msg: Any, value: str = value) -> None:
                (self.failed if err is not None else self.sent).append(value)

            self.producer.produce(
                self.topic, value=value.encode(), partition=i % PARTITIONS, on_delivery=report
            )
            self.producer.poll(0)
            i += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.producer.flush(20) == 0, "the producer delivered everything it queued"


def poll_until(
    consumers: list[GroupConsumer], done: Callable[[], bool], what: str, timeout: float = WAIT_S
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            owned = {c.name: sorted(c.owned()) for c in consumers}
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; owned {owned}")
        for c in consumers:
            c.poll_once()


def covers_all(consumers: list[GroupConsumer]) -> bool:
    """The members own every partition once, in shares that differ by at most one (the
    uniform assignor's target; partial assignments met on the way are not it)."""
    owned = [c.owned() for c in consumers]
    sizes = [len(o) for o in owned]
    return (
        sum(sizes) == PARTITIONS
        and set().union(*owned) == set(range(PARTITIONS))
        and max(sizes) - min(sizes) <= 1
    )


def test_members_leave_one_at_a_time_incrementally_with_nothing_lost_or_repeated(
    kip848_broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """3 → 2 → 1 members while records are produced. Each survivor keeps what it had (no
    stop-the-world revocation), and with synchronous commits after processing (every one
    eventually accepted) every produced record is consumed exactly once across the group:
    none skipped, none twice."""
    bootstrap = kip848_broker.bootstrap
    topic = new_topic(partitions=PARTITIONS, bootstrap=bootstrap)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    producing = Producing(bootstrap, topic)
    consumers = [GroupConsumer(bootstrap, topic, group, f"c{i}") for i in range(3)]
    try:
        poll_until(consumers, lambda: covers_all(consumers), "3 members to share 6 partitions")
        while consumers[1:]:
            # Every member consumes (and commits) from its partitions before one leaves.
            marks = {c.name: len(c.seen) for c in consumers}
            poll_until(
                consumers,
                lambda marks=marks: all(len(c.seen) >= marks[c.name] + 20 for c in consumers),
                f"each of {len(consumers)} members to consume 20 more records",
            )
            leaving = consumers.pop()
            before = {c.name: c.owned() for c in consumers}
            for c in consumers:
                c.revoked.clear()
            leaving.close()
            poll_until(
                consumers,
                lambda: covers_all(consumers),
                f"{len(consumers)} members to take over {leaving.name}'s partitions",
            )
            for c in consumers:
                assert before[c.name] <= c.owned(), f"{c.name} kept its partitions"
                assert not set(c.revoked) & before[c.name], f"{c.name} revoked nothing it kept"
            consumers[0].seen.extend(leaving.seen)
            consumers[0].commit_errors.extend(leaving.commit_errors)
        producing.stop()
        survivor = consumers[0]
        sent = set(producing.sent)
        poll_until(consumers, lambda: sent <= set(survivor.seen), "every record to be consumed")
    finally:
        for c in consumers:
            c.close()
    assert not producing.failed
    assert len(sent) > 100, "records were produced throughout"
    repeated = {v: n for v, n in Counter(survivor.seen).items() if n > 1}
    assert not repeated, f"consumed more than once: {sorted(repeated)[:20]}"
    assert set(survivor.seen) == sent
    assert not survivor.commit_errors, survivor.commit_errors


# -- the wire: errors of the two protocols meeting, epochs --------------------------------


def find_coordinator(conn: RawConnection, group: str) -> int:
    """FindCoordinator for the group, as a client asks first (it creates the offsets
    topic): the coordinator's node id."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse

    def send() -> Any:
        conn.send_request(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
        return conn.recv_response(FindCoordinatorResponse)

    [found] = retry_retriable(send).coordinators
    return int(found.node_id)


def heartbeat(conn: RawConnection, **fields: Any) -> Any:
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
    from kio.schema.consumer_group_heartbeat.v1.response import ConsumerGroupHeartbeatResponse

    fields.setdefault("topic_partitions", None)

    def send() -> Any:
        conn.send_request(ConsumerGroupHeartbeatRequest(**fields))
        return conn.recv_response(ConsumerGroupHeartbeatResponse)

    return retry_retriable(send)


def join(conn: RawConnection, group: str) -> Any:
    import datetime

    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.join_group.v5.response import JoinGroupResponse

    request = JoinGroupRequest(
        group_id=group,
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )

    def send() -> Any:
        conn.send_request(request)
        return conn.recv_response(JoinGroupResponse)

    return retry_retriable(send)


def commit_v9(conn: RawConnection, group: str, member_id: str, epoch: int, topic: str) -> Any:
    from kio.schema.offset_commit.v9.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_commit.v9.response import OffsetCommitResponse

    partition = OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_metadata=None
    )
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=topic, partitions=(partition,)),),
    )

    def send() -> Any:
        conn.send_request(request)
        return conn.recv_response(OffsetCommitResponse)

    [code] = {p.error_code for t in retry_retriable(send).topics for p in t.partitions}
    return code


def fetch_v9(
    conn: RawConnection, group: str, member_id: str, epoch: int, topic: str
) -> tuple[int, int | None]:
    """(the group's error, partition 0's committed offset) of an OffsetFetch v9."""
    from kio.schema.offset_fetch.v9.request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )
    from kio.schema.offset_fetch.v9.response import OffsetFetchResponse

    asked = OffsetFetchRequestGroup(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        topics=(OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),),
    )

    def send() -> Any:
        conn.send_request(OffsetFetchRequest(groups=(asked,), require_stable=False))
        return conn.recv_response(OffsetFetchResponse)

    [answer] = retry_retriable(send).groups
    offsets = [p.committed_offset for t in answer.topics for p in t.partitions]
    return answer.error_code, offsets[0] if offsets else None


def joining(group: str, member_id: str, topic: str) -> dict[str, Any]:
    import datetime

    return {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout": datetime.timedelta(seconds=10),
        "subscribed_topic_names": (topic,),
        "topic_partitions": (),
    }


def test_classic_and_consumer_protocols_refuse_each_others_groups(
    kip848_broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    from kio.schema.errors import ErrorCode

    bootstrap = kip848_broker.bootstrap
    topic = new_topic(partitions=2, bootstrap=bootstrap)
    modern, classic = f"modern-{uuid.uuid4().hex[:8]}", f"classic-{uuid.uuid4().hex[:8]}"
    with RawConnection(bootstrap) as conn:
        find_coordinator(conn, modern)
        joined = heartbeat(conn, **joining(modern, "m1", topic))
        assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
        refused = join(conn, modern)
        assert refused.error_code == ErrorCode.inconsistent_group_protocol
        assert join(conn, classic).error_code == ErrorCode.member_id_required
    # A classic member of `classic`, through a real classic consumer.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": classic, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        wait_until(
            lambda: consumer.poll(0.1) is None and consumer.assignment(),
            WAIT_S,
            "the classic consumer's assignment",
        )
        with RawConnection(bootstrap) as conn:
            find_coordinator(conn, classic)
            refused = heartbeat(conn, **joining(classic, "m2", topic))
            assert refused.error_code == ErrorCode.group_id_not_found, refused
            assert "not a consumer group" in (refused.error_message or "")
    finally:
        consumer.close()


def test_member_epochs_are_fenced_on_the_wire(
    kip848_broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    from kio.schema.errors import ErrorCode

    bootstrap = kip848_broker.bootstrap
    topic = new_topic(partitions=2, bootstrap=bootstrap)
    group = f"epochs-{uuid.uuid4().hex[:8]}"
    with RawConnection(bootstrap) as conn:
        find_coordinator(conn, group)
        joined = heartbeat(conn, **joining(group, "m1", topic))
        epoch = joined.member_epoch
        assert joined.assignment is not None
        owned = joined.assignment.topic_partitions
        base = {"group_id": group, "member_id": "m1", "topic_partitions": owned}
        assert heartbeat(conn, **base, member_epoch=epoch).error_code == ErrorCode.none
        ahead = heartbeat(conn, **base, member_epoch=epoch + 5)
        assert ahead.error_code == ErrorCode.fenced_member_epoch
        # Fenced, the member rejoins under its id at epoch 0 (as clients do from v1 on).
        rejoined = heartbeat(conn, **joining(group, "m1", topic))
        assert rejoined.error_code == ErrorCode.none and rejoined.member_epoch >= epoch
        epoch = rejoined.member_epoch
        unknown = heartbeat(conn, **{**base, "member_id": "nobody"}, member_epoch=epoch)
        assert unknown.error_code == ErrorCode.unknown_member_id
        bad = heartbeat(conn, **{**base, "member_id": ""}, member_epoch=epoch)
        assert bad.error_code == ErrorCode.invalid_request and bad.error_message
        no_group = heartbeat(conn, **{**base, "group_id": ""}, member_epoch=epoch)
        assert no_group.error_code == ErrorCode.invalid_request, no_group
        # OffsetCommit v9 carries the member epoch: only the current one commits.
        assert commit_v9(conn, group, "m1", epoch, topic) == ErrorCode.none
        assert commit_v9(conn, group, "m1", epoch - 1, topic) == ErrorCode.stale_member_epoch
        assert commit_v9(conn, group, "nobody", epoch, topic) == ErrorCode.unknown_member_id
        assert fetch_v9(conn, group, "m1", epoch, topic) == (ErrorCode.none, 0)
        assert fetch_v9(conn, group, "m1", epoch - 1, topic)[0] == ErrorCode.stale_member_epoch
        left = heartbeat(conn, **base, member_epoch=-1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        gone = heartbeat(conn, **base, member_epoch=epoch)
        assert gone.error_code == ErrorCode.unknown_member_id


def test_admin_tools_show_the_group_type(
    kip848_broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """ListGroups v5 and ConsumerGroupDescribe as librdkafka's admin client and `raftka
    groups` use them: the group's type, state, members and assignment."""
    import json

    from clients import run_raftka

    bootstrap = kip848_broker.bootstrap
    topic = new_topic(partitions=2, bootstrap=bootstrap)
    group = f"cli-{uuid.uuid4().hex[:8]}"
    consumer = GroupConsumer(bootstrap, topic, group, "cli-consumer")
    try:
        poll_until([consumer], lambda: consumer.owned() == {0, 1}, "the member's assignment")

        def cli(*args: str) -> Any:
            done = run_raftka("groups", *args, "--bootstrap-servers", bootstrap, "--output", "json")
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        listed = {g["group"]: g for g in cli("list")["groups"]}
        assert (listed[group]["type"], listed[group]["state"]) == ("consumer", "STABLE")
        described = cli("describe", group)
        assert (described["type"], described["state"]) == ("consumer", "STABLE")
        assert described["assignor"] == "uniform"
        [member] = described["members"]
        assert member["client_id"] == "cli-consumer"
        assert sorted(tp["partition"] for tp in member["assignment"]) == [0, 1]
    finally:
        consumer.close()


def test_regex_subscription(kip848_broker: BrokerProcess, new_topic: Callable[..., str]) -> None:
    """librdkafka sends a `^...` subscription as the heartbeat's regex (v1); the broker
    matches it against topic names (Python `re`, whole names) and assigns every match."""
    bootstrap = kip848_broker.bootstrap
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    first = new_topic(partitions=1, name=f"{prefix}-a", bootstrap=bootstrap)
    second = new_topic(partitions=2, name=f"{prefix}-b", bootstrap=bootstrap)
    new_topic(partitions=1, name=f"other-{prefix}", bootstrap=bootstrap)
    consumer = GroupConsumer(bootstrap, f"^{prefix}-.*", f"regex-{prefix}", "regex")
    try:
        wanted = {(first, 0), (second, 0), (second, 1)}

        def assigned() -> set[tuple[str, int]]:
            return {(tp.topic, tp.partition) for tp in consumer.consumer.assignment()}

        poll_until([consumer], lambda: assigned() == wanted, "the regex's topics")
    finally:
        consumer.close()


def test_a_broker_restart_keeps_members_and_their_partitions(
    broker_factory: Callable[..., BrokerProcess], new_topic: Callable[..., str]
) -> None:
    """The group's members and assignments are records in `__consumer_offsets`: after the
    coordinator restarts, the member goes on at its epoch with the same partitions (no
    revocation), and records produced meanwhile are consumed once."""
    broker = broker_factory(
        {
            "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            "offsets.topic.num.partitions": "1",
        }
    )
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    group = f"restart-{uuid.uuid4().hex[:8]}"
    producer = make_producer(broker.bootstrap, acks="all")
    consumer = GroupConsumer(broker.bootstrap, topic, group, "restart")
    try:
        poll_until([consumer], lambda: consumer.owned() == {0, 1}, "the member's assignment")
        for i in range(10):
            producer.produce(topic, value=f"before-{i}".encode(), partition=i % 2)
        assert producer.flush(20) == 0
        poll_until([consumer], lambda: len(consumer.seen) == 10, "the first records")
        consumer.revoked.clear()
        broker.restart()
        for i in range(10):
            producer.produce(topic, value=f"after-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        poll_until([consumer], lambda: len(set(consumer.seen)) == 20, "the records after")
        assert consumer.owned() == {0, 1} and consumer.revoked == []
        assert sorted(consumer.seen) == sorted(set(consumer.seen)), "nothing consumed twice"
    finally:
        consumer.close()


def test_java_consumer_with_the_consumer_protocol(
    kip848_broker: BrokerProcess, new_topic: Callable[..., str], java_tool: Any
) -> None:
    """Kafka's own Java consumer (3.9: ConsumerGroupHeartbeat v0, the member id chosen by
    the broker) with `group.protocol=consumer`: it reads everything, commits, and resumes
    from its commits."""
    bootstrap = kip848_broker.bootstrap
    topic = new_topic(partitions=3, bootstrap=bootstrap)
    producer = make_producer(bootstrap, acks="all")
    for i in range(30):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % 3)
    assert producer.flush(20) == 0
    group = f"java-{uuid.uuid4().hex[:8]}"
    conf = "group.protocol=consumer"
    rows = java_tool.json("consume-group", bootstrap, topic, group, 30, 60000, conf, timeout=120)
    assert sorted(r["value"] for r in rows) == sorted(f"m{i}" for i in range(30))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=WAIT_S).result(timeout=WAIT_S)
    [java_group] = [g for g in listed.valid if g.group_id == group]
    assert java_group.type == ConsumerGroupType.CONSUMER
    for i in range(3):
        producer.produce(topic, value=f"n{i}".encode(), partition=i)
    assert producer.flush(20) == 0
    rows = java_tool.json("consume-group", bootstrap, topic, group, 3, 60000, conf, timeout=120)
    assert sorted(r["value"] for r in rows) == ["n0", "n1", "n2"], "resumed from the commits"


def test_a_coordinator_failover_keeps_members_and_their_partitions(
    cluster_factory: Callable[..., Any],
) -> None:
    """3 brokers, `__consumer_offsets` replicated on all: the broker coordinating a group of
    two consumers stops; the new coordinator restores the members from the log and they go
    on with the partitions they had, with no revocation."""
    from clients import create_topic

    cluster = cluster_factory(
        3,
        {
            "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "3",
        },
    )
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    group = f"failover-{uuid.uuid4().hex[:8]}"
    consumers = [GroupConsumer(cluster.bootstrap, topic, group, f"f{i}") for i in range(2)]
    try:
        poll_until(consumers, lambda: covers_all(consumers), "2 members to share 6 partitions")
        before = {c.name: c.owned() for c in consumers}
        for c in consumers:
            c.revoked.clear()
        with RawConnection(cluster.nodes[0].bootstrap) as conn:
            coordinator = find_coordinator(conn, group)
        cluster.node(coordinator).stop()
        survivor = next(n for n in cluster.nodes if n.node_id != coordinator)

        def moved() -> bool:
            with RawConnection(survivor.bootstrap) as conn:
                return find_coordinator(conn, group) != coordinator

        poll_until(consumers, moved, "another broker to coordinate the group", timeout=60)
        admin = AdminClient({"bootstrap.servers": survivor.bootstrap})

        def described() -> Any:
            futures = admin.describe_consumer_groups([group], request_timeout=5)
            return futures[group].result(timeout=10)

        def settled() -> bool:
            try:
                members = described().members
            except KafkaException:
                return False  # the new coordinator is still loading
            return len(members) == 2 and covers_all(consumers)

        poll_until(consumers, settled, "the new coordinator to serve both members", timeout=60)
        assert {c.name: c.owned() for c in consumers} == before
        assert all(c.revoked == [] for c in consumers), "no member gave up a partition"
        assert {m.client_id for m in described().members} == {"f0", "f1"}
    finally:
        for c in consumers:
            c.close()
