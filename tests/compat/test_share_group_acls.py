"""Share groups under the StandardAuthorizer, as in Kafka: ShareGroupHeartbeat needs READ on
the group, ShareFetch READ on the group and on each topic (confluent-kafka's ShareConsumer
over SASL/PLAIN for the allowed case, raw requests for the refused ones)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from clients import unique
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AclOperation, ResourceType
from test_authorization import TIMEOUT_S, SecuredBroker, create_topics, grant
from test_authorization import secured as secured  # noqa: F401  (the broker fixture)

from raftka.broker.admin.wire import WireConnection

RECORDS = 5
SHARE_GROUP_HEARTBEAT, SHARE_FETCH = 76, 78
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 30, 29
COORDINATOR_RETRIABLE = (14, 15, 16)  # load in progress, not available, not coordinator


def produce_as_admin(secured: SecuredBroker, topic: str) -> None:
    producer = Producer(secured.client("admin"))
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0, f"records to {topic} unsent after {TIMEOUT_S} s"


def wire(secured: SecuredBroker, user: str) -> WireConnection:
    security = {k: str(v) for k, v in secured.client(user).items() if k.startswith(("sasl", "sec"))}
    return WireConnection(f"127.0.0.1:{secured.sasl_port}", TIMEOUT_S, security)


def heartbeat(conn: WireConnection, group: str, topic: str) -> Any:
    return conn.request(
        SHARE_GROUP_HEARTBEAT,
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "member_epoch": 0,
            "rack_id": None,
            "subscribed_topic_names": (topic,),
        },
        version=1,
    )


def share_fetch(conn: WireConnection, group: str, topic_id: uuid.UUID) -> Any:
    from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic

    return conn.request(
        SHARE_FETCH,
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "share_session_epoch": 0,
            "max_wait": datetime.timedelta(0),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": (
                FetchTopic(
                    topic_id=topic_id,
                    partitions=(FetchPartition(partition_index=0, acknowledgement_batches=()),),
                ),
            ),
            "forgotten_topics_data": (),
        },
        version=1,
    )


def test_share_apis_need_read_on_group_and_topic(secured: SecuredBroker) -> None:
    topic, group = unique("share-acl-t"), unique("share-acl-g")
    create_topics(secured, topic)
    produce_as_admin(secured, topic)
    with wire(secured, "admin") as conn:
        metadata = conn.request(
            3,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
            version=12,
        )
        (topic_id,) = [t.topic_id for t in metadata.topics if t.name == topic]
        # The coordinator's __consumer_offsets is created by the first FindCoordinator.
        conn.request(10, {"key_type": 0, "coordinator_keys": (group,)}, version=4)
    with wire(secured, "alice") as conn:
        assert heartbeat(conn, group, topic).error_code == GROUP_AUTHORIZATION_FAILED
        assert share_fetch(conn, group, topic_id).error_code == GROUP_AUTHORIZATION_FAILED
        grant(secured, "User:alice", AclOperation.READ, ResourceType.GROUP, group)
        deadline = time.monotonic() + TIMEOUT_S
        while (code := heartbeat(conn, group, topic).error_code) in COORDINATOR_RETRIABLE:
            assert time.monotonic() < deadline, f"coordinator still answers {code}"
            time.sleep(0.2)
        assert code == 0
        fetched = share_fetch(conn, group, topic_id)
        assert fetched.error_code == 0
        (partition,) = fetched.responses[0].partitions
        assert partition.error_code == TOPIC_AUTHORIZATION_FAILED and not partition.records
    grant(secured, "User:alice", AclOperation.READ, ResourceType.TOPIC, topic)
    grant(secured, "User:alice", AclOperation.DESCRIBE, ResourceType.GROUP, group)
    consumer = ShareConsumer(secured.client("alice", **{"group.id": group}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        # A new share-partition starts at the high watermark (share.auto.offset.reset is
        # latest here): records are produced until alice's consumer has joined and reads.
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < RECORDS:
            assert time.monotonic() < deadline, f"alice got {got} in {TIMEOUT_S} s"
            produce_as_admin(secured, topic)
            got += [m.value() for m in consumer.poll(1.0) if m.error() is None]
    finally:
        consumer.close()
    assert set(got) <= {f"v{i}".encode() for i in range(RECORDS)}
