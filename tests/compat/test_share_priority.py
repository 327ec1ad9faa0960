"""Priority and delayed delivery on share groups (raftka's own topic configs
`share.delivery.order` and `share.delivery.default.priority`, the `priority` and
`deliver-at-ms` record headers), driven by confluent-kafka's unchanged ShareConsumer against
a real broker: the configs are validated and described, a backlog is received in priority
order, delayed records arrive after their time and hold nothing back (on a priority topic,
a fair topic and a fifo topic with `share.delivery.delay.enable`), a fetch of records scattered
over big batches sends just those records, and acknowledgements made out of offset order
survive kill -9 of the broker and of a partition leader among three."""

from __future__ import annotations

import datetime
import random
import time
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import create_topic, make_producer, refused_topic_config, topic_configs, unique
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from harness import BrokerProcess
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic
from test_share_admin import SHARE_FETCH, share_heartbeat, topic_id

from raftka.broker.admin.wire import WireConnection
from raftka.protocol.record_headers import header_values, whole_batches

LOCK_MS = 15000
BROKER_CONFIG = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    "share.auto.offset.reset": "earliest",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}
WAIT_S = 60
DEFAULT_PRIORITY = 5
PRIORITY_CONFIGS = {
    "share.delivery.order": "priority",
    "share.delivery.default.priority": str(DEFAULT_PRIORITY),
}


@pytest.fixture(scope="module")
def broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(BROKER_CONFIG, name="share-priority-broker")


def share_consumer(bootstrap: str, group: str, **conf: Any) -> ShareConsumer:
    return ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            **conf,
        }
    )


def header_priority(raw: bytes | None) -> int:
    """The priority the broker gives a record: its header's ASCII integer, else the
    topic's default."""
    try:
        return int(raw.decode()) if raw is not None else DEFAULT_PRIORITY
    except ValueError:
        return DEFAULT_PRIORITY


def produce_backlog(
    bootstrap: str, topic: str, count: int, seed: int, compression: str = "none"
) -> dict[int, int]:
    """`count` records with values 0..count-1 and random priorities (some without a header,
    some unparsable); value -> the priority the broker should give it."""
    rng = random.Random(seed)
    producer = make_producer(bootstrap, linger_ms=5, compression_type=compression)
    priorities: dict[int, int] = {}
    for i in range(count):
        roll = rng.random()
        raw = (
            None if roll < 0.1 else b"soon" if roll < 0.15 else str(rng.randrange(-5, 50)).encode()
        )
        headers = [] if raw is None else [("priority", raw)]
        producer.produce(topic, value=str(i).encode(), headers=headers, partition=0)
        priorities[i] = header_priority(raw)
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    return priorities


def polls_accepting(consumer: ShareConsumer, want: int, accept: Any = None) -> list[list[Any]]:
    """Poll until `want` records came, acknowledging each poll's records (ACCEPT unless
    `accept(message)` is false: then RELEASE) and committing them; the polls' records."""
    polls: list[list[Any]] = []
    got = 0
    deadline = time.monotonic() + WAIT_S
    while got < want:
        assert time.monotonic() < deadline, f"{got} of {want} records after {WAIT_S} s"
        messages = [m for m in consumer.poll(0.5) if m.error() is None]
        if not messages:
            continue
        for m in messages:
            ok = accept is None or accept(m)
            consumer.acknowledge(m, AcknowledgeType.ACCEPT if ok else AcknowledgeType.RELEASE)
        results = consumer.commit_sync(10)
        assert all(error is None for error in results.values()), results
        polls.append(messages)
        got += len(messages)
    return polls


def test_configs_are_validated_and_described(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("prio-configs")
    create_topic(broker.bootstrap, topic, config=PRIORITY_CONFIGS)
    described = topic_configs(admin, topic)
    assert described["share.delivery.order"].value == "priority"
    assert described["share.delivery.default.priority"].value == str(DEFAULT_PRIORITY)
    plain = unique("prio-fifo")
    create_topic(broker.bootstrap, plain, config={})
    described = topic_configs(admin, plain)
    assert described["share.delivery.order"].value == "fifo"
    assert described["share.delivery.order"].is_default
    assert described["share.delivery.delay.enable"].value == "false"
    for name, bad in (
        ("share.delivery.order", "random"),
        ("share.delivery.default.priority", "high"),
        ("share.delivery.delay.enable", "sometimes"),
    ):
        error = refused_topic_config(admin, name, bad)
        assert error.name() == "INVALID_CONFIG" and name in error.str(), error


def test_a_backlog_is_received_in_priority_order(broker: BrokerProcess) -> None:
    """One consumer accepting every record it is given: each ShareFetch acquires the lowest
    (priority, offset) records not yet delivered, so each poll's records, taken in
    (priority, offset) order, continue exactly where the previous poll's ended (within a
    poll the consumer hands them out in offset order)."""
    topic, group = unique("prio-backlog"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config=PRIORITY_CONFIGS)
    total = 10_000  # as many as the issue that asked for priority order names
    # Compressed batches: the broker decompresses them to read the headers.
    priorities = produce_backlog(broker.bootstrap, topic, total, seed=28, compression="zstd")
    consumer = share_consumer(broker.bootstrap, group, **{"max.poll.records": 250})
    consumer.subscribe([topic])
    try:
        polls = polls_accepting(consumer, total)
    finally:
        consumer.close()

    def order(m: Any) -> tuple[int, int]:
        return priorities[int(m.value())], m.offset()

    received = [order(m) for poll in polls for m in sorted(poll, key=order)]
    assert sorted(received) == sorted((p, o) for o, p in priorities.items())
    assert received == sorted(received), "a poll held a record of lower priority than an earlier"
    for poll in polls:
        assert [m.offset() for m in poll] == sorted(m.offset() for m in poll)
    print(f"priority backlog: {total} records in {len(polls)} polls")


def test_a_fifo_topic_ignores_priority_headers(broker: BrokerProcess) -> None:
    topic, group = unique("prio-fifo"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config={})
    produce_backlog(broker.bootstrap, topic, 300, seed=1)
    consumer = share_consumer(broker.bootstrap, group, **{"max.poll.records": 100})
    consumer.subscribe([topic])
    try:
        polls = polls_accepting(consumer, 300)
    finally:
        consumer.close()
    assert [int(m.value()) for poll in polls for m in poll] == list(range(300))


def produce_big_batches(bootstrap: str, topic: str, count: int, seed: int) -> dict[int, int]:
    """`count` uncompressed records (values 0..count-1, padded) with random priorities,
    packed into few big batches; value -> priority."""
    rng = random.Random(seed)
    producer = make_producer(
        bootstrap, linger_ms=200, batch_size=1_000_000, batch_num_messages=100_000
    )
    priorities: dict[int, int] = {}
    for i in range(count):
        priorities[i] = rng.randrange(1000)
        value = str(i).encode().ljust(100, b".")
        producer.produce(
            topic, value=value, headers=[("priority", str(priorities[i]).encode())], partition=0
        )
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    return priorities


def test_scattered_records_reach_a_client_checking_crcs(broker: BrokerProcess) -> None:
    """Records of random priorities in big uncompressed batches: each fetch sends batches of
    just the records it acquired, which a consumer checking CRCs decodes, every value
    intact and in priority order."""
    topic, group = unique("prio-scattered"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config=PRIORITY_CONFIGS)
    total = 4000
    priorities = produce_big_batches(broker.bootstrap, topic, total, seed=11)
    consumer = share_consumer(
        broker.bootstrap, group, **{"max.poll.records": 50, "check.crcs": True}
    )
    consumer.subscribe([topic])
    try:
        polls = polls_accepting(consumer, total)
    finally:
        consumer.close()

    def order(m: Any) -> tuple[int, int]:
        return priorities[int(m.value().rstrip(b"."))], m.offset()

    received = [order(m) for poll in polls for m in sorted(poll, key=order)]
    assert received == sorted((p, o) for o, p in priorities.items())
    for poll in polls:
        for m in poll:
            assert m.value() == str(m.offset()).encode().ljust(100, b"."), "value at its offset"
            assert m.headers() == [("priority", str(priorities[m.offset()]).encode())]


def first_share_fetch(bootstrap: str, group: str, topic: str, max_records: int) -> Any:
    """The answer for partition 0 of the first ShareFetch (at most `max_records`, up to 50
    MiB) of a new member of `group` that acquires any record of `topic`."""
    member = uuid.uuid4().hex
    with WireConnection(bootstrap, 10) as conn:
        joined = share_heartbeat(conn, group, member, topic, 0)
        assert joined.error_code == 0, joined
        tid = topic_id(bootstrap, topic)
        deadline = time.monotonic() + WAIT_S
        while True:
            assert time.monotonic() < deadline, "no record acquired"
            fetched = conn.request(
                SHARE_FETCH,
                {
                    "group_id": group,
                    "member_id": member,
                    "share_session_epoch": 0,
                    "max_wait": datetime.timedelta(milliseconds=500),
                    "min_bytes": 1,
                    "max_bytes": 50 << 20,
                    "max_records": max_records,
                    "batch_size": max_records,
                    "topics": (
                        FetchTopic(
                            topic_id=tid,
                            partitions=(
                                FetchPartition(partition_index=0, acknowledgement_batches=()),
                            ),
                        ),
                    ),
                    "forgotten_topics_data": (),
                },
                version=1,
            )
            (partition,) = fetched.responses[0].partitions
            if partition.acquired_records:
                return partition


def test_a_fetch_of_scattered_records_sends_only_them(broker: BrokerProcess) -> None:
    """One ShareFetch of 20 records scattered over batches of thousands: its records field
    holds those 20 records (a batch of some of them per batch holding any), not the
    batches around them."""
    topic, group = unique("prio-one-fetch"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config=PRIORITY_CONFIGS)
    total = 20000
    priorities = produce_big_batches(broker.bootstrap, topic, total, seed=12)
    answer = first_share_fetch(broker.bootstrap, group, topic, 20)
    acquired = sorted(
        o for r in answer.acquired_records for o in range(r.first_offset, r.last_offset + 1)
    )
    assert acquired == sorted(sorted(range(total), key=lambda o: (priorities[o], o))[:20])
    records = bytes(answer.records)
    batches = list(whole_batches(records))
    sent = sorted(o for b in batches for o, _ in header_values(b, (b"priority",)))
    assert sent == acquired, "the records sent are the records acquired"
    # 20 records of about 130 bytes each, one batch header (61 bytes) per batch holding any.
    assert len(records) <= 20 * (61 + 200), f"{len(records)} bytes for 20 records"


@pytest.mark.parametrize(
    "configs",
    [PRIORITY_CONFIGS, {"share.delivery.delay.enable": "true"}, {"share.delivery.order": "fair"}],
    ids=["priority", "fifo-with-delays", "fair"],
)
def test_delayed_records_arrive_after_their_time_and_hold_nothing_back(
    broker: BrokerProcess, configs: dict[str, str]
) -> None:
    topic, group = unique("prio-delay"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config=configs)
    producer = make_producer(broker.bootstrap, linger_ms=0)
    consumer = share_consumer(broker.bootstrap, group)
    consumer.subscribe([topic])
    try:
        producer.produce(topic, value=b"warm-up", partition=0)
        producer.flush(30)
        polls_accepting(consumer, 1)  # the consumer is a member and fetching
        now_ms = int(time.time() * 1000)
        due: dict[bytes, int] = {}
        for i in range(20):
            deliver_at = now_ms + 1500 + 50 * i
            value = f"delayed-{i}".encode()
            # A delayed record of the most urgent priority still waits for its time.
            headers = [("deliver-at-ms", str(deliver_at).encode()), ("priority", b"-100")]
            producer.produce(topic, value=value, headers=headers, partition=0)
            due[value] = deliver_at
        for i in range(20):
            producer.produce(topic, value=f"now-{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        received: list[tuple[bytes, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < 40:
            assert time.monotonic() < deadline, f"{len(received)} of 40 after {WAIT_S} s"
            messages = [m for m in consumer.poll(0.5) if m.error() is None]
            at_ms = int(time.time() * 1000)
            for m in messages:
                received.append((m.value(), at_ms))
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            if messages:
                consumer.commit_sync(10)
    finally:
        consumer.close()
    order = [value for value, _ in received]
    assert sorted(order) == sorted([*due, *(f"now-{i}".encode() for i in range(20))])
    first_delayed = min(i for i, v in enumerate(order) if v in due)
    assert all(v.startswith(b"now-") for v in order[:first_delayed])
    assert first_delayed == 20, "a record behind a delayed one waited for it"
    lateness = sorted(at - due[v] for v, at in received if v in due)
    assert lateness[0] >= 0, f"a delayed record arrived {-lateness[0]} ms early"
    print(
        f"delayed delivery lateness on {configs} (receipt - deliver-at-ms), ms: min {lateness[0]}, "
        f"median {lateness[len(lateness) // 2]}, max {lateness[-1]}"
    )


def test_out_of_order_acknowledgements_survive_kill_9(broker_factory: Any) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic, group = unique("prio-restart"), unique("prio-g")
    create_topic(broker.bootstrap, topic, config=PRIORITY_CONFIGS)
    total = 600
    produce_backlog(broker.bootstrap, topic, total, seed=9)
    before = share_consumer(broker.bootstrap, group, **{"max.poll.records": 50})
    before.subscribe([topic])
    accepted: set[int] = set()
    released: set[int] = set()

    def accept(m: Any) -> bool:
        """Every seventh record is released once (it comes back), the rest accepted."""
        value = int(m.value())
        if value % 7 == 0 and value not in released:
            released.add(value)
            return False
        accepted.add(value)
        return True

    try:
        polls_accepting(before, 250, accept)
        held = [m for m in before.poll(5) if m.error() is None]  # acquired, never acknowledged
        broker.kill()
    finally:
        before.close()
    assert max(accepted) > min(set(range(total)) - accepted), "accepted out of offset order"
    broker.start()
    after = share_consumer(broker.bootstrap, group, **{"max.poll.records": 50})
    after.subscribe([topic])
    try:
        polls = polls_accepting(after, total - len(accepted))
    finally:
        after.close()
    delivered = [int(m.value()) for poll in polls for m in poll]
    assert not set(delivered) & accepted, "a record accepted before the kill came again"
    assert sorted(delivered) == sorted(set(range(total)) - accepted)
    print(
        f"priority restart: {len(accepted)} accepted out of offset order before the kill, "
        f"{len(released)} released, {len(held)} held; {len(delivered)} delivered after"
    )


def test_a_killed_leader_of_three_hands_over_out_of_order_acknowledgements(
    cluster_factory: Any,
) -> None:
    """The new leader rebuilds the index from its log and the replicated share state: what
    was accepted (in priority order, far from offset order) before kill -9 of the partition's
    leader is never delivered again, and everything else is."""
    cluster = cluster_factory(config={**BROKER_CONFIG, "offsets.topic.replication.factor": "3"})
    topic, group = unique("prio-failover"), unique("prio-g")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topic = NewTopic(topic, 1, 3, config=PRIORITY_CONFIGS)
    admin.create_topics([new_topic], operation_timeout=10)[topic].result(timeout=20)
    total = 400
    produce_backlog(cluster.bootstrap, topic, total, seed=4)
    before = share_consumer(cluster.bootstrap, group, **{"max.poll.records": 40})
    before.subscribe([topic])
    try:
        polls = polls_accepting(before, 160)
    finally:
        before.close()
    accepted = {int(m.value()) for poll in polls for m in poll}
    assert max(accepted) > min(set(range(total)) - accepted), "accepted out of offset order"
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    cluster.node(leader).kill()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    after = share_consumer(survivors, group, **{"max.poll.records": 50})
    after.subscribe([topic])
    delivered: set[int] = set()
    accepted_after: set[int] = set()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(accepted_after) < total - len(accepted):
            assert time.monotonic() < deadline, (
                f"{len(accepted_after)} of {total - len(accepted)} after the failover in {WAIT_S} s"
            )
            messages = [m for m in after.poll(0.5) if m.error() is None]
            for m in messages:
                value = int(m.value())
                assert value not in accepted, f"{value} was accepted before the kill"
                delivered.add(value)
                after.acknowledge(m, AcknowledgeType.ACCEPT)
            if not messages:
                continue
            results = after.commit_sync(10)
            failed = {tp.partition for tp, error in results.items() if error is not None}
            confirmed = {int(m.value()) for m in messages if m.partition() not in failed}
            assert not confirmed & accepted_after, "accepted twice"
            accepted_after |= confirmed
    finally:
        after.close()
    assert delivered == set(range(total)) - accepted
    print(f"priority failover: {len(accepted)} accepted before the kill, {len(delivered)} after")
