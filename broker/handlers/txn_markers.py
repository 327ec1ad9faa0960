"""WriteTxnMarkers: COMMIT and ABORT control records, written by the transaction coordinator
to every partition of a transaction through the partition's Raft group.

A marker is a transactional control batch of the producer (base sequence -1) with one record:
key (version 0, type COMMIT 1 / ABORT 0), value (version 0, coordinator epoch). Appending it
ends the producer's transaction on the partition (its records become visible to
read_committed consumers, or are listed as aborted) once the high watermark passes it.

The WriteTxnMarkers API (key 27) lets a coordinator elsewhere ask this broker; with an
authorizer it needs ALTER or CLUSTER_ACTION on the cluster, as Kafka's does (every marker's
partitions answer CLUSTER_AUTHORIZATION_FAILED otherwise). raftka's own coordinators do not
use it: they call `write_marker` here, or on the partition's leader over the Raft peer
transport, which no client ACL governs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import response_schema
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.topics import OFFSETS_TOPIC, now_ms
from raftka.consensus.core import NotLeaderError, StorageError
from raftka.log.producer_state import ProducerStateError
from raftka.protocol.api import build
from raftka.protocol.batch_builder import build_end_txn_marker

if TYPE_CHECKING:
    from raftka.broker.services import BrokerServices, RequestContext

logger = logging.getLogger("raftka.txn_markers")

#: How long a WriteTxnMarkers request waits for each marker to commit (Kafka's
#: request.timeout.ms default, which bounds the coordinator's marker requests).
WRITE_TXN_MARKERS_TIMEOUT_S = 30.0


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
    target = services.topics.partition(topic, partition)
    if target is None:
        return ErrorCode.unknown_topic_or_partition
    log = target.log
    if not target.is_leader or log is None:
        return ErrorCode.not_leader_or_follower
    # Checked and proposed with no await in between: no other append can come first.
    try:
        log.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
    except ProducerStateError as exc:
        logger.info(
            "refused a %s marker on %s: %s",
            "COMMIT" if committed else "ABORT",
            target.name,
            exc.message,
            extra={"partition": target.name, "topic": topic},
        )
        return ErrorCode(exc.error_code)
    batch = build_end_txn_marker(
        producer_id, producer_epoch, coordinator_epoch, committed, now_ms()
    )
    try:
        entry = target.propose(batch, 1)
    except StorageError:
        return ErrorCode.kafka_storage_error
    except NotLeaderError:
        return ErrorCode.not_leader_or_follower
    try:
        done = await target.wait_committed(entry, timeout_s)
    except NotLeaderError:
        return ErrorCode.not_leader_or_follower
    if not done:
        return ErrorCode.request_timed_out
    if topic == OFFSETS_TOPIC:
        services.groups.on_transaction_completed(partition, producer_id, committed)
    return ErrorCode.none


async def _write_one(
    services: BrokerServices,
    marker: Any,
    topic: str,
    partition: int,
    errors: dict[tuple[int, str, int], ErrorCode],
    slot: tuple[int, str, int],
) -> None:
    errors[slot] = await write_marker(
        services,
        topic,
        partition,
        marker.producer_id,
        marker.producer_epoch,
        marker.coordinator_epoch,
        marker.transaction_result,
        WRITE_TXN_MARKERS_TIMEOUT_S,
    )


async def handle_write_txn_markers(context: RequestContext, request: Any) -> Any:
    """Write every marker of the request (all partitions concurrently) and answer an error
    code per marker, topic and partition."""
    entity, module = response_schema(context)
    errors: dict[tuple[int, str, int], ErrorCode] = {}
    if not _may_write_markers(context):
        for number, marker in enumerate(request.markers):
            for wanted in marker.topics:
                for index in wanted.partition_indexes:
                    errors[(number, wanted.name, index)] = ErrorCode.cluster_authorization_failed
        return _response(context, entity, module, request, errors)
    async with trio.open_nursery() as nursery:
        for number, marker in enumerate(request.markers):
            for wanted in marker.topics:
                for index in wanted.partition_indexes:
                    slot = (number, wanted.name, index)
                    nursery.start_soon(
                        _write_one, context.services, marker, wanted.name, index, errors, slot
                    )
    return _response(context, entity, module, request, errors)


def _may_write_markers(context: RequestContext) -> bool:
    return context.authorize(
        AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME
    ) or context.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


def _response(
    context: RequestContext,
    entity: Any,
    module: Any,
    request: Any,
    errors: dict[tuple[int, str, int], ErrorCode],
) -> Any:
    """The answer: an error code per marker, topic and partition."""
    results = []
    for number, marker in enumerate(request.markers):
        topics = []
        for wanted in marker.topics:
            partitions = []
            for index in wanted.partition_indexes:
                code = errors[(number, wanted.name, index)]
                if code != ErrorCode.none:
                    context.services.metrics.request_error(context.api_key, code)
                partitions.append(
                    build(
                        module.WritableTxnMarkerPartitionResult,
                        partition_index=index,
                        error_code=code,
                    )
                )
            topics.append(
                build(
                    module.WritableTxnMarkerTopicResult,
                    name=wanted.name,
                    partitions=tuple(partitions),
                )
            )
        results.append(
            build(
                module.WritableTxnMarkerResult,
                producer_id=marker.producer_id,
                topics=tuple(topics),
            )
        )
    return build(entity, markers=tuple(results))
