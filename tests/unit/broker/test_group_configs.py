"""Group configs: Kafka 4's names, checked against the broker's bounds as Kafka checks them,
stored by the controller as the group's complete set, kept in the metadata image and its
snapshot, and read by a group over the broker's values."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterGroupConfigsCommand, Command
from raftka.broker.cluster.control.configs import alter_group_configs
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import AlterGroupConfigs, decode_record
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict
from raftka.broker.config import BrokerConfig, ConfigError, ConfigSource, validate_group_configs
from raftka.broker.handlers.group_configs import group_config


def test_values_inside_the_brokers_bounds_are_accepted() -> None:
    broker = BrokerConfig(environ={})
    parsed = validate_group_configs(
        {"share.record.lock.duration.ms": "15000", "share.auto.offset.reset": "earliest"}, broker
    )
    assert parsed == {"share.record.lock.duration.ms": 15000, "share.auto.offset.reset": "earliest"}


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"share.record.lock.duration.ms": "14999"}, "greater than or equal to"),
        ({"share.session.timeout.ms": "60001"}, "less than or equal to"),
        ({"consumer.heartbeat.interval.ms": "15001"}, "group.consumer.max.heartbeat.interval.ms"),
        (
            {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "45000"},
            "share.heartbeat.interval.ms",
        ),
        ({"share.auto.offset.reset": "none"}, "earliest, latest"),
        ({"group.share.session.timeout.ms": "1"}, "Unknown group config name"),
    ],
)
def test_kafkas_checks(configs: dict[str, str], message: str) -> None:
    broker = BrokerConfig({"group.share.max.heartbeat.interval.ms": "60000"}, environ={})
    with pytest.raises(ConfigError, match=message):
        validate_group_configs(configs, broker)


def test_the_controller_stores_the_complete_set_and_an_empty_one_forgets() -> None:
    image = MetadataImage()
    command = AlterGroupConfigsCommand("g", {"share.auto.offset.reset": "earliest"})
    assert Command.from_wire(command.to_wire()) == command
    (record,) = alter_group_configs(image, command).records
    assert record == AlterGroupConfigs("g", {"share.auto.offset.reset": "earliest"})
    assert decode_record(b"AlterGroupConfigs", record.to_bytes()) == record
    image.apply(record, 1)
    assert image_from_dict(image_to_dict(image)).group_configs == {
        "g": {"share.auto.offset.reset": "earliest"}
    }
    bad = alter_group_configs(image, AlterGroupConfigsCommand("g", {"x": "1"}))
    assert bad.result.error_code == ErrorCode.invalid_config and not bad.records
    image.apply(alter_group_configs(image, AlterGroupConfigsCommand("g", {})).records[0], 2)
    assert image.group_configs == {}


def test_a_group_reads_its_own_configs_over_the_brokers() -> None:
    broker = BrokerConfig({"group.share.record.lock.duration.ms": "2000"}, environ={})
    stored = {"g": {"share.auto.offset.reset": "earliest"}}
    config = group_config(broker, stored, "g")
    assert config.get_str("share.auto.offset.reset") == "earliest"
    assert config.source("share.auto.offset.reset") == ConfigSource.GROUP_CONFIG
    assert config.get_int("share.record.lock.duration.ms") == 2000
    assert config.source("share.record.lock.duration.ms") == ConfigSource.DEFAULT_CONFIG
    assert group_config(broker, stored, "other").get_str("share.auto.offset.reset") == "latest"
