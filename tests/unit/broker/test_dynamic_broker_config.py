"""Dynamic broker configs in BrokerConfig: this broker's own over the cluster-wide default
over the static configs, with the sources and synonyms Kafka's DescribeConfigs reports, and
the topic configs that fall back to them."""

from __future__ import annotations

from raftka.broker.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    BrokerConfig,
    ConfigSource,
    TopicConfig,
)

DYN, DEFAULT_DYN = ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
STATIC, DEFAULT = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG


def test_dynamic_configs_are_kafkas_and_the_others_are_read_only() -> None:
    for name in (
        "log.retention.ms",
        "log.segment.bytes",
        "message.max.bytes",
        "log.cleanup.policy",
    ):
        assert name in DYNAMIC_BROKER_CONFIGS
    for name in ("log.retention.hours", "num.partitions", "log.dirs", "node.id"):
        assert name not in DYNAMIC_BROKER_CONFIGS
        assert BROKER_CONFIGS[name].read_only


def test_own_value_over_default_over_static() -> None:
    config = BrokerConfig({"log.segment.bytes": "1000"}, environ={})
    assert (config.get("log.segment.bytes"), config.source("log.segment.bytes")) == (1000, STATIC)
    config.set_dynamic({}, {"log.segment.bytes": "2000"})
    assert (config.get("log.segment.bytes"), config.source("log.segment.bytes")) == (
        2000,
        DEFAULT_DYN,
    )
    config.set_dynamic({"log.segment.bytes": "3000"}, {"log.segment.bytes": "2000"})
    assert config.get("log.segment.bytes") == 3000
    assert config.synonyms("log.segment.bytes") == [
        ("log.segment.bytes", "3000", DYN),
        ("log.segment.bytes", "2000", DEFAULT_DYN),
        ("log.segment.bytes", "1000", STATIC),
        ("log.segment.bytes", "1073741824", DEFAULT),
    ]
    config.set_dynamic({}, {})
    assert config.get("log.segment.bytes") == 1000


def test_dynamic_retention_ms_wins_over_static_hours_and_lists_kafkas_synonyms() -> None:
    config = BrokerConfig({"log.retention.hours": "2"}, environ={})
    # Nothing names log.retention.ms itself: Kafka reports no synonym and the default source.
    assert config.get("log.retention.ms") == 2 * 3600 * 1000
    assert config.synonyms("log.retention.ms") == []
    config.set_dynamic({}, {"log.retention.ms": "60000"})
    assert config.get("log.retention.ms") == 60000
    assert config.synonyms("log.retention.ms") == [
        ("log.retention.ms", "60000", DEFAULT_DYN),
        ("log.retention.hours", "2", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    ]


def test_a_topic_without_an_override_takes_the_dynamic_default() -> None:
    config = BrokerConfig(environ={})
    config.set_dynamic({}, {"log.retention.ms": "60000"})
    topic = TopicConfig(config, {})
    assert topic.get("retention.ms") == 60000
    assert topic.source("retention.ms") == DEFAULT_DYN
    assert topic.synonyms("retention.ms")[0] == ("log.retention.ms", "60000", DEFAULT_DYN)
    overridden = TopicConfig(config, {"retention.ms": 5})
    assert overridden.source("retention.ms") == ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_a_stored_value_that_no_longer_parses_is_skipped() -> None:
    config = BrokerConfig(environ={})
    config.set_dynamic({"log.segment.bytes": "many", "gone.config": "1"}, {})
    assert config.get("log.segment.bytes") == 1073741824
    assert list(config.describe_dynamic_default()) == []
