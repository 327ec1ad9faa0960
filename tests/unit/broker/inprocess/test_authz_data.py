"""ACL checks of the data, group and transaction APIs in an in-process broker with
`authorizer.class.name` set: bindings go straight into the metadata image, requests are
handled as `User:alice` (or the super user `User:admin`), and each test reads the error a
refused request answers, that nothing of it was done, and that each topic is asked once."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_producers.v0 import request as producers_v0
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.sync_group.v5 import request as sync_v5
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3
from kio.schema.write_txn_markers.v1 import request as markers_v1
from kio.static.primitive import i16, i32
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.groups.coordinator import GroupDescription
from raftka.broker.groups.records import OffsetValue
from raftka.broker.handlers import HANDLERS
from raftka.broker.handlers.groups import NO_AUTHORIZED_OPERATIONS
from raftka.broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
)
from raftka.broker.security.listeners import ListenerSpec, SecurityProtocol
from raftka.broker.security.session import ClientSession, Principal
from raftka.broker.server import Broker, Listener
from raftka.broker.services import BrokerServices, RequestContext
from raftka.broker.share.group import ShareGroups
from raftka.broker.txn.coordinator import Listing
from raftka.broker.txn.metadata import TxnMetadata
from raftka.broker.txn.records import TxnState
from raftka.protocol.batch_builder import build_batch

TOPIC = "orders-eu"
OTHER = "payments"
PARTITIONS = 3
ALICE = "User:alice"

Op = AclOperation
Res = ResourceType


_run = run_with_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    config = BrokerConfig(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
        environ={},
    )
    instance = Broker(config, Listener("127.0.0.1", 0), tmp_path_factory.mktemp("authz") / "d")
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    for name in (TOPIC, OTHER):
        created = _run(
            instance,
            instance.controller.execute,
            CreateTopicCommand(name=name, num_partitions=PARTITIONS, replication_factor=1),
        )
        assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        for name in (TOPIC, OTHER):
            for index in range(PARTITIONS):
                partition = instance.topics.partition(name, index)
                while partition is None or not partition.is_leader:
                    await trio.sleep(0.01)
                    partition = instance.topics.partition(name, index)

    _run(instance, led)
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture(autouse=True)
def no_acls(broker: Broker) -> Iterator[None]:
    yield
    acls = broker.controller.image.acls
    for binding in list(acls):
        acls.remove(binding)


def allow(
    broker: Broker,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    principal: str = ALICE,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermission = AclPermission.ALLOW,
) -> None:
    broker.controller.image.acls.add(
        AclBinding(resource_type, name, pattern, principal, "*", operation, permission)
    )


class CountingAuthorizer(Authorizer):
    """The broker's authorizer, counting the checks of each resource."""

    def __init__(self, real: Authorizer) -> None:
        super().__init__(
            real._acls, enabled=real.enabled, super_users=real.super_users, allow_if_no_acl=False
        )
        self.asked: dict[tuple[ResourceType, str], int] = {}

    def authorize(
        self, principal: Any, host: str, operation: Any, resource_type: Any, name: str
    ) -> bool:
        key = (resource_type, name)
        self.asked[key] = self.asked.get(key, 0) + 1
        return super().authorize(principal, host, operation, resource_type, name)


def call(
    broker: Broker,
    api_key: int,
    version: int,
    request: Any,
    user: str = "alice",
    services: BrokerServices | None = None,
) -> Any:
    listener = ListenerSpec("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0)
    session = ClientSession(listener, principal=Principal("User", user))
    header = RequestHeader(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(1),
        client_id="authz-test",
    )
    context = RequestContext(
        services or broker.services, header, api_key, version, "127.0.0.1", 1, session
    )
    return _run(broker, HANDLERS[api_key].handle, context, request)


def log_end(broker: Broker, topic: str = TOPIC, index: int = 0) -> int:
    partition = broker.topics.partition(topic, index)
    assert partition is not None and partition.log is not None
    return partition.log.log_end_offset


# -- Produce ---------------------------------------------------------------------------------


def produce_request(
    topics: dict[str, list[int]], records: bytes, transactional_id: str | None = None
) -> Any:
    return produce_v9.ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=tuple(
            produce_v9.TopicProduceData(
                name=name,
                partition_data=tuple(
                    produce_v9.PartitionProduceData(index=index, records=records)
                    for index in indexes
                ),
            )
            for name, indexes in topics.items()
        ),
    )


