"""What the queue API changes in a share group's state of single records, at the leader of
their partition, without touching the log: a queued record's priority, a queued record
cancelled, and a release that makes the record wait before it is available again.

Each is kept in the share-partition's persisted state (`__share_group_state`, replicated
as its acknowledgements are), so it holds after a restart or a leader change: a priority
in `priorities`, a cancellation as the ARCHIVED state a rejected record takes, a delay in
`delays`. The caller needs READ on the group and the topic, as to acknowledge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import trio

from raftka.broker.handlers.metadata import partition_leader
from raftka.broker.handlers.share import share_config, share_partition
from raftka.broker.handlers.share_order import fill_index, indexed_order, record_values
from raftka.broker.queues.problems import Problem
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.share.delivery_index import IndexedOrder, parse_long
from raftka.broker.share.partition import RecordState
from raftka.broker.share.queue_view import queue_view
from raftka.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from raftka.broker.console.calls import Caller
    from raftka.broker.services import RequestContext
    from raftka.broker.share.manager import LedSharePartition
    from raftka.broker.topics import Partition

#: The API whose ACLs a change needs (READ on the group and the topic).
_AS = ApiKey.SHARE_ACKNOWLEDGE
#: A share-partition's state that cannot be read yet is asked this many times, this far apart.
STATE_TRIES = 8
STATE_RETRY_S = 0.25


@dataclass(frozen=True, slots=True)
class Changed:
    """A record's state after a change."""

    partition: int
    offset: int
    state: str
    priority: int | None = None


def read_context(caller: Caller, group: str, topic: str) -> RequestContext[Any, Any]:
    context = caller.context(_AS, 1)
    for resource, name in ((ResourceType.GROUP, group), (ResourceType.TOPIC, topic)):
        if not context.authorize(AclOperation.READ, resource, name):
            raise Problem(
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"READ on {resource.name.lower()} {name} is not allowed to this user",
            )
    return context


def _led(caller: Caller, topic: str, index: int) -> Partition:
    """The partition when this broker leads it; Problem otherwise."""
    partition = caller.services.topics.partition(topic, index)
    if partition is None:
        raise Problem(
            HTTPStatus.NOT_FOUND, "unknown-partition", f"queue {topic} has no partition {index}"
        )
    if not partition.is_leader or partition.log is None:
        leader, _ = partition_leader(caller.services.controller, partition)
        raise Problem(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "not-leader",
            f"broker {leader} leads {partition.name}, not this one",
        )
    return partition


