"""Kafka's ACL checks on Metadata, DescribeCluster and the admin APIs, in an in-process broker
with StandardAuthorizer: handlers called with a RequestContext whose session carries the
principal, and bindings added to the broker's metadata image directly."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.alter_configs.v2 import request as legacy_alter
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_cluster.v0 import request as describe_cluster
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.metadata.v12 import request as metadata
from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i8, i32
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.handlers import configs, scram_credentials, topics_admin
from raftka.broker.handlers.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    handle_describe_cluster,
    handle_metadata,
)
from raftka.broker.security.acl import (
    CLUSTER_NAME,
    OPERATIONS_OF,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from raftka.broker.security.listeners import ListenerSpec, SecurityProtocol
from raftka.broker.security.session import ClientSession, Principal
from raftka.broker.server import Broker, Listener
from raftka.broker.services import RequestContext

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
LISTENER = ListenerSpec("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 9092)
TIMEOUT = datetime.timedelta(seconds=10)
TOPICS = ("alice-1", "alice-2", "shared", "secret")


_run = run_with_broker


def _open(data_dir: Path, **configs: str) -> Broker:
    config = BrokerConfig(configs, environ={})
    instance = Broker(config, Listener("127.0.0.1", 0), data_dir)
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    for name in TOPICS:
        command = CreateTopicCommand(name=name, num_partitions=1, replication_factor=1)
        created = _run(instance, instance.controller.execute, command)
        assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        for name in TOPICS:
            while (p := instance.topics.partition(name, 0)) is None or not p.is_leader:
                await trio.sleep(0.01)

    _run(instance, led)
    return instance


def _close(broker: Broker) -> None:
    broker.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    instance = _open(
        tmp_path / "data", **{"authorizer.class.name": AUTHORIZER, "super.users": "User:admin"}
    )
    try:
        yield instance
    finally:
        _close(instance)


def allow(
    broker: Broker,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermission = AclPermission.ALLOW,
    principal: str = "User:alice",
) -> None:
    broker.controller.image.acls.add(
        AclBinding(resource_type, name, pattern, principal, "*", operation, permission)
    )


def call(broker: Broker, user: str, handle: Any, request: Any) -> Any:
    """`handle(request)` as `user` connected to a SASL listener."""
    header = RequestHeader(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=i32(1),
        client_id="test",
    )
    session = ClientSession(LISTENER, principal=Principal("User", user))
    context = RequestContext(
        broker.services,
        header,
        int(request.__api_key__),
        int(request.__version__),
        "127.0.0.1",
        1,
        session,
    )
    return _run(broker, handle, context, request)


def metadata_request(
    *names: str, auto_create: bool = False, topic_ops: bool = False
) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=tuple(metadata.MetadataRequestTopic(topic_id=None, name=n) for n in names)
        if names
        else None,
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=topic_ops,
    )


def by_name(response: Any) -> dict[str | None, Any]:
    return {t.name: t for t in response.topics}


# --- Metadata ---------------------------------------------------------------------------


def test_all_topics_lists_only_those_the_principal_may_describe(broker: Broker) -> None:
    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "alice-", PatternType.PREFIXED)
    allow(broker, AclOperation.READ, ResourceType.TOPIC, "shared")  # READ implies DESCRIBE
    listed = by_name(call(broker, "alice", handle_metadata, metadata_request()))
    assert set(listed) == {"alice-1", "alice-2", "shared"}
    assert all(t.error_code == ErrorCode.none for t in listed.values())
    assert call(broker, "bob", handle_metadata, metadata_request()).topics == ()
    assert set(by_name(call(broker, "admin", handle_metadata, metadata_request()))) >= set(TOPICS)


def test_a_named_topic_without_describe_is_denied_whether_or_not_it_exists(
    broker: Broker,
) -> None:
    response = call(broker, "alice", handle_metadata, metadata_request("secret", "no-such"))
    found = by_name(response)
    assert found["secret"].error_code == ErrorCode.topic_authorization_failed
    assert found["no-such"].error_code == ErrorCode.topic_authorization_failed
    # Nothing about the hidden topic leaks: no id, no partitions.
    assert found["secret"].topic_id in (None, uuid.UUID(int=0))
    assert found["secret"].partitions == ()


def test_a_deny_beats_an_allow(broker: Broker) -> None:
    allow(broker, AclOperation.ALL, ResourceType.TOPIC, "*")
    allow(
        broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "secret", permission=AclPermission.DENY
    )
    listed = by_name(call(broker, "alice", handle_metadata, metadata_request()))
    assert "secret" not in listed and "shared" in listed


def test_a_topic_asked_for_by_id_without_describe_keeps_its_name_back(broker: Broker) -> None:
    secret = broker.topics.get("secret")
    assert secret is not None
    request = metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=secret.topic_id, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (entry,) = call(broker, "alice", handle_metadata, request).topics
    assert (entry.error_code, entry.name, entry.topic_id) == (
        ErrorCode.topic_authorization_failed,
        None,
        secret.topic_id,
    )


def test_auto_creation_needs_create_on_the_topic_or_the_cluster(broker: Broker) -> None:
    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "*")
    request = metadata_request("auto-a", auto_create=True)
    (denied,) = call(broker, "alice", handle_metadata, request).topics
    assert denied.error_code == ErrorCode.topic_authorization_failed
    assert broker.topics.get("auto-a") is None

    allow(broker, AclOperation.CREATE, ResourceType.TOPIC, "auto-", PatternType.PREFIXED)
    (created,) = call(broker, "alice", handle_metadata, request).topics
    assert created.error_code in (ErrorCode.none, ErrorCode.leader_not_available)
    assert broker.controller.image.topics.get("auto-a") is not None

    allow(broker, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, principal="User:bob")
    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "*", principal="User:bob")
    (by_cluster,) = call(
        broker, "bob", handle_metadata, metadata_request("other", auto_create=True)
    ).topics
    assert by_cluster.error_code in (ErrorCode.none, ErrorCode.leader_not_available)


def test_without_auto_creation_a_missing_describable_topic_is_unknown(broker: Broker) -> None:
    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "*")
    (entry,) = call(broker, "alice", handle_metadata, metadata_request("missing")).topics
    assert entry.error_code == ErrorCode.unknown_topic_or_partition


def _bits(*operations: AclOperation) -> int:
    return sum(1 << int(op) for op in operations)


def test_authorized_operations_are_filled_only_when_asked_for(broker: Broker) -> None:
    allow(broker, AclOperation.READ, ResourceType.TOPIC, "shared")
    allow(broker, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "shared")
    (plain,) = call(broker, "alice", handle_metadata, metadata_request("shared")).topics
    assert plain.topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    request = metadata_request("shared", "secret", topic_ops=True)
    found = by_name(call(broker, "alice", handle_metadata, request))
    assert found["shared"].topic_authorized_operations == _bits(
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    )
    assert found["secret"].topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    (admin_view,) = call(
        broker, "admin", handle_metadata, metadata_request("secret", topic_ops=True)
    ).topics
    assert admin_view.topic_authorized_operations == _bits(*OPERATIONS_OF[ResourceType.TOPIC])


def test_cluster_authorized_operations_need_describe_on_the_cluster(broker: Broker) -> None:
    def cluster_ops(user: str) -> tuple[int, int]:
        old = metadata_v10.MetadataRequest(
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=False,
        )
        described = describe_cluster.DescribeClusterRequest(
            include_cluster_authorized_operations=True
        )
        return (
            call(broker, user, handle_metadata, old).cluster_authorized_operations,
            call(broker, user, handle_describe_cluster, described).cluster_authorized_operations,
        )

    assert cluster_ops("alice") == (0, 0)
    allow(broker, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    bits = _bits(AclOperation.ALTER, AclOperation.DESCRIBE)
    assert cluster_ops("alice") == (bits, bits)
    everything = _bits(*OPERATIONS_OF[ResourceType.CLUSTER])
    assert cluster_ops("admin") == (everything, everything)
    quiet = describe_cluster.DescribeClusterRequest(include_cluster_authorized_operations=False)
    response = call(broker, "admin", handle_describe_cluster, quiet)
    assert response.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


# --- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords --------------------------


def create_request(*names: str, validate_only: bool = False) -> Any:
    return create_topics.CreateTopicsRequest(
        topics=tuple(
            create_topics.CreatableTopic(
                name=n, num_partitions=2, replication_factor=1, assignments=(), configs=()
            )
            for n in names
        ),
        timeout=TIMEOUT,
        validate_only=validate_only,
    )


def test_create_topics_needs_create_on_the_topic_or_the_cluster(broker: Broker) -> None:
    response = call(broker, "alice", topics_admin.handle_create_topics, create_request("new-1"))
    (denied,) = response.topics
    assert denied.error_code == ErrorCode.topic_authorization_failed
    assert "User:alice" in denied.error_message and "CREATE" in denied.error_message
    assert broker.controller.image.topics.get("new-1") is None

    allow(broker, AclOperation.CREATE, ResourceType.TOPIC, "new-", PatternType.PREFIXED)
    response = call(
        broker, "alice", topics_admin.handle_create_topics, create_request("new-1", "other")
    )
    results = by_name(response)
    assert results["new-1"].error_code == ErrorCode.none
    assert results["other"].error_code == ErrorCode.topic_authorization_failed
    # Without DESCRIBE_CONFIGS on the new topic, Kafka keeps its configs (and sizes) back.
    assert results["new-1"].topic_config_error_code == ErrorCode.topic_authorization_failed
    assert results["new-1"].configs == () and results["new-1"].num_partitions == -1

    allow(broker, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, principal="User:bob")
    allow(broker, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "*", principal="User:bob")
    (made,) = call(broker, "bob", topics_admin.handle_create_topics, create_request("b")).topics
    assert made.error_code == ErrorCode.none and made.topic_config_error_code == 0
    assert made.num_partitions == 2 and made.configs


def delete_request(*names: str, ids: tuple[uuid.UUID, ...] = ()) -> Any:
    return delete_topics.DeleteTopicsRequest(
        topics=tuple(delete_topics.DeleteTopicState(name=n, topic_id=None) for n in names)
        + tuple(delete_topics.DeleteTopicState(name=None, topic_id=i) for i in ids),
        timeout=TIMEOUT,
    )


def test_delete_topics_needs_delete_and_hides_what_may_not_be_described(broker: Broker) -> None:
    secret = broker.topics.get("secret")
    assert secret is not None
    request = delete_request("secret", "no-such", ids=(secret.topic_id,))
    responses = call(broker, "alice", topics_admin.handle_delete_topics, request).responses
    assert [r.error_code for r in responses] == [ErrorCode.topic_authorization_failed] * 3
    # Asked for by id, the name of a topic one may not describe is not given.
    assert responses[2].name is None and responses[2].topic_id == secret.topic_id
    assert broker.controller.image.topics.get("secret") is not None

    allow(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, "*")
    responses = call(
        broker, "alice", topics_admin.handle_delete_topics, delete_request("shared", "no-such")
    ).responses
    assert [r.error_code for r in responses] == [
        ErrorCode.topic_authorization_failed,
        ErrorCode.unknown_topic_or_partition,
    ]
    allow(broker, AclOperation.DELETE, ResourceType.TOPIC, "shared")
    (deleted,) = call(
        broker, "alice", topics_admin.handle_delete_topics, delete_request("shared")
    ).responses
    assert deleted.error_code == ErrorCode.none
    assert broker.controller.image.topics.get("shared") is None


def test_delete_on_the_cluster_allows_deleting_every_topic(broker: Broker) -> None:
    allow(broker, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME)
    request = delete_request("secret", "no-such")
    responses = call(broker, "alice", topics_admin.handle_delete_topics, request).responses
    assert [r.error_code for r in responses] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert broker.controller.image.topics.get("secret") is None


def test_create_partitions_needs_alter_on_the_topic(broker: Broker) -> None:
    def grow(user: str) -> Any:
        request = create_partitions.CreatePartitionsRequest(
            topics=(
                create_partitions.CreatePartitionsTopic(name="shared", count=3, assignments=None),
            ),
            timeout=TIMEOUT,
            validate_only=False,
        )
        (result,) = call(broker, user, topics_admin.handle_create_partitions, request).results
        return result

    denied = grow("alice")
    assert denied.error_code == ErrorCode.topic_authorization_failed
    assert "ALTER" in denied.error_message
    assert broker.controller.image.topics["shared"].num_partitions == 1
    allow(broker, AclOperation.ALTER, ResourceType.TOPIC, "shared")
    assert grow("alice").error_code == ErrorCode.none


def test_delete_records_needs_delete_on_the_topic(broker: Broker) -> None:
    request = delete_records.DeleteRecordsRequest(
        topics=(
            delete_records.DeleteRecordsTopic(
                name="shared",
                partitions=(delete_records.DeleteRecordsPartition(partition_index=0, offset=-1),),
            ),
        ),
        timeout=TIMEOUT,
    )
    (topic,) = call(broker, "alice", topics_admin.handle_delete_records, request).topics
    assert topic.partitions[0].error_code == ErrorCode.topic_authorization_failed
    assert topic.partitions[0].low_watermark == -1
    allow(broker, AclOperation.DELETE, ResourceType.TOPIC, "shared")
    (topic,) = call(broker, "alice", topics_admin.handle_delete_records, request).topics
    assert topic.partitions[0].error_code == ErrorCode.none


# --- configs --------------------------------------------------------------------------------


def describe_configs_request(resource_type: int, name: str) -> Any:
    return describe_configs.DescribeConfigsRequest(
        resources=(
            describe_configs.DescribeConfigsResource(
                resource_type=i8(resource_type), resource_name=name, configuration_keys=None
            ),
        )
    )


def test_describe_configs_needs_describe_configs(broker: Broker) -> None:
    def describe(user: str, resource_type: int, name: str) -> Any:
        request = describe_configs_request(resource_type, name)
        (result,) = call(broker, user, configs.handle_describe_configs, request).results
        return result

    topic = describe("alice", configs.RESOURCE_TOPIC, "shared")
    assert (topic.error_code, topic.configs) == (ErrorCode.topic_authorization_failed, ())
    # Before existence: a missing topic one may not see is denied, not unknown.
    missing = describe("alice", configs.RESOURCE_TOPIC, "no-such")
    assert missing.error_code == ErrorCode.topic_authorization_failed
    for resource_type in (configs.RESOURCE_BROKER, configs.RESOURCE_BROKER_LOGGER):
        denied = describe("alice", resource_type, str(broker.node_id))
        assert denied.error_code == ErrorCode.cluster_authorization_failed
        assert "DESCRIBE_CONFIGS" in denied.error_message
        assert "cluster" in denied.error_message

    allow(broker, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "shared")  # implies describe
    allow(broker, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    assert describe("alice", configs.RESOURCE_TOPIC, "shared").configs
    assert describe("alice", configs.RESOURCE_BROKER, str(broker.node_id)).configs
    assert describe("admin", configs.RESOURCE_TOPIC, "secret").configs


def test_altering_configs_needs_alter_configs(broker: Broker) -> None:
    def alter(user: str, resource_type: int, name: str) -> Any:
        request = incremental_alter.IncrementalAlterConfigsRequest(
            resources=(
                incremental_alter.AlterConfigsResource(
                    resource_type=i8(resource_type),
                    resource_name=name,
                    configs=(
                        incremental_alter.AlterableConfig(
                            name="retention.ms", config_operation=i8(0), value="1000"
                        ),
                    ),
                ),
            ),
            validate_only=False,
        )
        (result,) = call(broker, user, configs.handle_incremental_alter_configs, request).responses
        return result

    assert alter("alice", configs.RESOURCE_TOPIC, "shared").error_code == (
        ErrorCode.topic_authorization_failed
    )
    assert "retention.ms" not in broker.controller.image.topics["shared"].configs
    for resource_type in (configs.RESOURCE_BROKER, configs.RESOURCE_BROKER_LOGGER):
        assert alter("alice", resource_type, "").error_code == (
            ErrorCode.cluster_authorization_failed
        )
    allow(broker, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "sha", PatternType.PREFIXED)
    assert alter("alice", configs.RESOURCE_TOPIC, "shared").error_code == ErrorCode.none
    assert broker.controller.image.topics["shared"].configs["retention.ms"] == "1000"


def test_legacy_alter_configs_needs_alter_configs(broker: Broker) -> None:
    def alter(user: str, resource_type: int, name: str) -> Any:
        request = legacy_alter.AlterConfigsRequest(
            resources=(
                legacy_alter.AlterConfigsResource(
                    resource_type=i8(resource_type),
                    resource_name=name,
                    configs=(legacy_alter.AlterableConfig(name="retention.ms", value="2000"),),
                ),
            ),
            validate_only=False,
        )
        (result,) = call(broker, user, configs.handle_alter_configs, request).responses
        return result

    denied = alter("alice", configs.RESOURCE_TOPIC, "shared")
    assert denied.error_code == ErrorCode.topic_authorization_failed
    assert "ALTER_CONFIGS" in denied.error_message and "topic 'shared'" in denied.error_message
    assert alter("alice", configs.RESOURCE_BROKER, "").error_code == (
        ErrorCode.cluster_authorization_failed
    )
    assert "retention.ms" not in broker.controller.image.topics["shared"].configs
    assert alter("admin", configs.RESOURCE_TOPIC, "shared").error_code == ErrorCode.none
    assert broker.controller.image.topics["shared"].configs["retention.ms"] == "2000"


# --- SCRAM credentials ----------------------------------------------------------------------


def test_scram_credentials_need_describe_and_alter_on_the_cluster(broker: Broker) -> None:
    describe = describe_scram.DescribeUserScramCredentialsRequest(
        users=(describe_scram.UserName(name="carol"),)
    )
    described = call(
        broker, "alice", scram_credentials.handle_describe_user_scram_credentials, describe
    )
    assert described.error_code == ErrorCode.cluster_authorization_failed
    assert [r.error_code for r in described.results] == [ErrorCode.cluster_authorization_failed]
    upsert = alter_scram.AlterUserScramCredentialsRequest(
        deletions=(),
        upsertions=(
            alter_scram.ScramCredentialUpsertion(
                name="carol",
                mechanism=i8(2),
                iterations=i32(4096),
                salt=b"salt" * 4,
                salted_password=b"p" * 64,
            ),
        ),
    )
    (altered,) = call(
        broker, "alice", scram_credentials.handle_alter_user_scram_credentials, upsert
    ).results
    assert (altered.user, altered.error_code) == ("carol", ErrorCode.cluster_authorization_failed)
    assert not broker.controller.image.scram_credentials

    (by_admin,) = call(
        broker, "admin", scram_credentials.handle_alter_user_scram_credentials, upsert
    ).results
    assert by_admin.error_code == ErrorCode.none
    allow(broker, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    described = call(
        broker, "alice", scram_credentials.handle_describe_user_scram_credentials, describe
    )
    assert described.error_code == ErrorCode.none
    assert [r.user for r in described.results] == ["carol"]


# --- no authorizer --------------------------------------------------------------------------


def test_without_an_authorizer_nothing_is_checked(tmp_path: Path) -> None:
    open_broker = _open(tmp_path / "data")
    try:
        listed = by_name(call(open_broker, "nobody", handle_metadata, metadata_request()))
        assert set(listed) >= set(TOPICS)
        request = describe_configs_request(configs.RESOURCE_BROKER, "")
        (result,) = call(open_broker, "nobody", configs.handle_describe_configs, request).results
        assert result.error_code == ErrorCode.none
        (made,) = call(
            open_broker, "nobody", topics_admin.handle_create_topics, create_request("free")
        ).topics
        assert made.error_code == ErrorCode.none and made.configs
    finally:
        _close(open_broker)