def produce_errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (topic.name, p.index): p.error_code
        for topic in response.responses
        for p in topic.partition_responses
    }


def plain_batch() -> bytes:
    return build_batch([(None, b"v")], 0)


def test_produce_needs_write_on_each_topic_and_writes_nothing_refused(broker: Broker) -> None:
    before = {(t, i): log_end(broker, t, i) for t in (TOPIC, OTHER) for i in range(PARTITIONS)}
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC)
    request = produce_request({TOPIC: [0, 1], OTHER: [0, 1, 2]}, plain_batch())
    errors = produce_errors(call(broker, 0, 9, request))
    assert errors == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.none,
        (OTHER, 0): ErrorCode.topic_authorization_failed,
        (OTHER, 1): ErrorCode.topic_authorization_failed,
        (OTHER, 2): ErrorCode.topic_authorization_failed,
    }
    assert log_end(broker, TOPIC, 0) == before[(TOPIC, 0)] + 1
    assert all(log_end(broker, OTHER, i) == before[(OTHER, i)] for i in range(PARTITIONS))


def test_produce_does_not_tell_a_refused_client_whether_a_topic_exists(broker: Broker) -> None:
    request = produce_request({"no-such-topic": [0], "orders-xx": [0]}, plain_batch())
    errors = produce_errors(call(broker, 0, 9, request))
    assert set(errors.values()) == {ErrorCode.topic_authorization_failed}
    # Allowed to write there (a prefixed ACL), the client learns the topic is unknown.
    allow(broker, Op.WRITE, Res.TOPIC, "orders-", pattern=PatternType.PREFIXED)
    errors = produce_errors(call(broker, 0, 9, request))
    assert errors == {
        ("no-such-topic", 0): ErrorCode.topic_authorization_failed,
        ("orders-xx", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_produce_asks_once_per_topic_however_many_partitions(broker: Broker) -> None:
    counting = CountingAuthorizer(broker.authorizer)
    services = broker.services.replace(authorizer=counting)
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC)
    request = produce_request({TOPIC: [0, 1, 2], OTHER: [0, 1, 2]}, plain_batch())
    call(broker, 0, 9, request, services=services)
    assert counting.asked == {(Res.TOPIC, TOPIC): 1, (Res.TOPIC, OTHER): 1}


def test_a_super_user_and_a_deny_beat_what_bindings_say(broker: Broker) -> None:
    allow(broker, Op.WRITE, Res.TOPIC, "*", principal="User:*")
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC, permission=AclPermission.DENY)
    request = produce_request({TOPIC: [0]}, plain_batch())
    assert produce_errors(call(broker, 0, 9, request)) == {
        (TOPIC, 0): ErrorCode.topic_authorization_failed
    }
    assert produce_errors(call(broker, 0, 9, request, user="bob")) == {(TOPIC, 0): ErrorCode.none}
    assert produce_errors(call(broker, 0, 9, request, user="admin")) == {(TOPIC, 0): ErrorCode.none}


def test_transactional_produce_needs_write_on_the_transactional_id(broker: Broker) -> None:
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC)
    batch = build_batch(
        [(None, b"v")], 0, producer_id=900, producer_epoch=0, base_sequence=0, transactional=True
    )
    before = log_end(broker)
    response = call(broker, 0, 9, produce_request({TOPIC: [0], OTHER: [0]}, batch, "tx-a"))
    assert set(produce_errors(response).values()) == {
        ErrorCode.transactional_id_authorization_failed
    }
    message = response.responses[0].partition_responses[0].error_message
    assert message == (
        "User:alice is not authorized to WRITE transactional id 'tx-a'; "
        "an ACL allowing User:alice WRITE on it is needed"
    )
    assert log_end(broker) == before


# -- Fetch, ListOffsets, OffsetForLeaderEpoch ---------------------------------------------------


