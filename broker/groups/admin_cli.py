"""`raftka groups list|describe`: consumer groups seen through the Kafka protocol.

A client of any Kafka-compatible broker (AdminClient for groups and committed offsets, a
Consumer for log-end offsets), printing what kafka-consumer-groups.sh prints.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

TIMEOUT_S = 15.0


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def list_groups(bootstrap: str, out: TextIO = sys.stdout) -> int:
    admin = _admin(bootstrap)  # kept referenced: a collected client cancels its requests
    result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    rows = sorted((g.group_id, str(getattr(g.state, "name", g.state))) for g in result.valid)
    _table(["GROUP", "STATE"], [list(r) for r in rows], out)
    for error in result.errors:
        print(f"error: {error}", file=sys.stderr)
    return 0


def describe_group(bootstrap: str, group_id: str, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    admin = _admin(bootstrap)
    description = admin.describe_consumer_groups([group_id], request_timeout=TIMEOUT_S)[
        group_id
    ].result()
    committed = (
        admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=TIMEOUT_S
        )[group_id]
        .result()
        .topic_partitions
    )
    state = str(getattr(description.state, "name", description.state))
    owner: dict[tuple[str, int], Any] = {}
    for member in description.members:
        assignment = member.assignment.topic_partitions if member.assignment else []
        for tp in assignment:
            owner[(tp.topic, tp.partition)] = member
    offsets = {(tp.topic, tp.partition): tp.offset for tp in committed or []}
    partitions = sorted(set(owner) | set(offsets))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group_id}-describe"})
    try:
        rows = []
        for topic, partition in partitions:
            _, end = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=TIMEOUT_S
            )
            offset = offsets.get((topic, partition))
            current = "-" if offset is None or offset < 0 else str(offset)
            lag = "-" if current == "-" else str(max(end - offset, 0))  # type: ignore[operator]
            member = owner.get((topic, partition))
            rows.append(
                [
                    group_id,
                    topic,
                    str(partition),
                    current,
                    str(end),
                    lag,
                    member.member_id if member else "-",
                    member.host if member else "-",
                    member.client_id if member else "-",
                ]
            )
    finally:
        consumer.close()

    coordinator = description.coordinator
    print(
        f"Group {group_id}: state {state}, assignor {description.partition_assignor or '-'}, "
        f"{len(description.members)} members, coordinator "
        f"{coordinator.host}:{coordinator.port} (id {coordinator.id})",
        file=out,
    )
    print(file=out)
    _table(
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        rows,
        out,
    )
    if description.members:
        print(file=out)
        _table(
            ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [
                [
                    m.member_id,
                    m.group_instance_id or "-",
                    m.host,
                    m.client_id,
                    str(len(m.assignment.topic_partitions) if m.assignment else 0),
                    _assignment_text(m),
                ]
                for m in description.members
            ],
            out,
        )
    return 0


def _assignment_text(member: Any) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in member.assignment.topic_partitions if member.assignment else []:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return (
        ", ".join(f"{t}({','.join(map(str, sorted(p)))})" for t, p in sorted(by_topic.items()))
        or "-"
    )


def _table(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip(), file=out)
