"""Share-group APIs (KIP-932): ShareGroupHeartbeat at the group's coordinator (and
ShareGroupDescribe, in share_describe.py), ShareFetch and ShareAcknowledge at each
partition's leader.

ShareFetch reads whole batches as Fetch does (records stay opaque; big ranges go out with
sendfile) and tells the consumer which offset ranges of them it acquired; the consumer
delivers only those. It sends the batches from the one holding the first record acquired to
the one holding the last, not every batch up to the request's byte limit. On a priority
or fair topic the records to acquire are chosen by share_order.py. Acknowledgements
(piggybacked on ShareFetch or in ShareAcknowledge) are answered after the share-partition
state they produce is persisted.

ACLs as Kafka's: READ on the group for ShareGroupHeartbeat, ShareFetch and
ShareAcknowledge, READ on each topic fetched or acknowledged.
"""

from __future__ import annotations

import datetime
import logging
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    R,
    TopicAccess,
    denied_message,
    duration_ms,
    led_partition,
    response_entity,
    response_module,
)
from raftka.broker.handlers.fetch import _any_appended, _records
from raftka.broker.handlers.group_configs import group_config
from raftka.broker.handlers.metadata import brokers_of, client_listener, partition_leader
from raftka.broker.handlers.share_order import acquire_indexed, fill_index, indexed_order
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.share.manager import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    LedSharePartition,
    Notice,
    SessionPartition,
    SharePartitionManager,
)
from raftka.broker.share.partition import Acquired
from raftka.log import OffsetOutOfRange
from raftka.protocol.api import build
from raftka.protocol.splice import SplicedResponse, Splices

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Partition
    from raftka.log.partition_core import LogSlice
    from raftka.log.segment import LogSegment
    from raftka.protocol.messages.requests import (
        ShareAcknowledgeRequest,
        ShareFetchRequest,
        ShareGroupHeartbeatRequest,
    )
    from raftka.protocol.messages.responses import (
        ShareAcknowledgeResponse,
        ShareFetchResponse,
        ShareGroupHeartbeatResponse,
    )

logger = logging.getLogger("raftka.share")

SHARE_API_MIN_VERSION = 1
#: How often a fetch waiting for records tries again to read a share-partition's state.
STATE_RETRY_S = 0.2
SHARE_API_MAX_VERSION = 1


@dataclass(frozen=True, slots=True)
class ShareConfig:
    lock_ms: int
    delivery_limit: int
    max_in_flight: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    auto_offset_reset: str
    sessions_max: int


def share_config(context: RequestContext, group_id: str | None = None) -> ShareConfig:
    """The share settings of `group_id`: its group configs (share.record.lock.duration.ms,
    share.session.timeout.ms, ...) where it sets them, else the broker's; the broker's
    alone without a group."""
    config = context.services.config
    group = group_config(config, context.services.controller.image.group_configs, group_id or "")
    return ShareConfig(
        lock_ms=group.get_int("share.record.lock.duration.ms"),
        delivery_limit=config.get_int("group.share.delivery.count.limit"),
        max_in_flight=config.get_int("group.share.partition.max.record.locks"),
        session_timeout_ms=group.get_int("share.session.timeout.ms"),
        heartbeat_interval_ms=group.get_int("share.heartbeat.interval.ms"),
        auto_offset_reset=group.get_str("share.auto.offset.reset"),
        sessions_max=config.get_int("group.share.max.share.sessions"),
    )


def _manager(context: RequestContext) -> SharePartitionManager:
    return context.services.groups.share_partitions


def _now_ms(context: RequestContext) -> float:
    """The loop's clock in milliseconds, the time share groups and sessions keep."""
    return context.services.clock.now_s() * 1000


# -- ShareGroupHeartbeat -------------------------------------------------------------------


async def release_departed(context: RequestContext, delivery_limit: int) -> None:
    """Members whose session timed out: the leaders of their partitions close their share
    sessions, so the records they acquired are available at once."""
    for group_id, member_id in context.services.groups.share.take_departed():
        await _manager(context).store.tell_brokers(
            Notice(group_id, member_id, delivery_limit=delivery_limit)
        )


