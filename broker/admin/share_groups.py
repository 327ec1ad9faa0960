"""`raftka groups describe` for a share group: each share-partition's state as last
persisted in `__share_group_state` (read with a plain consumer from the beginning to the
high watermark of each of its partitions), beside the partition's log end offset.

Acquisitions are not persisted, so records acquired since the last acknowledgement count as
available here; every acknowledged or archived record is counted once it is answered.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO, TypeVar, cast

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.share.manager import PersistedState
from raftka.broker.share.partition import RecordState
from raftka.broker.share.state_store import StoredStates, decode_state
from raftka.broker.topics import SHARE_STATE_TOPIC

if TYPE_CHECKING:
    from confluent_kafka import Uuid
    from kio.schema.alter_share_group_offsets.v0.response import AlterShareGroupOffsetsResponse
    from kio.schema.describe_share_group_offsets.v0.response import (
        DescribeShareGroupOffsetsResponseGroup,
    )
    from kio.schema.share_group_describe.v1.response import DescribedGroup

    from raftka.broker.admin.wire import WireCluster, WireConnection

T = TypeVar("T")


def _persisted(target: Target, group_id: str) -> dict[tuple[str, int], PersistedState]:
    """(topic id, partition) -> the group's latest persisted state."""
    states = persisted_states(target, lambda group, _topic_id, _partition: group == group_id)
    return {(topic_id, partition): state for (_g, topic_id, partition), state in states.items()}


def persisted_states(
    target: Target, keep: Callable[[str, str, int], bool]
) -> dict[tuple[str, str, int], PersistedState]:
    """(group, topic id, partition) -> the latest persisted state, of the share-partitions
    `keep(group, topic id, partition)` keeps."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    admin = target.admin()
    metadata = target.metadata(admin)
    topic = metadata.topics.get(SHARE_STATE_TOPIC)
    if topic is None or topic.error is not None:
        return {}
    consumer = Consumer(
        {
            **target.client_config(),
            "group.id": "raftka-cli",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    # Snapshots and their updates, folded once read to the end.
    stored = StoredStates()
    try:
        ends = {}
        for p in topic.partitions:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(SHARE_STATE_TOPIC, p), timeout=target.timeout_s
            )
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(SHARE_STATE_TOPIC, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + target.timeout_s
        done: set[int] = set()
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise AdminError(f"{SHARE_STATE_TOPIC} not read to its end in {target.timeout_s} s")
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            index, offset = message.partition(), message.offset()
            if index is None or offset is None:
                continue
            if offset + 1 >= ends[index]:
                done.add(index)
            key, value = message.key(), message.value()
            if key is None:
                continue
            # A tombstone of a snapshot's key: deleted (DeleteShareGroupOffsets, DeleteGroups).
            stored.apply(key, value)
    finally:
        consumer.close()
    states: dict[tuple[str, str, int], PersistedState] = {}
    for key, state in stored.states.items():
        group, topic_id, partition = json.loads(key)
        found = (str(group), str(topic_id), int(partition))
        if keep(*found):
            states[found] = decode_state(state.folded())
    return states


class _ClientTopicId(Protocol):
    """confluent-kafka's Uuid as it is at run time (its stub leaves these accessors out)."""

    def get_most_significant_bits(self) -> int: ...
    def get_least_significant_bits(self) -> int: ...


def canonical_topic_id(topic_id: Uuid) -> str:
    """A client's topic id (two signed 64-bit halves) as the state keys write it."""
    halves = cast("_ClientTopicId", topic_id)
    high = halves.get_most_significant_bits() & (2**64 - 1)
    low = halves.get_least_significant_bits() & (2**64 - 1)
    return str(uuid.UUID(int=(high << 64) | low))


def describe_share_group(target: Target, group_id: str, http: str | None = None) -> Document | None:
    """The share group's partitions, or None when nothing of the group was persisted."""
    from raftka.broker.admin.offsets import log_end_offsets
    from raftka.broker.admin.topics import topic_descriptions

    states = _persisted(target, group_id)
    if not states:
        return None
    admin = target.admin()
    metadata = target.metadata(admin)
    names = {
        canonical_topic_id(d.topic_id): name
        for name, d in topic_descriptions(target, admin, list(metadata.topics)).items()
    }
    keys = sorted(
        (names[topic_id], partition, state)
        for (topic_id, partition), state in states.items()
        if topic_id in names
    )
    ends = log_end_offsets(target, admin, [(t, p) for t, p, _s in keys])
    rows = []
    for topic, partition, state in keys:
        counts = dict.fromkeys(RecordState, 0)
        for batch in state.batches:
            counts[batch.state] += batch.last - batch.first + 1
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "start_offset": state.start_offset,
                "log_end_offset": ends[(topic, partition)],
                "in_flight_available": counts[RecordState.AVAILABLE],
                "acknowledged": counts[RecordState.ACKNOWLEDGED],
                "archived": counts[RecordState.ARCHIVED],
                "state_epoch": state.state_epoch,
            }
        )
    if http is not None:
        from raftka.broker.admin.queue_live import add_live, live_states

        for topic in sorted({str(r["topic"]) for r in rows}):
            mine = [r for r in rows if r["topic"] == topic]
            add_live(mine, live_states(target, http, topic, group_id))
    return {"group": group_id, "type": "share", "partitions": rows, "live": http is not None}


