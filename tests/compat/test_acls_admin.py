"""ACLs managed through Kafka's admin APIs (CreateAcls, DescribeAcls, DeleteAcls) on a broker
with the StandardAuthorizer: the confluent-kafka AdminClient as the super user, a user who
is not one refused, and a broker without an authorizer answering SECURITY_DISABLED."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from brokers import Brokers
from clients import RawConnection, run_raftka, wait_until
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from harness import BrokerProcess, ClusterProcess
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_acls.v3.response import DeleteAclsResponse
from kio.schema.describe_acls.v3 import DescribeAclsRequest, DescribeAclsResponse
from kio.static.primitive import i8
from secured import AUTHORIZER, SaslBroker, start_sasl_broker

TIMEOUT_S = 30


class AclsBroker(SaslBroker):
    def admin(self, user: str) -> AdminClient:
        return AdminClient(self.client(user))


@pytest.fixture(scope="module")
def secured(module_brokers: Brokers) -> AclsBroker:
    started = start_sasl_broker(module_brokers, ("admin", "alice"), name="acl-broker")
    return AclsBroker(started.broker, started.sasl_port)


def binding(
    name: str,
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    *,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    host: str = "*",
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, operation, permission)


def acl_filter(**overrides: Any) -> AclBindingFilter:
    fields: dict[str, Any] = {
        "restype": ResourceType.ANY,
        "name": None,
        "resource_pattern_type": ResourcePatternType.ANY,
        "principal": None,
        "host": None,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
        **overrides,
    }
    return AclBindingFilter(**fields)


def create(admin: AdminClient, bindings: list[AclBinding]) -> dict[AclBinding, Exception | None]:
    outcomes: dict[AclBinding, Exception | None] = {}
    for b, future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).items():
        try:
            future.result(timeout=TIMEOUT_S)
            outcomes[b] = None
        except KafkaException as exc:
            outcomes[b] = exc
    return outcomes


def describe(admin: AdminClient, f: AclBindingFilter) -> set[AclBinding]:
    return set(admin.describe_acls(f, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S))


def delete(admin: AdminClient, filters: list[AclBindingFilter]) -> list[set[AclBinding]]:
    futures = admin.delete_acls(filters, request_timeout=TIMEOUT_S)
    return [set(futures[f].result(timeout=TIMEOUT_S)) for f in filters]


def error_code(exc: BaseException | None) -> int:
    assert isinstance(exc, KafkaException), exc
    error = exc.args[0]
    assert isinstance(error, KafkaError)
    return int(error.code())


def test_super_user_creates_describes_and_deletes(secured: AclsBroker) -> None:
    admin = secured.admin("admin")
    read = binding("orders")
    prefixed_write = binding(
        "logs-", operation=AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED
    )
    wildcard_deny = binding(
        "*", "User:*", AclOperation.DELETE, host="10.0.0.9", permission=AclPermissionType.DENY
    )
    group = binding("g1", "User:bob", AclOperation.ALL, restype=ResourceType.GROUP)
    cluster = binding("kafka-cluster", operation=AclOperation.DESCRIBE, restype=ResourceType.BROKER)
    wanted = [read, prefixed_write, wildcard_deny, group, cluster]
    assert create(admin, wanted) == dict.fromkeys(wanted)
    assert create(admin, [read]) == {read: None}  # twice: still stored once

    assert describe(admin, acl_filter()) == set(wanted)
    topics = describe(admin, acl_filter(restype=ResourceType.TOPIC))
    assert topics == {read, prefixed_write, wildcard_deny}
    # MATCH: every binding that applies to the topic logs-2024 (its prefix, the wildcard).
    match = describe(
        admin,
        acl_filter(
            restype=ResourceType.TOPIC,
            name="logs-2024",
            resource_pattern_type=ResourcePatternType.MATCH,
        ),
    )
    assert match == {prefixed_write, wildcard_deny}
    assert describe(admin, acl_filter(principal="User:bob")) == {group}
    assert describe(admin, acl_filter(host="10.0.0.9")) == {wildcard_deny}

    removed = delete(
        admin,
        [
            acl_filter(
                restype=ResourceType.TOPIC,
                name="orders",
                resource_pattern_type=ResourcePatternType.LITERAL,
            ),
            acl_filter(permission_type=AclPermissionType.DENY),
            acl_filter(name="nothing"),
        ],
    )
    assert removed == [{read}, {wildcard_deny}, set()]
    assert describe(admin, acl_filter()) == {prefixed_write, group, cluster}
    assert delete(admin, [acl_filter()]) == [{prefixed_write, group, cluster}]
    assert describe(admin, acl_filter()) == set()


def test_invalid_creations_are_refused_and_valid_ones_kept(secured: AclsBroker) -> None:
    admin = secured.admin("admin")
    good = binding("kept", "User:carol")
    bad_cluster = binding("other", restype=ResourceType.BROKER, operation=AclOperation.ALTER)
    outcomes = create(admin, [good, bad_cluster])
    assert outcomes[good] is None
    assert error_code(outcomes[bad_cluster]) == KafkaError.INVALID_REQUEST
    assert describe(admin, acl_filter(principal="User:carol")) == {good}
    assert describe(admin, acl_filter(restype=ResourceType.BROKER)) == set()
    delete(admin, [acl_filter(principal="User:carol")])


def describe_raw_response(bootstrap: str) -> Any:
    """DescribeAcls (any binding) sent as is to this one broker."""
    with RawConnection(bootstrap) as conn:
        conn.send_request(
            DescribeAclsRequest(
                resource_type_filter=i8(1),
                resource_name_filter=None,
                pattern_type_filter=i8(1),
                principal_filter=None,
                host_filter=None,
                operation=i8(1),
                permission_type=i8(1),
            )
        )
        return conn.recv_response(DescribeAclsResponse)


def describe_raw(bootstrap: str) -> tuple[int, str | None]:
    """DescribeAcls's top-level error: librdkafka's describe_acls reports no error when the
    response carries one."""
    response = describe_raw_response(bootstrap)
    return int(response.error_code), response.error_message


def test_a_user_who_is_not_super_may_not_manage_acls(secured: AclsBroker) -> None:
    alice = secured.admin("alice")
    outcomes = create(alice, [binding("mine")])
    assert error_code(outcomes[binding("mine")]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as deleted:
        delete(alice, [acl_filter()])
    assert error_code(deleted.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The PLAINTEXT listener's clients are User:ANONYMOUS, not a super user either.
    code, message = describe_raw(secured.broker.bootstrap)
    assert code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert message is not None and "User:ANONYMOUS" in message
    assert describe(secured.admin("admin"), acl_filter(name="mine")) == set()


def test_without_an_authorizer_acl_requests_answer_security_disabled(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(name="plain-broker")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    outcomes = create(admin, [binding("t")])
    assert error_code(outcomes[binding("t")]) == KafkaError.SECURITY_DISABLED
    with pytest.raises(KafkaException) as deleted:
        delete(admin, [acl_filter()])
    assert error_code(deleted.value) == KafkaError.SECURITY_DISABLED
    assert describe_raw(broker.bootstrap) == (
        KafkaError.SECURITY_DISABLED,
        "No Authorizer is configured on the broker",
    )


def acls_cli(secured: AclsBroker, user: str, *args: str) -> Any:
    return run_raftka(
        "acls",
        *args,
        "--bootstrap-servers",
        f"127.0.0.1:{secured.sasl_port}",
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-mechanism",
        "PLAIN",
        "--sasl-username",
        user,
        "--sasl-password",
        f"{user}-secret",
    )


def _row(resource_type: str, name: str, pattern: str, principal: str, op: str, perm: str) -> dict:
    return {
        "resource_type": resource_type,
        "resource_name": name,
        "pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission": perm,
    }


def test_raftka_acls_cli(secured: AclsBroker) -> None:
    added = acls_cli(
        secured,
        "admin",
        "add",
        "--allow-principal",
        "User:dave",
        "--operation",
        "read",
        "--operation",
        "DESCRIBE",
        "--topic",
        "sales-",
        "--resource-pattern-type",
        "prefixed",
        "--output",
        "json",
    )
    assert added.returncode == 0, added.stderr
    read = _row("TOPIC", "sales-", "PREFIXED", "User:dave", "READ", "ALLOW")
    describe_ = _row("TOPIC", "sales-", "PREFIXED", "User:dave", "DESCRIBE", "ALLOW")
    assert json.loads(added.stdout) == {"added": [describe_, read]}
    denied = acls_cli(
        secured, "admin", "add", "--deny-principal", "User:dave", "--group", "g", "--cluster"
    )
    assert denied.returncode == 0, denied.stderr
    assert "Added 2 ACL(s)." in denied.stdout

    listed = acls_cli(secured, "admin", "list", "--principal", "User:dave", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    group_all = _row("GROUP", "g", "LITERAL", "User:dave", "ALL", "DENY")
    cluster_all = _row("CLUSTER", "kafka-cluster", "LITERAL", "User:dave", "ALL", "DENY")
    assert json.loads(listed.stdout)["acls"] == [cluster_all, group_all, describe_, read]
    matching = acls_cli(
        secured, "admin", "list", "--topic", "sales-2025", "--resource-pattern-type", "match"
    )
    assert matching.returncode == 0, matching.stderr
    lines = matching.stdout.splitlines()
    assert lines[0].split() == [
        "RESOURCE-TYPE",
        "RESOURCE",
        "PATTERN",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION",
    ]
    assert [line.split() for line in lines[1:]] == [
        ["TOPIC", "sales-", "PREFIXED", "User:dave", "*", "DESCRIBE", "ALLOW"],
        ["TOPIC", "sales-", "PREFIXED", "User:dave", "*", "READ", "ALLOW"],
    ]

    refused = acls_cli(secured, "alice", "list")
    assert refused.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    refused = acls_cli(secured, "alice", "add", "--allow-principal", "User:x", "--topic", "t")
    assert refused.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    bad = acls_cli(secured, "admin", "add", "--allow-principal", "dave", "--topic", "t")
    assert bad.returncode == 2 and "TYPE:NAME" in bad.stderr
    everything = acls_cli(secured, "admin", "remove")
    assert everything.returncode == 2 and "name what to remove" in everything.stderr

    removed = acls_cli(secured, "admin", "remove", "--principal", "User:dave", "--output", "json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["removed"] == [cluster_all, group_all, describe_, read]
    assert describe(secured.admin("admin"), acl_filter(principal="User:dave")) == set()


def java_sasl(user: str) -> list[str]:
    return [
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=PLAIN",
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{user}-secret";',
    ]


def test_java_admin_manages_acls(secured: AclsBroker, java_tool: Any) -> None:
    bootstrap = f"127.0.0.1:{secured.sasl_port}"
    admin = java_sasl("admin")
    acls = [
        "TOPIC,payments,LITERAL,User:frank,*,WRITE,ALLOW",
        "TOPIC,pay,PREFIXED,User:frank,*,READ,ALLOW",
        "GROUP,frank-,PREFIXED,User:frank,*,READ,ALLOW",
        "CLUSTER,kafka-cluster,LITERAL,User:frank,*,IDEMPOTENT_WRITE,ALLOW",
        "TRANSACTIONAL_ID,*,LITERAL,User:frank,10.1.1.1,WRITE,DENY",
    ]
    created = java_tool.json("create-acls", bootstrap, ";".join(acls), *admin)
    assert created == [{"acl": a, "error": None} for a in acls]
    bad = java_tool.json(
        "create-acls", bootstrap, "CLUSTER,mine,LITERAL,User:frank,*,ALTER,ALLOW", *admin
    )
    assert bad[0]["error"] == "InvalidRequestException"

    everything = "ANY,null,ANY,User:frank,null,ANY,ANY"
    listed = java_tool.json("describe-acls", bootstrap, everything, *admin)
    assert [row["acl"] for row in listed] == sorted(acls)
    # MATCH on the topic `payments`: its literal ACL and the `pay` prefix.
    matched = java_tool.json(
        "describe-acls", bootstrap, "TOPIC,payments,MATCH,null,null,ANY,ANY", *admin
    )
    assert [row["acl"] for row in matched] == sorted(acls[:2])
    # A user who is not super is refused, with Kafka's exception.
    refused = java_tool.json("describe-acls", bootstrap, everything, *java_sasl("alice"))
    assert refused[0]["error"] == "ClusterAuthorizationException"
    refused = java_tool.json("create-acls", bootstrap, acls[0], *java_sasl("alice"))
    assert refused[0]["error"] == "ClusterAuthorizationException"
    refused = java_tool.json("delete-acls", bootstrap, everything, *java_sasl("alice"))
    assert refused[0]["error"] == "ClusterAuthorizationException"

    deleted = java_tool.json(
        "delete-acls",
        bootstrap,
        "TOPIC,null,ANY,User:frank,null,ANY,ANY;ANY,null,ANY,null,10.1.1.1,ANY,DENY",
        *admin,
    )
    assert deleted == [
        {"filter": 0, "deleted": sorted(acls[:2])},
        {"filter": 1, "deleted": [acls[4]]},
    ]
    rest = java_tool.json("delete-acls", bootstrap, everything, *admin)
    assert rest == [{"filter": 0, "deleted": sorted(acls[2:4])}]
    assert java_tool.json("describe-acls", bootstrap, everything, *admin) == []


def test_java_admin_manages_scram_users(secured: AclsBroker, java_tool: Any) -> None:
    bootstrap = f"127.0.0.1:{secured.sasl_port}"
    admin = java_sasl("admin")
    user = "erin"
    upserted = java_tool.json(
        "upsert-scram-user", bootstrap, user, "SCRAM_SHA_256", 4096, "pw-1", *admin
    )
    assert upserted == [{"user": user, "error": None}]
    java_tool.json("upsert-scram-user", bootstrap, user, "SCRAM_SHA_512", 8192, "pw-1", *admin)
    users = {row["user"]: row for row in java_tool.json("describe-scram-users", bootstrap, *admin)}
    assert users[user]["credentials"] == [
        {"mechanism": "SCRAM_SHA_256", "iterations": 4096},
        {"mechanism": "SCRAM_SHA_512", "iterations": 8192},
    ]
    # The new credential logs in.
    client = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": "pw-1",
        }
    )
    client.list_topics(timeout=TIMEOUT_S)
    deleted = java_tool.json("delete-scram-user", bootstrap, user, "SCRAM_SHA_256", *admin)
    assert deleted == [{"user": user, "error": None}]
    again = java_tool.json("delete-scram-user", bootstrap, user, "SCRAM_SHA_256", *admin)
    assert again[0]["error"] == "ResourceNotFoundException"
    users = {row["user"]: row for row in java_tool.json("describe-scram-users", bootstrap, *admin)}
    assert users[user]["credentials"] == [{"mechanism": "SCRAM_SHA_512", "iterations": 8192}]
    java_tool.json("delete-scram-user", bootstrap, user, "SCRAM_SHA_512", *admin)


# -- a cluster ------------------------------------------------------------------------------

Acl = tuple[int, str, int, str, str, int, int]


def acls_on(bootstrap: str) -> set[Acl]:
    """Every ACL this one broker's metadata holds."""
    response = describe_raw_response(bootstrap)
    assert response.error_code == 0, response
    return {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
         a.permission_type)
        for r in response.resources
        for a in r.acls
    }  # fmt: skip


def create_raw(bootstrap: str, acls: list[Acl]) -> list[int]:
    with RawConnection(bootstrap) as conn:
        conn.send_request(
            CreateAclsRequest(
                creations=tuple(
                    AclCreation(
                        resource_type=i8(a[0]),
                        resource_name=a[1],
                        resource_pattern_type=i8(a[2]),
                        principal=a[3],
                        host=a[4],
                        operation=i8(a[5]),
                        permission_type=i8(a[6]),
                    )
                    for a in acls
                )
            )
        )
        response = conn.recv_response(CreateAclsResponse)
    return [int(r.error_code) for r in response.results]


def delete_raw(bootstrap: str, principal: str) -> set[Acl]:
    with RawConnection(bootstrap) as conn:
        conn.send_request(
            DeleteAclsRequest(
                filters=(
                    DeleteAclsFilter(
                        resource_type_filter=i8(1),
                        resource_name_filter=None,
                        pattern_type_filter=i8(1),
                        principal_filter=principal,
                        host_filter=None,
                        operation=i8(1),
                        permission_type=i8(1),
                    ),
                )
            )
        )
        response = conn.recv_response(DeleteAclsResponse)
    [result] = response.filter_results
    assert result.error_code == 0, result
    return {
        (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
         m.permission_type)
        for m in result.matching_acls
    }  # fmt: skip


