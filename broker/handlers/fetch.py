"""Fetch: byte ranges of segment files up to the high watermark, with long polling.

Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells the
client that no session was created, so it keeps sending full fetch requests. A request that
names a session we never handed out gets FETCH_SESSION_ID_NOT_FOUND, as Kafka answers for an
evicted session.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import NO_THROTTLE, led_partition, response_schema
from raftka.log import OffsetOutOfRange
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext
    from raftka.broker.topics import Partition, Topic

READ_COMMITTED = 1


def _read_all(
    context: RequestContext, request: Any, module: ModuleType
) -> tuple[list[Any], int, list[Partition]]:
    """One pass over the requested partitions: (topic responses, bytes, partitions read)."""
    topics = context.services.topics
    remaining = request.max_bytes if request.max_bytes > 0 else 0
    # KIP-74: the first partition with data returns at least one whole batch.
    min_one_batch = True
    total_bytes = 0
    watched: list[Partition] = []
    responses = []
    by_id = hasattr(request.topics[0], "topic_id") if request.topics else False
    for wanted in request.topics:
        topic: Topic | None
        if by_id:
            topic = topics.topics_by_id.get(wanted.topic_id)
            name = topic.name if topic is not None else None
        else:
            name = wanted.topic
            topic = topics.get(name)
        partitions = []
        for p in wanted.partitions:
            fields: dict[str, Any] = {
                "partition_index": p.partition,
                "error_code": ErrorCode.none,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",  # empty, never null: librdkafka rejects a null MessageSet
            }
            partition = (
                topic.partitions[p.partition]
                if topic is not None and 0 <= p.partition < len(topic.partitions)
                else None
            )
            # Consumers read from the leader (no fetch-from-follower, KIP-392).
            led = led_partition(partition, getattr(p, "current_leader_epoch", -1))
            if isinstance(led, ErrorCode):
                fields["error_code"] = (
                    ErrorCode.unknown_topic_id if by_id and topic is None else led
                )
            else:
                partition = led
                log = partition.hosted_log
                high_watermark = partition.high_watermark
                stable = partition.last_stable_offset
                limit = high_watermark if request.isolation_level != READ_COMMITTED else stable
                fields.update(
                    high_watermark=high_watermark,
                    last_stable_offset=stable,
                    log_start_offset=log.log_start_offset,
                )
                watched.append(partition)
                max_bytes = min(p.partition_max_bytes, remaining)
                try:
                    records = (
                        log.read(p.fetch_offset, max_bytes, limit, min_one_batch)
                        if max_bytes > 0 or min_one_batch
                        else b""
                    )
                except OffsetOutOfRange:
                    fields["error_code"] = ErrorCode.offset_out_of_range
                    records = b""
                if records:
                    min_one_batch = False
                    remaining = max(0, remaining - len(records))
                    total_bytes += len(records)
                fields["records"] = records
                if request.isolation_level == READ_COMMITTED:
                    fields["aborted_transactions"] = ()
            partitions.append(build(module.PartitionData, **fields))
        responses.append(
            build(
                module.FetchableTopicResponse,
                topic=name or "",
                topic_id=getattr(wanted, "topic_id", None),
                partitions=tuple(partitions),
            )
        )
    return responses, total_bytes, watched


async def handle_fetch(context: RequestContext, request: Any) -> Any:
    entity, module = response_schema(context)
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=0,
            responses=(),
        )
    responses, total_bytes, watched = _read_all(context, request, module)
    max_wait_s = max(request.max_wait.total_seconds(), 0)
    if total_bytes < request.min_bytes and max_wait_s > 0 and watched:
        with trio.move_on_after(max_wait_s):
            while total_bytes < request.min_bytes:
                await _any_appended(watched)
                responses, total_bytes, watched = _read_all(context, request, module)
    _count(context, responses)
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(responses),
    )


def _count(context: RequestContext, responses: list[Any]) -> None:
    """Bytes out per topic and partition errors of the response sent (not of the reads
    a long poll discarded)."""
    metrics = context.services.metrics
    for topic_response in responses:
        for partition in topic_response.partitions:
            if partition.records:
                metrics.fetched(topic_response.topic, len(partition.records))
            if partition.error_code:
                metrics.request_error(context.api_key, partition.error_code)


async def _any_appended(partitions: list[Partition]) -> None:
    """Wait until any of the partitions has an append (or is deleted)."""
    woken = trio.Event()
    for partition in partitions:
        partition.waiters.add(woken)
    try:
        await woken.wait()
    finally:
        for partition in partitions:
            partition.waiters.discard(woken)
