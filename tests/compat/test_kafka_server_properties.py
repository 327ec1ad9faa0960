"""A broker started from Kafka's own KRaft server.properties (its data directory aside,
which the test gives) whose PLAIN users are in Kafka's JAAS form
(`listener.name.<listener>.plain.sasl.jaas.config=...PlainLoginModule required
user_alice="...";`, written over continued lines as Kafka's docs do): confluent-kafka
authenticates as alice, and a wrong password is refused."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from brokers import Brokers
from clients import wait_until
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess, free_port

PLAIN_USERS_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
    '    username="admin" \\\n'
    '    password="admin-secret" \\\n'
    '    user_admin="admin-secret" \\\n'
    '    user_alice="alice-secret";\n'
)


def server_properties(sasl_port: int, controller_port: int) -> str:
    """Kafka's config/kraft/server.properties with its PLAINTEXT listener made SASL_PLAINTEXT
    and PLAIN users, as Kafka's security docs have it."""
    return (
        "process.roles=broker,controller\n"
        "node.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{sasl_port},CONTROLLER://127.0.0.1:{controller_port}\n"
        "inter.broker.listener.name=SASL_PLAINTEXT\n"
        f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"CONTROLLER://127.0.0.1:{controller_port}\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        "sasl.mechanism.inter.broker.protocol=PLAIN\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_USERS_JAAS}"
        "num.network.threads=3\n"
        "num.io.threads=8\n"
        "socket.send.buffer.bytes=102400\n"
        "socket.receive.buffer.bytes=102400\n"
        "socket.request.max.bytes=104857600\n"
        "log.dirs=/tmp/kraft-combined-logs\n"
        "num.partitions=1\n"
        "num.recovery.threads.per.data.dir=1\n"
        "offsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
        "share.coordinator.state.topic.replication.factor=1\n"
        "share.coordinator.state.topic.min.isr=1\n"
        "log.retention.hours=168\n"
        "log.segment.bytes=1073741824\n"
        "log.retention.check.interval.ms=300000\n"
    )


@pytest.fixture(scope="module")
def sasl(module_brokers: Brokers, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    sasl_port, controller_port = free_port(), free_port()
    path: Path = tmp_path_factory.mktemp("kafka-properties") / "server.properties"
    path.write_text(server_properties(sasl_port, controller_port))
    broker: BrokerProcess = module_brokers.broker(
        name="kafka-properties", extra_args=["--config-file", str(path)]
    )
    return f"127.0.0.1:{sasl_port}", broker


def client(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        "log_level": 0,
    }


def test_alice_from_the_jaas_config_produces(sasl: tuple[str, Any]) -> None:
    bootstrap, _broker = sasl
    topic = f"jaas-{uuid.uuid4().hex[:10]}"
    producer = Producer(client(bootstrap, "alice", "alice-secret"))
    delivered: list[int] = []
    producer.produce(topic, b"hello", on_delivery=lambda err, msg: delivered.append(msg.offset()))
    assert producer.flush(30) == 0, "the record was not delivered"
    assert delivered == [0]


def test_a_wrong_password_is_refused(sasl: tuple[str, Any]) -> None:
    bootstrap, _broker = sasl
    errors: list[Any] = []
    admin = AdminClient(
        {**client(bootstrap, "alice", "not-her-password"), "error_cb": errors.append}
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    wait_until(
        lambda: admin.poll(0.1) is not None and any("Authentication" in str(e) for e in errors),
        20,
        "the authentication failure to be reported",
    )
