"""Internal topics are the broker's: an admin read never creates one as an ordinary topic,
a Metadata request that may auto-create names one gets it with its own partition count and
configs (as Kafka's AutoTopicCreationManager does), `__cluster_metadata` is never a topic,
and a broker that finds one with the wrong configs says so and puts them right."""

from __future__ import annotations

from typing import Any

import pytest
from brokers import Brokers
from clients import make_producer, run_raftka, unique, wait_until
from confluent_kafka import KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from harness import BrokerProcess

from raftka.broker.admin.wire import WireConnection

STATE_PARTITIONS = 3
BROKER_CONFIG = {
    "share.auto.offset.reset": "earliest",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
}
SHARE_STATE, METADATA_LOG = "__share_group_state", "__cluster_metadata"
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, INVALID_REQUEST = 3, 5, 42
RECORDS = 10
WAIT_S = 30


@pytest.fixture
def broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(BROKER_CONFIG, name="internal-topics")


def produce_records(bootstrap: str) -> str:
    topic = unique("internal-data")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(timeout=20)
    producer = make_producer(bootstrap)
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    return topic


def share_read(bootstrap: str, topic: str) -> list[int]:
    """The offsets a new share group's consumer reads from `topic`."""
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("internal-share"),
            "share.acknowledgement.mode": "implicit",
        }
    )
    consumer.subscribe([topic])
    offsets: list[int] = []
    try:

        def more() -> bool:
            offsets.extend(m.offset() for m in consumer.poll(0.5) if m.error() is None)
            return len(offsets) >= RECORDS

        wait_until(more, WAIT_S, f"{RECORDS} records for the share consumer")
    finally:
        consumer.close()
    return sorted(offsets)


def metadata(bootstrap: str, name: str, allow_auto_topic_creation: bool) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    with WireConnection(bootstrap, 10) as conn:
        answer = conn.request(
            3,
            {
                "topics": (MetadataRequestTopic(topic_id=None, name=name),),
                "allow_auto_topic_creation": allow_auto_topic_creation,
                "include_topic_authorized_operations": False,
            },
            version=12,
        )
    (topic,) = answer.topics
    return topic


def topic_configs(bootstrap: str, name: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=20)
    return {key: entry.value for key, entry in entries.items()}


def test_describing_a_share_group_leaves_share_state_usable(broker: BrokerProcess) -> None:
    topic = produce_records(broker.bootstrap)
    described = run_raftka(
        "groups", "describe", unique("no-such-share-group"), "--bootstrap-servers",
        broker.bootstrap,
    )  # fmt: skip
    assert "Traceback" not in described.stderr, described.stderr
    state = metadata(broker.bootstrap, SHARE_STATE, allow_auto_topic_creation=False)
    assert state.error_code == UNKNOWN_TOPIC_OR_PARTITION, state
    assert share_read(broker.bootstrap, topic) == list(range(RECORDS))
    state = metadata(broker.bootstrap, SHARE_STATE, allow_auto_topic_creation=False)
    assert state.is_internal and len(state.partitions) == STATE_PARTITIONS, state


def test_metadata_auto_creation_makes_internal_topics_with_their_own_settings(
    broker: BrokerProcess,
) -> None:
    first = metadata(broker.bootstrap, SHARE_STATE, allow_auto_topic_creation=True)
    assert first.error_code in (0, LEADER_NOT_AVAILABLE), first

    def created() -> Any:
        topic = metadata(broker.bootstrap, SHARE_STATE, allow_auto_topic_creation=False)
        return topic.error_code == 0 and topic

    state = wait_until(created, WAIT_S, f"{SHARE_STATE} to be created")
    assert state.is_internal and len(state.partitions) == STATE_PARTITIONS, state
    assert topic_configs(broker.bootstrap, SHARE_STATE)["cleanup.policy"] == "compact"
    refused = metadata(broker.bootstrap, METADATA_LOG, allow_auto_topic_creation=True)
    assert refused.error_code == INVALID_REQUEST, refused
    absent = metadata(broker.bootstrap, METADATA_LOG, allow_auto_topic_creation=False)
    assert absent.error_code == UNKNOWN_TOPIC_OR_PARTITION, absent
    topic = produce_records(broker.bootstrap)
    assert share_read(broker.bootstrap, topic) == list(range(RECORDS))


def test_create_topics_does_not_make_an_internal_topic(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = "__transaction_state"
    future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST, refused.value
    assert "internal topic" in refused.value.args[0].str()
    absent = metadata(broker.bootstrap, name, allow_auto_topic_creation=False)
    assert absent.error_code == UNKNOWN_TOPIC_OR_PARTITION, absent


def test_a_broker_puts_back_the_configs_an_internal_topic_relies_on(
    broker: BrokerProcess,
) -> None:
    topic = produce_records(broker.bootstrap)
    assert share_read(broker.bootstrap, topic) == list(range(RECORDS))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        SHARE_STATE,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    assert topic_configs(broker.bootstrap, SHARE_STATE)["cleanup.policy"] == "delete"
    broker.restart()
    topic = produce_records(broker.bootstrap)
    assert share_read(broker.bootstrap, topic) == list(range(RECORDS))
    wait_until(
        lambda: topic_configs(broker.bootstrap, SHARE_STATE)["cleanup.policy"] == "compact",
        WAIT_S,
        f"{SHARE_STATE} to be compacted again",
    )
    log = broker.log_path.read_text()
    assert f"{SHARE_STATE} has cleanup.policy=delete" in log, log[-2000:]
