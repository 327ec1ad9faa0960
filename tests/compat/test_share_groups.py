"""Share groups (KIP-932) driven by confluent-kafka's ShareConsumer against a real broker:
explicit and implicit acknowledgement, redelivery after a lock expires or a consumer
leaves, the delivery-count limit, and acknowledgements surviving a broker restart."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from brokers import Brokers
from clients import make_consumer, make_producer, run_raftka, unique, wait_until
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from harness import BrokerProcess
from kio.schema.join_group.v5.request import JoinGroupRequestProtocol
from test_share_priority import first_share_fetch

from raftka.broker.admin.wire import WireConnection
from raftka.protocol.record_headers import whole_batches
from raftka.protocol.records import read_batch_header

LOCK_MS = 2000
DELIVERY_LIMIT = 3
BROKER_CONFIG = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    "share.auto.offset.reset": "earliest",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}
WAIT_S = 40
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, LIST_GROUPS = 76, 77, 16


@pytest.fixture(scope="module")
def broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(BROKER_CONFIG, name="share-broker")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})

    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
    futures[name].result(timeout=20)


def produce_values(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = make_producer(bootstrap, linger_ms=5)
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0, "records still unsent after 30 s"


def share_consumer(bootstrap: str, group: str, explicit: bool, **conf: Any) -> ShareConsumer:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
            **conf,
        }
    )
    return consumer


def poll_values(consumer: ShareConsumer, timeout: float = 0.5) -> list[Any]:
    return [m for m in consumer.poll(timeout) if m.error() is None]


def test_explicit_accept_release_reject_across_three_consumers(broker: BrokerProcess) -> None:
    topic, group = unique("share-explicit"), unique("share-g")
    create_topic(broker.bootstrap, topic, 2)
    total = 3000
    consumers = [share_consumer(broker.bootstrap, group, explicit=True) for _ in range(3)]
    for c in consumers:
        c.subscribe([topic])
    # Three members of two partitions: the group shares one partition between two of them.
    # Which of the two acquires a given record is a race of their fetches, so the sharing is
    # checked where it is decided, in the assignment.
    with WireConnection(broker.bootstrap, 10) as conn:

        def shared() -> Any:
            for c in consumers:
                assert not poll_values(c, 0.1), "a record before any was produced"
            g = describe_share_group(conn, group)
            owners = Counter(
                p for m in g.members for t in m.assignment.topic_partitions for p in t.partitions
            )
            current = all(m.member_epoch == g.assignment_epoch for m in g.members)
            return len(g.members) == 3 and current and sorted(owners.values()) == [1, 2]

        wait_until(shared, WAIT_S, "three members at the group's epoch, one partition shared")
    produce_values(broker.bootstrap, topic, 2, total)
    accepted: Counter[bytes] = Counter()
    rejected: set[bytes] = set()
    released_once: set[bytes] = set()
    deliveries: Counter[bytes] = Counter()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(accepted) + len(rejected) < total:
            assert time.monotonic() < deadline, (
                f"{len(accepted)} accepted and {len(rejected)} rejected of {total} after {WAIT_S} s"
            )
            for c in consumers:
                for m in poll_values(c, 0.2):
                    value = m.value()
                    deliveries[value] += 1
                    i = int(value[1:])
                    if i % 10 == 3 and value not in released_once:
                        released_once.add(value)
                        c.acknowledge(m, AcknowledgeType.RELEASE)
                    elif i % 10 == 7:
                        rejected.add(value)
                        c.acknowledge(m, AcknowledgeType.REJECT)
                    else:
                        accepted[value] += 1
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                c.commit_sync(10)
        # Nothing more comes: rejected records never again, accepted never again.
        for _ in range(4):
            for c in consumers:
                extra = poll_values(c, 0.3)
                assert not extra, f"delivered again: {[m.value() for m in extra][:5]}"
    finally:
        for c in consumers:
            c.close()
    expected_accepted = {f"v{i}".encode() for i in range(total) if i % 10 != 7}
    assert set(accepted) == expected_accepted
    assert max(accepted.values()) == 1, "a record was accepted twice"
    assert rejected == {f"v{i}".encode() for i in range(total) if i % 10 == 7}
    assert all(deliveries[v] == 2 for v in released_once), "a released record came back not once"


def describe_share_group(conn: WireConnection, group: str) -> Any:
    answer = conn.request(
        SHARE_GROUP_DESCRIBE,
        {"group_ids": (group,), "include_authorized_operations": False},
        version=1,
    )
    (g,) = answer.groups
    return g


def drain(consumers: list[ShareConsumer], want: int, what: str) -> list[Any]:
    """Poll (implicit mode acknowledges on the next poll) until `want` records came."""
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < want:
        assert time.monotonic() < deadline, f"{len(got)} of {want} {what} after {WAIT_S} s"
        for c in consumers:
            got.extend(poll_values(c, 0.2))
    return got


def test_implicit_mode_round_trip(broker: BrokerProcess) -> None:
    topic, group = unique("share-implicit"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 200)
    first = share_consumer(broker.bootstrap, group, explicit=False)
    first.subscribe([topic])
    try:
        got = drain([first], 200, "records delivered")
        first.commit_sync(10)
    finally:
        first.close()
    assert sorted(int(m.value()[1:]) for m in got) == list(range(200))
    assert_none_delivered_again(broker.bootstrap, group, topic, "accepted records")


def assert_none_delivered_again(bootstrap: str, group: str, topic: str, what: str) -> None:
    """A new consumer of the group gets no record for 1.5 lock durations."""
    second = share_consumer(bootstrap, group, explicit=False)
    second.subscribe([topic])
    try:
        end = time.monotonic() + 1.5 * LOCK_MS / 1000
        while time.monotonic() < end:
            again = poll_values(second, 0.3)
            assert not again, f"{what} delivered again: {[m.value() for m in again]}"
    finally:
        second.close()


def test_acknowledgements_a_consumer_sends_as_it_closes_are_kept(broker: BrokerProcess) -> None:
    """The records of a consumer's last poll are acknowledged by its close(). librdkafka
    sends the leaving ShareGroupHeartbeat and the final ShareAcknowledge (epoch -1) at
    once: the leave must not end the member's share session before the acknowledgements
    arrive (they were refused with SHARE_SESSION_NOT_FOUND and the records delivered
    again)."""
    topic, group = unique("share-ack-close"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 100)
    first = share_consumer(broker.bootstrap, group, explicit=True)
    first.subscribe([topic])
    try:
        got = drain([first], 100, "records delivered")
        for m in got:
            first.acknowledge(m, AcknowledgeType.ACCEPT)
    finally:
        first.close()
    assert sorted(int(m.value()[1:]) for m in got) == list(range(100))
    assert_none_delivered_again(broker.bootstrap, group, topic, "records acknowledged at close")


def test_a_fetch_sends_the_batches_holding_what_it_acquired_not_up_to_its_byte_limit(
    broker: BrokerProcess,
) -> None:
    """A fifo backlog of 100 batches and a ShareFetch for 20 records with a 50 MiB byte
    limit: its records field holds the batch holding those 20, not every batch up to the
    limit. (librdkafka's ShareConsumer asks for 50 MiB and parses all it is sent: a backlog
    of 1,000,000 records of 100 bytes drained ten times slower per record than one of
    100,000, the broker idle, while each answer of 500 records carried 50 MB.)"""
    topic, group = unique("share-slice"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    producer = make_producer(broker.bootstrap, linger_ms=5)
    for b in range(100):
        for i in range(50):
            producer.produce(topic, value=f"v{b * 50 + i}".encode().ljust(100, b"."), partition=0)
        assert producer.flush(30) == 0, "records still unsent after 30 s"
    answer = first_share_fetch(broker.bootstrap, group, topic, 20)
    (acquired,) = answer.acquired_records
    assert (acquired.first_offset, acquired.last_offset) == (0, 19)
    batches = [read_batch_header(b) for b in whole_batches(bytes(answer.records))]
    assert batches, "the acquired records are sent"
    assert batches[0].base_offset <= 0, "the first batch sent holds the first record acquired"
    assert batches[-1].next_offset > 19, "the last batch sent holds the last record acquired"
    for header in batches[1:]:
        assert header.base_offset <= 19, f"batch {header.base_offset}.. holds none acquired"


def test_delivery_count_limit_archives_a_record_released_too_often(
    broker: BrokerProcess,
) -> None:
    topic, group = unique("share-limit"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 10)
    consumer = share_consumer(broker.bootstrap, group, explicit=True)
    consumer.subscribe([topic])
    deliveries: Counter[bytes] = Counter()
    try:
        deadline = time.monotonic() + WAIT_S
        while sum(1 for v in deliveries if v != b"v4") < 9 or deliveries[b"v4"] < DELIVERY_LIMIT:
            assert time.monotonic() < deadline, f"deliveries after {WAIT_S} s: {deliveries}"
            for m in poll_values(consumer, 0.3):
                deliveries[m.value()] += 1
                kind = AcknowledgeType.RELEASE if m.value() == b"v4" else AcknowledgeType.ACCEPT
                consumer.acknowledge(m, kind)
            consumer.commit_sync(10)
        # Released at its last allowed delivery: archived, never delivered again.
        end = time.monotonic() + 2 * LOCK_MS / 1000
        while time.monotonic() < end:
            extra = poll_values(consumer, 0.3)
            assert not extra, f"delivered past the limit: {[m.value() for m in extra]}"
    finally:
        consumer.close()
    assert deliveries[b"v4"] == DELIVERY_LIMIT
    assert all(n == 1 for v, n in deliveries.items() if v != b"v4"), deliveries


HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    got = [m for m in c.poll(0.5) if m.error() is None]
    if got:
        print(len(got), flush=True)
        time.sleep(3600)
"""


