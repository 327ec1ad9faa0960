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
from pathlib import Path
from typing import Any

import lmdb
from kio.schema.errors import ErrorCode

from broker.handlers.common import NO_THROTTLE, response_schema
from protocol.api import build

logger = logging.getLogger("raftka.producer_ids")

INIT_PRODUCER_ID_MIN_VERSION = 0
INIT_PRODUCER_ID_MAX_VERSION = 5

# Same file, key and id scheme as broker.producer_ids, which the Broker opens at start-up.
PRODUCER_IDS_FILE = "producer-ids.lmdb"
PRODUCER_ID_BLOCK_SIZE = 1000
NODE_ID_SPACE = 1 << 16
_NEXT_BLOCK_KEY = b"producer-ids/next-block"


class ProducerIdAllocator:
    """Ids `sequence * NODE_ID_SPACE + node_id`: brokers never collide, and the sequence is
    reserved in blocks committed to lmdb before any id of a block is used, so a restart
    (even kill -9) never reuses one."""

    def __init__(self, path: Path, node_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if not 0 <= node_id < NODE_ID_SPACE:
            raise ValueError(f"node.id must be below {NODE_ID_SPACE}, got {node_id}")
        self.node_id = node_id
        self.block_size = block_size
        self._env = lmdb.open(str(path), map_size=1 << 20, subdir=True)
        self._unused = range(0)

    def next_producer_id(self) -> int:
        if not self._unused:
            with self._env.begin(write=True) as txn:
                raw = txn.get(_NEXT_BLOCK_KEY)
                start = int(raw) if raw is not None else 0
                txn.put(_NEXT_BLOCK_KEY, str(start + self.block_size).encode())
            self._unused = range(start, start + self.block_size)
        sequence = self._unused[0]
        self._unused = self._unused[1:]
        return sequence * NODE_ID_SPACE + self.node_id

    def close(self) -> None:
        self._env.close()


def _allocator(broker: Any) -> Any:
    """The broker's allocator; opened here on first use if the broker has none."""
    allocator = getattr(broker, "producer_ids", None)
    if allocator is None:
        allocator = ProducerIdAllocator(broker.data_dir / PRODUCER_IDS_FILE, broker.node_id)
        broker.producer_ids = allocator
    return allocator


async def handle_init_producer_id(context: Any, request: Any) -> Any:
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
    producer_id = _allocator(context.broker).next_producer_id()
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )
