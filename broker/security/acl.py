"""Kafka's ACL model and the authorizer that checks requests against it.

An ACL binding allows or denies one principal, from one host, one operation on the resources
its pattern names. The rules are Kafka's (AclAuthorizer, and StandardAuthorizer in KRaft):

- super users (`super.users`) may do anything;
- a resource no binding names is open to everyone only with
  `allow.everyone.if.no.acl.found=true`;
- a DENY binding for the operation (or ALL) beats any ALLOW;
- DESCRIBE is allowed by an ALLOW of READ, WRITE, DELETE or ALTER, and DESCRIBE_CONFIGS by
  ALTER_CONFIGS (a DENY is never implied);
- a LITERAL pattern names one resource (`*` names all of its type), a PREFIXED pattern every
  resource whose name starts with it; a principal `User:*` and a host `*` match anyone.

Without `authorizer.class.name` nothing is checked, as in Kafka.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftka.broker.config import BrokerConfig, ConfigError

if TYPE_CHECKING:  # at run time session imports the cluster metadata, which imports this
    from raftka.broker.security.session import Principal

#: The one CLUSTER resource's name.
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name, principal name or host that matches every one.
WILDCARD = "*"

#: `authorizer.class.name` values that turn authorization on (Kafka's two ACL authorizers).
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations whose ALLOW also allows the key (Kafka's implied operations).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

#: The operations each resource type has, for the `*_authorized_operations` bit fields.
OPERATIONS_OF: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One stored ACL: a resource pattern (LITERAL or PREFIXED) and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    #: `User:alice`, or `User:*` for every user.
    principal: str
    #: A client IP address, or `*`.
    host: str
    operation: AclOperation
    permission: AclPermission


class AclSet:
    """Bindings indexed by resource, so a check looks at only those naming its resource."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefixed: dict[ResourceType, dict[str, set[AclBinding]]] = {}
        self._count = 0
        for binding in bindings:
            self.add(binding)

    def _bucket(self, binding: AclBinding, create: bool) -> set[AclBinding] | None:
        if binding.pattern_type == PatternType.PREFIXED:
            by_prefix = self._prefixed.get(binding.resource_type)
            if by_prefix is None:
                if not create:
                    return None
                by_prefix = self._prefixed[binding.resource_type] = {}
            if create:
                return by_prefix.setdefault(binding.resource_name, set())
            return by_prefix.get(binding.resource_name)
        key = (binding.resource_type, binding.resource_name)
        if create:
            return self._literal.setdefault(key, set())
        return self._literal.get(key)

    def add(self, binding: AclBinding) -> bool:
        """Store `binding`; False if it was stored already."""
        bucket = self._bucket(binding, create=True)
        assert bucket is not None
        if binding in bucket:
            return False
        bucket.add(binding)
        self._count += 1
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Forget `binding`; False if it was not stored."""
        bucket = self._bucket(binding, create=False)
        if bucket is None or binding not in bucket:
            return False
        bucket.discard(binding)
        self._count -= 1
        if not bucket:
            if binding.pattern_type == PatternType.PREFIXED:
                by_prefix = self._prefixed[binding.resource_type]
                del by_prefix[binding.resource_name]
                if not by_prefix:
                    del self._prefixed[binding.resource_type]
            else:
                del self._literal[binding.resource_type, binding.resource_name]
        return True

    def __contains__(self, binding: object) -> bool:
        if not isinstance(binding, AclBinding):
            return False
        bucket = self._bucket(binding, create=False)
        return bucket is not None and binding in bucket

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[AclBinding]:
        for bucket in self._literal.values():
            yield from bucket
        for by_prefix in self._prefixed.values():
            for bucket in by_prefix.values():
                yield from bucket

    def naming(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern matches the resource `resource_type`/`name`."""
        found: list[AclBinding] = []
        exact = self._literal.get((resource_type, name))
        if exact:
            found.extend(exact)
        if name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard:
                found.extend(wildcard)
        by_prefix = self._prefixed.get(resource_type)
        if by_prefix:
            for end in range(1, len(name) + 1):
                bucket = by_prefix.get(name[:end])
                if bucket:
                    found.extend(bucket)
        return found

    def of_type(self, resource_type: ResourceType) -> Iterator[AclBinding]:
        for (kind, _), bucket in self._literal.items():
            if kind == resource_type:
                yield from bucket
        for bucket in self._prefixed.get(resource_type, {}).values():
            yield from bucket


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: `User:alice;User:bob` (Kafka separates them with semicolons)."""
    users: set[str] = set()
    for item in filter(None, (p.strip() for p in (text or "").split(";"))):
        kind, sep, name = item.partition(":")
        if not sep or not kind or not name:
            raise ConfigError(
                f"super.users: {item!r} is not a principal; expected TYPE:NAME;... "
                "such as User:admin;User:CN=broker"
            )
        users.add(item)
    return frozenset(users)


class Authorizer:
    """Decides whether a principal may do an operation on a resource.

    `acls` gives the current bindings (the cluster metadata image's, which the controller's
    replicated log keeps the same on every broker); it is read on each check, so a change
    applies to the next request.
    """

    def __init__(
        self,
        acls: Callable[[], AclSet],
        *,
        enabled: bool,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self._acls = acls
        self.enabled = enabled
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    @classmethod
    def from_config(cls, config: BrokerConfig, acls: Callable[[], AclSet]) -> Authorizer:
        class_name = (config.get_optional_str("authorizer.class.name") or "").strip()
        if class_name and class_name not in AUTHORIZER_CLASSES:
            raise ConfigError(
                f"authorizer.class.name: {class_name!r} is not supported; use "
                f"{AUTHORIZER_CLASSES[0]} (or leave it empty: no authorization)"
            )
        return cls(
            acls,
            enabled=bool(class_name),
            super_users=parse_super_users(config.get_optional_str("super.users")),
            allow_if_no_acl=config.get_bool("allow.everyone.if.no.acl.found"),
        )

    def _is_super(self, principal: Principal) -> bool:
        return not self.enabled or str(principal) in self.super_users

    def authorize(
        self,
        principal: Principal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May `principal`, connected from `host`, do `operation` on the resource?"""
        if self._is_super(principal):
            return True
        bindings = self._acls().naming(resource_type, name)
        if not bindings:
            return self.allow_if_no_acl
        principals = (str(principal), f"{principal.principal_type}:{WILDCARD}")
        allowing = _IMPLIED_BY.get(operation, frozenset()) | {operation, AclOperation.ALL}
        allowed = False
        for binding in bindings:
            if binding.principal not in principals or binding.host not in (host, WILDCARD):
                continue
            if binding.permission == AclPermission.DENY:
                if binding.operation in (operation, AclOperation.ALL):
                    return False
            elif binding.permission == AclPermission.ALLOW and binding.operation in allowing:
                allowed = True
        return allowed

    def authorize_any(
        self,
        principal: Principal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """May `principal` do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, as KIP-679 uses for idempotent producers): some ALLOW
        binding for it that no DENY binding for it covers."""
        if self._is_super(principal):
            return True
        bindings = list(self._acls().of_type(resource_type))
        if not bindings:
            return self.allow_if_no_acl
        principals = (str(principal), f"{principal.principal_type}:{WILDCARD}")
        allowing = {operation, AclOperation.ALL}
        mine = [b for b in bindings if b.principal in principals and b.host in (host, WILDCARD)]
        denied_literal = {
            b.resource_name
            for b in mine
            if b.permission == AclPermission.DENY
            and b.operation in allowing
            and b.pattern_type == PatternType.LITERAL
        }
        denied_prefixes = [
            b.resource_name
            for b in mine
            if b.permission == AclPermission.DENY
            and b.operation in allowing
            and b.pattern_type == PatternType.PREFIXED
        ]
        if WILDCARD in denied_literal:
            return False
        for b in mine:
            if b.permission != AclPermission.ALLOW or b.operation not in allowing:
                continue
            if any(b.resource_name.startswith(p) for p in denied_prefixes):
                continue
            if b.pattern_type == PatternType.LITERAL and b.resource_name in denied_literal:
                continue
            return True
        return False

    def authorized_operations(
        self, principal: Principal, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The `*_authorized_operations` bit field: bit `op` set for each operation of the
        resource type the principal may do."""
        bits = 0
        for operation in OPERATIONS_OF.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits


def _code(enum_type: type[enum.IntEnum], value: int) -> int:
    """`value` if it is one of `enum_type`'s codes, else its UNKNOWN (0)."""
    try:
        return int(enum_type(value))
    except ValueError:
        return 0


def binding_from_codes(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from its wire codes; a code Kafka does not define reads as UNKNOWN, which
    `check_new_binding` then rejects."""
    return AclBinding(
        ResourceType(_code(ResourceType, resource_type)),
        resource_name,
        PatternType(_code(PatternType, pattern_type)),
        principal,
        host,
        AclOperation(_code(AclOperation, operation)),
        AclPermission(_code(AclPermission, permission)),
    )


def binding_codes(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    """The binding as plain values, in `binding_from_codes`'s order (for records, commands)."""
    return (
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission),
    )


def check_new_binding(binding: AclBinding) -> str | None:
    """Why a binding may not be created (an INVALID_REQUEST message, as Kafka words it), or
    None if it may."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermission.ALLOW, AclPermission.DENY):
        return f"Invalid permissionType {binding.permission.name}"
    if not binding.resource_name:
        return "Invalid empty resource name"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, _ = binding.principal.partition(":")
    if not sep or not kind:
        return (
            f"expected a string in format principalType:principalName but got {binding.principal}"
        )
    if not binding.host:
        return "Invalid empty host: use * for every host"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings a DescribeAcls or DeleteAcls names (Kafka's AclBindingFilter): ANY
    matches every resource type, pattern type, operation or permission, None every name,
    principal or host; pattern type MATCH names every binding that applies to the resource
    `resource_name` (its LITERAL name, the LITERAL `*`, and each PREFIXED prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    @classmethod
    def from_codes(
        cls,
        resource_type: int,
        resource_name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission: int,
    ) -> AclBindingFilter:
        return cls(
            ResourceType(_code(ResourceType, resource_type)),
            resource_name,
            PatternType(_code(PatternType, pattern_type)),
            principal,
            host,
            AclOperation(_code(AclOperation, operation)),
            AclPermission(_code(AclPermission, permission)),
        )

    def codes(self) -> tuple[int, str | None, int, str | None, str | None, int, int]:
        return (
            int(self.resource_type),
            self.resource_name,
            int(self.pattern_type),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission),
        )

    def problem(self) -> str | None:
        """Why the filter matches nothing Kafka would accept (an INVALID_REQUEST message)."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter: the resource type or pattern type is not known"
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermission.UNKNOWN:
            return "Unknown entryFilter: the operation or permission type is not known"
        return None

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (AclOperation.ANY, binding.operation):
            return False
        if self.permission not in (AclPermission.ANY, binding.permission):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type != PatternType.MATCH:
            return self.resource_name == binding.resource_name
        if binding.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(binding.resource_name)
        return binding.resource_name in (self.resource_name, WILDCARD)

    def select(self, acls: AclSet) -> list[AclBinding]:
        """The bindings of `acls` this filter matches, in a stable order."""
        return sorted((b for b in acls if self.matches(b)), key=binding_codes)