def delivery_counts(consumer: ShareConsumer, total: int) -> dict[bytes, int]:
    """Poll, acknowledge and commit until `total` distinct values came: each value's
    delivery count."""
    counts: dict[bytes, int] = {}
    deadline = time.monotonic() + WAIT_S
    while len(counts) < total:
        assert time.monotonic() < deadline, f"{len(counts)} of {total} records after {WAIT_S} s"
        for m in poll_values(consumer, 0.3):
            counts[m.value()] = m.delivery_count()
            consumer.acknowledge(m)
        consumer.commit_sync(10)
    return counts


def test_records_of_a_killed_consumer_come_back_after_the_lock(broker: BrokerProcess) -> None:
    topic, group = unique("share-killed"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 50)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, broker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip().isdigit(), f"the holding consumer got no records (said {line!r})"
        held = int(line)
        holder.kill()
    finally:
        holder.kill()
        holder.wait(10)
    consumer = share_consumer(broker.bootstrap, group, explicit=True)
    consumer.subscribe([topic])
    try:
        counts = delivery_counts(consumer, 50)
    finally:
        consumer.close()
    redelivered = sorted(int(v[1:]) for v, n in counts.items() if n == 2)
    assert len(redelivered) == held, f"{held} held by the killed consumer, {redelivered} came back"
    print(f"killed consumer: {held} held, {len(redelivered)} redelivered after the lock")


