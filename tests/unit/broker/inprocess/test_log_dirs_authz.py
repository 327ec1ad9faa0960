"""DescribeLogDirs needs DESCRIBE on the cluster, as in Kafka: without it the answer is
CLUSTER_AUTHORIZATION_FAILED with no results; with it, a null topic list asks for every
hosted partition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs
from kio.schema.errors import ErrorCode
from test_authz_admin import AUTHORIZER, TOPICS, _close, _open, allow, call

from raftka.broker.handlers.log_dirs import handle_describe_log_dirs
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


def test_describe_log_dirs_needs_describe_on_the_cluster(broker: Broker) -> None:
    everything = describe_log_dirs.DescribeLogDirsRequest(topics=None)
    refused = call(broker, "alice", handle_describe_log_dirs, everything)
    assert (refused.error_code, refused.results) == (ErrorCode.cluster_authorization_failed, ())

    allow(broker, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    answer = call(broker, "alice", handle_describe_log_dirs, everything)
    assert answer.error_code == ErrorCode.none
    (result,) = answer.results
    assert result.log_dir == str(broker.topics.data_dir.absolute())
    assert sorted(topic.name for topic in result.topics) == sorted(TOPICS)
    for topic in result.topics:
        (partition,) = topic.partitions
        assert partition.partition_index == 0 and not partition.is_future_key
