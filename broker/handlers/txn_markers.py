"""WriteTxnMarkers: COMMIT and ABORT control records, written by the transaction coordinator
to every partition of a transaction through the partition's Raft group.

A marker is a transactional control batch of the producer (base sequence -1) with one record:
key (version 0, type COMMIT 1 / ABORT 0), value (version 0, coordinator epoch). Appending it
ends the producer's transaction on the partition (its records become visible to
read_committed consumers, or are listed as aborted) once the high watermark passes it.

The WriteTxnMarkers API (key 27) lets a coordinator elsewhere ask this broker; with an
authorizer it needs ALTER or CLUSTER_ACTION on the cluster, as Kafka's does (every marker's
partitions answer CLUSTER_AUTHORIZATION_FAILED otherwise). The markers are written by the
replica manager (`ReplicaManager.write_marker`); raftka's own coordinators call it directly,
or on the partition's leader over the Raft peer transport, which no client ACL governs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import response_entity, response_module
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from types import ModuleType
    from typing import TypeAlias

    import kio.schema.write_txn_markers.v1.request
    import kio.schema.write_txn_markers.v2.request

    from raftka.broker.handlers.context import BrokerServices, RequestContext
    from raftka.protocol.messages.requests import WriteTxnMarkersRequest
    from raftka.protocol.messages.responses import WriteTxnMarkersResponse

    WritableTxnMarker: TypeAlias = (
        kio.schema.write_txn_markers.v1.request.WritableTxnMarker
        | kio.schema.write_txn_markers.v2.request.WritableTxnMarker
    )

#: How long a WriteTxnMarkers request waits for each marker to commit (Kafka's
#: request.timeout.ms default, which bounds the coordinator's marker requests).
WRITE_TXN_MARKERS_TIMEOUT_S = 30.0


async def _write_one(
    services: BrokerServices,
    marker: WritableTxnMarker,
    topic: str,
    partition: int,
    errors: dict[tuple[int, str, int], ErrorCode],
    slot: tuple[int, str, int],
) -> None:
    errors[slot] = await services.replica_manager.write_marker(
        topic,
        partition,
        marker.producer_id,
        marker.producer_epoch,
        marker.coordinator_epoch,
        marker.transaction_result,
        WRITE_TXN_MARKERS_TIMEOUT_S,
    )


async def handle_write_txn_markers(
    context: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    """Write every marker of the request (all partitions concurrently) and answer an error
    code per marker, topic and partition."""
    entity: type[WriteTxnMarkersResponse] = response_entity(context)
    module = response_module(context)
    errors: dict[tuple[int, str, int], ErrorCode] = {}
    markers: tuple[WritableTxnMarker, ...] = request.markers
    if not _may_write_markers(context):
        for number, marker in enumerate(markers):
            for wanted in marker.topics:
                for index in wanted.partition_indexes:
                    errors[(number, wanted.name, index)] = ErrorCode.cluster_authorization_failed
        return _response(context, entity, module, request, errors)
    async with trio.open_nursery() as nursery:
        for number, marker in enumerate(markers):
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
    entity: type[WriteTxnMarkersResponse],
    module: ModuleType,
    request: WriteTxnMarkersRequest,
    errors: dict[tuple[int, str, int], ErrorCode],
) -> WriteTxnMarkersResponse:
    """The answer: an error code per marker, topic and partition."""
    results = []
    markers: tuple[WritableTxnMarker, ...] = request.markers
    for number, marker in enumerate(markers):
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