def test_records_of_a_consumer_closed_unacknowledged_are_redelivered(
    broker: BrokerProcess,
) -> None:
    topic, group = unique("share-closed"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 30)
    first = share_consumer(broker.bootstrap, group, explicit=True)
    first.subscribe([topic])
    try:
        held = drain([first], 1, "records for the first consumer")
    finally:
        first.close()
    second = share_consumer(broker.bootstrap, group, explicit=True)
    second.subscribe([topic])
    try:
        seen = delivery_counts(second, 30)
    finally:
        second.close()
    assert all(seen[m.value()] == 2 for m in held), "records held at close not delivered again"
    print(f"closed consumer: {len(held)} held at close, all redelivered")


def accept_committed(
    consumer: ShareConsumer, messages: list[Any], failures_allowed: bool = False
) -> set[bytes]:
    """ACCEPT the messages and commit: the values whose acknowledgement the broker confirmed
    (a refused one, allowed during a failover, leaves its record to be delivered again)."""
    for m in messages:
        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
    results = consumer.commit_sync(10)
    failed = {tp.partition for tp, error in results.items() if error is not None}
    assert failures_allowed or not failed, f"acknowledgements refused: {results}"
    return {m.value() for m in messages if m.partition() not in failed}


def test_a_killed_broker_restarts_without_losing_acknowledgements(
    broker_factory: Any,
) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic, group = unique("share-restart"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 300)
    before = share_consumer(broker.bootstrap, group, explicit=True, **{"max.poll.records": 40})
    before.subscribe([topic])
    accepted: set[bytes] = set()
    held: list[Any] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while len(accepted) < 120:
            assert time.monotonic() < deadline, f"{len(accepted)} accepted after {WAIT_S} s"
            accepted |= accept_committed(before, poll_values(before, 0.3))
        while not held:
            assert time.monotonic() < deadline, f"nothing more to hold after {WAIT_S} s"
            held = poll_values(before, 0.3)  # acquired, never acknowledged
        broker.kill()
    finally:
        before.close()
    broker.start()
    after = share_consumer(broker.bootstrap, group, explicit=True, **{"max.poll.records": 50})
    after.subscribe([topic])
    delivered: dict[bytes, int] = {}
    try:
        deadline = time.monotonic() + WAIT_S
        while len(delivered) < 300 - len(accepted):
            assert time.monotonic() < deadline, (
                f"{len(delivered)} of {300 - len(accepted)} after the restart in {WAIT_S} s"
            )
            got = poll_values(after, 0.3)
            for m in got:
                assert m.value() not in accepted, f"{m.value()!r} was accepted before the restart"
                delivered[m.value()] = m.delivery_count()
            accept_committed(after, got)
    finally:
        after.close()
    everything = {f"v{i}".encode() for i in range(300)}
    assert set(delivered) == everything - accepted
    assert all(delivered[m.value()] >= 1 for m in held)
    redelivered = sum(1 for n in delivered.values() if n > 1)
    print(f"restart: {len(accepted)} accepted before, {len(delivered)} after, "
          f"{len(held)} held at the kill, {redelivered} with delivery count > 1")  # fmt: skip


