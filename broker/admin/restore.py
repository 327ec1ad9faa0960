"""`raftka restore DIR`: recreate a backup's topics in a new cluster with the offsets,
timestamps, headers and producer ids they had, then their groups' committed offsets.

Topics are created with the `raftka.restore.in.progress` flag, under which the broker
appends each batch at its own base offset (the log end must equal it). A re-run continues
an interrupted restore: a flagged topic's log end says where. The flag is cleared last,
after the group offsets, and the result is checked against the backup.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from kio.index import load_request_schema

from raftka.broker.admin.backup import ProgressBar, progress_bar
from raftka.broker.admin.backup_format import (
    RESTORE_FLAG,
    Batch,
    Manifest,
    PartitionPlan,
    contiguous_ranges,
    read_batches,
    restore_stream,
)
from raftka.broker.admin.common import AdminError, Document, Target, print_table, state_name
from raftka.broker.admin.groups import RESETTABLE_STATES, commit_offsets
from raftka.broker.admin.offsets import earliest_spec, latest_spec, list_offsets
from raftka.broker.admin.wire import (
    RETRIES_MAX,
    LeaderClient,
    LeaderUnavailable,
    WireCluster,
    WireConnection,
)
from raftka.protocol.api import build, schema_module

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

PRODUCE_KEY = 0
PRODUCE_VERSION_MAX = 9
LIST_OFFSETS_KEY = 2
LIST_OFFSETS_VERSION_MAX = 7
DELETE_RECORDS_KEY = 21
DELETE_RECORDS_VERSION_MAX = 2
LATEST_TIMESTAMP = -1
# One Produce request carries about this much of one partition.
PRODUCE_BYTES = 1 << 20


@dataclass(frozen=True)
class TopicPlan:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    plans: dict[int, PartitionPlan]


def plan_restore(
    manifest: Manifest, topics: list[str] | None
) -> tuple[list[TopicPlan], dict[str, list[Document]]]:
    """Every topic a run holds and no later run saw deleted (or `topics` of them), as the
    newest run that holds it describes it, with its partition plans; and the newest run's
    group offsets."""
    if not manifest.runs:
        raise AdminError(f"{manifest.root} holds no completed backup run")
    latest = manifest.runs[-1]["run"]
    described: Document = {}
    for run in manifest.runs:
        for doc in manifest.load_run_json(run["run"], "topics.json"):
            described[doc["name"]] = doc
        for name in run.get("deleted_topics", []):
            described.pop(name, None)
    if topics:
        missing = sorted(set(topics) - set(described))
        if missing:
            raise AdminError(
                "not in the backup: "
                + ", ".join(missing)
                + " (it holds: "
                + (", ".join(sorted(described)) or "no topics")
                + ")"
            )
        described = {name: described[name] for name in topics}
    plans = []
    for name in sorted(described):
        doc = described[name]
        ranges = manifest.partition_ranges(name)
        plans.append(
            TopicPlan(
                name,
                int(doc["partitions"]),
                int(doc["replication_factor"]),
                {k: v for k, v in doc["configs"].items() if v is not None},
                {p: contiguous_ranges(r) for p, r in sorted(ranges.items())},
            )
        )
    return plans, manifest.load_run_json(latest, "groups.json")


class RecordsWriter(Protocol):
    """What a restore writes through (a PartitionWriter, or a stand-in in tests)."""

    def log_end(self, topic: str, partition: int) -> int: ...
    def append(self, topic: str, partition: int, batches: list[Batch]) -> None: ...
    def delete_records(self, topic: str, partition: int, offset: int) -> None: ...


class PartitionWriter(LeaderClient):
    """Produce, ListOffsets and DeleteRecords to a partition's leader, following leader
    changes."""

    def log_end(self, topic: str, partition: int) -> int:
        def send(connection: WireConnection) -> tuple[int, str | None, int]:
            version = connection.version_for(LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION_MAX)
            module = schema_module(load_request_schema(LIST_OFFSETS_KEY, version))
            wanted = build(
                module.ListOffsetsPartition,
                partition_index=partition,
                current_leader_epoch=-1,
                timestamp=LATEST_TIMESTAMP,
            )
            response = connection.request(
                LIST_OFFSETS_KEY,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": (build(module.ListOffsetsTopic, name=topic, partitions=(wanted,)),),
                },
                version=version,
            )
            (answer,) = response.topics[0].partitions
            return int(answer.error_code), None, int(answer.offset)

        return int(self.call(topic, partition, "log end of", send))

    def append(self, topic: str, partition: int, batches: list[Batch]) -> None:
        records = b"".join(b.raw for b in batches)

        def send(connection: WireConnection) -> tuple[int, str | None, None]:
            version = connection.version_for(PRODUCE_KEY, PRODUCE_VERSION_MAX)
            module = schema_module(load_request_schema(PRODUCE_KEY, version))
            data = build(module.PartitionProduceData, index=partition, records=records)
            response = connection.request(
                PRODUCE_KEY,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout": timedelta(seconds=self.cluster.target.timeout_s),
                    "topic_data": (
                        build(module.TopicProduceData, name=topic, partition_data=(data,)),
                    ),
                },
                version=version,
            )
            (answer,) = response.responses[0].partition_responses
            return int(answer.error_code), getattr(answer, "error_message", None), None

        self.call(topic, partition, f"restore offsets {batches[0].base_offset}.. of", send)

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        def send(connection: WireConnection) -> tuple[int, str | None, None]:
            version = connection.version_for(DELETE_RECORDS_KEY, DELETE_RECORDS_VERSION_MAX)
            module = schema_module(load_request_schema(DELETE_RECORDS_KEY, version))
            wanted = build(module.DeleteRecordsPartition, partition_index=partition, offset=offset)
            response = connection.request(
                DELETE_RECORDS_KEY,
                {
                    "topics": (build(module.DeleteRecordsTopic, name=topic, partitions=(wanted,)),),
                    "timeout": timedelta(seconds=self.cluster.target.timeout_s),
                },
                version=version,
            )
            (answer,) = response.topics[0].partitions
            return int(answer.error_code), None, None

        self.call(topic, partition, f"delete records before {offset} of", send)


def _batches(manifest: Manifest, plan: PartitionPlan) -> Iterator[Batch]:
    for piece in plan.ranges:
        if piece.file is not None:
            yield from read_batches(manifest.root / piece.file)


def _requests(stream: Iterator[Batch]) -> Iterator[list[Batch]]:
    """Batches grouped into Produce requests of about PRODUCE_BYTES."""
    pending: list[Batch] = []
    size = 0
    for batch in stream:
        if pending and size + len(batch.raw) > PRODUCE_BYTES:
            yield pending
            pending, size = [], 0
        pending.append(batch)
        size += len(batch.raw)
    if pending:
        yield pending


def restore_partition(
    manifest: Manifest,
    writer: RecordsWriter,
    topic: str,
    partition: int,
    plan: PartitionPlan,
    overall: ProgressBar,
) -> None:
    """Appends the plan's batches from where the partition's log ends now, then deletes the
    records before the plan's start. `writer` is a PartitionWriter (or any object with its
    log_end, append and delete_records)."""
    last_failure: AdminError | None = None
    for _ in range(RETRIES_MAX):
        resume_at = writer.log_end(topic, partition)
        stream = restore_stream(_batches(manifest, plan), plan.start, resume_at)
        try:
            for request in _requests(stream):
                writer.append(topic, partition, request)
                overall.update(sum(len(b.raw) for b in request))
            break
        except LeaderUnavailable as exc:
            # A write whose answer was lost may have landed: ask where the log ends now.
            last_failure = exc
    else:
        raise AdminError(f"restore {topic}[{partition}]: {last_failure}")
    if plan.start > 0:
        writer.delete_records(topic, partition, plan.start)


def _existing_restore_flags(
    target: Target, admin: AdminClient, names: list[str]
) -> dict[str, bool]:
    from confluent_kafka.admin import ConfigResource

    if not names:
        return {}
    futures = admin.describe_configs(
        [ConfigResource("topic", n) for n in names], request_timeout=target.timeout_s
    )
    flags = {}
    for resource, future in futures.items():
        entries = target.result(future, f"describe configs of topic {resource.name}")
        entry = entries.get(RESTORE_FLAG)
        flags[resource.name] = entry is not None and str(entry.value).lower() == "true"
    return flags


def _create_topics(
    target: Target, admin: AdminClient, plans: list[TopicPlan], rf: dict[str, int]
) -> None:
    from confluent_kafka.admin import NewTopic

    if not plans:
        return
    new = [
        NewTopic(
            p.name,
            num_partitions=p.partitions,
            replication_factor=rf[p.name],
            config={**p.configs, RESTORE_FLAG: "true"},
        )
        for p in plans
    ]
    futures = admin.create_topics(
        new, request_timeout=target.timeout_s, operation_timeout=target.timeout_s
    )
    for p in plans:
        target.result(futures[p.name], f"create topic {p.name}")


def _wait_for_leaders(writer: PartitionWriter, plans: list[TopicPlan], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    wanted = {(p.name, i) for p in plans for i in range(p.partitions)}
    while True:
        writer.refresh([p.name for p in plans])
        missing = sorted(k for k in wanted if writer.leaders.get(k, -1) < 0)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AdminError("no leader for " + ", ".join(f"{t}[{p}]" for t, p in missing[:10]))
        time.sleep(0.2)


def _restore_groups(
    target: Target, admin: AdminClient, groups: dict[str, list[Document]], topics: set[str]
) -> int:
    from confluent_kafka import TopicPartition

    restored = 0
    for group, offsets in sorted(groups.items()):
        chosen = [o for o in offsets if o["topic"] in topics]
        if not chosen:
            continue
        futures = admin.describe_consumer_groups([group], request_timeout=target.timeout_s)
        description = target.result(futures[group], f"describe group {group}")
        state = state_name(description.state)
        if state not in RESETTABLE_STATES:
            raise AdminError(
                f"group {group} is {state} in the target cluster with "
                f"{len(description.members)} member(s); its offsets can only be restored "
                "while nobody consumes in it: stop its consumers and run the restore again"
            )
        commit_offsets(
            target,
            admin,
            group,
            [
                TopicPartition(o["topic"], o["partition"], o["offset"], o.get("metadata") or "")
                for o in chosen
            ],
            "restore offsets of",
        )
        restored += 1
    return restored


def _clear_flag(target: Target, admin: AdminClient, names: list[str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    for name in names:
        entry = ConfigEntry(RESTORE_FLAG, None, incremental_operation=AlterConfigOpType.DELETE)
        resource = ConfigResource("topic", name, incremental_configs=[entry])
        futures = admin.incremental_alter_configs([resource], request_timeout=target.timeout_s)
        target.result(futures[resource], f"clear {RESTORE_FLAG} of topic {name}")


def run_restore(
    target: Target, root: Path, topics: list[str] | None, replication_factor: int | None
) -> Document:
    """Restores the backup in `root` into the cluster at `target`; the summary document."""
    manifest = Manifest.load(root)
    plans, groups = plan_restore(manifest, topics)
    admin = target.admin()
    metadata = target.metadata(admin)
    brokers = len(metadata.brokers)
    existing = [p.name for p in plans if p.name in metadata.topics]
    flags = _existing_restore_flags(target, admin, existing)
    not_restoring = sorted(n for n, flagged in flags.items() if not flagged)
    if not_restoring:
        raise AdminError(
            "topic(s) already exist in the target cluster and are not being restored: "
            + ", ".join(not_restoring)
            + "; restore into a new cluster, delete them (raftka topics delete), or leave "
            "them out with --topics"
        )
    notes: list[str] = []
    rf: dict[str, int] = {}
    for plan in plans:
        if replication_factor is not None:
            rf[plan.name] = replication_factor
        else:
            rf[plan.name] = max(1, min(plan.replication_factor, brokers))
            if rf[plan.name] < plan.replication_factor:
                notes.append(
                    f"topic {plan.name}: replication factor {plan.replication_factor} lowered "
                    f"to {rf[plan.name]} (the target cluster has {brokers} broker(s))"
                )
    for plan in plans:
        for p, partition_plan in plan.plans.items():
            if partition_plan.dropped_gap:
                a, b = partition_plan.dropped_gap
                notes.append(
                    f"{plan.name}[{p}]: the backup lacks offsets {a}..{b - 1} (retention); "
                    f"restored from {partition_plan.start}"
                )
    for note in notes:
        print(f"raftka restore: note: {note}", file=sys.stderr)
    _create_topics(target, admin, [p for p in plans if p.name not in flags], rf)

    total = sum(r.bytes for plan in plans for pp in plan.plans.values() for r in pp.ranges)
    with WireCluster(target) as cluster, progress_bar(desc="restore", total=total) as overall:
        writer = PartitionWriter(cluster)
        _wait_for_leaders(writer, plans, target.timeout_s * 4)
        for plan in plans:
            for p, partition_plan in plan.plans.items():
                restore_partition(manifest, writer, plan.name, p, partition_plan, overall)

    restored_groups = _restore_groups(target, admin, groups, {p.name for p in plans})
    _clear_flag(target, admin, [p.name for p in plans])

    keys = [(plan.name, p) for plan in plans for p in plan.plans]
    earliest = list_offsets(target, admin, keys, earliest_spec())
    latest = list_offsets(target, admin, keys, latest_spec())
    rows = []
    mismatches = []
    for plan in plans:
        for p, pp in plan.plans.items():
            got = (earliest[(plan.name, p)], latest[(plan.name, p)])
            if got != (pp.start, pp.end):
                mismatches.append(
                    f"{plan.name}[{p}]: log runs {got[0]}..{got[1]}, backup {pp.start}..{pp.end}"
                )
            rows.append({"topic": plan.name, "partition": p, "from": pp.start, "to": pp.end})
    if mismatches:
        raise AdminError("restored logs differ from the backup: " + "; ".join(mismatches))
    return {
        "directory": str(root),
        "run": manifest.runs[-1]["run"],
        "topics": [p.name for p in plans],
        "groups": restored_groups,
        "bytes": total,
        "partitions": rows,
        "notes": notes,
    }


def print_summary(document: Document, out: TextIO) -> None:
    print(
        f"Restored {len(document['topics'])} topics and {document['groups']} groups from "
        f"{document['directory']} (up to run {document['run']}).",
        file=out,
    )
    print_table(
        ["TOPIC", "PARTITION", "FROM", "TO"],
        [[r["topic"], r["partition"], r["from"], r["to"]] for r in document["partitions"]],
        out,
    )