async def _loaded(
    context: RequestContext[Any, Any], group: str, partition: Partition
) -> LedSharePartition:
    """The group's share-partition, its index filled; a state partition still electing its
    leader (the state topic's first use, a failover) is waited for a little."""
    config = share_config(context, group)
    for attempt in range(STATE_TRIES):
        try:
            led = await share_partition(context, group, partition, config)
            await fill_index(partition, led)
            return led
        except OSError as exc:
            if attempt + 1 == STATE_TRIES:
                raise Problem(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "unavailable",
                    f"the share group's state of {partition.name} cannot be read now: {exc}",
                ) from None
        await trio.sleep(STATE_RETRY_S)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def change_record(
    caller: Caller,
    group: str,
    topic: str,
    index: int,
    offset: int,
    *,
    priority: int | None = None,
    cancel: bool = False,
) -> Changed:
    """Give a queued record of `group` a new `priority`, or `cancel` it; Problem (and
    nothing changed) for an unknown record (404), one already acknowledged, archived or
    cancelled (409), one in flight when cancelling (409), or a priority on a queue that is
    not a priority queue (409)."""
    context = read_context(caller, group, topic)
    partition = _led(caller, topic, index)
    order = indexed_order(partition)
    if priority is not None and (order is None or not order.by_priority):
        raise Problem(
            HTTPStatus.CONFLICT,
            "not-a-priority-queue",
            f"queue {topic} hands out its messages in "
            f"{partition.topic.config.get_str('share.delivery.order')} order: a priority "
            "counts on a priority queue only",
        )
    led = await _loaded(context, group, partition)
    state = led.state
    # From here to the change, no await: no fetch acquires the record meanwhile.
    values = record_values(partition, offset, order or IndexedOrder(False))
    if values is None:
        raise Problem(
            HTTPStatus.NOT_FOUND,
            "unknown-message",
            f"{partition.name} holds no message at offset {offset} (past its end, deleted, "
            "or a transaction marker)",
        )
    found = state.state_of(offset)
    if found in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
        raise Problem(
            HTTPStatus.CONFLICT,
            "message-done",
            f"message {offset} of {partition.name} is already acknowledged, rejected or "
            f"cancelled in share group {group}",
        )
    if cancel:
        if found == RecordState.ACQUIRED:
            raise Problem(
                HTTPStatus.CONFLICT,
                "message-in-flight",
                f"message {offset} of {partition.name} is locked by a consumer of share group "
                f"{group}: settle it (ack, nack or reject) or wait for its lock to expire",
            )
        state.cancel(offset)
        shown = Changed(index, offset, "cancelled")
    else:
        assert priority is not None and led.index is not None, "a priority queue is indexed"
        state.set_priority(offset, priority)
        due = [parse_long(values[1]), state.delays.get(offset)]
        deliver_at = max((d for d in due if d is not None), default=None)
        led.index.override(offset, priority, deliver_at, caller.services.clock.wall_ms())
        shown = Changed(
            index, offset, "in-flight" if found == RecordState.ACQUIRED else "queued", priority
        )
    try:
        await context.services.groups.share_partitions.persist(led)
    except OSError as exc:
        raise Problem(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "unavailable",
            f"the change could not be persisted (nothing changed): {exc}",
        ) from None
    return shown


def indexed(caller: Caller, topic: str) -> bool:
    """Whether the queue honours delays (a priority or fair queue, or a fifo one with
    `share.delivery.delay.enable`): a release with a delay needs it."""
    found = caller.services.topics.get(topic)
    return (
        found is not None
        and bool(found.partitions)
        and indexed_order(found.partitions[0]) is not None
    )


def delay_releases(
    caller: Caller,
    group: str,
    member_id: str,
    topic: str,
    offsets: Sequence[tuple[int, int]],
    due_ms: int,
) -> list[tuple[int, int]]:
    """Before `member_id` releases (partition, offset) pairs: each it holds will not be
    acquirable again before `due_ms`; the pairs so marked (those it no longer holds are
    left to the release to refuse)."""
    manager = caller.services.groups.share_partitions
    found = caller.services.topics.get(topic)
    if found is None:
        return []
    marked = []
    for index, offset in offsets:
        led = manager.partitions.get((group, found.topic_id, index))
        if led is None or led.index is None:
            continue
        if led.state.delay_release(member_id, offset, due_ms):
            marked.append((index, offset))
    return marked


def undo_delays(caller: Caller, group: str, topic: str, offsets: Sequence[tuple[int, int]]) -> None:
    """The marks of `delay_releases` whose release was refused (the record is not released
    by this member: a later release of it owes nothing to this one)."""
    manager = caller.services.groups.share_partitions
    found = caller.services.topics.get(topic)
    if found is None:
        return
    for index, offset in offsets:
        led = manager.partitions.get((group, found.topic_id, index))
        if led is not None:
            led.state.undo_delay(offset)


def changed_priorities(
    caller: Caller, group: str, topic: str, records: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], int]:
    """(partition, offset) -> priority of those of `records` whose priority `group`
    changed (as this broker, their leader, keeps them)."""
    manager = caller.services.groups.share_partitions
    found = caller.services.topics.get(topic)
    changed: dict[tuple[int, int], int] = {}
    if found is None:
        return changed
    for index, offset in records:
        led = manager.partitions.get((group, found.topic_id, index))
        if led is not None and offset in led.state.priorities:
            changed[(index, offset)] = led.state.priorities[offset]
    return changed