def test_list_and_describe_share_groups_and_refuse_a_classic_id(broker: BrokerProcess) -> None:
    topic, group = unique("share-describe"), unique("share-g")
    create_topic(broker.bootstrap, topic, 2)
    produce_values(broker.bootstrap, topic, 2, 10)
    members = [share_consumer(broker.bootstrap, group, explicit=False) for _ in range(2)]
    classic_group = unique("classic-g")
    classic = make_consumer(broker.bootstrap, group_id=classic_group)
    classic.subscribe([topic])
    try:
        for m in members:
            m.subscribe([topic])
        drain(members, 10, "records")
        wait_until(lambda: classic.poll(0.2) is not None, WAIT_S, "the classic consumer to read")
        with WireConnection(broker.bootstrap, 10) as conn:

            def described() -> Any:
                g = describe_share_group(conn, group)
                assigned = sorted(
                    p for m in g.members for t in m.assignment.topic_partitions
                    for p in t.partitions
                )  # fmt: skip
                current = all(m.member_epoch == g.assignment_epoch for m in g.members)
                return g if len(g.members) == 2 and assigned == [0, 1] and current else None

            g = wait_until(
                described, WAIT_S, "both members at the group's epoch, one partition each"
            )
            assert g.error_code == 0 and g.group_state == "Stable"
            assert {m.subscribed_topic_names for m in g.members} == {(topic,)}

            listed = conn.request(
                LIST_GROUPS, {"states_filter": (), "types_filter": ("share",)}, version=5
            )
            shares = {x.group_id: x.group_type for x in listed.groups}
            assert shares[group] == "share" and set(shares.values()) == {"share"}
            assert classic_group not in shares
            everything = conn.request(
                LIST_GROUPS, {"states_filter": (), "types_filter": ()}, version=5
            )
            types = {x.group_id: x.group_type for x in everything.groups}
            assert types[group] == "share" and types[classic_group] == "classic"

            answer = conn.request(
                SHARE_GROUP_DESCRIBE,
                {"group_ids": (classic_group,), "include_authorized_operations": False},
                version=1,
            )
            assert answer.groups[0].error_code == 69  # GROUP_ID_NOT_FOUND
            refused = conn.request(
                SHARE_GROUP_HEARTBEAT,
                {
                    "group_id": classic_group,
                    "member_id": uuid.uuid4().hex,
                    "member_epoch": 0,
                    "rack_id": None,
                    "subscribed_topic_names": (topic,),
                },
                version=1,
            )
            assert refused.error_code == 69, refused
            assert "classic" in (refused.error_message or "")
            joined = conn.request(
                11,  # JoinGroup, a classic member in the share group's id
                {
                    "group_id": group,
                    "session_timeout": datetime.timedelta(seconds=10),
                    "rebalance_timeout": datetime.timedelta(seconds=10),
                    "member_id": "",
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": (JoinGroupRequestProtocol(name="range", metadata=b""),),
                },
                version=5,
            )
            assert joined.error_code == 23, joined  # INCONSISTENT_GROUP_PROTOCOL
            consumer_member = conn.request(
                68,  # ConsumerGroupHeartbeat (KIP-848) in the share group's id
                {
                    "group_id": group,
                    "member_id": uuid.uuid4().hex,
                    "member_epoch": 0,
                    "instance_id": None,
                    "rack_id": None,
                    "rebalance_timeout": datetime.timedelta(seconds=10),
                    "subscribed_topic_names": (topic,),
                    "server_assignor": None,
                    "topic_partitions": (),
                },
                version=0,
            )
            assert consumer_member.error_code == 69, consumer_member  # GROUP_ID_NOT_FOUND
    finally:
        classic.close()
        for m in members:
            m.close()


