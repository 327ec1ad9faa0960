"""Share-group administration against a real broker: DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups (over our wire client, as
confluent-kafka lacks them) with confluent-kafka's ShareConsumer reading, and a member's share
session outliving its leave (for its last acknowledgements) but not its connection."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import error_codes, make_producer, retry_retriable, run_raftka, unique, wait_until
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType
from harness import BrokerProcess
from test_authorization import TIMEOUT_S, SecuredBroker, create_topics, grant
from test_authorization import secured as secured  # noqa: F401  (the broker fixture)

from raftka.broker.admin.wire import WireConnection

DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS, DELETE_GROUPS = 90, 91, 92, 42
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
NONE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 0, 68, 69
INVALID_RECORD_STATE = 121
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 30, 29
# Locks and share sessions outlive the test: a record comes back within it only if
# something released it.
LOCK_MS = 60_000
BROKER_CONFIG = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "60000",
    "share.auto.offset.reset": "earliest",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}
WAIT_S = 20
RECORDS = 20


@pytest.fixture(scope="module")
def broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(BROKER_CONFIG, name="share-admin")


def create_topic(bootstrap: str, name: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name].result(timeout=20)
    producer = make_producer(bootstrap)
    for i in range(RECORDS):
        producer.produce(name, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    return topic_id(bootstrap, name)


def topic_id(bootstrap: str, name: str) -> uuid.UUID:
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    with WireConnection(bootstrap, 10) as conn:
        answer = conn.request(
            3,
            {
                "topics": (MetadataRequestTopic(topic_id=None, name=name),),
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
            version=12,
        )
    (topic,) = answer.topics
    return topic.topic_id


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "implicit",
        }
    )
    consumer.subscribe([topic])
    return consumer


def read_offsets(consumer: ShareConsumer, count: int) -> list[int]:
    """The offsets of `count` records polled (implicitly acknowledged)."""
    offsets: list[int] = []

    def more() -> bool:
        offsets.extend(m.offset() for m in consumer.poll(0.5) if m.error() is None)
        return len(offsets) >= count

    wait_until(more, WAIT_S, f"{count} records for the share consumer")
    return offsets


def describe(conn: WireConnection, group: str, topic: str) -> Any:
    from kio.schema.describe_share_group_offsets.v1.request import (
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )

    answer = retry_retriable(
        lambda: conn.request(
            DESCRIBE_OFFSETS,
            {
                "groups": (
                    DescribeShareGroupOffsetsRequestGroup(
                        group_id=group,
                        topics=(
                            DescribeShareGroupOffsetsRequestTopic(
                                topic_name=topic, partitions=(0,)
                            ),
                        ),
                    ),
                )
            },
            version=1,
        )
    )
    (described,) = answer.groups
    assert described.error_code == NONE, described
    ((partition,),) = [t.partitions for t in described.topics]
    assert partition.error_code == NONE, partition
    return partition


def alter(conn: WireConnection, group: str, topic: str, start: int, partitions: int = 1) -> Any:
    """AlterShareGroupOffsets: `start` for partitions 0 to `partitions` - 1 of `topic`."""
    from kio.schema.alter_share_group_offsets.v0.request import (
        AlterShareGroupOffsetsRequestPartition,
        AlterShareGroupOffsetsRequestTopic,
    )

    return retry_retriable(
        lambda: conn.request(
            ALTER_OFFSETS,
            {
                "group_id": group,
                "topics": (
                    AlterShareGroupOffsetsRequestTopic(
                        topic_name=topic,
                        partitions=tuple(
                            AlterShareGroupOffsetsRequestPartition(
                                partition_index=p, start_offset=start
                            )
                            for p in range(partitions)
                        ),
                    ),
                ),
            },
            version=0,
        )
    )


def delete_offsets(conn: WireConnection, group: str, topic: str) -> Any:
    from kio.schema.delete_share_group_offsets.v0.request import (
        DeleteShareGroupOffsetsRequestTopic,
    )

    return retry_retriable(
        lambda: conn.request(
            DELETE_OFFSETS,
            {
                "group_id": group,
                "topics": (DeleteShareGroupOffsetsRequestTopic(topic_name=topic),),
            },
            version=0,
        )
    )


def delete_group(conn: WireConnection, group: str) -> int:
    answer = retry_retriable(
        lambda: conn.request(DELETE_GROUPS, {"groups_names": (group,)}, version=2)
    )
    (result,) = answer.results
    return int(result.error_code)


def test_describe_alter_and_delete_offsets_of_an_idle_share_group(broker: BrokerProcess) -> None:
    topic, group = unique("share-admin"), unique("share-admin-g")
    create_topic(broker.bootstrap, topic)
    with WireConnection(broker.bootstrap, 10) as conn:
        consumer = share_consumer(broker.bootstrap, group, topic)
        try:
            assert sorted(read_offsets(consumer, RECORDS)) == list(range(RECORDS))
            consumer.poll(0.5)  # sends the implicit acknowledgements
            wait_until(
                lambda: describe(conn, group, topic).start_offset == RECORDS,
                WAIT_S,
                "the acknowledged records to move the share-partition start offset",
            )
            assert describe(conn, group, topic).lag == 0
            refused = alter(conn, group, topic, 5)
            assert refused.error_code == NON_EMPTY_GROUP, refused
            refused_delete = delete_offsets(conn, group, topic)
            assert refused_delete.error_code == NON_EMPTY_GROUP, refused_delete
            assert delete_group(conn, group) == NON_EMPTY_GROUP
        finally:
            consumer.close()

        # The member left on close: its start offset can be moved back.
        altered = wait_until(
            lambda: (a := alter(conn, group, topic, 5)).error_code != NON_EMPTY_GROUP and a,
            WAIT_S,
            "the closed consumer to leave the group",
        )
        assert altered.error_code == NONE, altered
        assert [p.error_code for t in altered.responses for p in t.partitions] == [NONE]
        described = describe(conn, group, topic)
        assert (described.start_offset, described.lag) == (5, RECORDS - 5)
        consumer = share_consumer(broker.bootstrap, group, topic)
        try:
            assert sorted(read_offsets(consumer, RECORDS - 5)) == list(range(5, RECORDS))
        finally:
            consumer.close()

        # Deleted offsets: the next member starts per share.auto.offset.reset (earliest).
        deleted = wait_until(
            lambda: (d := delete_offsets(conn, group, topic)).error_code != NON_EMPTY_GROUP and d,
            WAIT_S,
            "the closed consumer to leave the group",
        )
        assert deleted.error_code == NONE, deleted
        assert [t.error_code for t in deleted.responses] == [NONE]
        assert describe(conn, group, topic).start_offset == -1
        consumer = share_consumer(broker.bootstrap, group, topic)
        try:
            assert sorted(read_offsets(consumer, RECORDS)) == list(range(RECORDS))
            consumer.poll(0.5)
        finally:
            consumer.close()

        # DeleteGroups: the group and its state go; a new member starts afresh again.
        wait_until(
            lambda: describe(conn, group, topic).start_offset == RECORDS,
            WAIT_S,
            "the acknowledgements of the third consumer to be persisted",
        )
        wait_until(
            lambda: delete_group(conn, group) != NON_EMPTY_GROUP,
            WAIT_S,
            "the third consumer to leave the group",
        )
        assert describe(conn, group, topic).start_offset == -1
        assert delete_group(conn, group) == GROUP_ID_NOT_FOUND
        consumer = share_consumer(broker.bootstrap, group, topic)
        try:
            assert sorted(read_offsets(consumer, RECORDS)) == list(range(RECORDS))
        finally:
            consumer.close()


def share_heartbeat(conn: WireConnection, group: str, member: str, topic: str, epoch: int) -> Any:
    """A ShareGroupHeartbeat of `member` (joining `topic` at epoch 0), retried while
    retriable. Joining looks the coordinator up first, as a client does: the first
    FindCoordinator creates `__consumer_offsets`, without which no broker coordinates."""
    if epoch == 0:
        conn.request(10, {"key_type": 0, "coordinator_keys": (group,)}, version=4)
    return retry_retriable(
        lambda: conn.request(
            SHARE_GROUP_HEARTBEAT,
            {
                "group_id": group,
                "member_id": member,
                "member_epoch": epoch,
                "rack_id": None,
                "subscribed_topic_names": (topic,) if epoch == 0 else None,
            },
            version=1,
        )
    )


def acquired(conn: WireConnection, group: str, member: str, tid: uuid.UUID, index: int) -> int:
    """How many records of partition `index` one ShareFetch (opening a session) acquires."""
    from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic

    answer = conn.request(
        SHARE_FETCH,
        {
            "group_id": group,
            "member_id": member,
            "share_session_epoch": 0,
            "max_wait": datetime.timedelta(milliseconds=500),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": (
                FetchTopic(
                    topic_id=tid,
                    partitions=(FetchPartition(partition_index=index, acknowledgement_batches=()),),
                ),
            ),
            "forgotten_topics_data": (),
        },
        version=1,
    )
    return sum(
        r.last_offset - r.first_offset + 1
        for t in answer.responses
        for p in t.partitions
        for r in p.acquired_records
    )


def join_and_acquire_all(
    conn: WireConnection, group: str, member: str, topic: str, tid: uuid.UUID
) -> None:
    """`member` joins `group` and acquires every record of `topic`'s partition 0."""
    joined = share_heartbeat(conn, group, member, topic, 0)
    assert joined.error_code == NONE, joined
    wait_until(
        lambda: acquired(conn, group, member, tid, 0) == RECORDS,
        WAIT_S,
        "the member to acquire every record",
    )


