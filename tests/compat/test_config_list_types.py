"""Topic configs typed as Kafka types them: a LIST config (cleanup.policy) takes
IncrementalAlterConfigs' APPEND and SUBTRACT, and the others refuse them with Kafka's error."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)


def _config(admin: AdminClient, topic: str, name: str) -> str:
    resource = ConfigResource("topic", topic)
    return admin.describe_configs([resource])[resource].result(timeout=10)[name].value


def test_append_and_subtract_change_the_cleanup_policy_list(bootstrap: str, new_topic) -> None:
    topic = new_topic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _config(admin, topic, "cleanup.policy") == "delete"

    # Without an override APPEND starts from the default, as Kafka's controller does.
    _alter(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert _config(admin, topic, "cleanup.policy") == "delete,compact"

    # An item already there is not added twice.
    _alter(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert _config(admin, topic, "cleanup.policy") == "delete,compact"

    _alter(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    )
    assert _config(admin, topic, "cleanup.policy") == "compact"

    # Kafka reads a list with spaces around its items.
    _alter(
        admin,
        topic,
        ConfigEntry(
            "cleanup.policy", "compact , delete", incremental_operation=AlterConfigOpType.SET
        ),
    )
    assert _config(admin, topic, "cleanup.policy") == "compact,delete"


def test_list_items_are_checked_and_other_types_refuse_append(bootstrap: str, new_topic) -> None:
    topic = new_topic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as bad_item:
        _alter(
            admin,
            topic,
            ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.APPEND),
        )
    assert bad_item.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "shred" in bad_item.value.args[0].str()

    with pytest.raises(KafkaException) as not_list:
        _alter(
            admin,
            topic,
            ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
        )
    assert not_list.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "not LIST" in not_list.value.args[0].str()
    assert _config(admin, topic, "cleanup.policy") == "delete"
