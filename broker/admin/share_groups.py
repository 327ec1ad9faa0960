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
from typing import Any, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.share.manager import PersistedState
from raftka.broker.share.partition import RecordState
from raftka.broker.share.state_store import decode_state
from raftka.broker.topics import SHARE_STATE_TOPIC


def _persisted(target: Target, group_id: str) -> dict[tuple[str, int], PersistedState]:
    """(topic id, partition) -> the group's latest persisted state."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    admin = target.admin()
    metadata = target.metadata(admin, SHARE_STATE_TOPIC)
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
    states: dict[tuple[str, int], PersistedState] = {}
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
            if key is None or value is None:
                continue
            group, topic_id, partition = json.loads(key)
            if group == group_id:
                states[(str(topic_id), int(partition))] = decode_state(value)
    finally:
        consumer.close()
    return states


def _canonical(topic_id: Any) -> str:
    """A client's topic id (two signed 64-bit halves) as the state keys write it."""
    high = topic_id.get_most_significant_bits() & (2**64 - 1)
    low = topic_id.get_least_significant_bits() & (2**64 - 1)
    return str(uuid.UUID(int=(high << 64) | low))


def describe_share_group(target: Target, group_id: str) -> Document | None:
    """The share group's partitions, or None when nothing of the group was persisted."""
    from raftka.broker.admin.groups import _log_end_offsets
    from raftka.broker.admin.topics import topic_descriptions

    states = _persisted(target, group_id)
    if not states:
        return None
    admin = target.admin()
    metadata = target.metadata(admin)
    names = {
        _canonical(d.topic_id): name
        for name, d in topic_descriptions(target, admin, list(metadata.topics)).items()
    }
    keys = sorted(
        (names[topic_id], partition, state)
        for (topic_id, partition), state in states.items()
        if topic_id in names
    )
    ends = _log_end_offsets(target, admin, [(t, p) for t, p, _s in keys])
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
    return {"group": group_id, "type": "share", "partitions": rows}


def print_describe(document: Document, out: TextIO) -> None:
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
            ]
            for r in document["partitions"]
        ],
        out,
    )