def test_acls_are_replicated_to_every_broker_and_survive_restarts(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    # Plain listeners, whose clients (User:ANONYMOUS) are the super user here.
    config = {"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"}
    cluster = cluster_factory(config=config)
    acls: list[Acl] = [
        (2, "orders", 3, "User:alice", "*", 3, 3),
        (2, "logs-", 4, "User:*", "*", 4, 2),
        (3, "g", 3, "User:bob", "10.0.0.1", 2, 3),
    ]
    one, two, three = (cluster.node(i) for i in (1, 2, 3))
    assert create_raw(one.bootstrap, acls) == [0, 0, 0]
    for node in (two, three):
        wait_until(lambda n=node: acls_on(n.bootstrap) == set(acls), 30, f"ACLs on {node}")

    two.stop()
    two.start()
    # A broker serves only once it has applied its own new registration, so its first
    # answer already has everything committed before it started.
    assert acls_on(two.bootstrap) == set(acls)

    assert delete_raw(three.bootstrap, "User:bob") == {acls[2]}
    wait_until(lambda: acls_on(one.bootstrap) == set(acls[:2]), 30, "the delete on node 1")

    cluster.stop()
    cluster.start()
    for node in cluster.nodes:
        assert acls_on(node.bootstrap) == set(acls[:2]), f"ACLs on {node} after the restart"