def fetch_request(*topics: str) -> Any:
    return fetch_v12.FetchRequest(
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        topics=tuple(
            fetch_v12.FetchTopic(
                topic=name,
                partitions=tuple(
                    fetch_v12.FetchPartition(
                        partition=index, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                    for index in range(PARTITIONS)
                ),
            )
            for name in topics
        ),
        forgotten_topics_data=(),
    )


def test_fetch_needs_read_and_returns_nothing_of_a_refused_topic(broker: Broker) -> None:
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC)
    call(broker, 0, 9, produce_request({TOPIC: [0], OTHER: [0]}, plain_batch()), user="admin")
    allow(broker, Op.READ, Res.TOPIC, TOPIC)
    counting = CountingAuthorizer(broker.authorizer)
    services = broker.services.replace(authorizer=counting)
    response = call(broker, 1, 12, fetch_request(TOPIC, OTHER, "unknown"), services=services)
    by_topic = {t.topic: t.partitions for t in response.responses}
    assert {p.error_code for p in by_topic[TOPIC]} == {ErrorCode.none}
    assert by_topic[TOPIC][0].records
    for name in (OTHER, "unknown"):
        assert {p.error_code for p in by_topic[name]} == {ErrorCode.topic_authorization_failed}
        assert all(not p.records and p.high_watermark == -1 for p in by_topic[name])
    assert set(counting.asked.values()) == {1}


def test_list_offsets_and_leader_epochs_need_describe(broker: Broker) -> None:
    allow(broker, Op.READ, Res.TOPIC, TOPIC)  # READ implies DESCRIBE
    offsets = list_offsets_v7.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=tuple(
            list_offsets_v7.ListOffsetsTopic(
                name=name,
                partitions=(list_offsets_v7.ListOffsetsPartition(partition_index=0, timestamp=-1),),
            )
            for name in (TOPIC, OTHER)
        ),
    )
    response = call(broker, 2, 7, offsets)
    assert {t.name: t.partitions[0].error_code for t in response.topics} == {
        TOPIC: ErrorCode.none,
        OTHER: ErrorCode.topic_authorization_failed,
    }
    # A refused topic first: it gets its error and nothing of another partition's answer.
    reordered = dataclasses.replace(offsets, topics=offsets.topics[::-1])
    response = call(broker, 2, 7, reordered)
    answers = {t.name: t.partitions[0] for t in response.topics}
    assert answers[OTHER].error_code == ErrorCode.topic_authorization_failed
    assert (answers[OTHER].offset, answers[OTHER].timestamp) == (-1, -1)
    assert answers[TOPIC].error_code == ErrorCode.none and answers[TOPIC].offset >= 0
    epochs = epoch_v4.OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=tuple(
            epoch_v4.OffsetForLeaderTopic(
                topic=name,
                partitions=(epoch_v4.OffsetForLeaderPartition(partition=0, leader_epoch=0),),
            )
            for name in (TOPIC, OTHER)
        ),
    )
    response = call(broker, 23, 4, epochs)
    assert {t.topic: t.partitions[0].error_code for t in response.topics} == {
        TOPIC: ErrorCode.none,
        OTHER: ErrorCode.topic_authorization_failed,
    }
    # A broker (CLUSTER_ACTION) may ask about every topic.
    allow(broker, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME)
    response = call(broker, 23, 4, epochs)
    assert {t.partitions[0].error_code for t in response.topics} == {ErrorCode.none}


# -- groups ----------------------------------------------------------------------------------


def test_find_coordinator_needs_describe_on_each_key(broker: Broker) -> None:
    allow(broker, Op.READ, Res.GROUP, "mine")
    response = call(
        broker, 10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=("mine", "theirs"))
    )
    errors = {c.key: c.error_code for c in response.coordinators}
    assert errors["theirs"] == ErrorCode.group_authorization_failed
    assert errors["mine"] != ErrorCode.group_authorization_failed
    response = call(broker, 10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=("tx",)))
    assert response.coordinators[0].error_code == ErrorCode.transactional_id_authorization_failed
    assert response.coordinators[0].node_id == -1


def test_group_membership_needs_read_on_the_group(broker: Broker) -> None:
    join = join_v9.JoinGroupRequest(
        group_id="g",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        protocol_type="consumer",
        protocols=(join_v9.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    response = call(broker, 11, 9, join)
    assert response.error_code == ErrorCode.group_authorization_failed
    assert response.generation_id == -1 and response.members == ()
    heartbeat = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
    assert call(broker, 12, 4, heartbeat).error_code == ErrorCode.group_authorization_failed
    sync = sync_v5.SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id="m",
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    synced = call(broker, 14, 5, sync)
    assert synced.error_code == ErrorCode.group_authorization_failed and synced.assignment == b""
    leave = leave_v5.LeaveGroupRequest(
        group_id="g", members=(leave_v5.MemberIdentity(member_id="m"),)
    )
    left = call(broker, 13, 5, leave)
    assert left.error_code == ErrorCode.group_authorization_failed and left.members == ()
    assert broker.groups.describe_group("g")[1].members == ()


def commit_request(group_id: str, *topics: str) -> Any:
    return commit_v8.OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=tuple(
            commit_v8.OffsetCommitRequestTopic(
                name=name,
                partitions=(
                    commit_v8.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=5, committed_metadata=""
                    ),
                ),
            )
            for name in topics
        ),
    )


def commit_errors(response: Any) -> dict[str, ErrorCode]:
    return {t.name: t.partitions[0].error_code for t in response.topics}


def test_offset_commit_needs_read_on_the_group_then_on_each_topic(broker: Broker) -> None:
    response = call(broker, 8, 8, commit_request("g", TOPIC, OTHER))
    assert set(commit_errors(response).values()) == {ErrorCode.group_authorization_failed}
    allow(broker, Op.READ, Res.GROUP, "g")
    allow(broker, Op.READ, Res.TOPIC, OTHER)
    # The group passes; the topic without READ is refused before the group is asked.
    errors = commit_errors(call(broker, 8, 8, commit_request("g", TOPIC, OTHER)))
    assert errors[TOPIC] == ErrorCode.topic_authorization_failed
    assert errors[OTHER] != ErrorCode.topic_authorization_failed


class Offsets:
    """A group coordinator stand-in holding one group's committed offsets."""

    def __init__(self, offsets: dict[tuple[str, int], OffsetValue]) -> None:
        self.offsets = offsets
        self.asked: list[list[tuple[str, int]] | None] = []

    def fetch_offsets(self, group_id: str, partitions: Any, member: Any = (None, -1)) -> Any:
        self.asked.append(None if partitions is None else list(partitions))
        wanted = self.offsets if partitions is None else partitions
        return ErrorCode.none, {tp: self.offsets.get(tp) for tp in wanted}

    def unstable_offsets(self, group_id: str, partitions: Any) -> set[tuple[str, int]]:
        return set()


def test_offset_fetch_hides_the_offsets_of_topics_the_principal_may_not_describe(
    broker: Broker,
) -> None:
    stored = {
        (TOPIC, 0): OffsetValue(7, -1, "", 0),
        (OTHER, 0): OffsetValue(9, -1, "", 0),
    }
    groups = Offsets(stored)
    services = broker.services.replace(groups=groups)  # type: ignore[arg-type]
    allow(broker, Op.DESCRIBE, Res.GROUP, "g")
    allow(broker, Op.DESCRIBE, Res.TOPIC, TOPIC)

    def fetch(topics: tuple[str, ...] | None, group_id: str = "g") -> Any:
        wanted = (
            None
            if topics is None
            else tuple(
                offset_fetch_v8.OffsetFetchRequestTopics(name=name, partition_indexes=(0,))
                for name in topics
            )
        )
        request = offset_fetch_v8.OffsetFetchRequest(
            groups=(offset_fetch_v8.OffsetFetchRequestGroup(group_id=group_id, topics=wanted),)
        )
        return call(broker, 9, 8, request, services=services).groups[0]

    named = fetch((TOPIC, OTHER))
    answers = {t.name: t.partitions[0] for t in named.topics}
    assert answers[TOPIC].committed_offset == 7 and answers[TOPIC].error_code == ErrorCode.none
    assert answers[OTHER].committed_offset == -1
    assert answers[OTHER].error_code == ErrorCode.topic_authorization_failed
    assert groups.asked[-1] == [(TOPIC, 0)]  # the coordinator is not asked for it at all
    everything = fetch(None)
    assert [t.name for t in everything.topics] == [TOPIC]
    refused = fetch(None, group_id="h")
    assert refused.error_code == ErrorCode.group_authorization_failed and refused.topics == ()
    # v8 asks for several groups at once: each is answered on its own.
    both = offset_fetch_v8.OffsetFetchRequest(
        groups=tuple(
            offset_fetch_v8.OffsetFetchRequestGroup(group_id=group_id, topics=None)
            for group_id in ("g", "h")
        )
    )
    answers = call(broker, 9, 8, both, services=services).groups
    assert [(a.group_id, a.error_code) for a in answers] == [
        ("g", ErrorCode.none),
        ("h", ErrorCode.group_authorization_failed),
    ]
    assert [t.name for t in answers[0].topics] == [TOPIC]


