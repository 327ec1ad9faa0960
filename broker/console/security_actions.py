"""The security page's changes, as POST forms: add or remove an ACL binding, set or remove a
user's SCRAM credential, set or remove a client quota. Each calls the admin API a client
would (CreateAcls, DeleteAcls, AlterUserScramCredentials, AlterClientQuotas) as the console's
principal, so the same ACLs (ALTER on the cluster) allow or refuse it; removals are confirmed
by typing the principal or user they take away."""

from __future__ import annotations

import enum
from http import HTTPStatus
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from raftka.broker.console.actions import CONFIRM_FIELD, form, number, outcome, text_field
from raftka.broker.console.html import Html, link, section, tag
from raftka.broker.console.view import PageError
from raftka.broker.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from raftka.broker.security.scram import ITERATIONS_MIN, ScramMechanism

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

#: What a binding may name (the "any"/"unknown"/"match" values are filters, not bindings).
RESOURCE_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)
PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
OPERATIONS = tuple(o for o in AclOperation if o > AclOperation.ANY)
PERMISSIONS = (AclPermission.ALLOW, AclPermission.DENY)
#: Kafka's client quota entity types and keys (KIP-546), as `kafka-configs` names them.
QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
)
ITERATIONS_MAX = 16384
BACK = "/security"


def _select(label: str, name: str, choices: tuple[str, ...], selected: str = "") -> Html:
    options = [tag("option", c, value=c, selected="" if c == selected else None) for c in choices]
    return tag("label", label, " ", tag("select", *options, name=name))


def _names(members: tuple[enum.Enum, ...]) -> tuple[str, ...]:
    return tuple(m.name for m in members)


def _acl_fields() -> list[Html]:
    return [
        _select("resource type", "resource_type", _names(RESOURCE_TYPES), "TOPIC"),
        text_field("name", "resource_name", required="", size=24),
        _select("pattern", "pattern_type", _names(PATTERN_TYPES), "LITERAL"),
        text_field("principal", "principal", required="", size=20, placeholder="User:alice"),
        text_field("host", "host", value="*", size=12),
        _select("operation", "operation", _names(OPERATIONS), "READ"),
        _select("permission", "permission", _names(PERMISSIONS), "ALLOW"),
    ]


def security_forms(view: View) -> Html:
    """The forms under the security page's tables."""
    mechanisms = _names(tuple(ScramMechanism))
    return section(
        "Changes",
        tag("h3", "Add an ACL binding"),
        form(view, "/security/acls", "Add", *_acl_fields(), confirm=None),
        tag("h3", "Remove an ACL binding"),
        tag("p", "Names the binding exactly; confirm with its principal.", class_="note"),
        form(view, "/security/acls/delete", "Remove", *_acl_fields(), confirm="the principal"),
        tag("h3", "Set a SCRAM password"),
        form(
            view,
            "/security/users",
            "Set",
            text_field("user", "user", required="", size=20),
            _select("mechanism", "mechanism", mechanisms, "SCRAM-SHA-512"),
            text_field("password", "password", type="password", required="", size=20),
            text_field("iterations", "iterations", value=ITERATIONS_MIN, size=6),
            confirm=None,
        ),
        tag("h3", "Remove a SCRAM credential"),
        form(
            view,
            "/security/users/delete",
            "Remove",
            text_field("user", "user", required="", size=20),
            _select("mechanism", "mechanism", mechanisms, "SCRAM-SHA-512"),
            confirm="the user",
        ),
        tag("h3", "Set a client quota"),
        form(
            view,
            "/security/quotas",
            "Set",
            _select("entity type", "entity_type", QUOTA_ENTITY_TYPES, "user"),
            text_field("name (empty: the default)", "entity_name", size=20),
            _select("quota", "key", QUOTA_KEYS, "producer_byte_rate"),
            text_field("value (empty: remove)", "value", size=12),
            confirm=None,
        ),
        id="security-actions",
    )


E = TypeVar("E", bound=enum.Enum)


def _choice(view: View, field: str, allowed: tuple[E, ...]) -> E:
    given = view.form.get(field, "").strip().upper().replace("-", "_")
    for member in allowed:
        if member.name == given:
            return member
    names = ", ".join(m.name for m in allowed)
    raise PageError(HTTPStatus.BAD_REQUEST, f"{field}: {given or 'nothing'} is not one of {names}")


