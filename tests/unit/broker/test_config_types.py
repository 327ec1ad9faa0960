"""Typed config reads: each getter returns the type its config is declared with, the
computed broker configs (log.roll.ms, log.retention.ms, log.flush.interval.ms) keep Kafka's
derivations, and a getter that does not match a config's type is a TypeError naming it.
"""

from __future__ import annotations

import pytest

from raftka.broker.config import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigDef,
    TopicConfig,
    python_type,
    validate_topic_configs,
)

HOUR_MS = 3600 * 1000


def broker(**overrides: str) -> BrokerConfig:
    """A broker config from `--config`-style overrides (underscores for dots), no environment."""
    return BrokerConfig({k.replace("_", "."): v for k, v in overrides.items()}, environ={})


@pytest.mark.parametrize(
    "definition", [*BROKER_CONFIGS.values(), *TOPIC_CONFIGS.values()], ids=lambda d: d.name
)
def test_every_default_has_its_declared_type(definition: ConfigDef) -> None:
    if definition.default is not None:
        assert type(definition.default) is python_type(definition.type)
        assert definition.parse(definition.render(definition.default)) == definition.default


def test_getters_return_parsed_types() -> None:
    config = broker(
        num_partitions="3",
        delete_topic_enable="false",
        log_message_timestamp_type="LogAppendTime",
        broker_rack="r1",
    )
    assert config.get_int("num.partitions") == 3
    assert config.get_int("connections.max.idle.ms") == 600000  # a LONG default
    assert config.get_bool("delete.topic.enable") is False
    assert config.get_bool("auto.create.topics.enable") is True
    assert config.get_str("log.message.timestamp.type") == "LogAppendTime"
    assert config.get_int("offsets.topic.replication.factor") == 3
    assert config.get_optional_str("broker.rack") == "r1"
    assert config.get_optional_str("advertised.listeners") is None


def test_topic_getters_read_overrides_then_broker_synonyms() -> None:
    config = TopicConfig(
        broker(log_segment_bytes="1000", log_retention_hours="2"),
        validate_topic_configs({"max.message.bytes": "500"}),
    )
    assert config.get_int("max.message.bytes") == 500
    assert config.get_int("segment.bytes") == 1000
    assert config.get_int("retention.ms") == 2 * HOUR_MS
    assert config.get_int("flush.messages") == LONG_MAX
    assert config.get_str("message.timestamp.type") == "CreateTime"


def test_log_roll_ms_comes_from_hours_unless_set() -> None:
    assert broker().get_int("log.roll.ms") == 168 * HOUR_MS
    assert broker(log_roll_hours="2").get_int("log.roll.ms") == 2 * HOUR_MS
    assert broker(log_roll_hours="2", log_roll_ms="5000").get_int("log.roll.ms") == 5000


def test_log_retention_ms_prefers_ms_then_minutes_then_hours() -> None:
    assert broker().get_int("log.retention.ms") == 168 * HOUR_MS
    assert broker(log_retention_hours="-1").get_int("log.retention.ms") == -1
    assert broker(log_retention_minutes="3").get_int("log.retention.ms") == 3 * 60 * 1000
    assert broker(log_retention_minutes="-1").get_int("log.retention.ms") == -1
    both = broker(log_retention_minutes="3", log_retention_hours="1")
    assert both.get_int("log.retention.ms") == 3 * 60 * 1000
    assert broker(log_retention_minutes="3", log_retention_ms="7").get_int("log.retention.ms") == 7


def test_log_flush_interval_ms_defaults_to_the_scheduler_interval() -> None:
    assert broker().get_int("log.flush.interval.ms") == LONG_MAX
    flushed = broker(log_flush_scheduler_interval_ms="250")
    assert flushed.get_int("log.flush.interval.ms") == 250
    assert broker(log_flush_interval_ms="10").get_int("log.flush.interval.ms") == 10


def test_describe_shows_computed_configs_only_when_set_under_their_own_name() -> None:
    """As Kafka 3.9's DescribeConfigs: log.roll.ms is null while only log.roll.hours is set
    (the broker still rolls by the hours: get gives the computed value)."""
    config = broker(log_roll_hours="1", log_retention_ms="5000")
    described = {d.name: value for d, value, _source in config.describe()}
    assert described["log.roll.ms"] is None
    assert config.get("log.roll.ms") == HOUR_MS
    assert described["log.roll.hours"] == "1"
    assert described["log.retention.ms"] == "5000"
    assert described["log.flush.interval.ms"] is None
    assert described["log.retention.minutes"] is None
    assert described["delete.topic.enable"] == "true"


@pytest.mark.parametrize(
    ("getter", "name", "declared"),
    [
        ("get_str", "num.partitions", "INT"),
        ("get_bool", "log.retention.bytes", "LONG"),
        ("get_int", "delete.topic.enable", "BOOLEAN"),
        ("get_int", "log.message.timestamp.type", "STRING"),
        ("get_optional_str", "node.id", "INT"),
    ],
)
def test_mismatched_getter_raises_type_error_naming_the_config(
    getter: str, name: str, declared: str
) -> None:
    with pytest.raises(TypeError, match=rf"{name} is declared {declared} "):
        getattr(broker(), getter)(name)


def test_mismatched_topic_getter_raises_type_error_naming_the_config() -> None:
    config = TopicConfig(broker(), {})
    with pytest.raises(TypeError, match=r"segment.bytes is declared INT \(int\), not str"):
        config.get_str("segment.bytes")


def test_required_getter_refuses_a_config_without_default_even_when_set() -> None:
    # Whether the broker was given a rack must not decide whether reading it fails.
    for config in (broker(), broker(broker_rack="r1")):
        with pytest.raises(TypeError, match="broker.rack has no default"):
            config.get_str("broker.rack")
    with pytest.raises(TypeError, match="log.retention.minutes has no default"):
        broker(log_retention_minutes="3").get_int("log.retention.minutes")


def test_a_named_choice_takes_its_prefix_and_a_name() -> None:
    assert validate_topic_configs({"share.fair.key": "header:tenant"}) == {
        "share.fair.key": "header:tenant"
    }
    assert validate_topic_configs({"share.delivery.order": "fair"}) == {
        "share.delivery.order": "fair"
    }
    for bad in ("header:", "headers:x", "value", ""):
        with pytest.raises(ValueError, match=r"share\.fair\.key: must be one of key, header:NAME"):
            validate_topic_configs({"share.fair.key": bad})