def share_acknowledge(
    conn: WireConnection,
    group: str,
    member: str,
    tid: uuid.UUID,
    last: int,
    epoch: int,
    more: tuple[tuple[int, int], ...] = (),
) -> Any:
    """ShareAcknowledge: ACCEPT offsets 0 to `last` of partition 0 in share session `epoch`,
    and the (first, last) ranges of `more` as batches of their own."""
    from kio.schema.share_acknowledge.v1.request import (
        AcknowledgementBatch,
        AcknowledgePartition,
        AcknowledgeTopic,
    )

    batches = tuple(
        AcknowledgementBatch(first_offset=first, last_offset=end, acknowledge_types=(1,))
        for first, end in ((0, last), *more)
    )
    return conn.request(
        SHARE_ACKNOWLEDGE,
        {
            "group_id": group,
            "member_id": member,
            "share_session_epoch": epoch,
            "topics": (
                AcknowledgeTopic(
                    topic_id=tid,
                    partitions=(
                        AcknowledgePartition(partition_index=0, acknowledgement_batches=batches),
                    ),
                ),
            ),
        },
        version=1,
    )


def test_a_member_acknowledges_after_leaving_and_its_closed_connection_releases_the_rest(
    broker: BrokerProcess,
) -> None:
    """Leaving the group does not end a member's share session (librdkafka's close sends
    the leave and its last acknowledgements at once; Kafka's session lasts until its final
    epoch or until its connection closes): an acknowledgement after the leave is accepted
    and its records are not delivered again, and the records still held come back as soon
    as the connection closes, long before their lock would run out."""
    topic, group = unique("share-leave"), unique("share-leave-g")
    tid = create_topic(broker.bootstrap, topic)
    member, half = uuid.uuid4().hex, RECORDS // 2
    with WireConnection(broker.bootstrap, 10) as conn:

        def heartbeat(epoch: int) -> Any:
            return share_heartbeat(conn, group, member, topic, epoch)

        joined = heartbeat(0)
        assert joined.error_code == NONE, joined
        wait_until(
            lambda: acquired(conn, group, member, tid, 0) == RECORDS,
            WAIT_S,
            "the member to acquire every record",
        )
        left = heartbeat(-1)
        assert left.error_code == NONE, left
        # The session opened by the ShareFetch that acquired the records is at epoch 1.
        answer = share_acknowledge(conn, group, member, tid, half - 1, epoch=1)
        assert answer.error_code == NONE, answer
        assert [p.error_code for t in answer.responses for p in t.partitions] == [NONE], answer
    # WAIT_S is well under the lock: the records come back only because they were released.
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(read_offsets(consumer, RECORDS - half)) == list(range(half, RECORDS))
    finally:
        consumer.close()


