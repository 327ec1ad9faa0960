"""InitProducerId: producer ids for idempotent and transactional producers (KIP-98, KIP-360).

As in Kafka's TransactionCoordinator, a request without a transactional id always gets a
fresh producer id at epoch 0; the producer_id/epoch it may carry (v3+) are ignored, because
an idempotent producer bumps its epoch itself and nothing on the broker ties an id to a
client. A request with a transactional id goes to the transaction coordinator, which this
broker must be for that id (NOT_COORDINATOR otherwise): a new id gets a fresh producer id
at epoch 0, a known one the next epoch (fencing its previous producer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import NO_THROTTLE, duration_ms, response_schema
from raftka.broker.handlers.txn import coordinator_of, fenced_for_version
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext

INIT_PRODUCER_ID_MIN_VERSION = 0
INIT_PRODUCER_ID_MAX_VERSION = 5


async def handle_init_producer_id(context: RequestContext, request: Any) -> Any:
    entity, _module = response_schema(context)
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
