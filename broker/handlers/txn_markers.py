"""WriteTxnMarkers: COMMIT and ABORT control records, written by the transaction coordinator
to every partition of a transaction through the partition's Raft group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from raftka.broker.services import BrokerServices


async def write_marker(
    services: BrokerServices,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
    timeout_s: float,
) -> ErrorCode:
    """Append one COMMIT (`committed`) or ABORT marker of `producer_id` at `producer_epoch`
    to topic-partition, which this broker must lead, and return once it is committed (the
    high watermark passed it): ErrorCode.none, or Kafka's error (NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for an epoch older than the
    partition's, REQUEST_TIMED_OUT after `timeout_s`). A marker on a `__consumer_offsets`
    partition also tells the group coordinator (`on_transaction_completed`)."""
    raise NotImplementedError("write_marker")
