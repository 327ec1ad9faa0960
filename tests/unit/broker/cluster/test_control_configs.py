"""The controller's config decisions: topic overrides and dynamic broker configs."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterBrokerConfigsCommand, AlterConfigsCommand
from raftka.broker.cluster.control.configs import alter_broker_configs, alter_topic_configs
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    AlterBrokerConfigs,
    AlterTopicConfigs,
    CreateTopic,
    RegisterBroker,
)

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")
RATE = "leader.replication.throttled.rate"


def _image() -> MetadataImage:
    image = MetadataImage()
    image.apply(RegisterBroker(1, "h", 9092, None, "i1"), 0)
    image.apply(CreateTopic("t", TID, [[1]], {"retention.ms": "5"}), 1)
    return image


def test_alter_topic_configs_replaces_the_overrides() -> None:
    image = _image()
    command = AlterConfigsCommand("t", {"cleanup.policy": "compact"})
    assert alter_topic_configs(image, command) == ControllerResult(
        (AlterTopicConfigs(TID, {"cleanup.policy": "compact"}),)
    )
    validate_only = AlterConfigsCommand("t", {"retention.ms": "7"}, validate_only=True)
    assert alter_topic_configs(image, validate_only) == ControllerResult()


def test_alter_topic_configs_errors() -> None:
    image = _image()
    assert alter_topic_configs(image, AlterConfigsCommand("nope", {})) == ControllerResult.error(
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
    )
    bad = alter_topic_configs(image, AlterConfigsCommand("t", {"retention.ms": "soon"}))
    assert (bad.records, bad.result.error_code) == ((), ErrorCode.invalid_config)
    null = alter_topic_configs(image, AlterConfigsCommand("t", {"retention.ms": None}))
    assert null == ControllerResult.error(
        ErrorCode.invalid_config, "Null value not supported for topic configs: retention.ms"
    )
    # Validation refuses a bad value even when nothing would be written.
    only = AlterConfigsCommand("t", {"retention.ms": "soon"}, validate_only=True)
    assert alter_topic_configs(image, only).result.error_code == ErrorCode.invalid_config


def test_alter_broker_configs_merges_into_the_current_ones() -> None:
    image = _image()
    image.apply(AlterBrokerConfigs("1", {RATE: "100"}), 2)
    set_default = AlterBrokerConfigsCommand("", {RATE: "5000"})
    assert alter_broker_configs(image, set_default) == ControllerResult(
        (AlterBrokerConfigs("", {RATE: "5000"}),)
    )
    reset = AlterBrokerConfigsCommand("1", {RATE: None})
    assert alter_broker_configs(image, reset).records == (AlterBrokerConfigs("1", {}),)
    only = AlterBrokerConfigsCommand("1", {RATE: "7"}, validate_only=True)
    assert alter_broker_configs(image, only) == ControllerResult()


def test_alter_broker_configs_errors() -> None:
    image = _image()
    for resource, changes, code in [
        ("", {"log.dirs": "/x"}, ErrorCode.invalid_request),
        ("", {"no.such.config": "1"}, ErrorCode.invalid_config),
        ("", {RATE: "0"}, ErrorCode.invalid_request),
        ("", {RATE: "fast"}, ErrorCode.invalid_request),
        ("9", {RATE: "1"}, ErrorCode.invalid_request),
        ("x", {RATE: "1"}, ErrorCode.invalid_request),
    ]:
        decision = alter_broker_configs(image, AlterBrokerConfigsCommand(resource, changes))
        assert (decision.records, decision.result.error_code) == ((), code), (resource, changes)
