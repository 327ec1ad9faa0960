"""Coordinator parity with Apache Kafka 4, against real brokers.

- The empty group id: OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept it
  (kafka-python's admin client commits and reads offsets under it), its offsets survive a
  restart; JoinGroup, SyncGroup, Heartbeat, LeaveGroup, TxnOffsetCommit and OffsetDelete
  answer INVALID_GROUP_ID. Under an authorizer it is the GROUP resource "", which only a
  wildcard ACL can name (an ACL's resource name may not be empty).
- The versions Kafka 4 removed (KIP-896) of OffsetCommit, OffsetFetch, CreateTopics,
  DeleteTopics and DescribeConfigs are neither advertised nor served.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from brokers import Brokers
from clients import RawConnection, api_versions_v0, retry_retriable
from harness import BrokerProcess
from kafka import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaPythonTopicPartition
from kio.schema.delete_groups.v2 import request as delete_groups_req
from kio.schema.delete_groups.v2 import response as delete_groups_resp
from kio.schema.describe_groups.v5 import request as describe_req
from kio.schema.describe_groups.v5 import response as describe_resp
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_coordinator_req
from kio.schema.find_coordinator.v3 import response as find_coordinator_resp
from kio.schema.heartbeat.v3 import request as heartbeat_req
from kio.schema.heartbeat.v3 import response as heartbeat_resp
from kio.schema.join_group.v5 import request as join_req
from kio.schema.join_group.v5 import response as join_resp
from kio.schema.leave_group.v3 import request as leave_req
from kio.schema.leave_group.v3 import response as leave_resp
from kio.schema.offset_commit.v2 import request as commit2_req
from kio.schema.offset_commit.v8 import request as commit_req
from kio.schema.offset_commit.v8 import response as commit_resp
from kio.schema.offset_delete.v0 import request as offset_delete_req
from kio.schema.offset_delete.v0 import response as offset_delete_resp
from kio.schema.offset_fetch.v8 import request as fetch_req
from kio.schema.offset_fetch.v8 import response as fetch_resp
from kio.schema.sync_group.v3 import request as sync_req
from kio.schema.sync_group.v3 import response as sync_resp
from kio.schema.txn_offset_commit.v3 import request as txn_commit_req
from kio.schema.txn_offset_commit.v3 import response as txn_commit_resp
from kio.static.primitive import i8, i16, i32, i64
from secured import start_sasl_broker

E = ErrorCode
EMPTY = ""


def call(bootstrap: str, request: Any, response_cls: type) -> Any:
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        return conn.recv_response(response_cls)


def call_retrying(bootstrap: str, request: Any, response_cls: type) -> Any:
    """`call`, repeated while the coordinator loads (as a client retries)."""
    return retry_retriable(lambda: call(bootstrap, request, response_cls))


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> list[ErrorCode]:
    """A simple (generation -1) OffsetCommit v8: each partition's error."""
    request = commit_req.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            commit_req.OffsetCommitRequestTopic(
                name=topic,
                partitions=tuple(
                    commit_req.OffsetCommitRequestPartition(
                        partition_index=i32(p), committed_offset=i64(o), committed_metadata=""
                    )
                    for p, o in offsets.items()
                ),
            ),
        ),
    )
    answer = call_retrying(bootstrap, request, commit_resp.OffsetCommitResponse)
    return [p.error_code for t in answer.topics for p in t.partitions]


def fetch(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """OffsetFetch v8 of one group: each partition's committed offset (-1: none)."""
    request = fetch_req.OffsetFetchRequest(
        groups=(
            fetch_req.OffsetFetchRequestGroup(
                group_id=group,
                topics=(
                    fetch_req.OffsetFetchRequestTopics(
                        name=topic, partition_indexes=tuple(i32(p) for p in partitions)
                    ),
                ),
            ),
        ),
        require_stable=False,
    )
    (answer,) = call_retrying(bootstrap, request, fetch_resp.OffsetFetchResponse).groups
    assert (answer.group_id, answer.error_code) == (group, E.none)
    assert [p.error_code for t in answer.topics for p in t.partitions] == [E.none] * len(partitions)
    return {
        int(p.partition_index): int(p.committed_offset) for t in answer.topics for p in t.partitions
    }


def find_coordinator(bootstrap: str, group: str) -> int:
    """The port of the group's coordinator; the lookup creates `__consumer_offsets`."""
    found = call_retrying(
        bootstrap,
        find_coordinator_req.FindCoordinatorRequest(key=group, key_type=i8(0)),
        find_coordinator_resp.FindCoordinatorResponse,
    )
    assert found.error_code == E.none, found
    return int(found.port)


def describe(bootstrap: str, group: str) -> Any:
    request = describe_req.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False
    )
    (described,) = call_retrying(bootstrap, request, describe_resp.DescribeGroupsResponse).groups
    return described


def delete_group(bootstrap: str, group: str) -> ErrorCode:
    request = delete_groups_req.DeleteGroupsRequest(groups_names=(group,))
    answer = call_retrying(bootstrap, request, delete_groups_resp.DeleteGroupsResponse)
    (result,) = answer.results
    assert result.group_id == group
    return result.error_code


def kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def test_the_empty_group_commits_and_reads_offsets_across_a_restart(
    broker_factory: Callable[..., BrokerProcess], new_topic: Callable[..., str]
) -> None:
    broker = broker_factory()
    bootstrap = broker.bootstrap
    topic = new_topic(partitions=2, bootstrap=bootstrap)
    # Java's "".hashCode() is 0: the coordinator is the leader of __consumer_offsets-0.
    assert find_coordinator(bootstrap, EMPTY) == broker.port
    # Nothing yet: Dead, and nothing to delete.
    assert (describe(bootstrap, EMPTY).error_code, describe(bootstrap, EMPTY).group_state) == (
        E.none,
        "Dead",
    )
    assert delete_group(bootstrap, EMPTY) == E.group_id_not_found

    assert commit(bootstrap, EMPTY, topic, {0: 5, 1: 7}) == [E.none, E.none]
    assert fetch(bootstrap, EMPTY, topic, [0, 1]) == {0: 5, 1: 7}
    # A real client: kafka-python's admin commits (OffsetCommit, generation -1) and reads
    # back (OffsetFetch) under the empty group id.
    admin = kafka_python_admin(bootstrap)
    try:
        tp0, tp1 = (KafkaPythonTopicPartition(topic, p) for p in (0, 1))
        altered = retry_retriable(
            lambda: admin.alter_group_offsets(EMPTY, {tp0: OffsetAndMetadata(9, "", -1)}),
            codes=lambda errors: [error.errno for error in errors.values()],
        )
        assert [error.errno for error in altered.values()] == [E.none]
        listed = admin.list_group_offsets(EMPTY)[EMPTY]
        assert {tp: oam.offset for tp, oam in listed.items()} == {tp0: 9, tp1: 7}
    finally:
        admin.close()
    described = describe(bootstrap, EMPTY)
    assert (described.error_code, described.group_state, described.protocol_type) == (
        E.none,
        "Empty",
        "",
    )
    assert described.members == ()

    broker.restart()
    assert fetch(bootstrap, EMPTY, topic, [0, 1]) == {0: 9, 1: 7}
    assert delete_group(bootstrap, EMPTY) == E.none
    assert fetch(bootstrap, EMPTY, topic, [0, 1]) == {0: -1, 1: -1}


