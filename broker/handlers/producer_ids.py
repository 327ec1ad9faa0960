"""InitProducerId: producer ids for idempotent and transactional producers (KIP-98, KIP-360).

As in Kafka's TransactionCoordinator, a request without a transactional id always gets a
fresh producer id at epoch 0; the producer_id/epoch it may carry (v3+) are ignored, because
an idempotent producer bumps its epoch itself and nothing on the broker ties an id to a
client. A request with a transactional id goes to the transaction coordinator, which this
broker must be for that id (NOT_COORDINATOR otherwise): a new id gets a fresh producer id
at epoch 0, a known one the next epoch (fencing its previous producer).

With an authorizer, a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
otherwise); an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some
topic (KIP-679; CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    duration_ms,
    response_entity,
)
from raftka.broker.handlers.txn import coordinator_of, fenced_for_version, may_write_transaction
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import InitProducerIdRequest
    from raftka.protocol.messages.responses import InitProducerIdResponse

INIT_PRODUCER_ID_MIN_VERSION = 0
INIT_PRODUCER_ID_MAX_VERSION = 5


def _refusal(context: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """Kafka's ACLs for InitProducerId: WRITE on the transactional id, or for an idempotent
    producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if transactional_id is not None:
        if may_write_transaction(context, transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if context.authorize(
        AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or context.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


async def handle_init_producer_id(
    context: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    entity: type[InitProducerIdResponse] = response_entity(context)
    refusal = _refusal(context, request.transactional_id)
    if refusal is not None:
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=refusal,
            producer_id=-1,
            producer_epoch=-1,
        )
    if request.transactional_id is not None:
        producer_id = int(getattr(request, "producer_id", -1))
        producer_epoch = int(getattr(request, "producer_epoch", -1))
        expected = None if producer_id < 0 else (producer_id, producer_epoch)
        result = await coordinator_of(context).init_producer_id(
            request.transactional_id, duration_ms(request.transaction_timeout), expected
        )
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=fenced_for_version(result.error, context.api_version, 4),
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
    producer_id = await context.services.producer_ids.next_producer_id()
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )
