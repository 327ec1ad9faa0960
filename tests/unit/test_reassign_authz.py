"""AlterPartitionReassignments needs ALTER and ListPartitionReassignments DESCRIBE on the
cluster, as in Kafka; refused requests change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.alter_partition_reassignments.v0 import request as alter_v0
from kio.schema.alter_partition_reassignments.v1 import request as alter_v1
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import request as list_v0
from kio.static.primitive import i32
from test_authz_admin import AUTHORIZER, _close, _open, allow, call

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
