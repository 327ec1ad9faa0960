"""InitProducerId: producer ids for idempotent producers (KIP-98, KIP-360).

As in Kafka's TransactionCoordinator, a request without a transactional id always gets a
fresh producer id at epoch 0; the producer_id/epoch it may carry (v3+) are ignored, because
an idempotent producer bumps its epoch itself and nothing on the broker ties an id to a
client. Transactions are not supported: a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which the Java client and librdkafka treat as fatal
at once (initTransactions fails with a clear exception) instead of retrying forever.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import NO_THROTTLE, response_schema
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext

logger = logging.getLogger("raftka.producer_ids")

INIT_PRODUCER_ID_MIN_VERSION = 0
INIT_PRODUCER_ID_MAX_VERSION = 5


async def handle_init_producer_id(context: RequestContext, request: Any) -> Any:
    entity, _module = response_schema(context)
    if request.transactional_id is not None:
        logger.info(
            "refused InitProducerId for transactional id %r from %s: transactions are not "
            "supported",
            request.transactional_id,
            context.client_host,
        )
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = await context.services.producer_ids.next_producer_id()
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )
