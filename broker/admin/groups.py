"""`raftka groups list|describe|delete|reset-offsets`: consumer groups seen through the Kafka
protocol, printing what kafka-consumer-groups.sh prints.

AdminClient for groups and committed offsets, ListOffsets for log-start and log-end offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table, state_name
from raftka.broker.admin.offsets import earliest_spec, latest_spec, list_offsets, log_end_offsets

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, MemberDescription

# Kafka resets offsets only for a group nobody consumes in (the tool checks the same states).
RESETTABLE_STATES = ("EMPTY", "DEAD")


def list_groups(target: Target) -> Document:
    admin = target.admin()  # kept referenced: a collected client cancels its requests
    target.metadata(admin)
    result = target.result(
        admin.list_consumer_groups(request_timeout=target.timeout_s), "list groups"
    )
    groups = sorted(
        (g.group_id, state_name(g.state), _group_type(getattr(g, "type", None)))
        for g in result.valid
    )
    return {
        "groups": [{"group": g, "state": s, "type": t} for g, s, t in groups],
        "errors": [str(e) for e in result.errors],
    }


def _group_type(group_type: object) -> str | None:
    """`consumer` (KIP-848) or `classic`; None when the client does not say."""
    name = state_name(group_type).lower() if group_type is not None else "unknown"
    return None if name == "unknown" else name


def print_list(document: Document, out: TextIO) -> None:
    print_table(
        ["GROUP", "TYPE", "STATE"],
        [[g["group"], g["type"], g["state"]] for g in document["groups"]],
        out,
    )


def _describe(target: Target, admin: AdminClient, group_id: str) -> ConsumerGroupDescription:
    futures = admin.describe_consumer_groups([group_id], request_timeout=target.timeout_s)
    description: ConsumerGroupDescription = target.result(
        futures[group_id], f"describe group {group_id}"
    )
    return description


def _committed(target: Target, admin: AdminClient, group_id: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group_id)], request_timeout=target.timeout_s
    )
    listed = target.result(futures[group_id], f"committed offsets of group {group_id}")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in listed.topic_partitions or []
        if tp.offset >= 0
    }


def commit_offsets(
    target: Target, admin: AdminClient, group_id: str, offsets: list[TopicPartition], what: str
) -> None:
    """Commit `offsets` (TopicPartitions) for a group with no active members; AdminError
    naming every partition the broker refused."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(group_id, offsets)
    futures = admin.alter_consumer_group_offsets([request], request_timeout=target.timeout_s)
    altered = target.result(futures[group_id], f"{what} group {group_id}")
    errors = [
        f"{tp.topic}[{tp.partition}]: {tp.error}"
        for tp in altered.topic_partitions
        if tp.error is not None
    ]
    if errors:
        raise AdminError(f"{what} group {group_id}: " + "; ".join(errors))


def describe_group(target: Target, group_id: str, http: str | None = None) -> Document:
    admin = target.admin()
    target.metadata(admin)
    description = _describe(target, admin, group_id)
    committed = _committed(target, admin, group_id)
    state = state_name(description.state)
    if state == "DEAD" and not committed:
        from raftka.broker.admin.share_groups import describe_share_group

        shared = describe_share_group(target, group_id, http)
        if shared is not None:
            return shared
        raise AdminError(f"GROUP_ID_NOT_FOUND: consumer group '{group_id}' does not exist")
    owner: dict[tuple[str, int], MemberDescription] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions if member.assignment else []:
            owner[(tp.topic, tp.partition)] = member
    partitions = sorted(set(owner) | set(committed))
    ends = log_end_offsets(target, admin, partitions)
    rows = []
    for key in partitions:
        offset = committed.get(key)
        owned_by = owner.get(key)
        rows.append(
            {
                "topic": key[0],
                "partition": key[1],
                "current_offset": offset,
                "log_end_offset": ends[key],
                "lag": None if offset is None else max(ends[key] - offset, 0),
                "consumer_id": owned_by.member_id if owned_by else None,
                "host": owned_by.host if owned_by else None,
                "client_id": owned_by.client_id if owned_by else None,
            }
        )
    coordinator = description.coordinator
    return {
        "group": group_id,
        "type": _group_type(getattr(description, "type", None)),
        "state": state,
        "assignor": description.partition_assignor or None,
        "coordinator": {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port},
        "partitions": rows,
        "members": [
            {
                "consumer_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "host": m.host,
                "client_id": m.client_id,
                "assignment": [
                    {"topic": tp.topic, "partition": tp.partition}
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                ],
            }
            for m in description.members
        ],
    }


def print_describe(document: Document, out: TextIO) -> None:
    if document.get("type") == "share":
        from raftka.broker.admin.share_groups import print_describe as print_share

        print_share(document, out)
        return
    group_id = document["group"]
    coordinator = document["coordinator"]
    print(
        f"Group {group_id}: type {document['type'] or '-'}, state {document['state']}, "
        f"assignor {document['assignor'] or '-'}, "
        f"{len(document['members'])} members, coordinator "
        f"{coordinator['host']}:{coordinator['port']} (id {coordinator['id']})",
        file=out,
    )
    print(file=out)
    print_table(
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
        [
            [
                group_id,
                r["topic"],
                r["partition"],
                r["current_offset"],
                r["log_end_offset"],
                r["lag"],
                r["consumer_id"],
                r["host"],
                r["client_id"],
            ]
            for r in document["partitions"]
        ],
        out,
    )
    if document["members"]:
        print(file=out)
        print_table(
            ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [
                [
                    m["consumer_id"],
                    m["group_instance_id"],
                    m["host"],
                    m["client_id"],
                    len(m["assignment"]),
                    _assignment_text(m["assignment"]),
                ]
                for m in document["members"]
            ],
            out,
        )


def _assignment_text(assignment: Sequence[Document]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp["topic"], []).append(tp["partition"])
    return (
        ", ".join(f"{t}({','.join(map(str, sorted(p)))})" for t, p in sorted(by_topic.items()))
        or "-"
    )


def delete_groups(target: Target, group_ids: Sequence[str]) -> Document:
    admin = target.admin()
    target.metadata(admin)
    futures = admin.delete_consumer_groups(list(group_ids), request_timeout=target.timeout_s)
    return target.deleted(futures, group_ids, "group", "DELETE")


def print_deleted(document: Document, out: TextIO) -> None:
    for group_id in document["deleted"]:
        print(f"Deleted consumer group '{group_id}'.", file=out)


@dataclass(frozen=True)
class ResetSpec:
    """Exactly one of Kafka's reset scenarios."""

    to_earliest: bool = False
    to_latest: bool = False
    to_datetime: datetime | None = None
    shift_by: int | None = None

    def describe(self) -> str:
        if self.to_earliest:
            return "to-earliest"
        if self.to_latest:
            return "to-latest"
        if self.to_datetime is not None:
            return f"to-datetime {self.to_datetime.isoformat()}"
        return f"shift-by {self.shift_by}"


def _planned_offsets(
    target: Target,
    admin: AdminClient,
    partitions: Sequence[tuple[str, int]],
    committed: dict[tuple[str, int], int],
    spec: ResetSpec,
) -> dict[tuple[str, int], int]:
    from confluent_kafka.admin import OffsetSpec

    earliest = list_offsets(target, admin, partitions, earliest_spec())
    latest = list_offsets(target, admin, partitions, latest_spec())
    if spec.to_earliest:
        return earliest
    if spec.to_latest:
        return latest
    if spec.to_datetime is not None:
        timestamp_ms = int(spec.to_datetime.timestamp() * 1000)
        found = list_offsets(target, admin, partitions, OffsetSpec.for_timestamp(timestamp_ms))
        # As Kafka's tool: no record at or after the time means the log end.
        return {key: latest[key] if found[key] < 0 else found[key] for key in partitions}
    shift_by = spec.shift_by
    if shift_by is None:
        raise AdminError("give one of --to-earliest, --to-latest, --to-datetime or --shift-by")
    missing = [f"{t}[{p}]" for t, p in partitions if (t, p) not in committed]
    if missing:
        raise AdminError(
            "--shift-by needs a committed offset to shift; none for " + ", ".join(missing)
        )
    # Kafka's tool clamps a shifted offset into the log's current range.
    return {
        key: min(max(committed[key] + shift_by, earliest[key]), latest[key]) for key in partitions
    }


def reset_offsets(
    target: Target,
    group_id: str,
    topics: Sequence[tuple[str, Sequence[int]]],
    spec: ResetSpec,
    execute: bool,
) -> Document:
    """Plans (and with `execute` commits) new offsets for the partitions of `topics`, each
    (name, partitions) with no partitions meaning all of the topic's."""
    from confluent_kafka import TopicPartition

    admin = target.admin()
    metadata = target.metadata(admin)
    missing = sorted({t for t, _ in topics if t not in metadata.topics})
    if missing:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION: no such topic: " + ", ".join(missing))
    chosen: set[tuple[str, int]] = set()
    for topic, wanted in topics:
        existing = set(metadata.topics[topic].partitions)
        absent = sorted(set(wanted) - existing)
        if absent:
            raise AdminError(
                f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic} has no partition "
                + ", ".join(map(str, absent))
            )
        chosen |= {(topic, p) for p in (wanted or existing)}
    partitions = sorted(chosen)
    description = _describe(target, admin, group_id)
    state = state_name(description.state)
    if state == "DEAD":
        from raftka.broker.admin import share_groups

        members = share_groups.share_group_members(target, group_id)
        if members is not None:
            return _reset_share_offsets(target, admin, group_id, partitions, spec, execute, members)
    if execute and state not in RESETTABLE_STATES:
        raise AdminError(
            f"assignments can only be reset if the group '{group_id}' is inactive (no members), "
            f"but the current state is {state} with {len(description.members)} member(s); "
            "stop its consumers first"
        )
    committed = _committed(target, admin, group_id)
    planned = _planned_offsets(target, admin, partitions, committed, spec)
    if execute:
        commit_offsets(
            target,
            admin,
            group_id,
            [TopicPartition(t, p, planned[(t, p)]) for t, p in partitions],
            "reset offsets of",
        )
    return _reset_document(group_id, spec, execute, partitions, committed, planned)


def _reset_share_offsets(
    target: Target,
    admin: AdminClient,
    group_id: str,
    partitions: list[tuple[str, int]],
    spec: ResetSpec,
    execute: bool,
    members: int,
) -> Document:
    """reset-offsets for a share group: its share-partitions' start offsets, moved with
    AlterShareGroupOffsets (the group must have no members)."""
    from raftka.broker.admin import share_groups

    if execute and members:
        raise AdminError(
            f"share group '{group_id}' has {members} member(s): its start offsets can only be "
            "reset while it has none; stop its consumers first"
        )
    current = share_groups.share_start_offsets(target, group_id, partitions)
    planned = _planned_offsets(target, admin, partitions, current, spec)
    if execute:
        share_groups.alter_share_start_offsets(target, group_id, planned)
    return _reset_document(group_id, spec, execute, partitions, current, planned)


def _reset_document(
    group_id: str,
    spec: ResetSpec,
    execute: bool,
    partitions: list[tuple[str, int]],
    current: dict[tuple[str, int], int],
    planned: dict[tuple[str, int], int],
) -> Document:
    """What reset-offsets did (or would do): each partition's current and new offset."""
    return {
        "group": group_id,
        "scenario": spec.describe(),
        "executed": execute,
        "partitions": [
            {
                "topic": t,
                "partition": p,
                "current_offset": current.get((t, p)),
                "new_offset": planned[(t, p)],
            }
            for t, p in partitions
        ],
    }


def print_reset(document: Document, out: TextIO) -> None:
    print_table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [
            [document["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"]]
            for r in document["partitions"]
        ],
        out,
    )
