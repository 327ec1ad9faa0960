"""Dynamic broker configs as Kafka has them: per broker (the resource named by its id) and
the cluster-wide default (the empty name), changed with IncrementalAlterConfigs, described
with Kafka's sources and synonyms, stored in the cluster metadata (every broker applies them,
a restart keeps them), and applied to topics without an override of their own.

The cluster-wide default is driven by the Java admin client (what `kafka-configs
--entity-type brokers --entity-default` calls): librdkafka refuses a BROKER resource with
the empty name before sending it. Per-broker configs are driven by confluent-kafka too."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clients import create_topic, wait_until
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from harness import BrokerProcess, ClusterProcess, JavaTool
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

DEFAULT_DYN = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
PER_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value


def _set(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def _delete(name: str) -> ConfigEntry:
    return ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)


def _alter(admin: AdminClient, kind: str, name: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(kind, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)


def _describe(admin: AdminClient, kind: str, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(timeout=15)


def _value_and_source(admin: AdminClient, topic: str, name: str) -> tuple[str, int]:
    entry = _describe(admin, "topic", topic)[name]
    return entry.value, entry.source


def _set_default(java_tool: JavaTool, bootstrap: str, *ops: str) -> list[dict]:
    return java_tool.json("alter-configs", bootstrap, "broker", "", ";".join(ops))


def test_cluster_default_and_per_broker_configs_apply_to_topics_and_survive_a_restart(
    broker_factory: Callable[..., BrokerProcess], java_tool: JavaTool
) -> None:
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(broker.bootstrap, "plain")
    create_topic(broker.bootstrap, "overridden", config={"retention.ms": "5000"})
    # As Kafka 3.9 describes them: no value while only their hours/scheduler synonyms apply.
    described = _describe(admin, "broker", "1")
    for computed in ("log.retention.ms", "log.roll.ms", "log.flush.interval.ms"):
        assert described[computed].value is None, computed
    assert described["log.retention.hours"].value == "168"

    # kafka-configs --alter --entity-type brokers --entity-default --add-config ...
    ok = [{"error": None}]
    assert _set_default(java_tool, broker.bootstrap, "SET:log.retention.ms=3600000") == ok
    # --describe --entity-default: the cluster-wide dynamic configs alone, as Kafka lists them.
    assert java_tool.json("describe-configs", broker.bootstrap, "broker", "") == [
        {
            "name": "log.retention.ms",
            "value": "3600000",
            "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
            "readOnly": False,
            "type": "LONG",
            "synonyms": [["log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"]],
        }
    ]
    assert _value_and_source(admin, "plain", "retention.ms") == ("3600000", DEFAULT_DYN)
    assert _value_and_source(admin, "overridden", "retention.ms")[0] == "5000"

    # This broker's own value wins over the default; its synonyms list both.
    _alter(admin, "broker", "1", _set("log.retention.ms", "7200000"))
    entry = _describe(admin, "broker", "1")["log.retention.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == ("7200000", PER_BROKER, False)
    # (confluent-kafka keys synonyms by name, so the Java client shows them all.)
    described = java_tool.json("describe-configs", broker.bootstrap, "broker", "1")
    own = next(e for e in described if e["name"] == "log.retention.ms")
    assert own["synonyms"] == [
        ["log.retention.ms", "7200000", "DYNAMIC_BROKER_CONFIG"],
        ["log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        ["log.retention.hours", "168", "DEFAULT_CONFIG"],
    ]
    assert _value_and_source(admin, "plain", "retention.ms") == ("7200000", PER_BROKER)

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _value_and_source(admin, "plain", "retention.ms") == ("7200000", PER_BROKER)

    _alter(admin, "broker", "1", _delete("log.retention.ms"))
    assert _value_and_source(admin, "plain", "retention.ms") == ("3600000", DEFAULT_DYN)
    assert _set_default(java_tool, broker.bootstrap, "DELETE:log.retention.ms") == ok
    default_source = ConfigSource.DEFAULT_CONFIG.value
    assert _value_and_source(admin, "plain", "retention.ms") == ("604800000", default_source)
    assert java_tool.json("describe-configs", broker.bootstrap, "broker", "") == []


def test_a_dynamic_segment_size_rolls_the_segments_of_topics_without_an_override(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(broker.bootstrap, "rolled")
    _alter(admin, "broker", "1", _set("log.segment.bytes", "1024"))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(20):
        producer.produce("rolled", value=b"x" * 200, partition=0)
        assert producer.flush(10) == 0
    segments = list((broker.data_dir / "rolled-0").glob("*.log"))
    assert len(segments) > 3, segments


def test_kafkas_errors_for_configs_that_are_not_dynamic(
    broker_factory: Callable[..., BrokerProcess], java_tool: JavaTool
) -> None:
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for entry, code in [
        (_set("num.partitions", "3"), KafkaError.INVALID_REQUEST),
        (_set("log.retention.ms", "soon"), KafkaError.INVALID_REQUEST),
        (_set("no.such.config", "1"), KafkaError.INVALID_CONFIG),
    ]:
        with pytest.raises(KafkaException) as failure:
            _alter(admin, "broker", "1", entry)
        assert failure.value.args[0].code() == code, entry
    refused = _set_default(java_tool, broker.bootstrap, "SET:log.dirs=/elsewhere")
    assert refused[0]["error"] == "InvalidRequestException"
    assert "Cannot update these configs dynamically" in refused[0]["message"]
    described = _describe(admin, "broker", "1")
    assert described["num.partitions"].is_read_only
    assert not described["message.max.bytes"].is_read_only
    assert java_tool.json("describe-configs", broker.bootstrap, "broker", "") == []

    # A LIST broker config takes APPEND, as a topic's does.
    appended = java_tool.json(
        "alter-configs", broker.bootstrap, "broker", "1", "APPEND:log.cleanup.policy=compact"
    )
    assert appended == [{"error": None}]
    assert _describe(admin, "broker", "1")["log.cleanup.policy"].value == "delete,compact"


def test_every_broker_applies_the_cluster_default(
    cluster_factory: Callable[..., ClusterProcess], java_tool: JavaTool
) -> None:
    cluster = cluster_factory()
    create_topic(cluster.bootstrap, "everywhere", partitions=3, replication_factor=3)
    ok = [{"error": None}]
    assert _set_default(java_tool, cluster.node(1).bootstrap, "SET:message.max.bytes=200000") == ok
    # Node 3 answers for itself: it has applied the default from the metadata log.
    far = AdminClient({"bootstrap.servers": cluster.node(3).bootstrap})

    def applied() -> bool:
        entry = _describe(far, "broker", "3")["message.max.bytes"]
        return (entry.value, entry.source) == ("200000", DEFAULT_DYN)

    wait_until(applied, 30, "the default on node 3")
    assert _value_and_source(far, "everywhere", "max.message.bytes") == ("200000", DEFAULT_DYN)


def test_legacy_alter_configs_sets_a_brokers_dynamic_configs(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _alter(admin, "broker", "1", _set("log.segment.bytes", "2000000"))
    # kafka-python's AlterConfigs (not incremental): the given set replaces the broker's, so
    # the client first describes the broker and sends its other dynamic configs along.
    legacy = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resource = KafkaConfigResource(
            ConfigResourceType.BROKER, "1", {"log.retention.ms": "1800000"}
        )
        legacy.alter_configs([resource], incremental=False, raise_on_unknown=False)
    finally:
        legacy.close()
    described = _describe(admin, "broker", "1")
    retention = described["log.retention.ms"]
    assert (retention.value, retention.source) == ("1800000", PER_BROKER)
    segment = described["log.segment.bytes"]
    assert (segment.value, segment.source) == ("2000000", PER_BROKER)
