"""Group configs (Kafka 4's GROUP config resources, `kafka-configs --entity-type groups`):
set per group with IncrementalAlterConfigs, checked against the broker's bounds as Kafka
checks them, described with their sources, and used by a share group in place of the
broker-wide values."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clients import make_producer, unique, wait_until
from confluent_kafka import KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from harness import BrokerProcess

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}


GROUP_CONFIG_SOURCE = 8  # Kafka 4's DescribeConfigs source of a group's own config
DEFAULT_SOURCE = 5


def _alter(admin: AdminClient, group: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource("group", group, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)


def _set(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def test_a_share_group_starts_where_its_own_auto_offset_reset_says(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic, group = unique("group-cfg"), unique("share-g")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    producer = make_producer(broker.bootstrap, linger_ms=5)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0

    # The broker starts share groups at the latest offset; this group asks for earliest.
    # (kafka-configs --alter --entity-type groups --entity-name G --add-config ...)
    _alter(admin, group, _set("share.auto.offset.reset", "earliest"))
    resource = ConfigResource("group", group)
    described = admin.describe_configs([resource])[resource].result(timeout=15)
    reset = described["share.auto.offset.reset"]
    assert (reset.value, reset.source) == ("earliest", GROUP_CONFIG_SOURCE)
    # A config the group does not set is the broker's value, as Kafka reports it.
    lock = described["share.record.lock.duration.ms"]
    assert (lock.value, lock.source, lock.is_read_only) == ("30000", DEFAULT_SOURCE, False)

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    received: list[bytes] = []
    try:

        def all_ten() -> bool:
            received.extend(m.value() for m in consumer.poll(0.5) if m.error() is None)
            return len(received) >= 10

        wait_until(all_ten, 40, "the records produced before the group existed")
    finally:
        consumer.close()
    assert sorted(received) == sorted(f"v{i}".encode() for i in range(10))


def test_group_configs_are_checked_against_the_brokers_bounds(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(BROKER_CONFIG)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = unique("bounded")
    for entry, words in [
        (_set("share.record.lock.duration.ms", "5000"), "group.share.min.record.lock.duration.ms"),
        (_set("share.session.timeout.ms", "90000"), "group.share.max.session.timeout.ms"),
        (_set("consumer.heartbeat.interval.ms", "100"), "group.consumer.min.heartbeat.interval.ms"),
        (_set("share.auto.offset.reset", "middle"), "share.auto.offset.reset"),
        (_set("no.such.config", "1"), "Unknown group config name"),
    ]:
        with pytest.raises(KafkaException) as failure:
            _alter(admin, group, entry)
        error = failure.value.args[0]
        assert error.code() == KafkaError.INVALID_CONFIG, entry
        assert words in error.str(), error.str()
    _alter(admin, group, _set("share.record.lock.duration.ms", "20000"))
    resource = ConfigResource("group", group)
    described = admin.describe_configs([resource])[resource].result(timeout=15)
    assert described["share.record.lock.duration.ms"].value == "20000"
    assert described["share.heartbeat.interval.ms"].value == "500"  # the broker's
