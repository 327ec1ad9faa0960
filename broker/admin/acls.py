"""`raftka acls list|add|remove`: the cluster's ACL bindings, in the spirit of kafka-acls.sh,
through Kafka's CreateAcls, DescribeAcls and DeleteAcls.

`add` creates every combination of the resources, principals, hosts and operations given;
`list` and `remove` take the same options as a filter (what is not given matches anything).
Adding and removing go through the confluent-kafka AdminClient; listing sends DescribeAcls
itself, because librdkafka drops that response's error (a refusal would read as no ACLs).
"""

from __future__ import annotations

import argparse
import itertools
from typing import TYPE_CHECKING, Any, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AclOperation as ClientOperation
    from confluent_kafka.admin import AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as ClientResourceType

    from raftka.broker.admin.common import Subcommands

DESCRIBE_ACLS_KEY = 29
#: Operations a binding may name (`--operation`), Kafka's names.
OPERATIONS = tuple(
    op.name for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
)
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def _operation(text: str) -> str:
    name = text.strip().upper().replace("-", "_")
    if name not in OPERATIONS:
        raise argparse.ArgumentTypeError(
            f"unknown operation {text!r}; expected one of {', '.join(OPERATIONS)}"
        )
    return name


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a principal; expected TYPE:NAME such as User:alice (User:* for all)"
        )
    return text


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, t) for t in args.topic or []]
    resources += [(ResourceType.GROUP, g) for g in args.group or []]
    resources += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id or []]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _principals(args: argparse.Namespace) -> list[tuple[str, AclPermission]]:
    return [(p, AclPermission.ALLOW) for p in args.allow_principal or []] + [
        (p, AclPermission.DENY) for p in args.deny_principal or []
    ]


def check_add(args: argparse.Namespace) -> str | None:
    if not _resources(args):
        return "name at least one resource: --topic, --group, --transactional-id or --cluster"
    if not _principals(args):
        return "name at least one principal: --allow-principal or --deny-principal TYPE:NAME"
    if args.resource_pattern_type not in (None, "literal", "prefixed"):
        return "an ACL's --resource-pattern-type is literal or prefixed (match and any filter)"
    return None


def check_remove(args: argparse.Namespace) -> str | None:
    if not _resources(args) and not _principals(args) and not args.principal:
        return (
            "name what to remove: a resource (--topic, --group, --transactional-id, --cluster) "
            "and/or a principal (--allow-principal, --deny-principal, --principal)"
        )
    return None


# -- confluent-kafka's types ---------------------------------------------------------------


def _client_restype(resource_type: ResourceType) -> ClientResourceType:
    from confluent_kafka.admin import ResourceType as ClientType

    # librdkafka calls the CLUSTER resource (code 4) BROKER.
    return ClientType(int(resource_type))


def _client_pattern(pattern_type: PatternType) -> ResourcePatternType:
    from confluent_kafka.admin import ResourcePatternType

    return ResourcePatternType(int(pattern_type))


def _client_operation(name: str) -> ClientOperation:
    from confluent_kafka.admin import AclOperation as ClientOperation

    return ClientOperation(int(AclOperation[name]))


def _client_permission(permission: AclPermission) -> AclPermissionType:
    from confluent_kafka.admin import AclPermissionType

    return AclPermissionType(int(permission))


def _row(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> dict[str, str]:
    return {
        "resource_type": ResourceType(resource_type).name,
        "resource_name": name,
        "pattern_type": PatternType(pattern_type).name,
        "principal": principal,
        "host": host,
        "operation": AclOperation(operation).name,
        "permission": AclPermission(permission).name,
    }


def _client_row(binding: Any) -> dict[str, str]:  # Any: AclBinding's stub has union fields
    return _row(
        int(binding.restype.value),
        binding.name,
        int(binding.resource_pattern_type.value),
        binding.principal,
        binding.host,
        int(binding.operation.value),
        int(binding.permission_type.value),
    )


def _sorted(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(rows, key=lambda r: tuple(r.values()))


# -- the commands --------------------------------------------------------------------------


def add_acls(target: Target, args: argparse.Namespace) -> Document:
    from confluent_kafka.admin import AclBinding

    pattern = PatternType[(args.resource_pattern_type or "literal").upper()]
    bindings = [
        AclBinding(
            _client_restype(restype),
            name,
            _client_pattern(pattern),
            principal,
            host,
            _client_operation(operation),
            _client_permission(permission),
        )
        for (restype, name), (principal, permission), host, operation in itertools.product(
            _resources(args), _principals(args), args.host or ["*"], args.operation or ["ALL"]
        )
    ]
    admin = target.admin()
    futures = admin.create_acls(bindings, request_timeout=target.timeout_s)
    failures = []
    created = []
    for binding in bindings:
        row = _client_row(binding)
        try:
            target.result(futures[binding], "add ACL")
            created.append(row)
        except AdminError as exc:
            failures.append(f"{_describe(row)}: {exc}")
    if failures:
        if created:
            failures.append(f"added: {len(created)} other ACL(s)")
        raise AdminError("\n".join(failures))
    return {"added": _sorted(created)}


# (resource type, name, pattern type, principal, host, operation, permission); None: any.
AclFilter = tuple[ResourceType, str | None, PatternType, str | None, str | None, str, AclPermission]


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    """(resource type, name, pattern type, principal, host, operation, permission) filters."""
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args)) or [
        (ResourceType.ANY, None)
    ]
    default_pattern = "literal" if _resources(args) else "any"
    pattern = PatternType[(args.resource_pattern_type or default_pattern).upper()]
    principals: list[tuple[str | None, AclPermission]] = list(_principals(args))
    principals += [(p, AclPermission.ANY) for p in getattr(args, "principal", None) or []]
    return [
        (restype, name, pattern, principal, host, operation, permission)
        for (restype, name), (principal, permission), host, operation in itertools.product(
            resources,
            principals or [(None, AclPermission.ANY)],
            args.host or [None],
            args.operation or ["ANY"],
        )
    ]