async def queue_state(
    caller: Caller, group: str, topic: str, indexes: Iterable[int]
) -> list[dict[str, Any]]:
    """Per partition of `topic` among `indexes`: its `queue_view` in `group` when this
    broker leads it and the group has state there (`state: "none"` when it has not), else
    only its leader (`led_here` false). Needs DESCRIBE on the group and the topic, as
    DescribeShareGroupOffsets."""
    context = caller.context(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    for resource, name in ((ResourceType.GROUP, group), (ResourceType.TOPIC, topic)):
        if not context.authorize(AclOperation.DESCRIBE, resource, name):
            raise Problem(
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"DESCRIBE on {resource.name.lower()} {name} is not allowed to this user",
            )
    services = caller.services
    here = services.identity.node_id
    manager = services.groups.share_partitions
    found: list[dict[str, Any]] = []
    for index in indexes:
        partition = services.topics.partition(topic, index)
        if partition is None:
            continue
        if not partition.is_leader or partition.log is None:
            leader, _ = partition_leader(services.controller, partition)
            found.append({"partition": index, "leader": leader, "led_here": False})
            continue
        shown: dict[str, Any] = {"partition": index, "leader": here, "led_here": True}
        key = (group, partition.topic.topic_id, index)
        # A group that never read the partition gets no state from being described.
        if key not in manager.partitions and await manager.store.read(key) is None:
            found.append(shown | {"state": "none"})
            continue
        led = await _loaded(context, group, partition)
        view = queue_view(led.state, led.index, partition.high_watermark, services.clock.wall_ms())
        found.append(shown | {"state": "led", **view.as_json()})
    return found


# -- the steps another broker's queue API takes here, at the partitions' leader --------


def _records(given: Any) -> list[tuple[int, int]]:  # Any: another broker's JSON
    return [(int(p), int(o)) for p, o in given]


async def _change_op(caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    """A priority changed or a message cancelled here, at its partition's leader."""
    changed = await change_record(
        caller,
        str(args["group"]),
        str(args["topic"]),
        int(args["partition"]),
        int(args["offset"]),
        priority=args["priority"],
        cancel=bool(args["cancel"]),
    )
    return dataclasses.asdict(changed)


async def _delay_op(caller: Caller, args: dict[str, Any]) -> list[tuple[int, int]]:
    group, topic = str(args["group"]), str(args["topic"])
    read_context(caller, group, topic)
    return delay_releases(
        caller, group, str(args["member_id"]), topic, _records(args["records"]), int(args["due"])
    )


async def _undo_op(caller: Caller, args: dict[str, Any]) -> None:
    group, topic = str(args["group"]), str(args["topic"])
    read_context(caller, group, topic)
    undo_delays(caller, group, topic, _records(args["records"]))


async def _priorities_op(caller: Caller, args: dict[str, Any]) -> list[tuple[int, int, int]]:
    group, topic = str(args["group"]), str(args["topic"])
    read_context(caller, group, topic)
    found = changed_priorities(caller, group, topic, _records(args["records"]))
    return [(p, o, priority) for (p, o), priority in sorted(found.items())]


async def _state_op(caller: Caller, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The group's view of the partitions another broker was asked for and this one leads."""
    partitions = [int(p) for p in args["partitions"]]
    return await queue_state(caller, str(args["group"]), str(args["topic"]), partitions)


#: Op name -> the step (see `raftka.broker.queues.remote.QueueOps`).
LEADER_OPS: dict[str, Callable[[Caller, dict[str, Any]], Awaitable[Any]]] = {
    "change": _change_op,
    "delay": _delay_op,
    "undo": _undo_op,
    "priorities": _priorities_op,
    "state": _state_op,
}
