"""Kafka's ACLs on Metadata and the admin APIs, with real clients: one broker with the
StandardAuthorizer, `super.users=User:admin`, and a SASL_PLAINTEXT listener for admin and
alice. The super user grants ACLs with the confluent-kafka AdminClient (`create_acls`);
alice sees and changes only what they allow, through confluent-kafka and `raftka topics`."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from brokers import Brokers
from clients import run_raftka, unique
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient
from kafka.errors import ClusterAuthorizationFailedError
from secured import SaslBroker, password, start_sasl_broker

TIMEOUT_S = 30
USERS = ("admin", "alice")


class SecuredBroker(SaslBroker):
    def admin(self, user: str) -> AdminClient:
        return AdminClient(self.client(user))

    def raftka(self, user: str, *args: object) -> subprocess.CompletedProcess[str]:
        """`raftka ARGS` as `user` over the SASL listener."""
        return run_raftka(*args, "--bootstrap-servers", self.address,
                          "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                          "--sasl-username", user, "--sasl-password", password(user),
                          timeout=90)  # fmt: skip


@pytest.fixture(scope="module")
def secured(module_brokers: Brokers) -> SecuredBroker:
    started = start_sasl_broker(module_brokers, USERS, name="authz-admin-broker")
    return SecuredBroker(started.broker, started.sasl_port)


def grant(
    secured: SecuredBroker,
    operation: AclOperation,
    name: str,
    *,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    principal: str = "User:alice",
) -> None:
    """The super user adds an ALLOW binding with create_acls."""
    binding = AclBinding(restype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
    admin = secured.admin("admin")  # kept referenced: a collected client cancels its requests
    futures = admin.create_acls([binding], request_timeout=TIMEOUT_S)
    futures[binding].result(timeout=TIMEOUT_S)


def create_topics(secured: SecuredBroker, user: str, *names: str) -> dict[str, Exception | None]:
    admin = secured.admin(user)
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=1, replication_factor=1) for n in names],
        request_timeout=TIMEOUT_S,
        operation_timeout=TIMEOUT_S,
    )
    return {n: outcome(f) for n, f in futures.items()}


def outcome(future: Any) -> Exception | None:
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return exc
    return None


def code(exc: BaseException | None) -> int | None:
    if exc is None:
        return None
    assert isinstance(exc, KafkaException), repr(exc)
    error = exc.args[0]
    assert isinstance(error, KafkaError), repr(error)
    return int(error.code())


def topics_seen_by(secured: SecuredBroker, user: str) -> set[str]:
    return set(secured.admin(user).list_topics(timeout=TIMEOUT_S).topics)


def wait_for_topic(secured: SecuredBroker, name: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while name not in topics_seen_by(secured, "admin"):
        assert time.monotonic() < deadline, f"topic {name} never appeared"
        time.sleep(0.2)


# -- Metadata --------------------------------------------------------------------------------


def test_list_topics_shows_only_topics_alice_may_describe(secured: SecuredBroker) -> None:
    mine, readable, hidden = unique("alice-own"), unique("shared"), unique("hidden")
    assert create_topics(secured, "admin", mine, readable, hidden) == dict.fromkeys(
        [mine, readable, hidden]
    )
    grant(secured, AclOperation.DESCRIBE, mine)
    grant(secured, AclOperation.READ, readable)  # READ implies DESCRIBE
    seen = topics_seen_by(secured, "alice")
    assert mine in seen and readable in seen
    assert hidden not in seen
    assert {mine, readable, hidden} <= topics_seen_by(secured, "admin")
    # Asked for by name, the hidden topic is denied, not reported missing.
    named = secured.admin("alice").list_topics(topic=hidden, timeout=TIMEOUT_S).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_raftka_topics_list_as_alice_shows_only_hers(secured: SecuredBroker) -> None:
    prefix = unique("alice-cli") + "-"
    mine, other = prefix + "a", unique("other")
    create_topics(secured, "admin", mine, other)
    grant(secured, AclOperation.DESCRIBE, prefix, pattern=ResourcePatternType.PREFIXED)
    listed = secured.raftka("alice", "topics", "list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert mine in listed.stdout and other not in listed.stdout
    by_admin = secured.raftka("admin", "topics", "list")
    assert by_admin.returncode == 0 and mine in by_admin.stdout and other in by_admin.stdout


def test_auto_creation_by_a_producer_without_create_fails(secured: SecuredBroker) -> None:
    prefix = unique("auto") + "-"
    topic = prefix + "t"
    grant(secured, AclOperation.WRITE, prefix, pattern=ResourcePatternType.PREFIXED)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer(secured.client("alice", **{"message.timeout.ms": 10_000}))
    producer.produce(topic, b"value", on_delivery=delivered)
    producer.flush(30)
    assert [e.code() for e in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], failures
    assert topic not in topics_seen_by(secured, "admin")


# -- CreateTopics, DeleteTopics, CreatePartitions, configs ------------------------------------


def test_alice_creates_topics_only_with_create(secured: SecuredBroker) -> None:
    prefix = unique("team") + "-"
    denied = create_topics(secured, "alice", prefix + "a")
    assert code(denied[prefix + "a"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert prefix + "a" not in topics_seen_by(secured, "admin")
    grant(secured, AclOperation.CREATE, prefix, pattern=ResourcePatternType.PREFIXED)
    assert create_topics(secured, "alice", prefix + "a") == {prefix + "a": None}
    assert prefix + "a" in topics_seen_by(secured, "admin")


def test_alice_deletes_and_grows_topics_only_with_the_acl(secured: SecuredBroker) -> None:
    topic = unique("victim")
    create_topics(secured, "admin", topic)
    alice = secured.admin("alice")

    def delete() -> int | None:
        futures = alice.delete_topics([topic], request_timeout=TIMEOUT_S)
        return code(outcome(futures[topic]))

    def grow() -> int | None:
        futures = alice.create_partitions([NewPartitions(topic, 3)], request_timeout=TIMEOUT_S)
        return code(outcome(futures[topic]))

    assert delete() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert grow() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(secured, AclOperation.ALTER, topic)
    assert grow() is None
    grant(secured, AclOperation.DELETE, topic)
    assert delete() is None
    deadline = time.monotonic() + TIMEOUT_S
    while topic in topics_seen_by(secured, "admin"):
        assert time.monotonic() < deadline, f"{topic} was not deleted"
        time.sleep(0.2)


def test_alice_alters_topic_configs_only_with_alter_configs(secured: SecuredBroker) -> None:
    prefix = unique("conf") + "-"
    topic = prefix + "t"
    create_topics(secured, "admin", topic)
    alice = secured.admin("alice")

    def alter() -> int | None:
        resource = ConfigResource(
            "topic",
            topic,
            incremental_configs=[
                ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        futures = alice.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)
        return code(outcome(futures[resource]))

    assert alter() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(secured, AclOperation.ALTER_CONFIGS, prefix, pattern=ResourcePatternType.PREFIXED)
    assert alter() is None
    resource = ConfigResource("topic", topic)
    described = alice.describe_configs([resource], request_timeout=TIMEOUT_S)
    assert described[resource].result(timeout=TIMEOUT_S)["retention.ms"].value == "60000"


def test_describing_the_broker_configs_needs_describe_configs_on_the_cluster(
    secured: SecuredBroker,
) -> None:
    broker_resource = ConfigResource("broker", "1")
    alice, admin = secured.admin("alice"), secured.admin("admin")
    futures = alice.describe_configs([broker_resource], request_timeout=TIMEOUT_S)
    assert code(outcome(futures[broker_resource])) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    futures = admin.describe_configs([broker_resource], request_timeout=TIMEOUT_S)
    assert "log.retention.ms" in futures[broker_resource].result(timeout=TIMEOUT_S)


# -- SCRAM users -----------------------------------------------------------------------------


def test_alice_cannot_list_or_alter_scram_users(secured: SecuredBroker) -> None:
    # Listing, with kafka-python: librdkafka 2.16 aborts the process on Kafka's answer here (a
    # request-level error code), so confluent-kafka is not asked.
    kp_alice = KafkaAdminClient(
        bootstrap_servers=secured.address,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=password("alice"),
    )
    try:
        with pytest.raises(ClusterAuthorizationFailedError, match="not authorized to DESCRIBE"):
            kp_alice.describe_user_scram_credentials()
    finally:
        kp_alice.close()
    alice = secured.admin("alice")
    upsertion = UserScramCredentialUpsertion(
        "mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"password"
    )
    futures = alice.alter_user_scram_credentials([upsertion], request_timeout=TIMEOUT_S)
    assert code(outcome(futures["mallory"])) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    cli = secured.raftka("alice", "users", "list")
    assert cli.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in cli.stderr, cli.stderr
    assert "User:alice" in cli.stderr and "DESCRIBE" in cli.stderr, cli.stderr
    # The super user may: the user is made and listed.
    admin = secured.admin("admin")
    futures = admin.alter_user_scram_credentials([upsertion], request_timeout=TIMEOUT_S)
    assert outcome(futures["mallory"]) is None
    assert "mallory" in secured.raftka("admin", "users", "list").stdout


# -- the CLI's denials -------------------------------------------------------------------------


def test_raftka_topics_create_as_alice_names_the_denied_operation(secured: SecuredBroker) -> None:
    topic = unique("cli-denied")
    result = secured.raftka("alice", "topics", "create", topic, "--partitions", "1")
    assert result.returncode == 1
    assert "TOPIC_AUTHORIZATION_FAILED" in result.stderr, result.stderr
    assert topic in result.stderr and "CREATE" in result.stderr, result.stderr
    assert topic not in topics_seen_by(secured, "admin")
    made = secured.raftka("admin", "topics", "create", topic, "--partitions", "1")
    assert made.returncode == 0, made.stderr
    # librdkafka drops DeleteTopics' message: the CLI names the ACL itself.
    grant(secured, AclOperation.DESCRIBE, topic)
    kept = secured.raftka("alice", "topics", "delete", topic)
    assert kept.returncode == 1
    assert "TOPIC_AUTHORIZATION_FAILED" in kept.stderr, kept.stderr
    assert f"DELETE on topic {topic}" in kept.stderr, kept.stderr
    assert topic in topics_seen_by(secured, "admin")
