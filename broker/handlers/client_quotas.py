"""DescribeClientQuotas and AlterClientQuotas (KIP-546).

Describe reads this broker's metadata image. Alter checks every entry as Kafka's controller
does (entity types and combinations, known keys, positive whole values where Kafka wants
LONGs, no key twice) and sends each valid entity's changes to the controller, which writes
only what changes; an entry with bad input changes nothing and is answered INVALID_REQUEST
with a message. `validate_only` checks and answers without changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterClientQuotaCommand
from raftka.broker.handlers.common import NO_THROTTLE, response_entity, response_module
from raftka.broker.quotas import (
    QuotaEntity,
    QuotaRequestError,
    describe_quotas,
    validate_entity,
    validate_ops,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterClientQuotasResponse,
        DescribeClientQuotasResponse,
    )


async def handle_describe_client_quotas(
    context: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    answer: type[DescribeClientQuotasResponse] = response_entity(context)
    module = response_module(context)
    if not context.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(
            answer,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    quotas = context.services.controller.image.client_quotas
    try:
        found = describe_quotas(
            quotas,
            [(c.entity_type, int(c.match_type), c.match) for c in request.components],
            bool(request.strict),
        )
    except QuotaRequestError as exc:
        return build(
            answer,
            throttle_time=NO_THROTTLE,
            error_code=exc.error_code,
            error_message=exc.message,
            entries=None,
        )
    entries = tuple(
        build(
            module.EntryData,
            entity=tuple(
                module.EntityData(entity_type=kind, entity_name=name) for kind, name in entity
            ),
            values=tuple(
                build(module.ValueData, key=key, value=value)
                for key, value in sorted(values.items())
            ),
        )
        for entity, values in found
    )
    return build(
        answer,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=entries,
    )


async def handle_alter_client_quotas(
    context: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    answer: type[AlterClientQuotasResponse] = response_entity(context)
    module = response_module(context)
    authorized = context.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    seen: set[QuotaEntity] = set()
    results = []
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        code, message = ErrorCode.none, None
        try:
            if not authorized:
                raise QuotaRequestError(
                    "Cluster authorization failed.", ErrorCode.cluster_authorization_failed
                )
            entity = validate_entity(pairs)
            if entity in seen:
                raise QuotaRequestError(f"Ignoring duplicate entity {_render(pairs)}")
            seen.add(entity)
            changes = validate_ops(
                (op.key, None if op.remove else float(op.value)) for op in entry.ops
            )
            if not request.validate_only:
                result = await context.services.controller.execute(
                    AlterClientQuotaCommand(entity, tuple(changes.items()))
                )
                code, message = result.error_code, result.error_message
        except QuotaRequestError as exc:
            code, message = exc.error_code, exc.message
        results.append(
            build(
                module.EntryData,
                error_code=code,
                error_message=message,
                entity=tuple(
                    module.EntityData(entity_type=kind, entity_name=name) for kind, name in pairs
                ),
            )
        )
    return build(answer, throttle_time=NO_THROTTLE, entries=tuple(results))


def _render(pairs: list[tuple[str, str | None]]) -> str:
    return "ClientQuotaEntity(" + ", ".join(f"{kind}={name}" for kind, name in pairs) + ")"
