"""LIST configs as Kafka reads them, and IncrementalAlterConfigs' operations on a resource's
configs: SET and DELETE on any config, APPEND and SUBTRACT on LIST configs only."""

from __future__ import annotations

import pytest

from raftka.broker.config import TOPIC_CONFIGS, ConfigError, ConfigType, validate_topic_configs
from raftka.broker.config.alter_ops import AlterConfigOp, apply_config_ops

APPEND, SUBTRACT = AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT
SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE


def test_cleanup_policy_is_a_list_of_compact_and_delete() -> None:
    policy = TOPIC_CONFIGS["cleanup.policy"]
    assert policy.type == ConfigType.LIST
    assert policy.parse(" compact , delete ") == "compact,delete"
    assert policy.parse("") == ""
    with pytest.raises(ConfigError, match="shred"):
        policy.parse("compact,shred")


def test_throttled_replicas_are_lists_checked_for_their_format() -> None:
    assert TOPIC_CONFIGS["follower.replication.throttled.replicas"].type == ConfigType.LIST
    parsed = validate_topic_configs({"leader.replication.throttled.replicas": "0:1, 1:2"})
    assert parsed == {"leader.replication.throttled.replicas": "0:1,1:2"}
    with pytest.raises(ConfigError):
        validate_topic_configs({"follower.replication.throttled.replicas": "0-1"})


def test_append_starts_from_the_default_and_adds_only_new_items() -> None:
    ops = [("cleanup.policy", APPEND, "compact,delete")]
    assert apply_config_ops({}, ops, TOPIC_CONFIGS, "topic") == {"cleanup.policy": "delete,compact"}


def test_subtract_removes_items_and_set_and_delete_apply_in_order() -> None:
    current = {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    ops = [
        ("cleanup.policy", SUBTRACT, "delete,absent"),
        ("retention.ms", DELETE, None),
        ("segment.ms", SET, "100"),
    ]
    assert apply_config_ops(current, ops, TOPIC_CONFIGS, "topic") == {
        "cleanup.policy": "compact",
        "segment.ms": "100",
    }


def test_append_to_a_config_that_is_not_a_list_and_unknown_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="Can't APPEND to key retention.ms"):
        apply_config_ops({}, [("retention.ms", APPEND, "1")], TOPIC_CONFIGS, "topic")
    with pytest.raises(ConfigError, match="Unknown topic config name: no.such"):
        apply_config_ops({}, [("no.such", SET, "1")], TOPIC_CONFIGS, "topic")