def test_a_closed_connection_releases_the_records_its_share_session_held(
    broker: BrokerProcess,
) -> None:
    """A member that stays in its group but whose connection closes (a client killed, a
    network cut) has its share session there ended: the records it held are delivered to
    another consumer at once, not after their lock."""
    topic, group = unique("share-dropped"), unique("share-dropped-g")
    tid = create_topic(broker.bootstrap, topic)
    member = uuid.uuid4().hex
    with WireConnection(broker.bootstrap, 10) as conn:
        join_and_acquire_all(conn, group, member, topic, tid)
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(read_offsets(consumer, RECORDS)) == list(range(RECORDS))
    finally:
        consumer.close()


def test_cli_resets_and_deletes_a_share_group(broker: BrokerProcess) -> None:
    topic, group = unique("share-cli"), unique("share-cli-g")
    create_topic(broker.bootstrap, topic)
    bootstrap = ("--bootstrap-servers", broker.bootstrap)
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(read_offsets(consumer, RECORDS)) == list(range(RECORDS))
        consumer.poll(0.5)
        refused = run_raftka(
            "groups", "reset-offsets", group, "--topic", topic, "--shift-by", "-5", "--execute",
            *bootstrap,
        )  # fmt: skip
        assert refused.returncode != 0 and "member" in refused.stderr, refused
    finally:
        consumer.close()
    with WireConnection(broker.bootstrap, 10) as conn:
        wait_until(
            lambda: describe(conn, group, topic).start_offset == RECORDS,
            WAIT_S,
            "the acknowledgements to be persisted",
        )

    def reset() -> Any:
        result = run_raftka(
            "groups", "reset-offsets", group, "--topic", topic, "--shift-by", "-5", "--execute",
            "--output", "json", *bootstrap,
        )  # fmt: skip
        return result.returncode == 0 and result

    result = wait_until(reset, WAIT_S, "the consumer to leave so its group can be reset")
    (row,) = json.loads(result.stdout)["partitions"]
    assert (row["current_offset"], row["new_offset"]) == (RECORDS, RECORDS - 5)
    described = run_raftka("groups", "describe", group, "--output", "json", *bootstrap)
    assert described.returncode == 0, described.stderr
    (persisted,) = json.loads(described.stdout)["partitions"]
    assert persisted["start_offset"] == RECORDS - 5
    consumer = share_consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(read_offsets(consumer, 5)) == list(range(RECORDS - 5, RECORDS))
    finally:
        consumer.close()

    deleted = wait_until(
        lambda: (r := run_raftka("groups", "delete", group, *bootstrap)).returncode == 0 and r,
        WAIT_S,
        "the consumer to leave so its group can be deleted",
    )
    assert group in deleted.stdout
    gone = run_raftka("groups", "describe", group, *bootstrap)
    assert gone.returncode != 0 and "GROUP_ID_NOT_FOUND" in gone.stderr, gone


def test_leave_and_alter_on_partition_leaders_on_other_brokers(cluster_factory: Any) -> None:
    """In a 3-broker cluster: a member's records at each partition leader come back at
    once when it leaves and its connections close, and the start offsets altered at the
    group's coordinator are used by the other partitions' leaders."""
    cluster = cluster_factory(config={**BROKER_CONFIG, "offsets.topic.replication.factor": "3"})
    topic, group = unique("share-3"), unique("share-3-g")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=10)[topic].result(timeout=20)
    producer = make_producer(cluster.bootstrap)
    for i in range(RECORDS * 3):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0, "records still unsent after 30 s"

    # The broker answering Metadata learns the leaders of partitions it does not lead from
    # its peers' leadership gossip (every half second): wait until it names all three.
    def known_leaders() -> dict[int, int] | None:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        found = {p: meta.leader for p, meta in partitions.items()}
        return found if all(leader >= 0 for leader in found.values()) else None

    leaders = wait_until(known_leaders, WAIT_S, "a leader for every partition in Metadata")
    assert len(set(leaders.values())) > 1, f"partitions all led by one broker: {leaders}"
    tid = topic_id(cluster.nodes[0].bootstrap, topic)
    address = {n.node_id: n.bootstrap for n in cluster.nodes}
    member = uuid.uuid4().hex
    with WireConnection(cluster.nodes[0].bootstrap, 10) as any_conn:

        def coordinator() -> Any:
            found = any_conn.request(
                10, {"key_type": 0, "coordinator_keys": (group,)}, version=4
            ).coordinators[0]
            return found.error_code == NONE and found.node_id

        coordinator_id = wait_until(coordinator, WAIT_S, "a coordinator for the group")
    with WireConnection(address[coordinator_id], 10) as conn:

        def heartbeat(epoch: int) -> Any:
            return share_heartbeat(conn, group, member, topic, epoch)

        assert heartbeat(0).error_code == NONE
        for partition, leader in sorted(leaders.items()):
            with WireConnection(address[leader], 10) as at_leader:

                def acquire(at_leader: WireConnection = at_leader, index: int = partition) -> bool:
                    return acquired(at_leader, group, member, tid, index) == RECORDS

                wait_until(acquire, WAIT_S, f"the member to acquire partition {partition}")
        assert heartbeat(-1).error_code == NONE

        def read_all(consumer: ShareConsumer) -> list[tuple[int, int]]:
            got: list[tuple[int, int]] = []

            def more() -> bool:
                got.extend((m.partition(), m.offset()) for m in consumer.poll(0.5) if not m.error())
                return len(got) >= RECORDS * 3

            wait_until(more, WAIT_S, f"{RECORDS * 3} records (lock {LOCK_MS} ms)")
            consumer.poll(0.5)  # sends the implicit acknowledgements
            return sorted(got)

        everything = [(p, o) for p in range(3) for o in range(RECORDS)]
        consumer = share_consumer(cluster.bootstrap, group, topic)
        try:
            assert read_all(consumer) == everything
        finally:
            consumer.close()

        def alter_all() -> Any:
            answer = alter(conn, group, topic, 0, partitions=3)
            return answer.error_code != NON_EMPTY_GROUP and answer

        altered = wait_until(alter_all, WAIT_S, "the consumer to leave the group")
        assert error_codes(altered) == [NONE] * 4, altered
        consumer = share_consumer(cluster.bootstrap, group, topic)
        try:
            assert read_all(consumer) == everything
        finally:
            consumer.close()


