"""ACLs on the data, group and transaction APIs, as real clients meet them: one broker with
the StandardAuthorizer, `User:admin` its super user, alice and bob on a SASL_PLAINTEXT
listener, and ACLs created by admin with the confluent-kafka AdminClient (CreateAcls).

Each test uses its own topics and groups, so the ACLs of one never grant another's. What a
refused client reports (librdkafka's error name and text) is asserted by error code and
printed with `-s`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest
from brokers import Brokers
from clients import unique
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from secured import SaslBroker, start_sasl_broker

TIMEOUT_S = 30
USERS = ("admin", "alice", "bob")
RECORDS = 3


@dataclass
class SecuredBroker(SaslBroker):
    """The broker, with its super user's AdminClient as `admin`."""

    def __post_init__(self) -> None:
        self.admin = AdminClient(self.client("admin"))


@pytest.fixture(scope="module")
def secured(module_brokers: Brokers) -> SecuredBroker:
    started = start_sasl_broker(module_brokers, USERS, name="authz-broker")
    return SecuredBroker(started.broker, started.sasl_port)


def create_topics(secured: SecuredBroker, *names: str) -> None:
    """Create topics as admin and wait until each has a leader."""
    futures = secured.admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1) for name in names],
        operation_timeout=TIMEOUT_S,
        request_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        topics = secured.admin.list_topics(timeout=TIMEOUT_S).topics
        if all(
            name in topics
            and topics[name].error is None
            and topics[name].partitions
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name in names
        ):
            return
        assert time.monotonic() < deadline, f"no leader for {names} in time"
        time.sleep(0.1)


def grant(
    secured: SecuredBroker,
    principal: str,
    operation: AclOperation,
    restype: ResourceType,
    name: str,
    *,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> None:
    binding = AclBinding(restype, name, pattern, principal, "*", operation, permission)
    futures = secured.admin.create_acls([binding], request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def produce(secured: SecuredBroker, user: str, topic: str, **extra: Any) -> list[KafkaError | None]:
    """Produce RECORDS records as `user`; each one's delivery error (None: delivered)."""
    outcomes: list[KafkaError | None] = []
    producer = Producer(secured.client(user, **{"message.timeout.ms": 20000, **extra}))
    for i in range(RECORDS):
        producer.produce(
            topic, f"{user}-{i}".encode(), on_delivery=lambda err, _msg: outcomes.append(err)
        )
    assert producer.flush(TIMEOUT_S) == 0, "delivery reports did not all come back"
    return outcomes


def high_watermark(secured: SecuredBroker, topic: str) -> int:
    consumer = Consumer(secured.client("admin", **{"group.id": unique("wm-")}))
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1])
    finally:
        consumer.close()


def consume(
    secured: SecuredBroker, user: str, topic: str, group: str, timeout_s: float = TIMEOUT_S
) -> tuple[list[bytes], KafkaError | None]:
    """Consume `topic` from the start as `user` in `group` until RECORDS records or the first
    error: (values, error)."""
    consumer = Consumer(
        secured.client(
            user,
            **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
        )
    )
    values: list[bytes] = []
    error: KafkaError | None = None
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < RECORDS and error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                error = message.error()
            else:
                values.append(message.value())
    finally:
        consumer.close()
    return values, error


def report(what: str, error: KafkaError | KafkaException | None) -> None:
    print(f"\n{what}: {error!r}")


# -- produce -----------------------------------------------------------------------------------


def test_alice_cannot_produce_without_write_and_nothing_is_stored(secured: SecuredBroker) -> None:
    topic = unique("authz-produce-")
    create_topics(secured, topic)
    refused = produce(secured, "alice", topic)
    assert all(err is not None for err in refused), refused
    assert {err.code() for err in refused if err is not None} == {
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    }
    report("producer without WRITE, delivery report", refused[0])
    assert refused[0] is not None and refused[0].str() == "Broker: Topic authorization failed"
    assert high_watermark(secured, topic) == 0

    grant(secured, "User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic)
    assert produce(secured, "alice", topic) == [None] * RECORDS
    assert high_watermark(secured, topic) == RECORDS


def test_an_idempotent_producer_needs_write_on_some_topic(secured: SecuredBroker) -> None:
    topic = unique("authz-idem-")
    create_topics(secured, topic)
    # bob has no ACL at all: InitProducerId is refused (IDEMPOTENT_WRITE or WRITE on a topic),
    # which librdkafka reports as a fatal error.
    producer = Producer(secured.client("bob", **{"enable.idempotence": True}))
    producer.produce(topic, b"never")
    deadline = time.monotonic() + TIMEOUT_S
    with pytest.raises(KafkaException) as refused:
        while time.monotonic() < deadline:
            producer.poll(0.5)
    error = refused.value.args[0]
    assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED and error.fatal(), error
    report("idempotent producer without any WRITE, raised by poll", error)
    producer.purge()
    assert high_watermark(secured, topic) == 0
    grant(secured, "User:bob", AclOperation.WRITE, ResourceType.TOPIC, topic)
    assert produce(secured, "bob", topic, **{"enable.idempotence": True}) == [None] * RECORDS


def test_a_prefixed_acl_grants_every_topic_with_the_prefix(secured: SecuredBroker) -> None:
    prefix = unique("orders-") + "-"
    granted, other = f"{prefix}eu", unique("payments-")
    create_topics(secured, granted, other)
    for operation in (AclOperation.WRITE, AclOperation.READ):
        grant(
            secured,
            "User:alice",
            operation,
            ResourceType.TOPIC,
            prefix,
            pattern=ResourcePatternType.PREFIXED,
        )
    group = unique("alice-prefixed-")
    grant(secured, "User:alice", AclOperation.READ, ResourceType.GROUP, group)
    assert produce(secured, "alice", granted) == [None] * RECORDS
    values, error = consume(secured, "alice", granted, group)
    assert error is None and len(values) == RECORDS
    refused = produce(secured, "alice", other)
    assert {err.code() for err in refused if err is not None} == {
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    }


# -- consume and commit ------------------------------------------------------------------------


def test_consuming_needs_read_on_the_topic_and_on_the_group(secured: SecuredBroker) -> None:
    topic = unique("authz-consume-")
    create_topics(secured, topic)
    assert produce(secured, "admin", topic) == [None] * RECORDS
    group, other_group = unique("alice-g-"), unique("alice-other-")
    grant(secured, "User:alice", AclOperation.READ, ResourceType.GROUP, group)

    # The group allows her, the topic does not.
    values, error = consume(secured, "alice", topic, group)
    assert values == [] and error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    report("consumer without READ on the topic", error)
    assert error.str().endswith("Broker: Topic authorization failed") and topic in error.str()
    consumer = Consumer(secured.client("alice", **{"group.id": group}))
    try:
        with pytest.raises(KafkaException) as refused:
            committed = consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
            # A partition-level refusal comes back in the list; raise it like the rest.
            errors = [tp.error for tp in committed or () if tp.error is not None]
            if errors:
                raise KafkaException(errors[0])
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        report("commit without READ on the topic", refused.value)
    finally:
        consumer.close()

    # The topic allows her, this other group does not.
    grant(secured, "User:alice", AclOperation.READ, ResourceType.TOPIC, topic)
    values, error = consume(secured, "alice", topic, other_group)
    assert values == [] and error is not None
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    report("consumer without READ on the group", error)
    assert f"User:alice is not authorized to DESCRIBE group '{other_group}'" in error.str()

    # Both allow her: she reads everything and commits.
    values, error = consume(secured, "alice", topic, group)
    assert error is None and values == [f"admin-{i}".encode() for i in range(RECORDS)]
    consumer = Consumer(secured.client("alice", **{"group.id": group}))
    try:
        committed = consumer.commit(offsets=[TopicPartition(topic, 0, RECORDS)], asynchronous=False)
        assert committed is not None and committed[0].error is None
        assert consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)[0].offset == (
            RECORDS
        )
    finally:
        consumer.close()


def test_a_deny_beats_an_allow_and_the_super_user_needs_no_acl(secured: SecuredBroker) -> None:
    topic = unique("authz-deny-")
    create_topics(secured, topic)
    # No ACL names the topic yet: only the super user may use it.
    assert produce(secured, "admin", topic) == [None] * RECORDS
    group_prefix = unique("deny-g-")
    grant(secured, "User:*", AclOperation.READ, ResourceType.TOPIC, topic)
    grant(
        secured,
        "User:*",
        AclOperation.READ,
        ResourceType.GROUP,
        group_prefix,
        pattern=ResourcePatternType.PREFIXED,
    )
    grant(
        secured,
        "User:bob",
        AclOperation.READ,
        ResourceType.TOPIC,
        topic,
        permission=AclPermissionType.DENY,
    )
    values, error = consume(secured, "alice", topic, f"{group_prefix}alice")
    assert error is None and len(values) == RECORDS
    values, error = consume(secured, "bob", topic, f"{group_prefix}bob")
    assert values == [] and error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    values, error = consume(secured, "admin", topic, unique("admin-g-"))
    assert error is None and len(values) == RECORDS


# -- transactions and groups ---------------------------------------------------------------


def test_a_transactional_producer_needs_write_on_its_transactional_id(
    secured: SecuredBroker,
) -> None:
    topic = unique("authz-txn-")
    transactional_id = unique("alice-tx-")
    create_topics(secured, topic)
    grant(secured, "User:alice", AclOperation.WRITE, ResourceType.TOPIC, topic)
    producer = Producer(secured.client("alice", **{"transactional.id": transactional_id}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    report("init_transactions without WRITE on the transactional id", error)
    assert error.fatal() and "Broker: Transactional Id authorization failed" in error.str()

    # DESCRIBE finds the coordinator; InitProducerId still needs WRITE.
    grant(
        secured,
        "User:alice",
        AclOperation.DESCRIBE,
        ResourceType.TRANSACTIONAL_ID,
        transactional_id,
    )
    producer = Producer(secured.client("alice", **{"transactional.id": transactional_id}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    report("init_transactions with DESCRIBE but without WRITE", error)

    grant(
        secured, "User:alice", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    )
    producer = Producer(secured.client("alice", **{"transactional.id": transactional_id}))
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(topic, f"tx-{i}".encode())
    producer.commit_transaction(TIMEOUT_S)
    # RECORDS records and the COMMIT marker.
    assert high_watermark(secured, topic) == RECORDS + 1


def test_list_groups_shows_alice_only_the_groups_she_may_describe(
    secured: SecuredBroker,
) -> None:
    topic = unique("authz-groups-")
    create_topics(secured, topic)
    mine, theirs = unique("alice-list-"), unique("bob-list-")
    for group in (mine, theirs):
        consumer = Consumer(secured.client("admin", **{"group.id": group}))
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        finally:
            consumer.close()
    grant(secured, "User:alice", AclOperation.DESCRIBE, ResourceType.GROUP, mine)

    def listed(user: str) -> set[str]:
        admin = AdminClient(secured.client(user))
        result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
        return {group.group_id for group in result.valid}

    assert mine in listed("alice") and theirs not in listed("alice")
    assert {mine, theirs} <= listed("admin")
