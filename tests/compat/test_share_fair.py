"""Fair delivery on share groups (raftka's own topic configs `share.delivery.order=fair` and
`share.fair.key`, `share.fair.records.per.turn`), driven by confluent-kafka's unchanged
ShareConsumer (and one raw ShareFetch) against a real broker: the configs are validated and
described; a key with 100,000 queued records does not hold back a key with 100 behind it; a
key takes its records per turn; a header names the key just as well; a released record
comes back at its key's next turn; and after kill -9 and a restart the broker rebuilds the
rotation from its log and the persisted share state, delivering nothing acknowledged again."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from brokers import Brokers
from clients import create_topic, make_producer, refused_topic_config, topic_configs, unique
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from harness import BrokerProcess
from test_share_priority import first_share_fetch

BROKER_CONFIG = {
    "group.share.record.lock.duration.ms": "15000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    "share.auto.offset.reset": "earliest",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}
WAIT_S = 60
FAIR = {"share.delivery.order": "fair"}


@pytest.fixture(scope="module")
def broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(BROKER_CONFIG, name="share-fair-broker")


def share_consumer(bootstrap: str, group: str, max_poll_records: int) -> ShareConsumer:
    return ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": max_poll_records,
        }
    )


def produce_keys(
    bootstrap: str, topic: str, counts: list[tuple[bytes | None, int]], header: str = ""
) -> None:
    """For each (key, count) in turn, `count` records whose values are `key-i`; the key is
    the record key, or with `header` the value of that header (the record key then the same
    for all). Big batches: the backlog goes in few requests."""
    producer = make_producer(
        bootstrap,
        linger_ms=50,
        batch_size=1_000_000,
        queue_buffering_max_messages=500_000,
    )
    for key, count in counts:
        name = b"none" if key is None else key
        for i in range(count):
            value = name + b"-" + str(i).encode()
            if header:
                headers = [] if key is None else [(header, key)]
                producer.produce(topic, value=value, key=b"same", headers=headers, partition=0)
            else:
                producer.produce(topic, value=value, key=key, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0, "records still unsent after 60 s"


def key_of(value: bytes) -> bytes:
    return value.rsplit(b"-", 1)[0]


def deliveries(
    consumer: ShareConsumer, want: int, release: Any = None
) -> tuple[list[bytes], list[list[tuple[bytes, int]]]]:
    """Poll until `want` records were accepted, acknowledging each poll's records (ACCEPT,
    or RELEASE when `release(message)` says so) and committing them before polling again:
    (the values accepted in the order delivered, each poll's (value, delivery count))."""
    accepted: list[bytes] = []
    polls: list[list[tuple[bytes, int]]] = []
    deadline = time.monotonic() + WAIT_S
    while len(accepted) < want:
        assert time.monotonic() < deadline, f"{len(accepted)} of {want} after {WAIT_S} s"
        messages = [m for m in consumer.poll(0.5) if m.error() is None]
        if not messages:
            continue
        for m in messages:
            if release is not None and release(m):
                consumer.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.append(m.value())
        results = consumer.commit_sync(10)
        assert all(error is None for error in results.values()), results
        polls.append([(m.value(), m.delivery_count()) for m in messages])
    return accepted, polls


def test_fair_configs_are_validated_and_described(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("fair-configs")
    create_topic(broker.bootstrap, topic, config={**FAIR, "share.fair.key": "header:tenant"})
    described = topic_configs(admin, topic)
    assert described["share.delivery.order"].value == "fair"
    assert described["share.fair.key"].value == "header:tenant"
    plain = unique("fair-default")
    create_topic(broker.bootstrap, plain, config=FAIR)
    described = topic_configs(admin, plain)
    assert described["share.fair.key"].value == "key" and described["share.fair.key"].is_default
    per_turn = described["share.fair.records.per.turn"]
    assert per_turn.value == "1" and per_turn.is_default
    for name, bad in (
        ("share.fair.key", "tenant"),
        ("share.fair.key", "header:"),
        ("share.fair.records.per.turn", "0"),
        ("share.fair.records.per.turn", "two"),
        ("share.delivery.order", "round-robin"),
    ):
        error = refused_topic_config(admin, name, bad)
        assert error.name() == "INVALID_CONFIG" and name in error.str(), error
        if name == "share.fair.key":
            assert "key, header:NAME" in error.str(), error


def test_a_small_key_is_served_beside_a_big_backlog(broker: BrokerProcess) -> None:
    """100,000 records of key `big`, then 100 of key `small` (last in the log: a fifo topic
    would hand them out after all the others), produced before the consumer starts: the
    small key's records are all delivered within the first 300 deliveries, and every record
    is delivered once."""
    topic, group = unique("fair-backlog"), unique("fair-g")
    create_topic(broker.bootstrap, topic, config=FAIR)
    big, small = 100_000, 100
    produce_keys(broker.bootstrap, topic, [(b"big", big), (b"small", small)])
    started = time.monotonic()
    first = share_consumer(broker.bootstrap, group, max_poll_records=50)
    first.subscribe([topic])
    try:
        head, _polls = deliveries(first, 300)
    finally:
        first.close()
    head_s = time.monotonic() - started
    small_at = [i for i, value in enumerate(head) if key_of(value) == b"small"]
    assert len(small_at) == small, f"{len(small_at)} small records in the first {len(head)}"
    print(f"fair backlog: the last small record was delivery {small_at[-1] + 1} of {len(head)}")
    # The rest of the backlog, in bigger polls: every record exactly once.
    rest = share_consumer(broker.bootstrap, group, max_poll_records=5000)
    rest.subscribe([topic])
    try:
        tail, _polls = deliveries(rest, big + small - len(head))
    finally:
        rest.close()
    everything = head + tail
    assert len(everything) == len(set(everything)) == big + small
    print(
        f"fair backlog: first 300 of {big + small} in {head_s:.1f} s, all in "
        f"{time.monotonic() - started:.1f} s"
    )


def test_a_key_takes_its_records_per_turn(broker: BrokerProcess) -> None:
    """`share.fair.records.per.turn=10`, keys a, b and c with 50 records each, one after the
    other in the log: a fetch of 25 acquires a's first 10, b's first 10 and c's first 5
    (its turn goes on in the next fetch), where one record per turn would take 8 or 9 of
    each."""
    topic, group = unique("fair-per-turn"), unique("fair-g")
    create_topic(broker.bootstrap, topic, config={**FAIR, "share.fair.records.per.turn": "10"})
    produce_keys(broker.bootstrap, topic, [(b"a", 50), (b"b", 50), (b"c", 50)])
    answer = first_share_fetch(broker.bootstrap, group, topic, 25)
    acquired = sorted(
        o for r in answer.acquired_records for o in range(r.first_offset, r.last_offset + 1)
    )
    assert acquired == [*range(10), *range(50, 60), *range(100, 105)]


def test_a_header_names_the_fairness_key(broker: BrokerProcess) -> None:
    """`share.fair.key=header:tenant`: every record has the same record key; the tenants
    (and the records without the header, a key of their own) take turns."""
    topic, group = unique("fair-header"), unique("fair-g")
    create_topic(broker.bootstrap, topic, config={**FAIR, "share.fair.key": "header:tenant"})
    produce_keys(
        broker.bootstrap,
        topic,
        [(b"acme", 2000), (b"globex", 20), (None, 20)],
        header="tenant",
    )
    consumer = share_consumer(broker.bootstrap, group, max_poll_records=30)
    consumer.subscribe([topic])
    try:
        accepted, polls = deliveries(consumer, 120)
    finally:
        consumer.close()
    assert Counter(key_of(v) for v in accepted[:60]) == {b"acme": 20, b"globex": 20, b"none": 20}
    for poll in polls[:2]:
        counts = Counter(key_of(v) for v, _ in poll)
        assert counts == {b"acme": 10, b"globex": 10, b"none": 10}, counts


def test_a_released_record_comes_back_at_its_keys_next_turn(broker: BrokerProcess) -> None:
    """One consumer, polls of 10 (five records of each of two keys): the first record it
    gets is released; the next poll brings it again (delivery 2) as its key's first record,
    still with five of the other key; nothing else is delivered twice."""
    topic, group = unique("fair-release"), unique("fair-g")
    create_topic(broker.bootstrap, topic, config=FAIR)
    produce_keys(broker.bootstrap, topic, [(b"a", 200), (b"b", 200)])
    released: list[bytes] = []

    def release_first(m: Any) -> bool:
        if not released:
            released.append(m.value())
            return True
        return False

    consumer = share_consumer(broker.bootstrap, group, max_poll_records=10)
    consumer.subscribe([topic])
    try:
        accepted, polls = deliveries(consumer, 400, release_first)
    finally:
        consumer.close()
    assert released == [b"a-0"]
    assert Counter(key_of(v) for v, _ in polls[0]) == {b"a": 5, b"b": 5}
    again = polls[1]
    assert [v for v, _ in again if key_of(v) == b"a"] == [b"a-0", b"a-5", b"a-6", b"a-7", b"a-8"]
    assert [c for v, c in again if v == b"a-0"] == [2]
    assert Counter(key_of(v) for v, _ in again) == {b"a": 5, b"b": 5}
    assert sorted(accepted) == sorted(
        k + b"-" + str(i).encode() for k in (b"a", b"b") for i in range(200)
    )


def test_a_restart_rebuilds_the_rotation(broker_factory: Any) -> None:
    """Two keys (3,000 and 300 records) and 30 records without a key (a key of their own);
    240 deliveries accepted, one poll held unacknowledged, then kill -9 of the broker. After
    the restart nothing accepted comes again, every other record does, and the keys left
    still take turns."""
    broker = broker_factory(BROKER_CONFIG)
    topic, group = unique("fair-restart"), unique("fair-g")
    create_topic(broker.bootstrap, topic, config=FAIR)
    counts: dict[bytes | None, int] = {b"a": 3000, b"b": 300, None: 30}
    produce_keys(broker.bootstrap, topic, list(counts.items()))
    before = share_consumer(broker.bootstrap, group, max_poll_records=30)
    before.subscribe([topic])
    try:
        accepted, _polls = deliveries(before, 240)
        held = [m.value() for m in before.poll(5) if m.error() is None]  # never acknowledged
        broker.kill()
    finally:
        before.close()
    taken = Counter(key_of(v) for v in accepted)
    assert taken[b"none"] == 30 and abs(taken[b"a"] - taken[b"b"]) <= 1, taken
    broker.start()
    after = share_consumer(broker.bootstrap, group, max_poll_records=30)
    after.subscribe([topic])
    total = sum(counts.values())
    try:
        delivered, _polls = deliveries(after, total - len(accepted))
    finally:
        after.close()
    assert not set(delivered) & set(accepted), "a record accepted before the kill came again"
    assert len(delivered) + len(accepted) == len(set(delivered) | set(accepted)) == total
    left_b = counts[b"b"] - taken[b"b"]
    last_b = max(i for i, v in enumerate(delivered) if key_of(v) == b"b")
    # Turns about: within a poll the consumer hands out records in offset order.
    assert last_b < 2 * left_b + 30, f"b's {left_b} records waited behind a: the last at {last_b}"
    print(f"fair restart: {len(accepted)} accepted, {len(held)} held, {len(delivered)} after")


def test_a_new_leader_of_three_rebuilds_the_rotation(cluster_factory: Any) -> None:
    """kill -9 of the partition's leader among three brokers: the new leader rebuilds the
    rotation from its log and the replicated share state; nothing accepted before comes
    again, the keys left still take turns."""
    cluster = cluster_factory(config={**BROKER_CONFIG, "offsets.topic.replication.factor": "3"})
    topic, group = unique("fair-failover"), unique("fair-g")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topic = NewTopic(topic, 1, 3, config=FAIR)
    admin.create_topics([new_topic], operation_timeout=10)[topic].result(timeout=20)
    counts: dict[bytes | None, int] = {b"a": 1000, b"b": 200}
    produce_keys(cluster.bootstrap, topic, list(counts.items()))
    before = share_consumer(cluster.bootstrap, group, max_poll_records=20)
    before.subscribe([topic])
    try:
        accepted, _polls = deliveries(before, 100)
    finally:
        before.close()
    taken = Counter(key_of(v) for v in accepted)
    assert abs(taken[b"a"] - taken[b"b"]) <= 1, taken
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    cluster.node(leader).kill()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    after = share_consumer(survivors, group, max_poll_records=20)
    after.subscribe([topic])
    total = sum(counts.values())
    delivered: list[bytes] = []
    confirmed: set[bytes] = set()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(confirmed) < total - len(accepted):
            assert time.monotonic() < deadline, (
                f"{len(confirmed)} of {total - len(accepted)} after the failover in {WAIT_S} s"
            )
            messages = [m for m in after.poll(0.5) if m.error() is None]
            if not messages:
                continue
            for m in messages:
                assert m.value() not in accepted, f"{m.value()!r} was accepted before the kill"
                delivered.append(m.value())
                after.acknowledge(m, AcknowledgeType.ACCEPT)
            results = after.commit_sync(10)
            if all(error is None for error in results.values()):
                confirmed |= {m.value() for m in messages}
    finally:
        after.close()
    assert confirmed == {
        (b"%s-%d" % (k, i)) for k, n in counts.items() if k for i in range(n)
    } - set(accepted)
    left_b = counts[b"b"] - taken[b"b"]
    first_b = [i for i, v in enumerate(delivered) if key_of(v) == b"b"]
    assert first_b[left_b - 1] < 2 * left_b + 20, "b's records waited behind a"
    print(f"fair failover: {len(accepted)} accepted before the kill, {len(confirmed)} after")
