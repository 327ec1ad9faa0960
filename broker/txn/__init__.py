"""Kafka's transaction coordinator (KIP-98): transactional ids, their producer ids and epochs,
the partitions of each ongoing transaction, and the markers that end it.

`TransactionCoordinator.verify_partition` is what a partition leader asks before it appends
the first transactional batch of a producer's transaction (KIP-890's verification).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class TransactionCoordinator:
    """Placeholder until the coordinator lands: no transaction is ever ongoing."""

    async def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> ErrorCode:
        """ErrorCode.none when (producer_id, producer_epoch) is the current producer of
        `transactional_id` and its ongoing transaction includes topic-partition; otherwise
        Kafka's error for the produce request (INVALID_TXN_STATE when the partition was not
        added, INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a stale epoch,
        NOT_ENOUGH_REPLICAS when the coordinator cannot answer now, which clients retry)."""
        return ErrorCode.invalid_txn_state