def test_a_killed_partition_leader_hands_over_without_losing_acknowledgements(
    cluster_factory: Any,
) -> None:
    cluster = cluster_factory(config={**BROKER_CONFIG, "offsets.topic.replication.factor": "3"})
    topic, group = unique("share-failover"), unique("share-g")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=10)[topic].result(timeout=20)
    produce_values(cluster.bootstrap, topic, 1, 300)
    before = share_consumer(cluster.bootstrap, group, explicit=True, **{"max.poll.records": 40})
    before.subscribe([topic])
    accepted: set[bytes] = set()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(accepted) < 120:
            assert time.monotonic() < deadline, f"{len(accepted)} accepted after {WAIT_S} s"
            accepted |= accept_committed(before, poll_values(before, 0.3))
    finally:
        before.close()
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    cluster.node(leader).kill()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    after = share_consumer(survivors, group, explicit=True, **{"max.poll.records": 50})
    after.subscribe([topic])
    delivered: dict[bytes, int] = {}
    accepted_after: set[bytes] = set()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(accepted_after) < 300 - len(accepted):
            assert time.monotonic() < deadline, (
                f"{len(accepted_after)} of {300 - len(accepted)} after the failover in {WAIT_S} s"
            )
            got = poll_values(after, 0.3)
            for m in got:
                assert m.value() not in accepted, f"{m.value()!r} was accepted before the kill"
                delivered[m.value()] = m.delivery_count()
            confirmed = accept_committed(after, got, failures_allowed=True)
            twice = confirmed & accepted_after
            assert not twice, f"accepted twice: {sorted(twice)[:5]}"
            accepted_after |= confirmed
    finally:
        after.close()
    assert set(delivered) == {f"v{i}".encode() for i in range(300)} - accepted
    redelivered = sum(1 for n in delivered.values() if n > 1)
    print(f"failover: {len(accepted)} accepted before, {len(delivered)} after, "
          f"{redelivered} redelivered")  # fmt: skip


def test_groups_describe_cli_shows_a_share_groups_partitions(broker: BrokerProcess) -> None:
    topic, group = unique("share-cli"), unique("share-g")
    create_topic(broker.bootstrap, topic, 1)
    produce_values(broker.bootstrap, topic, 1, 20)
    consumer = share_consumer(broker.bootstrap, group, explicit=True, **{"max.poll.records": 20})
    consumer.subscribe([topic])
    try:
        got = drain([consumer], 1, "records")
        for m in got:
            kind = AcknowledgeType.REJECT if m.offset() < 2 else AcknowledgeType.ACCEPT
            consumer.acknowledge(m, kind if m.offset() < 12 else AcknowledgeType.RELEASE)
        consumer.commit_sync(10)
    finally:
        consumer.close()
    assert len(got) == 20, f"one poll of 20 records expected, got {len(got)}"
    result = run_raftka("groups", "describe", group, "--bootstrap-servers", broker.bootstrap,
                        "--output", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["partitions"]
    # Offsets 0-1 rejected, 2-11 accepted: the start moved past them; 12-19 released.
    assert row["topic"] == topic and row["start_offset"] == 12 and row["log_end_offset"] == 20
    assert row["in_flight_available"] == 8 and row["acknowledged"] == 0
    table = run_raftka("groups", "describe", group, "--bootstrap-servers", broker.bootstrap)
    assert table.returncode == 0 and "IN-FLIGHT" in table.stdout, table.stderr