def print_describe(document: Document, out: TextIO) -> None:
    from raftka.broker.admin.queue_live import LIVE

    live = list(LIVE) if document.get("live") else []
    print(f"Share group {document['group']}", file=out)
    print(file=out)
    print_table(
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "START-OFFSET",
            "LOG-END-OFFSET",
            "IN-FLIGHT",
            "ACKNOWLEDGED",
            "ARCHIVED",
            *(c.upper() for c in live),
        ],
        [
            [
                document["group"],
                r["topic"],
                r["partition"],
                r["start_offset"],
                r["log_end_offset"],
                r["in_flight_available"],
                r["acknowledged"],
                r["archived"],
                *("-" if r[c] is None else r[c] for c in live),
            ]
            for r in document["partitions"]
        ],
        out,
    )


# -- reset-offsets ---------------------------------------------------------------------------

FIND_COORDINATOR, SHARE_GROUP_DESCRIBE = 10, 77
DESCRIBE_SHARE_OFFSETS, ALTER_SHARE_OFFSETS = 90, 91
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
_COORDINATOR_RETRIABLE = {14, 15, 16}
_RETRIES = 30
_RETRY_PAUSE_S = 0.2


def _at_coordinator(
    cluster: WireCluster, group_id: str, send: Callable[[WireConnection], tuple[int, T]]
) -> T:
    """`send(connection)` -> (error code, answer) at the group's coordinator, retried while
    the coordinator loads or moves; the answer once the code is not retriable."""
    code = 15
    cluster.metadata(())  # the brokers' addresses
    for attempt in range(_RETRIES):
        if attempt:
            time.sleep(_RETRY_PAUSE_S)
        found = cluster.any_connection().request(
            FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": (group_id,)}, version=4
        )
        (coordinator,) = found.coordinators
        if coordinator.error_code != 0:
            continue
        code, answer = send(cluster.to_node(coordinator.node_id))
        if code not in _COORDINATOR_RETRIABLE:
            return answer
    raise AdminError(f"the coordinator of group {group_id} did not answer (error {code})")


def share_group_members(target: Target, group_id: str) -> int | None:
    """The number of members of share group `group_id`, None when it is not a live share
    group at its coordinator."""
    from raftka.broker.admin.wire import WireCluster

    def send(conn: WireConnection) -> tuple[int, DescribedGroup]:
        answer = conn.request(
            SHARE_GROUP_DESCRIBE,
            {"group_ids": (group_id,), "include_authorized_operations": False},
            version=1,
        )
        (group,) = answer.groups
        return int(group.error_code), group

    with WireCluster(target) as cluster:
        group = _at_coordinator(cluster, group_id, send)
    if group.error_code != 0:
        return None
    return len(group.members)


def share_start_offsets(
    target: Target, group_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The persisted start offsets of the group's share-partitions among `partitions`."""
    from kio.schema.describe_share_group_offsets.v0.request import (
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )

    from raftka.broker.admin.wire import WireCluster
    from raftka.protocol.api import build

    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = build(
        DescribeShareGroupOffsetsRequestGroup,
        group_id=group_id,
        topics=tuple(
            build(DescribeShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(ps))
            for t, ps in sorted(by_topic.items())
        ),
    )

    def send(conn: WireConnection) -> tuple[int, DescribeShareGroupOffsetsResponseGroup]:
        answer = conn.request(DESCRIBE_SHARE_OFFSETS, {"groups": (request,)}, version=0)
        (group,) = answer.groups
        return int(group.error_code), group

    with WireCluster(target) as cluster:
        group = _at_coordinator(cluster, group_id, send)
    if group.error_code != 0:
        raise AdminError(f"error {group.error_code} describing share group {group_id}")
    return {
        (t.topic_name, p.partition_index): p.start_offset
        for t in group.topics
        for p in t.partitions
        if p.error_code == 0 and p.start_offset >= 0
    }


def alter_share_start_offsets(
    target: Target, group_id: str, planned: dict[tuple[str, int], int]
) -> None:
    """AlterShareGroupOffsets: the share-partitions start at `planned` offsets."""
    from kio.schema.alter_share_group_offsets.v0.request import (
        AlterShareGroupOffsetsRequestPartition,
        AlterShareGroupOffsetsRequestTopic,
    )

    from raftka.broker.admin.wire import WireCluster
    from raftka.protocol.api import build

    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(planned.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    topics = tuple(
        build(
            AlterShareGroupOffsetsRequestTopic,
            topic_name=topic,
            partitions=tuple(
                build(AlterShareGroupOffsetsRequestPartition, partition_index=p, start_offset=o)
                for p, o in entries
            ),
        )
        for topic, entries in by_topic.items()
    )

    def send(conn: WireConnection) -> tuple[int, AlterShareGroupOffsetsResponse]:
        answer = conn.request(
            ALTER_SHARE_OFFSETS, {"group_id": group_id, "topics": topics}, version=0
        )
        response: AlterShareGroupOffsetsResponse = answer
        return int(response.error_code), response

    with WireCluster(target) as cluster:
        answer = _at_coordinator(cluster, group_id, send)
    if answer.error_code != 0:
        raise AdminError(
            f"error {answer.error_code} resetting share group {group_id}: {answer.error_message}"
        )
    failed = [
        f"{t.topic_name}[{p.partition_index}]: error {p.error_code} {p.error_message or ''}"
        for t in answer.responses
        for p in t.partitions
        if p.error_code != 0
    ]
    if failed:
        raise AdminError("start offsets not reset for " + "; ".join(failed))
