"""DescribeAcls, CreateAcls and DeleteAcls: the cluster's ACL bindings.

Describe reads this broker's metadata image; create and delete go to the controller as one
command each, which stores or removes the bindings in one metadata batch. Without an
authorizer (`authorizer.class.name` empty) every request answers SECURITY_DISABLED, as in
Kafka. Creating and deleting need ALTER on the cluster, describing DESCRIBE on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    AclOutcome,
    CommandResult,
    CreateAclsCommand,
    DeleteAclsCommand,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    binding_codes,
    binding_from_codes,
)
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        CreateAclsRequest,
        DeleteAclsRequest,
        DescribeAclsRequest,
    )
    from raftka.protocol.messages.responses import (
        CreateAclsResponse,
        DeleteAclsResponse,
        DescribeAclsResponse,
    )

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _refusal(context: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Why this request may not touch ACLs at all, as (error, message); None if it may."""
    if not context.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return (
            ErrorCode.cluster_authorization_failed,
            f"{context.principal} is not authorized to {operation.name} the cluster's ACLs: "
            f"it needs {operation.name} on the CLUSTER resource",
        )
    if not context.services.authorizer.enabled:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


def _outcomes(result: CommandResult, count: int) -> list[AclOutcome]:
    """The controller's per-item outcomes, or its one failure (no controller, a commit that
    timed out) repeated for every item."""
    if result.acl_outcomes is not None and len(result.acl_outcomes) == count:
        return list(result.acl_outcomes)
    code = result.error_code
    if code == ErrorCode.none:
        code = ErrorCode.unknown_server_error
    return [
        AclOutcome(code, result.error_message or "The controller answered no ACL results")
    ] * count


class _FilterFields(Protocol):
    """An ACL filter as DescribeAcls and DeleteAcls send it (pattern type from v1 on)."""

    @property
    def resource_type_filter(self) -> int: ...

    @property
    def resource_name_filter(self) -> str | None: ...

    @property
    def principal_filter(self) -> str | None: ...

    @property
    def host_filter(self) -> str | None: ...

    @property
    def operation(self) -> int: ...

    @property
    def permission_type(self) -> int: ...


def _filter_of(item: _FilterFields) -> AclBindingFilter:
    return AclBindingFilter.from_codes(
        item.resource_type_filter,
        item.resource_name_filter,
        getattr(item, "pattern_type_filter", 3),
        item.principal_filter,
        item.host_filter,
        item.operation,
        item.permission_type,
    )


def _grouped(module: ModuleType, bindings: Iterable[AclBinding]) -> tuple[object, ...]:
    """Bindings grouped by resource pattern (type, name, pattern type), as Kafka answers."""
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(bindings, key=binding_codes):
        key = (int(b.resource_type), b.resource_name, int(b.pattern_type))
        by_resource.setdefault(key, []).append(b)
    return tuple(
        build(
            module.DescribeAclsResource,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern_type,
            acls=tuple(
                build(
                    module.AclDescription,
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in members
            ),
        )
        for (resource_type, name, pattern_type), members in by_resource.items()
    )


async def handle_describe_acls(
    context: RequestContext, request: DescribeAclsRequest
) -> DescribeAclsResponse:
    entity: type[DescribeAclsResponse] = response_entity(context)
    module = response_module(context)
    resources: tuple[object, ...] = ()
    code, message = ErrorCode.none, None
    refusal = _refusal(context, AclOperation.DESCRIBE)
    if refusal is not None:
        code, message = refusal
    else:
        acl_filter = _filter_of(request)
        problem = acl_filter.problem()
        if problem is not None:
            code, message = ErrorCode.invalid_request, problem
        else:
            resources = _grouped(module, acl_filter.select(context.services.controller.image.acls))
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        resources=resources,
    )


async def handle_create_acls(
    context: RequestContext, request: CreateAclsRequest
) -> CreateAclsResponse:
    entity: type[CreateAclsResponse] = response_entity(context)
    module = response_module(context)
    outcomes: list[AclOutcome]
    refusal = _refusal(context, AclOperation.ALTER)
    if refusal is not None:
        outcomes = [AclOutcome(*refusal)] * len(request.creations)
    elif not request.creations:
        outcomes = []
    else:
        command = CreateAclsCommand(
            tuple(
                binding_codes(
                    binding_from_codes(
                        c.resource_type,
                        c.resource_name,
                        getattr(c, "resource_pattern_type", 3),
                        c.principal,
                        c.host,
                        c.operation,
                        c.permission_type,
                    )
                )
                for c in request.creations
            )
        )
        result = await context.services.controller.execute(command)
        outcomes = _outcomes(result, len(request.creations))
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(
                module.AclCreationResult,
                error_code=o.error_code,
                error_message=o.error_message,
            )
            for o in outcomes
        ),
    )


async def handle_delete_acls(
    context: RequestContext, request: DeleteAclsRequest
) -> DeleteAclsResponse:
    entity: type[DeleteAclsResponse] = response_entity(context)
    module = response_module(context)
    outcomes: list[AclOutcome]
    refusal = _refusal(context, AclOperation.ALTER)
    if refusal is not None:
        outcomes = [AclOutcome(*refusal)] * len(request.filters)
    elif not request.filters:
        outcomes = []
    else:
        command = DeleteAclsCommand(tuple(_filter_of(f).codes() for f in request.filters))
        result = await context.services.controller.execute(command)
        outcomes = _outcomes(result, len(request.filters))
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        filter_results=tuple(
            build(
                module.DeleteAclsFilterResult,
                error_code=o.error_code,
                error_message=o.error_message,
                matching_acls=tuple(
                    build(
                        module.DeleteAclsMatchingAcl,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=b[0],
                        resource_name=b[1],
                        pattern_type=b[2],
                        principal=b[3],
                        host=b[4],
                        operation=b[5],
                        permission_type=b[6],
                    )
                    for b in o.bindings
                ),
            )
            for o in outcomes
        ),
    )