def list_acls(target: Target, args: argparse.Namespace) -> Document:
    from raftka.broker.admin.wire import WireCluster

    rows: dict[tuple[str, ...], dict[str, str]] = {}
    with WireCluster(target) as cluster:
        connection = cluster.any_connection()
        for restype, name, pattern, principal, host, operation, permission in _filters(args):
            response = connection.request(
                DESCRIBE_ACLS_KEY,
                {
                    "resource_type_filter": int(restype),
                    "resource_name_filter": name,
                    "pattern_type_filter": int(pattern),
                    "principal_filter": principal,
                    "host_filter": host,
                    "operation": int(AclOperation[operation]),
                    "permission_type": int(permission),
                },
            )
            if response.error_code:
                raise AdminError(
                    f"list ACLs: {response.error_code.name.upper()}: {response.error_message}"
                )
            for resource in response.resources:
                for acl in resource.acls:
                    row = _row(
                        resource.resource_type,
                        resource.resource_name,
                        getattr(resource, "pattern_type", 3),
                        acl.principal,
                        acl.host,
                        acl.operation,
                        acl.permission_type,
                    )
                    rows[tuple(row.values())] = row
    return {"acls": _sorted(list(rows.values()))}


def remove_acls(target: Target, args: argparse.Namespace) -> Document:
    from confluent_kafka.admin import AclBindingFilter

    # None matches anything; confluent-kafka's stub types these arguments as str only.
    filters = [
        AclBindingFilter(
            _client_restype(restype),
            name,  # type: ignore[arg-type]
            _client_pattern(pattern),
            principal,  # type: ignore[arg-type]
            host,  # type: ignore[arg-type]
            _client_operation(operation),
            _client_permission(permission),
        )
        for restype, name, pattern, principal, host, operation, permission in _filters(args)
    ]
    admin = target.admin()
    futures = admin.delete_acls(filters, request_timeout=target.timeout_s)
    removed: dict[tuple[str, ...], dict[str, str]] = {}
    for acl_filter in filters:
        for binding in target.result(futures[acl_filter], "remove ACLs"):
            row = _client_row(binding)
            removed[tuple(row.values())] = row
    return {"removed": _sorted(list(removed.values()))}


def _describe(row: dict[str, str]) -> str:
    return (
        f"{row['permission']} {row['principal']} {row['operation']} from {row['host']} on "
        f"{row['resource_type']} {row['resource_name']} ({row['pattern_type']})"
    )


_HEADER = ("RESOURCE-TYPE", "RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")


def print_acls(document: Document, out: TextIO) -> None:
    (rows,) = document.values()
    if "acls" not in document:
        verb = "Added" if "added" in document else "Removed"
        print(f"{verb} {len(rows)} ACL(s).", file=out)
        if not rows:
            return
    print_table(_HEADER, ([*r.values()] for r in rows), out)


def add_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("acls", help="ACLs: list, add or remove (like kafka-acls.sh)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text, run, check in (
        ("list", "the ACLs a filter matches (all by default)", list_acls, None),
        ("add", "allow or deny principals operations on resources", add_acls, check_add),
        ("remove", "remove the ACLs a filter matches", remove_acls, check_remove),
    ):
        sub = actions.add_parser(name, parents=[common], help=text)
        resources = sub.add_argument_group("resources (repeatable)")
        resources.add_argument("--topic", action="append", metavar="TOPIC")
        resources.add_argument("--group", action="append", metavar="GROUP")
        resources.add_argument("--transactional-id", action="append", metavar="ID")
        resources.add_argument("--cluster", action="store_true", help="the cluster resource")
        sub.add_argument(
            "--resource-pattern-type",
            choices=PATTERN_TYPES,
            type=str.lower,
            help="literal (default) or prefixed; list and remove also take match (every "
            "ACL that applies to the named resource) and any (default without a resource)",
        )
        sub.add_argument("--allow-principal", action="append", type=_principal, metavar="P")
        sub.add_argument("--deny-principal", action="append", type=_principal, metavar="P")
        if name != "add":
            sub.add_argument(
                "--principal",
                action="append",
                type=_principal,
                metavar="P",
                help="ACLs of this principal, allowing or denying",
            )
        sub.add_argument(
            "--operation",
            action="append",
            type=_operation,
            metavar="OP",
            help=f"{', '.join(OPERATIONS)} (add: default ALL)",
        )
        sub.add_argument(
            "--host", action="append", metavar="HOST", help="client IP address (add: default *)"
        )
        sub.set_defaults(run=lambda a, t, r=run: (r(t, a), print_acls), check=check, parser=sub)
