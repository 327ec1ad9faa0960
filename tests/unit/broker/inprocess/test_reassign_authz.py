"""AlterPartitionReassignments needs ALTER and ListPartitionReassignments DESCRIBE on the
cluster, as in Kafka; refused requests change nothing. The replication throttle rate is a
dynamic broker config (ALTER_CONFIGS on the cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_partition_reassignments.v0 import request as alter_v0
from kio.schema.alter_partition_reassignments.v1 import request as alter_v1
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter
from kio.schema.list_partition_reassignments.v0 import request as list_v0
from kio.static.primitive import i8, i32
from test_authz_admin import AUTHORIZER, _close, _open, allow, call

from raftka.broker.config import ConfigSource
from raftka.broker.handlers import configs
from raftka.broker.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.server import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    instance = _open(
        tmp_path / "data", **{"authorizer.class.name": AUTHORIZER, "super.users": "User:admin"}
    )
    try:
        yield instance
    finally:
        _close(instance)


def _alter(replicas: tuple[int, ...] | None) -> alter_v0.AlterPartitionReassignmentsRequest:
    partition = alter_v0.ReassignablePartition(partition_index=i32(0), replicas=replicas)
    return alter_v0.AlterPartitionReassignmentsRequest(
        topics=(alter_v0.ReassignableTopic(name="shared", partitions=(partition,)),)
    )


def test_alter_needs_alter_and_list_needs_describe_on_the_cluster(broker: Broker) -> None:
    refused = call(broker, "alice", handle_alter_partition_reassignments, _alter((1,)))
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert "ALTER" in refused.error_message and not refused.responses
    listing = list_v0.ListPartitionReassignmentsRequest(topics=None)
    refused = call(broker, "alice", handle_list_partition_reassignments, listing)
    assert refused.error_code == ErrorCode.cluster_authorization_failed

    allow(broker, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    allow(broker, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    answer = call(broker, "alice", handle_alter_partition_reassignments, _alter(None))
    (topic,) = answer.responses
    assert [p.error_code for p in topic.partitions] == [ErrorCode.no_reassignment_in_progress]
    answer = call(broker, "alice", handle_alter_partition_reassignments, _alter((1, 1)))
    assert [p.error_code for p in answer.responses[0].partitions] == [
        ErrorCode.invalid_replica_assignment
    ]
    listed = call(broker, "alice", handle_list_partition_reassignments, listing)
    assert listed.error_code == ErrorCode.none and listed.topics == ()


def test_v1_refuses_a_replication_factor_change_when_not_allowed(broker: Broker) -> None:
    partition = alter_v1.ReassignablePartition(partition_index=i32(0), replicas=(1, 2))
    request = alter_v1.AlterPartitionReassignmentsRequest(
        allow_replication_factor_change=False,
        topics=(alter_v1.ReassignableTopic(name="shared", partitions=(partition,)),),
    )
    answer = call(broker, "admin", handle_alter_partition_reassignments, request)
    assert answer.allow_replication_factor_change is False
    (p,) = answer.responses[0].partitions
    assert p.error_code == ErrorCode.invalid_replication_factor
    assert "from 1 to 2" in p.error_message
    assert not broker.controller.image.topics["shared"].reassignments


def test_the_throttle_rate_is_a_dynamic_broker_config(broker: Broker) -> None:
    def alter(user: str, name: str, value: str | None) -> Any:
        entry = incremental_alter.AlterableConfig(
            name=name, config_operation=i8(0 if value is not None else 1), value=value
        )
        request = incremental_alter.IncrementalAlterConfigsRequest(
            resources=(
                incremental_alter.AlterConfigsResource(
                    resource_type=i8(configs.RESOURCE_BROKER), resource_name="", configs=(entry,)
                ),
            ),
            validate_only=False,
        )
        (result,) = call(broker, user, configs.handle_incremental_alter_configs, request).responses
        return result

    rate = "leader.replication.throttled.rate"
    assert alter("alice", rate, "1000").error_code == ErrorCode.cluster_authorization_failed
    assert broker.node.append_throttle is None
    assert alter("admin", rate, "1000").error_code == ErrorCode.none
    assert broker.node.append_throttle is not None
    assert broker.node.append_throttle.rate_bytes_per_s == 1000
    refused = alter("admin", "log.dirs", "/elsewhere")
    assert refused.error_code == ErrorCode.invalid_request and "dynamic" in refused.error_message

    request = describe_configs.DescribeConfigsRequest(
        resources=(
            describe_configs.DescribeConfigsResource(
                resource_type=i8(configs.RESOURCE_BROKER),
                resource_name="",
                configuration_keys=(rate,),
            ),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    (described,) = call(broker, "admin", configs.handle_describe_configs, request).results
    (entry,) = described.configs
    assert (entry.value, entry.config_source) == (
        "1000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert alter("admin", rate, None).error_code == ErrorCode.none
    assert broker.node.append_throttle is None