async def handle_share_group_heartbeat(
    context: RequestContext, request: ShareGroupHeartbeatRequest
) -> ShareGroupHeartbeatResponse:
    entity: type[ShareGroupHeartbeatResponse] = response_entity(context)
    module = response_module(context)
    coordinator = context.services.groups
    config = share_config(context, request.group_id)

    def answer(
        error: ErrorCode, message: str | None = None, **fields: object
    ) -> ShareGroupHeartbeatResponse:
        fields.setdefault("member_id", request.member_id or None)
        fields.setdefault("member_epoch", 0)
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            heartbeat_interval=datetime.timedelta(milliseconds=config.heartbeat_interval_ms),
            **fields,
        )

    group_id = request.group_id
    if not context.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return answer(
            ErrorCode.group_authorization_failed,
            denied_message(context, AclOperation.READ, ResourceType.GROUP, group_id),
        )
    subscribed = request.subscribed_topic_names
    error = coordinator.ownership.request_error(group_id)
    if error != ErrorCode.none:
        return answer(error)
    if coordinator.is_classic_group(group_id):
        return answer(
            ErrorCode.group_id_not_found,
            f"group {group_id} is a classic or consumer group, not a share group: use another "
            "group id",
        )
    result = coordinator.share.heartbeat(
        group_id=group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed=None if subscribed is None else tuple(subscribed),
        client_id=context.header.client_id or "",
        client_host=context.client_host,
        now_ms=_now_ms(context),
        session_timeout_ms=config.session_timeout_ms,
    )
    await release_departed(context, config.delivery_limit)
    if result.error != ErrorCode.none:
        return answer(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        topics = context.services.topics
        assigned = []
        for name, partitions in sorted(result.assignment.items()):
            topic = topics.get(name)
            if topic is not None:
                assigned.append(
                    build(
                        module.TopicPartitions,
                        topic_id=topic.topic_id,
                        partitions=tuple(partitions),
                    )
                )
        assignment = build(module.Assignment, topic_partitions=tuple(assigned))
    return answer(
        ErrorCode.none,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        assignment=assignment,
    )


# -- ShareFetch and ShareAcknowledge -------------------------------------------------------


@dataclass(slots=True)
class _PartitionAnswer:
    topic_id: uuid.UUID
    index: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode = ErrorCode.none
    ack_message: str | None = None
    leader: tuple[int, int] = (-1, -1)
    # b"" until records are read: then their (segment, position, length) in the log
    records: bytes | tuple[LogSegment, int, int] = b""
    acquired: tuple[Acquired, ...] = ()


def _group_error(
    context: RequestContext, group_id: str | None, member_id: str | None
) -> tuple[ErrorCode, str] | None:
    """(error, message) refusing the request as a whole, or None."""
    if not group_id:
        return ErrorCode.invalid_group_id, "GroupId must be set"
    if not member_id:
        return ErrorCode.invalid_request, "MemberId must be set"
    if not context.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return (
            ErrorCode.group_authorization_failed,
            denied_message(context, AclOperation.READ, ResourceType.GROUP, group_id),
        )
    return None


def _locate(
    context: RequestContext, topic_id: uuid.UUID, index: int, may_read: TopicAccess
) -> tuple[Partition | None, _PartitionAnswer]:
    """The partition when this broker leads it and the principal may read it; the answer
    carries the error otherwise."""
    answer = _PartitionAnswer(topic_id, index)
    topic = context.services.topics.topics_by_id.get(topic_id)
    if topic is None:
        answer.error = ErrorCode.unknown_topic_id
        return None, answer
    if not may_read(topic.name):
        answer.error = ErrorCode.topic_authorization_failed
        return None, answer
    partition = topic.partitions[index] if 0 <= index < len(topic.partitions) else None
    if partition is not None:
        answer.leader = partition_leader(context.services.controller, partition)
    led = led_partition(partition, -1)
    if isinstance(led, ErrorCode):
        answer.error = led
        return None, answer
    return led, answer


async def share_partition(
    context: RequestContext, group_id: str, partition: Partition, config: ShareConfig
) -> LedSharePartition:
    log = partition.hosted_log
    led = await _manager(context).get(
        (group_id, partition.topic.topic_id, partition.index),
        partition.leader_epoch,
        log.log_start_offset,
        partition.high_watermark,
        config.auto_offset_reset,
        indexed_order(partition),
    )
    led.state.move_start(log.log_start_offset)
    if led.state.release_expired(_now_ms(context), config.delivery_limit):
        _manager(context).notify_released()
    return led


class AcknowledgementBatch(Protocol):
    """One acknowledgement batch of a ShareFetch or ShareAcknowledge request."""

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def acknowledge_types(self) -> Sequence[int]: ...


def _refused(
    answer: _PartitionAnswer,
    partition: Partition,
    batch: AcknowledgementBatch,
    member_id: str,
    error: ErrorCode,
) -> None:
    answer.ack_error = error
    answer.ack_message = (
        f"offsets {batch.first_offset}..{batch.last_offset} of {partition.name} are "
        f"not acquired by member {member_id} (lock expired or never acquired)"
        if error == ErrorCode.invalid_record_state
        else f"acknowledgement batch {batch.first_offset}..{batch.last_offset} is not valid"
    )


async def _acknowledge(
    context: RequestContext,
    group_id: str,
    member_id: str,
    partition: Partition,
    batches: Iterable[AcknowledgementBatch],
    config: ShareConfig,
    answer: _PartitionAnswer,
) -> None:
    """Apply the partition's acknowledgement batches and persist them; errors go into
    `answer.ack_error`. As in Kafka, a partition's batches apply all together or not at
    all: one that cannot (an offset not acquired by the member) fails them all, and a
    client told so can count on none of them having changed a record."""
    try:
        led = await share_partition(context, group_id, partition, config)
    except OSError as exc:
        answer.ack_error, answer.ack_message = ErrorCode.coordinator_not_available, str(exc)
        return
    # RELEASEd records go back to the group only once the acknowledgement is persisted:
    # one whose write fails must have handed nothing to another member.
    batches = list(batches)
    for batch in batches:
        error = led.state.acknowledgement_error(
            member_id, batch.first_offset, batch.last_offset, list(batch.acknowledge_types)
        )
        if error != ErrorCode.none:
            _refused(answer, partition, batch, member_id, error)
            return
    releases: list[tuple[int, int, int]] = []
    for batch in batches:
        # Refused only when batches overlap (the first took what the next acknowledges).
        error = led.state.acknowledge(
            member_id,
            batch.first_offset,
            batch.last_offset,
            list(batch.acknowledge_types),
            config.delivery_limit,
            releases,
        )
        if error != ErrorCode.none:
            _refused(answer, partition, batch, member_id, error)
    try:
        await _manager(context).persist(led)
    except OSError as exc:
        answer.ack_error = ErrorCode.coordinator_not_available
        answer.ack_message = f"the acknowledgement could not be persisted: {exc}"
        return
    if releases and led.state.release_held(member_id, releases, config.delivery_limit):
        _manager(context).notify_released()


def _fetch_once(
    context: RequestContext,
    member_id: str,
    targets: list[tuple[Partition, LedSharePartition, _PartitionAnswer]],
    request: ShareFetchRequest,
    config: ShareConfig,
) -> int:
    """Acquire and read for each partition (no await: the slices stay valid); the number of
    records acquired."""
    remaining_bytes = request.max_bytes if request.max_bytes > 0 else 0
    remaining_records: int = request.max_records
    acquired_total = 0
    now = _now_ms(context)
    for partition, led, answer in targets:
        if remaining_records <= 0:
            break
        if answer.error != ErrorCode.none:
            continue
        log = partition.hosted_log
        high_watermark = partition.high_watermark
        led.state.move_start(log.log_start_offset)
        if led.index is not None:
            acquired, records, length = acquire_indexed(
                partition,
                led,
                member_id,
                remaining_records,
                max(remaining_bytes, 1),
                config.max_in_flight,
                now,
                context.services.clock.wall_ms(),
                config.lock_ms,
            )
            if acquired:
                count = sum(a.last - a.first + 1 for a in acquired)
                remaining_records -= count
                acquired_total += count
                remaining_bytes = max(0, remaining_bytes - length)
                answer.records = records
                answer.acquired = tuple(acquired)
                context.services.metrics.fetched(partition.topic.name, length)
            continue
        start = led.state.next_available()
        if start is None or start >= high_watermark:
            continue
        try:
            found = log.fetch_slice(start, max(remaining_bytes, 1), high_watermark, True)
        except OffsetOutOfRange:
            continue
        if found is None:
            continue
        acquired = led.state.acquire(
            member_id,
            found.next_offset,
            remaining_records,
            config.max_in_flight,
            now,
            config.lock_ms,
        )
        if not acquired:
            continue
        count = sum(a.last - a.first + 1 for a in acquired)
        remaining_records -= count
        acquired_total += count
        position, length = acquired_batches(found, acquired[0].first, acquired[-1].last)
        remaining_bytes = max(0, remaining_bytes - length)
        answer.records = (found.segment, position, length)
        answer.acquired = tuple(acquired)
        context.services.metrics.fetched(partition.topic.name, length)
    return acquired_total


def acquired_batches(found: LogSlice, first: int, last: int) -> tuple[int, int]:
    """(position, length) of the batches of `found` from the one holding `first` to the
    one holding `last`: what a fetch that acquired offsets [first, last] sends, as Kafka's
    ShareFetchUtils.maybeSliceFetchRecords slices, not every batch up to the request's byte
    limit (a consumer parses all it is sent, to deliver only what was acquired)."""
    head = found.segment.find_batch(first)
    tail = head if head is not None and head.next_offset > last else found.segment.find_batch(last)
    if head is None or tail is None:
        return found.position, found.length
    start = max(head.position, found.position)
    stop = min(tail.position + tail.size_bytes, found.position + found.length)
    return start, stop - start


def _topic_id(topic_id: uuid.UUID | None) -> uuid.UUID:
    """A share request's topic id, which kio types as nullable (null: UNKNOWN_TOPIC_ID)."""
    return cast(uuid.UUID, topic_id)


def _session_partitions(request: ShareFetchRequest) -> set[SessionPartition]:
    return {
        (_topic_id(t.topic_id), p.partition_index) for t in request.topics for p in t.partitions
    }


def _node_endpoints(
    context: RequestContext, module: ModuleType, answers: list[_PartitionAnswer]
) -> tuple[object, ...]:
    wanted = {a.leader[0] for a in answers if a.error == ErrorCode.not_leader_or_follower}
    if not wanted:
        return ()
    return tuple(
        build(module.NodeEndpoint, node_id=node_id, host=host, port=port, rack=rack)
        for node_id, host, port, rack in brokers_of(context.services, client_listener(context))
        if node_id in wanted
    )


def _by_topic(answers: list[_PartitionAnswer]) -> dict[uuid.UUID, list[_PartitionAnswer]]:
    out: dict[uuid.UUID, list[_PartitionAnswer]] = {}
    for a in answers:
        out.setdefault(a.topic_id, []).append(a)
    return out


def _response(
    entity: type[R],
    error: ErrorCode,
    message: str | None,
    responses: tuple[object, ...] = (),
    node_endpoints: tuple[object, ...] = (),
    **fields: object,
) -> R:
    """A ShareFetch or ShareAcknowledge response; a refusal when `responses` is empty."""
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        responses=responses,
        node_endpoints=node_endpoints,
        **fields,
    )