def test_share_offsets_apis_check_group_and_topic_acls(secured: SecuredBroker) -> None:
    topic, group = unique("share-admin-acl"), unique("share-admin-acl-g")
    create_topics(secured, topic)

    def sasl(user: str) -> dict[str, str]:
        conf = secured.client(user).items()
        return {k: str(v) for k, v in conf if k.startswith(("sasl", "sec"))}

    with WireConnection(f"127.0.0.1:{secured.sasl_port}", TIMEOUT_S, sasl("admin")) as conn:
        # The coordinator's __consumer_offsets is created by the first FindCoordinator.
        conn.request(10, {"key_type": 0, "coordinator_keys": (group,)}, version=4)
    with WireConnection(f"127.0.0.1:{secured.sasl_port}", TIMEOUT_S, sasl("alice")) as conn:

        def described() -> tuple[int, list[int]]:
            from kio.schema.describe_share_group_offsets.v1.request import (
                DescribeShareGroupOffsetsRequestGroup,
                DescribeShareGroupOffsetsRequestTopic,
            )

            request = DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=(DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),),
            )
            answer = retry_retriable(
                lambda: conn.request(DESCRIBE_OFFSETS, {"groups": (request,)}, version=1)
            )
            (g,) = answer.groups
            return g.error_code, [p.error_code for t in g.topics for p in t.partitions]

        def altered() -> tuple[int, list[int]]:
            answer = alter(conn, group, topic, 0)
            return answer.error_code, [p.error_code for t in answer.responses for p in t.partitions]

        def deleted() -> tuple[int, list[int]]:
            answer = delete_offsets(conn, group, topic)
            return answer.error_code, [t.error_code for t in answer.responses]

        refused = (GROUP_AUTHORIZATION_FAILED, [])
        assert (described(), altered(), deleted()) == (refused, refused, refused)
        assert delete_group(conn, group) == GROUP_AUTHORIZATION_FAILED
        grant(secured, "User:alice", AclOperation.DESCRIBE, ResourceType.GROUP, group)
        assert described() == (NONE, [TOPIC_AUTHORIZATION_FAILED])
        grant(secured, "User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        assert described() == (NONE, [NONE])
        assert altered() == refused
        grant(secured, "User:alice", AclOperation.READ, ResourceType.GROUP, group)
        assert altered() == (NONE, [TOPIC_AUTHORIZATION_FAILED])
        assert deleted() == refused
        grant(secured, "User:alice", AclOperation.READ, ResourceType.TOPIC, topic)
        assert altered() == (NONE, [NONE])
        grant(secured, "User:alice", AclOperation.DELETE, ResourceType.GROUP, group)
        assert deleted() == (NONE, [NONE])


def test_an_acknowledgement_with_a_batch_not_acquired_changes_no_record(
    broker: BrokerProcess,
) -> None:
    """A partition's acknowledgement batches apply together or not at all, as in Kafka: one
    batch of offsets the member does not hold fails the partition's acknowledgement with
    INVALID_RECORD_STATE and leaves every record as it was, so the same ACCEPT sent again
    alone succeeds (had the valid batch been applied, it would be refused now)."""
    topic, group = unique("share-ack-whole"), unique("share-ack-whole-g")
    tid = create_topic(broker.bootstrap, topic)
    member, half = uuid.uuid4().hex, RECORDS // 2
    with WireConnection(broker.bootstrap, 10) as conn:
        join_and_acquire_all(conn, group, member, topic, tid)
        # Offsets past the last record were never acquired by anyone.
        refused = share_acknowledge(
            conn, group, member, tid, half - 1, epoch=1, more=((RECORDS + 5, RECORDS + 5),)
        )
        assert [p.error_code for t in refused.responses for p in t.partitions] == [
            INVALID_RECORD_STATE
        ], refused
        again = share_acknowledge(conn, group, member, tid, half - 1, epoch=2)
        assert [p.error_code for t in again.responses for p in t.partitions] == [NONE], again
