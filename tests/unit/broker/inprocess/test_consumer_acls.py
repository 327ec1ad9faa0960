"""ACL checks of ConsumerGroupHeartbeat and ConsumerGroupDescribe, as Kafka makes them: READ
on the group and DESCRIBE on each topic subscribed to by name; DESCRIBE to describe."""

from __future__ import annotations

import datetime

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from test_authz_admin import allow, broker, call  # noqa: F401 - `broker` is a fixture

from raftka.broker.handlers.consumer_groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.server import Broker

AUTHORIZATION_ERRORS = {ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed}


def join(*topics: str) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="app",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=topics,
        topic_partitions=(),
    )


def test_heartbeat_needs_read_on_the_group_and_describe_on_each_subscribed_topic(
    broker: Broker,  # noqa: F811
) -> None:
    refused = call(broker, "alice", handle_consumer_group_heartbeat, join("shared"))
    assert refused.error_code == ErrorCode.group_authorization_failed
    assert "READ" in refused.error_message and refused.assignment is None
    allow(broker, AclOperation.READ, ResourceType.GROUP, "app")
    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "shared")
    refused = call(broker, "alice", handle_consumer_group_heartbeat, join("shared", "secret"))
    assert refused.error_code == ErrorCode.topic_authorization_failed
    assert "secret" in refused.error_message and "shared" not in refused.error_message
    passed = call(broker, "alice", handle_consumer_group_heartbeat, join("shared"))
    assert passed.error_code not in AUTHORIZATION_ERRORS, passed


def test_describe_needs_describe_on_the_group(broker: Broker) -> None:  # noqa: F811
    request = ConsumerGroupDescribeRequest(group_ids=("app",), include_authorized_operations=False)
    [group] = call(broker, "alice", handle_consumer_group_describe, request).groups
    assert group.error_code == ErrorCode.group_authorization_failed and group.error_message
    allow(broker, AclOperation.DESCRIBE, ResourceType.GROUP, "app")
    [group] = call(broker, "alice", handle_consumer_group_describe, request).groups
    assert group.error_code not in AUTHORIZATION_ERRORS, group