def _lock_timeout(config: ShareConfig) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=config.lock_ms)


def _leader(module: ModuleType, answer: _PartitionAnswer) -> object:
    leader_id, leader_epoch = answer.leader
    return build(module.LeaderIdAndEpoch, leader_id=leader_id, leader_epoch=leader_epoch)


async def handle_share_fetch(
    context: RequestContext, request: ShareFetchRequest
) -> ShareFetchResponse | SplicedResponse:
    entity: type[ShareFetchResponse] = response_entity(context)
    module = response_module(context)
    config = share_config(context, request.group_id)
    manager = _manager(context)

    def refuse(error: ErrorCode, message: str | None) -> ShareFetchResponse:
        return _response(entity, error, message, acquisition_lock_timeout=_lock_timeout(config))

    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    refused = _group_error(context, group_id, member_id)
    if refused is not None:
        return refuse(*refused)
    assert group_id and member_id, "_group_error refuses a request without them"
    acks = {
        (_topic_id(t.topic_id), p.partition_index): p.acknowledgement_batches
        for t in request.topics
        for p in t.partitions
        if p.acknowledgement_batches
    }
    if epoch == INITIAL_EPOCH:
        if acks:
            return refuse(
                ErrorCode.invalid_request,
                "a ShareFetch opening a share session (epoch 0) cannot acknowledge",
            )
        manager.evict_idle(_now_ms(context), config.session_timeout_ms, config.delivery_limit)
        opened = manager.open_session(
            group_id,
            member_id,
            _session_partitions(request),
            config.delivery_limit,
            config.sessions_max,
            context.session,
        )
        if opened is None:
            return refuse(
                ErrorCode.share_session_limit_reached,
                f"{config.sessions_max} share sessions are open on this broker "
                "(group.share.max.share.sessions)",
            )
        session = opened
    else:
        error = manager.session_error(group_id, member_id, epoch)
        if error != ErrorCode.none:
            if error == ErrorCode.invalid_share_session_epoch:
                manager.close_session(group_id, member_id, config.delivery_limit)
            return refuse(error, f"share session of member {member_id}: {error.name}")
        session = manager.sessions[(group_id, member_id)]
        if epoch == FINAL_EPOCH and request.forgotten_topics_data:
            return refuse(
                ErrorCode.invalid_request, "a final ShareFetch (epoch -1) cannot forget partitions"
            )
        if epoch != FINAL_EPOCH:
            session.partitions |= _session_partitions(request)
            session.epoch += 1
    session.last_used_ms = _now_ms(context)
    may_read = TopicAccess(context, AclOperation.READ)
    answers: dict[SessionPartition, _PartitionAnswer] = {}
    located: dict[SessionPartition, Partition] = {}
    for key in list(session.partitions | acks.keys()):
        partition, answer = _locate(context, key[0], key[1], may_read)
        answers[key] = answer
        if partition is not None:
            located[key] = partition
    for key, batches in acks.items():
        partition = located.get(key)
        if partition is None:
            answers[key].ack_error = answers[key].error
            continue
        await _acknowledge(context, group_id, member_id, partition, batches, config, answers[key])
    for t in request.forgotten_topics_data:
        forgotten_id = _topic_id(t.topic_id)
        for index in t.partitions:
            session.partitions.discard((forgotten_id, index))
            answers.pop((forgotten_id, index), None)
            led = manager.partitions.get((group_id, forgotten_id, index))
            if led is not None and led.state.release_member(member_id, config.delivery_limit):
                manager.notify_released()
    if epoch == FINAL_EPOCH:
        manager.close_session(group_id, member_id, config.delivery_limit)
    elif request.max_records > 0:
        targets: list[tuple[Partition, LedSharePartition, _PartitionAnswer]] = []
        # Share-partitions whose state cannot be read yet (a state partition electing its
        # leader): answered without records, as not ready, and tried again while waiting.
        pending = sorted(
            (key for key in session.partitions if key in located),
            key=lambda k: (str(k[0]), k[1]),
        )
        pending = await _load(context, group_id, pending, located, answers, targets, config)
        await _fill_indexes(targets)
        acquired = _fetch_once(context, member_id, targets, request, config)
        max_wait_s = max(duration_ms(request.max_wait) / 1000, 0)
        if acquired == 0 and max_wait_s > 0 and (targets or pending):
            deadline = context.services.clock.now_s() + max_wait_s
            while acquired == 0 and context.services.clock.now_s() < deadline:
                retry_at = context.services.clock.now_s() + STATE_RETRY_S
                wake_at = min(deadline, retry_at) if pending else deadline
                await _wait_for_records(context, targets, wake_at)
                if (group_id, member_id) not in manager.sessions:
                    break
                if pending:
                    pending = await _load(
                        context, group_id, pending, located, answers, targets, config
                    )
                now = _now_ms(context)
                for _partition, led, _answer in targets:
                    if led.state.release_expired(now, config.delivery_limit):
                        manager.notify_released()
                await _fill_indexes(targets)
                acquired = _fetch_once(context, member_id, targets, request, config)
    return _fetch_response(context, entity, module, list(answers.values()), config)