class Described:
    """A group coordinator stand-in describing any group as an empty consumer group."""

    def __init__(self) -> None:
        self.described: list[str] = []

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        self.described.append(group_id)
        return ErrorCode.none, GroupDescription(group_id, "Empty", "consumer", "", ())


def test_describe_groups_per_group_and_its_authorized_operations(broker: Broker) -> None:
    groups = Described()
    services = broker.services.replace(groups=groups)  # type: ignore[arg-type]
    allow(broker, Op.READ, Res.GROUP, "g")
    response = call(
        broker,
        15,
        5,
        DescribeGroupsRequest(groups=("g", "h"), include_authorized_operations=True),
        services=services,
    )
    assert groups.described == ["g"]
    by_id = {g.group_id: g for g in response.groups}
    assert by_id["h"].error_code == ErrorCode.group_authorization_failed
    assert by_id["h"].authorized_operations == NO_AUTHORIZED_OPERATIONS
    assert by_id["g"].error_code == ErrorCode.none
    # READ, and DESCRIBE which READ implies; not DELETE.
    assert by_id["g"].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    response = call(
        broker,
        15,
        5,
        DescribeGroupsRequest(groups=("g",), include_authorized_operations=False),
        services=services,
    )
    assert response.groups[0].authorized_operations == NO_AUTHORIZED_OPERATIONS


class Listed:
    """A group coordinator stand-in with groups to list and delete."""

    def __init__(self, *group_ids: str) -> None:
        self.group_ids = group_ids
        self.deleted: list[str] = []
        self.share = ShareGroups(dict)  # no share groups

    def list_typed_groups(
        self, states: Any = (), types: Any = ()
    ) -> list[tuple[str, str, str, str]]:
        return [(g, "consumer", "Empty", "classic") for g in self.group_ids]

    def list_share_groups(
        self, states: Any = (), types: Any = ()
    ) -> list[tuple[str, str, str, str]]:
        return []

    def is_loading(self) -> bool:
        return False

    async def delete_groups(self, group_ids: Any) -> dict[str, ErrorCode]:
        self.deleted.extend(group_ids)
        return dict.fromkeys(group_ids, ErrorCode.none)

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        self.deleted.extend(f"{group_id}:{topic}-{index}" for topic, index in partitions)
        return ErrorCode.none, dict.fromkeys(partitions, ErrorCode.none)


def test_list_groups_shows_only_describable_groups_and_delete_needs_delete(
    broker: Broker,
) -> None:
    groups = Listed("alice-1", "alice-2", "bob-1")
    services = broker.services.replace(groups=groups)  # type: ignore[arg-type]
    allow(broker, Op.READ, Res.GROUP, "alice-", pattern=PatternType.PREFIXED)
    listed = call(broker, 16, 4, ListGroupsRequest(), services=services)
    assert [g.group_id for g in listed.groups] == ["alice-1", "alice-2"]
    listed = call(broker, 16, 4, ListGroupsRequest(), user="admin", services=services)
    assert len(listed.groups) == 3
    allow(broker, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME)  # Kafka's "all groups" grant
    assert len(call(broker, 16, 4, ListGroupsRequest(), services=services).groups) == 3

    allow(broker, Op.DELETE, Res.GROUP, "alice-1")
    request = DeleteGroupsRequest(groups_names=("alice-1", "bob-1", "alice-1"))
    results = call(broker, 42, 2, request, services=services).results
    assert {r.group_id: r.error_code for r in results} == {
        "alice-1": ErrorCode.none,
        "bob-1": ErrorCode.group_authorization_failed,
    }
    assert groups.deleted == ["alice-1"]


def test_offset_delete_needs_delete_on_the_group_and_read_on_topics(broker: Broker) -> None:
    groups = Listed()
    services = broker.services.replace(groups=groups)  # type: ignore[arg-type]
    request = offset_delete_v0.OffsetDeleteRequest(
        group_id="g",
        topics=tuple(
            offset_delete_v0.OffsetDeleteRequestTopic(
                name=name,
                partitions=(offset_delete_v0.OffsetDeleteRequestPartition(partition_index=0),),
            )
            for name in (TOPIC, OTHER)
        ),
    )
    response = call(broker, 47, 0, request, services=services)
    assert response.error_code == ErrorCode.group_authorization_failed
    allow(broker, Op.DELETE, Res.GROUP, "g")
    allow(broker, Op.READ, Res.TOPIC, OTHER)
    response = call(broker, 47, 0, request, services=services)
    assert {t.name: t.partitions[0].error_code for t in response.topics} == {
        TOPIC: ErrorCode.topic_authorization_failed,
        OTHER: ErrorCode.none,
    }
    assert groups.deleted == [f"g:{OTHER}-0"]


