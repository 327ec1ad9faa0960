"""Kafka's ACL rules as the authorizer applies them, and the filters DescribeAcls and
DeleteAcls select bindings with."""

from __future__ import annotations

import pytest

# The cluster metadata first: importing security.session (or scram) first cycles back to it.
import raftka.broker.cluster  # noqa: F401
from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AclSet,
    Authorizer,
    PatternType,
    ResourceType,
    binding_from_codes,
    check_new_binding,
)
from raftka.broker.security.session import Principal

ALICE = Principal("User", "alice")
BOB = Principal("User", "bob")
ADMIN = Principal("User", "admin")
HOST = "10.0.0.1"

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
Op = AclOperation


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermission = ALLOW,
    principal: str = "User:alice",
    *,
    resource_type: ResourceType = TOPIC,
    pattern: PatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*bindings: AclBinding, allow_if_no_acl: bool = False) -> Authorizer:
    acls = AclSet(bindings)
    return Authorizer(
        lambda: acls,
        enabled=True,
        super_users=frozenset({"User:admin"}),
        allow_if_no_acl=allow_if_no_acl,
    )


def may(auth: Authorizer, who: Principal, op: AclOperation, name: str, host: str = HOST) -> bool:
    return auth.authorize(who, host, op, TOPIC, name)


def test_allow_applies_to_its_principal_operation_and_resource_only() -> None:
    auth = authorizer(acl("orders", Op.READ))
    assert may(auth, ALICE, Op.READ, "orders")
    assert not may(auth, ALICE, Op.WRITE, "orders")
    assert not may(auth, BOB, Op.READ, "orders")
    assert not may(auth, ALICE, Op.READ, "orders2")
    assert not auth.authorize(ALICE, HOST, Op.READ, GROUP, "orders")


def test_deny_beats_allow_and_all_covers_every_operation() -> None:
    auth = authorizer(
        acl("orders", Op.ALL),
        acl("orders", Op.WRITE, DENY),
        acl("*", Op.DELETE, DENY, "User:*"),
    )
    assert may(auth, ALICE, Op.READ, "orders")
    assert may(auth, ALICE, Op.ALTER_CONFIGS, "orders")
    assert not may(auth, ALICE, Op.WRITE, "orders")
    assert not may(auth, ALICE, Op.DELETE, "orders")
    deny_all = authorizer(acl("t", Op.READ), acl("t", Op.ALL, DENY))
    assert not may(deny_all, ALICE, Op.READ, "t")


def test_describe_is_implied_by_an_allow_but_never_by_a_deny() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert may(authorizer(acl("t", op)), ALICE, Op.DESCRIBE, "t"), op
    assert not may(authorizer(acl("t", Op.CREATE)), ALICE, Op.DESCRIBE, "t")
    assert may(authorizer(acl("t", Op.ALTER_CONFIGS)), ALICE, Op.DESCRIBE_CONFIGS, "t")
    # A DENY of READ does not deny DESCRIBE.
    auth = authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY))
    assert may(auth, ALICE, Op.DESCRIBE, "t")
    assert not may(auth, ALICE, Op.READ, "t")


def test_prefixed_and_wildcard_resources() -> None:
    auth = authorizer(
        acl("logs-", Op.READ, pattern=PREFIXED),
        acl("*", Op.WRITE),
        acl("logs-secret", Op.READ, DENY, pattern=PREFIXED),
    )
    assert may(auth, ALICE, Op.READ, "logs-2025")
    assert not may(auth, ALICE, Op.READ, "logs")
    assert not may(auth, ALICE, Op.READ, "logs-secret-1")
    assert may(auth, ALICE, Op.WRITE, "anything")
    # A literal name `logs-` is not a prefix of other names for a LITERAL binding.
    literal = authorizer(acl("logs-", Op.READ))
    assert not may(literal, ALICE, Op.READ, "logs-1")


def test_principal_wildcard_and_hosts() -> None:
    auth = authorizer(acl("t", Op.READ, principal="User:*"), acl("t", Op.WRITE, host="10.0.0.2"))
    assert may(auth, BOB, Op.READ, "t")
    assert not may(auth, Principal("Group", "x"), Op.READ, "t")
    assert may(auth, ALICE, Op.WRITE, "t", host="10.0.0.2")
    assert not may(auth, ALICE, Op.WRITE, "t", host="10.0.0.3")
    denied_host = authorizer(acl("t", Op.READ), acl("t", Op.READ, DENY, host="10.0.0.9"))
    assert may(denied_host, ALICE, Op.READ, "t")
    assert not may(denied_host, ALICE, Op.READ, "t", host="10.0.0.9")


def test_super_users_and_resources_no_acl_names() -> None:
    auth = authorizer(acl("t", Op.READ, DENY, "User:admin"))
    assert may(auth, ADMIN, Op.READ, "t")  # a super user even past a DENY
    assert not may(auth, ALICE, Op.READ, "untouched")
    assert may(authorizer(allow_if_no_acl=True), ALICE, Op.READ, "untouched")
    # Once a binding names the resource, allow.everyone.if.no.acl.found no longer opens it.
    named = authorizer(acl("t", Op.READ, principal="User:bob"), allow_if_no_acl=True)
    assert not may(named, ALICE, Op.READ, "t")
    assert may(named, ALICE, Op.READ, "other")
    off = Authorizer(AclSet, enabled=False)
    assert off.authorize(ALICE, HOST, Op.ALTER, CLUSTER, "kafka-cluster")