async def _load(
    context: RequestContext,
    group_id: str,
    keys: list[SessionPartition],
    located: dict[SessionPartition, Partition],
    answers: dict[SessionPartition, _PartitionAnswer],
    targets: list[tuple[Partition, LedSharePartition, _PartitionAnswer]],
    config: ShareConfig,
) -> list[SessionPartition]:
    """Load the share-partitions of `keys` into `targets`; the keys still unreadable."""
    still: list[SessionPartition] = []
    for key in keys:
        partition = located[key]
        try:
            led = await share_partition(context, group_id, partition, config)
        except OSError as exc:
            logger.info("share-partition %s of %s not ready: %s", partition.name, group_id, exc)
            still.append(key)
            continue
        targets.append((partition, led, answers[key]))
    return still


async def _fill_indexes(
    targets: list[tuple[Partition, LedSharePartition, _PartitionAnswer]],
) -> None:
    """Indexed topics: index what was appended since their last fetch."""
    for partition, led, _answer in targets:
        if led.index is not None:
            await fill_index(partition, led)


async def _wait_for_records(
    context: RequestContext,
    targets: list[tuple[Partition, LedSharePartition, _PartitionAnswer]],
    deadline: float,
) -> None:
    """Until an append, a release, the next lock expiry, a delayed record becoming due or
    `deadline`, whichever is first."""
    lock_deadlines = [
        d for _p, led, _a in targets if (d := led.state.next_lock_deadline_ms()) is not None
    ]
    clock = context.services.clock
    due = [
        clock.now_s() + max(0, d - clock.wall_ms()) / 1000
        for _p, led, _a in targets
        if led.index is not None and (d := led.index.next_due_ms()) is not None
    ]
    wake_at = min([deadline, *(d / 1000 for d in lock_deadlines), *due])
    released = _manager(context).released
    with trio.move_on_at(wake_at):
        async with trio.open_nursery() as nursery:

            async def appended() -> None:
                await _any_appended([p for p, _led, _a in targets])
                nursery.cancel_scope.cancel()

            async def freed() -> None:
                await released.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(appended)
            nursery.start_soon(freed)
    if not math.isfinite(wake_at):
        await trio.lowlevel.checkpoint()


def _fetch_response(
    context: RequestContext,
    entity: type[R],
    module: ModuleType,
    answers: list[_PartitionAnswer],
    config: ShareConfig,
) -> R | SplicedResponse:
    splices = Splices()
    topics = []
    for topic_id, partitions in _by_topic(answers).items():
        built = []
        for a in partitions:
            stored = a.records
            records = _records(*stored, splices) if isinstance(stored, tuple) else stored
            built.append(
                build(
                    module.PartitionData,
                    partition_index=a.index,
                    error_code=a.error,
                    error_message=a.message,
                    acknowledge_error_code=a.ack_error,
                    acknowledge_error_message=a.ack_message,
                    current_leader=_leader(module, a),
                    records=records,
                    acquired_records=tuple(
                        build(
                            module.AcquiredRecords,
                            first_offset=r.first,
                            last_offset=r.last,
                            delivery_count=r.delivery_count,
                        )
                        for r in a.acquired
                    ),
                )
            )
        topics.append(
            build(module.ShareFetchableTopicResponse, topic_id=topic_id, partitions=tuple(built))
        )
    response = _response(
        entity,
        ErrorCode.none,
        None,
        responses=tuple(topics),
        node_endpoints=_node_endpoints(context, module, answers),
        acquisition_lock_timeout=_lock_timeout(config),
    )
    return SplicedResponse(response, splices) if splices.ranges else response


async def handle_share_acknowledge(
    context: RequestContext, request: ShareAcknowledgeRequest
) -> ShareAcknowledgeResponse:
    entity: type[ShareAcknowledgeResponse] = response_entity(context)
    module = response_module(context)
    config = share_config(context, request.group_id)
    manager = _manager(context)

    def refuse(error: ErrorCode, message: str | None) -> ShareAcknowledgeResponse:
        return _response(entity, error, message)

    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    refused = _group_error(context, group_id, member_id)
    if refused is not None:
        return refuse(*refused)
    assert group_id and member_id, "_group_error refuses a request without them"
    if epoch == INITIAL_EPOCH:
        return refuse(
            ErrorCode.invalid_share_session_epoch,
            "ShareAcknowledge needs an open share session: its epoch cannot be 0",
        )
    error = manager.session_error(group_id, member_id, epoch)
    if error != ErrorCode.none:
        return refuse(error, f"share session of member {member_id}: {error.name}")
    session = manager.sessions[(group_id, member_id)]
    session.last_used_ms = _now_ms(context)
    if epoch != FINAL_EPOCH:
        session.epoch += 1
    may_read = TopicAccess(context, AclOperation.READ)
    answers: list[_PartitionAnswer] = []
    for t in request.topics:
        for p in t.partitions:
            partition, answer = _locate(context, _topic_id(t.topic_id), p.partition_index, may_read)
            answers.append(answer)
            if partition is not None:
                await _acknowledge(
                    context,
                    group_id,
                    member_id,
                    partition,
                    p.acknowledgement_batches,
                    config,
                    answer,
                )
                answer.error = answer.ack_error
                answer.message = answer.ack_message
    if epoch == FINAL_EPOCH:
        manager.close_session(group_id, member_id, config.delivery_limit)
    topics = []
    for topic_id, partitions in _by_topic(answers).items():
        built = tuple(
            build(
                module.PartitionData,
                partition_index=a.index,
                error_code=a.error,
                error_message=a.message,
                current_leader=_leader(module, a),
            )
            for a in partitions
        )
        topics.append(
            build(module.ShareAcknowledgeTopicResponse, topic_id=topic_id, partitions=built)
        )
    return _response(
        entity,
        ErrorCode.none,
        None,
        responses=tuple(topics),
        node_endpoints=_node_endpoints(context, module, answers),
    )