# -- producer ids and transactions ------------------------------------------------------------


def init_producer_id(broker: Broker, transactional_id: str | None) -> Any:
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60)
    )
    return call(broker, 22, 4, request)


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(broker: Broker) -> None:
    refused = init_producer_id(broker, None)
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert refused.producer_id == -1
    allow(broker, Op.WRITE, Res.TOPIC, "orders-", pattern=PatternType.PREFIXED)
    granted = init_producer_id(broker, None)
    assert granted.error_code == ErrorCode.none and granted.producer_id >= 0
    broker.controller.image.acls.remove(
        AclBinding(
            Res.TOPIC, "orders-", PatternType.PREFIXED, ALICE, "*", Op.WRITE, AclPermission.ALLOW
        )
    )
    allow(broker, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME)
    assert init_producer_id(broker, None).error_code == ErrorCode.none


def test_transaction_apis_need_write_on_the_transactional_id(broker: Broker) -> None:
    refused = ErrorCode.transactional_id_authorization_failed
    assert init_producer_id(broker, "tx").error_code == refused
    end = EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True)
    assert call(broker, 26, 3, end).error_code == refused
    offsets = AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"
    )
    assert call(broker, 25, 3, offsets).error_code == refused
    allow(broker, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")
    assert call(broker, 25, 3, offsets).error_code == ErrorCode.group_authorization_failed

    txn_commit = txn_commit_v3.TxnOffsetCommitRequest(
        transactional_id="other-tx",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        topics=(
            txn_commit_v3.TxnOffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    txn_commit_v3.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata=""
                    ),
                ),
            ),
        ),
    )
    response = call(broker, 28, 3, txn_commit)
    assert response.topics[0].partitions[0].error_code == refused
    response = call(broker, 28, 3, dataclasses.replace(txn_commit, transactional_id="tx"))
    assert response.topics[0].partitions[0].error_code == ErrorCode.group_authorization_failed
    allow(broker, Op.READ, Res.GROUP, "g")
    response = call(broker, 28, 3, dataclasses.replace(txn_commit, transactional_id="tx"))
    assert response.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed


def test_add_partitions_needs_write_on_the_id_and_every_topic(broker: Broker) -> None:
    request = add_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(
            add_v3.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),
            add_v3.AddPartitionsToTxnTopic(name=OTHER, partitions=(0,)),
        ),
    )

    def errors() -> dict[str, ErrorCode]:
        response = call(broker, 24, 3, request)
        return {
            t.name: t.results_by_partition[0].partition_error_code
            for t in response.results_by_topic_v3_and_below
        }

    assert set(errors().values()) == {ErrorCode.transactional_id_authorization_failed}
    allow(broker, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")
    allow(broker, Op.WRITE, Res.TOPIC, TOPIC)
    # All or nothing: the allowed partition is not added either.
    assert errors() == {
        TOPIC: ErrorCode.operation_not_attempted,
        OTHER: ErrorCode.topic_authorization_failed,
    }


def test_broker_to_broker_forms_need_cluster_permissions(broker: Broker) -> None:
    verify = add_v4.AddPartitionsToTxnRequest(
        transactions=(
            add_v4.AddPartitionsToTxnTransaction(
                transactional_id="tx",
                producer_id=1,
                producer_epoch=0,
                verify_only=True,
                topics=(add_v4.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),),
            ),
        )
    )
    response = call(broker, 24, 4, verify)
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert response.results_by_transaction == ()
    markers = markers_v1.WriteTxnMarkersRequest(
        markers=(
            markers_v1.WritableTxnMarker(
                producer_id=901,
                producer_epoch=0,
                transaction_result=True,
                coordinator_epoch=0,
                topics=(markers_v1.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=(1,)),),
            ),
        )
    )
    before = log_end(broker, TOPIC, 1)
    response = call(broker, 27, 1, markers)
    assert response.markers[0].topics[0].partitions[0].error_code == (
        ErrorCode.cluster_authorization_failed
    )
    assert log_end(broker, TOPIC, 1) == before
    # The coordinator's own path is no client request: no ACL applies to it.
    written = _run(
        broker, broker.services.replica_manager.write_marker, TOPIC, 1, 901, 0, 0, True, 10.0
    )
    assert written == ErrorCode.none
    assert log_end(broker, TOPIC, 1) == before + 1