def test_authorizer_from_config() -> None:
    config = BrokerConfig(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:CN=broker",
            "allow.everyone.if.no.acl.found": "true",
        },
        environ={},
    )
    auth = Authorizer.from_config(config, AclSet)
    assert auth.enabled and auth.allow_if_no_acl
    assert auth.super_users == {"User:admin", "User:CN=broker"}
    assert not Authorizer.from_config(BrokerConfig({}, environ={}), AclSet).enabled
    zookeeper_era = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    by_default = Authorizer.from_config(BrokerConfig(zookeeper_era, environ={}), AclSet)
    assert by_default.enabled and not by_default.allow_if_no_acl and not by_default.super_users
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        Authorizer.from_config(
            BrokerConfig({"authorizer.class.name": "com.example.Mine"}, environ={}), AclSet
        )


def test_authorize_any_and_authorized_operations() -> None:
    auth = authorizer(
        acl("tx-", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID, pattern=PREFIXED)
    )
    tx = ResourceType.TRANSACTIONAL_ID
    assert auth.authorize_any(ALICE, HOST, Op.WRITE, tx)
    assert not auth.authorize_any(BOB, HOST, Op.WRITE, tx)
    denied = authorizer(
        acl("a", Op.WRITE),
        acl("a", Op.WRITE, DENY),
    )
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    wildcard_deny = authorizer(acl("a", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert not wildcard_deny.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    bits = authorizer(acl("t", Op.READ)).authorized_operations(ALICE, HOST, TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_acl_set_stores_each_binding_once() -> None:
    acls = AclSet()
    binding = acl("t", Op.READ)
    assert acls.add(binding) and not acls.add(binding)
    assert len(acls) == 1 and binding in acls
    assert acls.remove(binding) and not acls.remove(binding)
    assert len(acls) == 0 and list(acls) == []


# -- filters --------------------------------------------------------------------------------

BINDINGS = [
    acl("orders", Op.READ),
    acl("*", Op.WRITE, principal="User:bob"),
    acl("ord", Op.DESCRIBE, DENY, pattern=PREFIXED, host="10.0.0.9"),
    acl("other", Op.READ),
    acl("g", Op.READ, resource_type=GROUP),
    acl("kafka-cluster", Op.ALTER, resource_type=CLUSTER, principal="User:bob"),
]


def select(**fields: object) -> set[AclBinding]:
    return set(AclBindingFilter(**fields).select(AclSet(BINDINGS)))  # type: ignore[arg-type]


def test_filter_any_and_null_fields_match_everything() -> None:
    assert select() == set(BINDINGS)
    assert select(resource_type=GROUP) == {BINDINGS[4]}
    assert select(principal="User:bob") == {BINDINGS[1], BINDINGS[5]}
    assert select(host="10.0.0.9") == {BINDINGS[2]}
    assert select(operation=Op.READ) == {BINDINGS[0], BINDINGS[3], BINDINGS[4]}
    assert select(permission=DENY) == {BINDINGS[2]}
    assert select(pattern_type=PREFIXED) == {BINDINGS[2]}


def test_filter_names_match_exactly_unless_match() -> None:
    assert select(resource_type=TOPIC, resource_name="orders") == {BINDINGS[0]}
    # LITERAL `*` is a name like any other outside MATCH.
    assert select(resource_name="*", pattern_type=LITERAL) == {BINDINGS[1]}
    assert select(resource_name="ord", pattern_type=LITERAL) == set()
    assert select(resource_name="ord", pattern_type=PREFIXED) == {BINDINGS[2]}
    # MATCH: every binding that applies to the topic `orders`.
    assert select(resource_type=TOPIC, resource_name="orders", pattern_type=PatternType.MATCH) == {
        BINDINGS[0],
        BINDINGS[1],
        BINDINGS[2],
    }
    assert select(resource_type=TOPIC, resource_name="x", pattern_type=PatternType.MATCH) == {
        BINDINGS[1]
    }


def test_filters_and_creations_with_unknown_codes_are_invalid() -> None:
    assert AclBindingFilter().problem() is None
    assert AclBindingFilter.from_codes(9, None, 1, None, None, 1, 1).problem() is not None
    assert AclBindingFilter.from_codes(1, None, 0, None, None, 1, 1).problem() is not None
    assert AclBindingFilter.from_codes(1, None, 1, None, None, 42, 1).problem() is not None
    assert AclBindingFilter.from_codes(1, None, 1, None, None, 1, 0).problem() is not None
    good = binding_from_codes(2, "t", 3, "User:a", "*", 3, 3)
    assert check_new_binding(good) is None
    assert check_new_binding(binding_from_codes(2, "t", 3, "User:a", "*", 3, 7)) == (
        "Invalid permissionType UNKNOWN"
    )
    assert check_new_binding(binding_from_codes(2, "t", 3, "User:", "*", 3, 3)) is None
    assert "principalType:principalName" in (
        check_new_binding(binding_from_codes(2, "t", 3, ":a", "*", 3, 3)) or ""
    )
    assert check_new_binding(binding_from_codes(2, "t", 3, "User:a", "", 3, 3)) is not None
