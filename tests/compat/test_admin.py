"""Admin operations beyond create/delete: configs, partitions, records, cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def test_incremental_alter_configs_changes_topic_config(bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=1)
    admin = _admin(bootstrap)
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(timeout=10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    reset = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([reset])[reset].result(timeout=10)
    configs = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(
        timeout=10
    )
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_alter_configs_rejects_unknown_config(bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=1)
    admin = _admin(bootstrap)
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as failure:
        admin.incremental_alter_configs([resource])[resource].result(timeout=10)
    assert failure.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_create_partitions_grows_topic(bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=2)
    admin = _admin(bootstrap)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 5:
            break
        time.sleep(0.1)
    assert len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 5
    _produce(bootstrap, topic, 4, 3)

    with pytest.raises(KafkaException) as failure:
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=10)
    assert failure.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_delete_records_advances_log_start(bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=1)
    _produce(bootstrap, topic, 0, 10)
    admin = _admin(bootstrap)
    target = TopicPartition(topic, 0, 4)
    deleted = admin.delete_records([target])[target].result(timeout=10)
    assert deleted.low_watermark == 4
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
    finally:
        consumer.close()


def test_describe_cluster(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    cluster = admin.describe_cluster().result(timeout=10)
    assert cluster.cluster_id
    host, port = bootstrap.rsplit(":", 1)
    assert any(node.port == int(port) for node in cluster.nodes)