class Transactions:
    """A transaction coordinator stand-in knowing two transactional ids."""

    def describe(self, transactional_id: str) -> TxnMetadata:
        return TxnMetadata(
            transactional_id,
            producer_id=5,
            producer_epoch=0,
            state=TxnState.ONGOING,
            partitions=frozenset({(TOPIC, 0), (OTHER, 0)}),
            start_ms=0,
        )

    def list_transactions(self, *_: Any) -> list[Listing]:
        return [Listing("tx-a", 5, TxnState.ONGOING), Listing("tx-b", 6, TxnState.ONGOING)]


def test_transactions_are_described_and_listed_only_where_allowed(broker: Broker) -> None:
    services = broker.services.replace(transactions=Transactions())  # type: ignore[arg-type]
    request = DescribeTransactionsRequest(transactional_ids=("tx-a", "tx-b"))
    allow(broker, Op.DESCRIBE, Res.TRANSACTIONAL_ID, "tx-a")
    allow(broker, Op.READ, Res.TOPIC, TOPIC)
    states = call(broker, 65, 0, request, services=services).transaction_states
    assert states[0].error_code == ErrorCode.none
    # Only the topics the principal may DESCRIBE are shown.
    assert [t.topic for t in states[0].topics] == [TOPIC]
    assert states[1].error_code == ErrorCode.transactional_id_authorization_failed
    listed = call(
        broker,
        66,
        0,
        ListTransactionsRequest(state_filters=(), producer_id_filters=()),
        services=services,
    )
    assert [t.transactional_id for t in listed.transaction_states] == ["tx-a"]


def test_describe_producers_needs_read_on_the_topic(broker: Broker) -> None:
    request = producers_v0.DescribeProducersRequest(
        topics=(producers_v0.TopicRequest(name=TOPIC, partition_indexes=(0, 1)),)
    )
    response = call(broker, 61, 0, request)
    assert {p.error_code for p in response.topics[0].partitions} == {
        ErrorCode.topic_authorization_failed
    }
    allow(broker, Op.READ, Res.TOPIC, TOPIC)
    response = call(broker, 61, 0, request)
    assert {p.error_code for p in response.topics[0].partitions} == {ErrorCode.none}


def test_a_refused_acks_0_produce_closes_the_connection(broker: Broker) -> None:
    listener = ListenerSpec("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0)
    header = RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="t"
    )
    request = dataclasses.replace(produce_request({TOPIC: [0]}, plain_batch()), acks=0)
    allowed = ClientSession(listener, principal=Principal("User", "admin"))
    refused = ClientSession(listener, principal=Principal("User", "alice"))
    for session in (allowed, refused):
        context = RequestContext(broker.services, header, 0, 9, "127.0.0.1", 1, session)
        assert _run(broker, HANDLERS[0].handle, context, request) is None
    assert not allowed.close_after_response
    assert refused.close_after_response


def test_add_partitions_refuses_internal_topics_even_to_a_super_user(broker: Broker) -> None:
    _run(broker, broker.groups.ensure_offsets_topic)
    assert broker.topics.get("__consumer_offsets") is not None
    request = add_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(
            add_v3.AddPartitionsToTxnTopic(name="__consumer_offsets", partitions=(0,)),
        ),
    )
    response = call(broker, 24, 3, request, user="admin")
    result = response.results_by_topic_v3_and_below[0].results_by_partition[0]
    assert result.partition_error_code == ErrorCode.topic_authorization_failed


def test_nobody_produces_to_an_internal_topic(broker: Broker) -> None:
    _run(broker, broker.groups.ensure_offsets_topic)
    request = produce_request({"__consumer_offsets": [0]}, plain_batch())
    # As in Kafka: the ACL first, then the refusal every client gets.
    assert produce_errors(call(broker, 0, 9, request)) == {
        ("__consumer_offsets", 0): ErrorCode.topic_authorization_failed
    }
    assert produce_errors(call(broker, 0, 9, request, user="admin")) == {
        ("__consumer_offsets", 0): ErrorCode.invalid_topic_exception
    }