def test_group_management_refuses_the_empty_group_id(
    bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    joined = call_retrying(
        bootstrap,
        join_req.JoinGroupRequest(
            group_id=EMPTY,
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(join_req.JoinGroupRequestProtocol(name="range", metadata=b""),),
        ),
        join_resp.JoinGroupResponse,
    )
    assert joined.error_code == E.invalid_group_id
    synced = call_retrying(
        bootstrap,
        sync_req.SyncGroupRequest(
            group_id=EMPTY,
            generation_id=i32(1),
            member_id="m",
            group_instance_id=None,
            assignments=(),
        ),
        sync_resp.SyncGroupResponse,
    )
    assert synced.error_code == E.invalid_group_id
    beat = call_retrying(
        bootstrap,
        heartbeat_req.HeartbeatRequest(
            group_id=EMPTY, generation_id=i32(1), member_id="m", group_instance_id=None
        ),
        heartbeat_resp.HeartbeatResponse,
    )
    assert beat.error_code == E.invalid_group_id
    left = call_retrying(
        bootstrap,
        leave_req.LeaveGroupRequest(
            group_id=EMPTY,
            members=(leave_req.MemberIdentity(member_id="m", group_instance_id=None),),
        ),
        leave_resp.LeaveGroupResponse,
    )
    assert left.error_code == E.invalid_group_id
    txn_committed = call_retrying(
        bootstrap,
        txn_commit_req.TxnOffsetCommitRequest(
            transactional_id="parity-txn",
            group_id=EMPTY,
            producer_id=i64(1),
            producer_epoch=i16(0),
            generation_id=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                txn_commit_req.TxnOffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        txn_commit_req.TxnOffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(1),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        ),
        txn_commit_resp.TxnOffsetCommitResponse,
    )
    assert [p.error_code for t in txn_committed.topics for p in t.partitions] == [
        E.invalid_group_id
    ]
    deleted = call_retrying(
        bootstrap,
        offset_delete_req.OffsetDeleteRequest(
            group_id=EMPTY,
            topics=(
                offset_delete_req.OffsetDeleteRequestTopic(
                    name=topic,
                    partitions=(
                        offset_delete_req.OffsetDeleteRequestPartition(partition_index=i32(0)),
                    ),
                ),
            ),
        ),
        offset_delete_resp.OffsetDeleteResponse,
    )
    assert deleted.error_code == E.invalid_group_id


# -- versions Kafka 4 removed (KIP-896) ----------------------------------------------------

# api key: (name, Kafka 4's lowest version)
KAFKA_4_BASELINES = {
    8: ("OffsetCommit", 2),
    9: ("OffsetFetch", 1),
    19: ("CreateTopics", 2),
    20: ("DeleteTopics", 1),
    32: ("DescribeConfigs", 1),
}


def test_versions_kafka_4_removed_are_neither_advertised_nor_served(bootstrap: str) -> None:
    advertised = api_versions_v0(bootstrap)
    assert {key: advertised[key][0] for key in KAFKA_4_BASELINES} == {
        key: lowest for key, (_name, lowest) in KAFKA_4_BASELINES.items()
    }
    # A request in a removed version closes the connection (Kafka answers nothing either);
    # the body is the baseline's, only the header's version is the removed one.
    request = commit2_req.OffsetCommitRequest(
        group_id="parity-old-version",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=(),
    )
    for removed in (0, 1):
        with RawConnection(bootstrap) as conn:
            conn.send_request(request, api_version=removed)
            assert conn.wait_closed(), f"OffsetCommit v{removed} was answered"
    assert api_versions_v0(bootstrap) == advertised  # the broker serves on


# -- under an authorizer ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def authorizing_broker(module_brokers: Brokers) -> tuple[str, Any]:
    """A broker with the StandardAuthorizer: its PLAINTEXT bootstrap (User:ANONYMOUS) and a
    confluent-kafka AdminClient of its super user over SASL_PLAINTEXT."""
    from confluent_kafka.admin import AdminClient

    started = start_sasl_broker(module_brokers, ("admin",), name="parity-authz")
    return started.broker.bootstrap, AdminClient(started.client("admin"))


def test_the_empty_group_under_acls_is_granted_by_a_wildcard_only(
    authorizing_broker: tuple[str, Any],
) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    bootstrap, admin = authorizing_broker
    topic = f"parity-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30).values():
        future.result(timeout=30)

    def allow(restype: ResourceType, name: str) -> None:
        binding = AclBinding(
            restype,
            name,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([binding], request_timeout=30).values():
            future.result(timeout=30)

    allow(ResourceType.TOPIC, topic)
    assert commit(bootstrap, EMPTY, topic, {0: 3}) == [E.group_authorization_failed]
    # No ACL can name the empty group itself, as in Kafka (INVALID_REQUEST).
    with pytest.raises(KafkaException) as refused:
        allow(ResourceType.GROUP, EMPTY)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST, refused.value
    allow(ResourceType.GROUP, "*")
    find_coordinator(bootstrap, EMPTY)
    assert commit(bootstrap, EMPTY, topic, {0: 3}) == [E.none]
    assert fetch(bootstrap, EMPTY, topic, [0]) == {0: 3}
