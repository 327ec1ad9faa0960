"""Legacy AlterConfigs on a BROKER resource replaces its whole set of dynamic configs, as in
Kafka (a config left out goes back to its static value); a resource naming another broker
is refused with INVALID_REQUEST. The connection limits follow their dynamic configs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_configs.v2 import request as alter
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from test_authz_admin import _close, _open, call

from raftka.broker.handlers import configs
from raftka.broker.server import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    instance = _open(tmp_path / "data")
    try:
        yield instance
    finally:
        _close(instance)


def _legacy(broker: Broker, name: str, **values: str) -> Any:
    request = alter.AlterConfigsRequest(
        resources=(
            alter.AlterConfigsResource(
                resource_type=i8(configs.RESOURCE_BROKER),
                resource_name=name,
                configs=tuple(
                    alter.AlterableConfig(name=k.replace("_", "."), value=v)
                    for k, v in values.items()
                ),
            ),
        ),
        validate_only=False,
    )
    (result,) = call(broker, "admin", configs.handle_alter_configs, request).responses
    return result


def test_the_given_set_replaces_the_brokers_dynamic_configs(broker: Broker) -> None:
    assert _legacy(
        broker, "1", log_segment_bytes="2000000", log_retention_ms="60000"
    ).error_code == (ErrorCode.none)
    assert broker.controller.image.broker_configs["1"] == {
        "log.segment.bytes": "2000000",
        "log.retention.ms": "60000",
    }
    assert broker.config.get_int("log.segment.bytes") == 2000000
    assert _legacy(broker, "1", log_retention_ms="120000").error_code == ErrorCode.none
    assert broker.controller.image.broker_configs["1"] == {"log.retention.ms": "120000"}
    assert broker.config.get_int("log.segment.bytes") == 1073741824
    assert broker.topics.get("shared") is not None
    assert broker.topics.get("shared").config.get_int("retention.ms") == 120000  # type: ignore[union-attr]

    refused = _legacy(broker, "7", log_retention_ms="1")
    assert refused.error_code == ErrorCode.invalid_request
    assert refused.error_message == "Unexpected broker id, expected 1, but received 7"
    static = _legacy(broker, "", num_partitions="3")
    assert static.error_code == ErrorCode.invalid_request


def test_connection_limits_follow_their_dynamic_configs(broker: Broker) -> None:
    assert broker.connection_limits.per_ip_max == 2**31 - 1
    assert _legacy(broker, "", max_connections_per_ip="3", max_connections="50").error_code == (
        ErrorCode.none
    )
    assert (broker.connection_limits.per_ip_max, broker.connection_limits.total_max) == (3, 50)
    assert _legacy(broker, "").error_code == ErrorCode.none
    assert broker.connection_limits.per_ip_max == 2**31 - 1