def _required(view: View, field: str) -> str:
    value = view.form.get(field, "").strip()
    if not value:
        raise PageError(HTTPStatus.BAD_REQUEST, f"{field}: required")
    return value


def _confirmed_by(view: View, expected: str, what: str) -> None:
    if view.form.get(CONFIRM_FIELD, "").strip() != expected:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"not confirmed: type {what} ({expected}) to confirm"
        )


def _binding(view: View) -> AclBinding:
    resource_type = _choice(view, "resource_type", RESOURCE_TYPES)
    name = _required(view, "resource_name")
    if resource_type is ResourceType.CLUSTER and name != "kafka-cluster":
        raise PageError(HTTPStatus.BAD_REQUEST, "resource_name: the cluster is kafka-cluster")
    principal = _required(view, "principal")
    if ":" not in principal:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"principal: {principal!r} is not TYPE:NAME (User:alice)"
        )
    return AclBinding(
        resource_type,
        name,
        _choice(view, "pattern_type", PATTERN_TYPES),
        principal,
        view.form.get("host", "").strip() or "*",
        _choice(view, "operation", OPERATIONS),
        _choice(view, "permission", PERMISSIONS),
    )


def _back() -> Html:
    return tag("p", link(BACK, "← security"))


async def add_acl(view: View) -> HttpResponse:
    binding = _binding(view)
    result = (await view.caller.create_acl(binding)).results[0]
    return outcome(view, "Add an ACL binding", result.error_code, result.error_message, _back())


async def remove_acl(view: View) -> HttpResponse:
    binding = _binding(view)
    _confirmed_by(view, binding.principal, "the principal")
    result = (await view.caller.delete_acl(binding)).filter_results[0]
    if result.error_code == ErrorCode.none and not result.matching_acls:
        raise PageError(HTTPStatus.NOT_FOUND, "no ACL binding is exactly that one")
    return outcome(view, "Remove an ACL binding", result.error_code, result.error_message, _back())


def _mechanism(view: View) -> ScramMechanism:
    return _choice(view, "mechanism", tuple(ScramMechanism))


async def set_scram_password(view: View) -> HttpResponse:
    user = _required(view, "user")
    mechanism = _mechanism(view)
    password = view.form.get("password", "")
    if not password:
        raise PageError(HTTPStatus.BAD_REQUEST, "password: required")
    iterations = number(view, "iterations", ITERATIONS_MIN, ITERATIONS_MAX, ITERATIONS_MIN)
    response = await view.caller.set_scram_password(user, mechanism, password, iterations)
    result = response.results[0]
    title = f"SCRAM password of {user}"
    return outcome(view, title, result.error_code, result.error_message, _back())


async def remove_scram_credential(view: View) -> HttpResponse:
    user = _required(view, "user")
    mechanism = _mechanism(view)
    _confirmed_by(view, user, "the user")
    result = (await view.caller.delete_scram_credential(user, mechanism)).results[0]
    title = f"{mechanism.mechanism_name} credential of {user}"
    return outcome(view, title, result.error_code, result.error_message, _back())


async def set_quota(view: View) -> HttpResponse:
    entity_type = view.form.get("entity_type", "")
    if entity_type not in QUOTA_ENTITY_TYPES:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"entity_type: one of {', '.join(QUOTA_ENTITY_TYPES)}"
        )
    key = view.form.get("key", "")
    if key not in QUOTA_KEYS:
        raise PageError(HTTPStatus.BAD_REQUEST, f"key: one of {', '.join(QUOTA_KEYS)}")
    name = view.form.get("entity_name", "").strip() or None
    given = view.form.get("value", "").strip()
    try:
        value = float(given) if given else None
    except ValueError:
        raise PageError(HTTPStatus.BAD_REQUEST, f"value: not a number: {given!r}") from None
    result = (await view.caller.alter_quota([(entity_type, name)], key, value)).entries[0]
    title = f"Quota {key} of {entity_type} {name or '(default)'}"
    return outcome(view, title, result.error_code, result.error_message, _back())
