"""`raftka backup DIR`: copy topics, committed group offsets and topic metadata out of a
running cluster, the first time in full, then incrementally (only offsets written since).

The directory layout and manifest are described in `backup_format`. Consistency without
stopping the cluster: committed group offsets are snapshotted first, then every partition
is copied from where the previous run ended up to its high watermark as read after that
snapshot, so every committed offset points at or below data the backup holds. Each
partition is a point-in-time copy of its own; partitions are not copied at one instant.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from kio.index import load_request_schema

from raftka.broker.admin.backup_format import (
    INTERNAL_TOPICS,
    RESTORE_FLAG,
    Manifest,
    Range,
    next_range_start,
    split_batches,
    write_atomically,
)
from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.offsets import earliest_spec, latest_spec, list_offsets
from raftka.broker.admin.topics import non_default_configs, topic_descriptions
from raftka.broker.admin.wire import (
    RETRIES_MAX,
    RETRY_PAUSE_S,
    Fields,
    LeaderClient,
    WireCluster,
    WireConnection,
)
from raftka.log import fsync_directory
from raftka.protocol.api import build, schema_module

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

FETCH_KEY = 1
FETCH_VERSION_MAX = 12
# One Fetch brings at most this much of one partition; a batch larger than that comes whole
# anyway (Kafka returns the first batch even when it exceeds the limit).
FETCH_PARTITION_BYTES = 4 << 20
# Errors after which the leader may have moved: refresh metadata and try again.


class ProgressBar(Protocol):
    """What the commands use of a tqdm bar."""

    def update(self, n: float = 1) -> object: ...
    def __enter__(self) -> ProgressBar: ...
    def __exit__(self, *exc: object) -> object: ...


def progress_bar(**kwargs: object) -> ProgressBar:
    """A tqdm bar on stderr (hidden when stderr is not a terminal)."""
    from tqdm import tqdm

    bar: ProgressBar = tqdm(file=sys.stderr, disable=None, unit="B", unit_scale=True, **kwargs)
    return bar


@dataclass(frozen=True)
class PartitionCopy:
    topic: str
    partition: int
    start: int
    end: int
    gap: tuple[int, int] | None


class PartitionReader(LeaderClient):
    """Fetches one partition's raw batches from its leader, following leader changes."""

    def fetch(self, topic: str, partition: int, offset: int) -> bytes:
        """The records bytes a Fetch at `offset` returns (possibly empty)."""

        def send(connection: WireConnection) -> tuple[int, str | None, bytes]:
            version = connection.version_for(FETCH_KEY, FETCH_VERSION_MAX)
            response = connection.request(
                FETCH_KEY, fetch_request(version, topic, partition, offset), version=version
            )
            (answer,) = response.responses[0].partitions
            return int(answer.error_code), None, bytes(answer.records or b"")

        return self.call(topic, partition, f"fetch at offset {offset} of", send)


def fetch_request(version: int, topic: str, partition: int, offset: int) -> Fields:
    module = schema_module(load_request_schema(FETCH_KEY, version))
    fetch_partition = build(
        module.FetchPartition,
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=FETCH_PARTITION_BYTES,
    )
    return {
        "replica_id": -1,
        "max_wait": timedelta(milliseconds=0),
        "min_bytes": 0,
        "max_bytes": FETCH_PARTITION_BYTES,
        "isolation_level": 0,  # read_uncommitted: aborted data and markers are copied too
        "session_id": 0,
        "session_epoch": -1,
        "topics": (build(module.FetchTopic, topic=topic, partitions=(fetch_partition,)),),
        "forgotten_topics_data": (),
        "rack_id": "",
    }


def copy_partition(
    reader: PartitionReader, copy: PartitionCopy, root: Path, relative: Path, overall: ProgressBar
) -> Range:
    """Writes the batches of [copy.start, copy.end) to `root / relative` (synced); their
    range."""
    path = root / relative
    relative_file: str | None = None
    base = copy.start
    size = 0
    offsets = 0
    offset = copy.start
    if copy.end > copy.start:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        with (
            temporary.open("wb") as f,
            progress_bar(desc=f"{copy.topic}[{copy.partition}]", leave=False) as bar,
        ):
            first = True
            empty_fetches = 0
            while offset < copy.end:
                batches, _ = split_batches(reader.fetch(copy.topic, copy.partition, offset))
                wanted = [
                    b for b in batches if b.last_offset >= offset and b.base_offset < copy.end
                ]
                if not wanted:
                    # A new leader may not have advanced its high watermark yet.
                    empty_fetches += 1
                    if empty_fetches >= RETRIES_MAX:
                        raise AdminError(
                            f"fetch {copy.topic}[{copy.partition}] at offset {offset} kept "
                            f"returning nothing below its high watermark {copy.end}"
                        )
                    time.sleep(RETRY_PAUSE_S)
                    reader.refresh([copy.topic])
                    continue
                empty_fetches = 0
                for batch in wanted:
                    if first:
                        base = batch.base_offset
                        first = False
                    f.write(batch.raw)
                    size += len(batch.raw)
                    offsets += batch.last_offset - max(batch.base_offset, offset) + 1
                    bar.update(len(batch.raw))
                    overall.update(len(batch.raw))
                    offset = batch.last_offset + 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        fsync_directory(path.parent)
        relative_file = str(relative)
    # A batch can end past the high watermark read first (it cannot start below it and end
    # above it on raftka, where the watermark moves by whole batches, but Kafka allows it).
    end = max(offset, copy.end)
    return Range(copy.start, end, base, relative_file, size, offsets, copy.gap)


def _group_offsets(target: Target, admin: AdminClient) -> dict[str, list[Document]]:
    """Every group's committed offsets with their metadata strings."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    listed = target.result(
        admin.list_consumer_groups(request_timeout=target.timeout_s), "list groups"
    )
    snapshot: dict[str, list[Document]] = {}
    for group in sorted(g.group_id for g in listed.valid):
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=target.timeout_s
        )
        offsets = target.result(futures[group], f"committed offsets of group {group}")
        snapshot[group] = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": tp.offset,
                "metadata": tp.metadata or "",
            }
            for tp in sorted(offsets.topic_partitions or [], key=lambda t: (t.topic, t.partition))
            if tp.offset >= 0
        ]
    return snapshot


def new_run_id(manifest: Manifest) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    taken = {run["run"] for run in manifest.runs}
    run_id, n = stamp, 1
    while run_id in taken or (manifest.root / "runs" / run_id).exists():
        n += 1
        run_id = f"{stamp}-{n}"
    return run_id


def run_backup(target: Target, root: Path, topics: list[str] | None, full: bool) -> Document:
    """One backup run into `root`; the summary document."""
    admin = target.admin()
    metadata = target.metadata(admin)
    cluster_id = metadata.cluster_id
    if (root / "manifest.json").exists():
        manifest = Manifest.load(root)
        if manifest.cluster_id and cluster_id and manifest.cluster_id != cluster_id:
            raise AdminError(
                f"{root} holds backups of cluster {manifest.cluster_id}, not of {cluster_id}; "
                "back this cluster up into another directory"
            )
    elif root.exists() and any(root.iterdir()):
        raise AdminError(
            f"{root} is not empty and is not a raftka backup (no manifest.json); "
            "give an empty or new directory"
        )
    else:
        manifest = Manifest.new(root, cluster_id)
    for stray in manifest.stray_runs():
        shutil.rmtree(stray)  # an interrupted run: never in the manifest, never restored
    previous = {} if full else manifest.latest_ranges()
    previous_ids = {} if full else manifest.topic_ids()
    kind = "incremental" if previous else "full"

    # Group offsets first: everything they point at is then at or below the watermarks below.
    group_snapshot = _group_offsets(target, admin)

    descriptions = topic_descriptions(target, admin, sorted(metadata.topics))
    existing = sorted(
        name
        for name in metadata.topics
        if name not in INTERNAL_TOPICS
        and not name.startswith("__")
        and not getattr(descriptions.get(name), "is_internal", False)
    )
    if topics:
        missing = sorted(set(topics) - set(existing))
        if missing:
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION: no such topic: " + ", ".join(missing))
        chosen = sorted(set(topics))
    else:
        chosen = existing
    configs = non_default_configs(target, admin, chosen)
    run_id = new_run_id(manifest)
    notes: list[str] = []
    deleted_topics: list[str] = []
    topics_doc = []
    topic_ids: dict[str, str | None] = {}
    for name in chosen:
        partitions = metadata.topics[name].partitions
        topic_id = getattr(descriptions.get(name), "topic_id", None)
        topic_ids[name] = None if topic_id is None else str(topic_id)
        topics_doc.append(
            {
                "name": name,
                "topic_id": topic_ids[name],
                "partitions": len(partitions),
                "replication_factor": max(
                    (len(p.replicas) for p in partitions.values()), default=1
                ),
                "configs": {k: v for k, v in configs.get(name, {}).items() if k != RESTORE_FLAG},
            }
        )
    for name in sorted(set(previous_ids) - set(chosen)):
        if name not in metadata.topics:
            deleted_topics.append(name)
            notes.append(f"topic {name} was deleted since the last run; restore skips it")

    keys = [(name, p) for name in chosen for p in sorted(metadata.topics[name].partitions)]
    earliest = list_offsets(target, admin, keys, earliest_spec())
    latest = list_offsets(target, admin, keys, latest_spec())

    fresh: dict[str, bool] = {}
    copies = []
    for name in chosen:
        recreated = name in previous_ids and previous_ids[name] != topic_ids[name]
        fresh[name] = name not in previous_ids or recreated
        if recreated:
            notes.append(f"topic {name} was recreated (new topic id): copied in full")
    for name, p in keys:
        prior = None if fresh[name] else previous.get((name, p))
        start, gap = next_range_start(prior[1].end if prior else None, earliest[(name, p)])
        end = max(latest[(name, p)], start)
        if gap is not None:
            notes.append(
                f"{name}[{p}]: offsets {gap[0]}..{gap[1] - 1} were deleted by retention "
                "before this run; a restore starts after them"
            )
        copies.append(PartitionCopy(name, p, start, end, gap))

    for note in notes:
        print(f"raftka backup: warning: {note}", file=sys.stderr)

    run_dir = root / "runs" / run_id
    run_topics: dict[str, Document] = {
        name: {"topic_id": topic_ids[name], "fresh": fresh[name], "partitions": {}}
        for name in chosen
    }
    with (
        WireCluster(target) as cluster,
        progress_bar(desc="backup", total=None) as overall,
    ):
        reader = PartitionReader(cluster)
        reader.refresh(chosen)
        for copy in copies:
            relative = Path("runs") / run_id / "data" / copy.topic / f"{copy.partition}.batches"
            copied = copy_partition(reader, copy, root, relative, overall)
            run_topics[copy.topic]["partitions"][str(copy.partition)] = copied.as_json()

    write_atomically(run_dir / "topics.json", json.dumps(topics_doc, indent=2).encode())
    write_atomically(run_dir / "groups.json", json.dumps(group_snapshot, indent=2).encode())
    fsync_directory(root / "runs")
    run = {
        "run": run_id,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "kind": kind,
        "topics": run_topics,
        "deleted_topics": deleted_topics,
        "notes": notes,
    }
    manifest.add_run(run)
    manifest.save()
    summaries = [
        {"topic": t, "partition": int(p), **r}
        for t, entry in run_topics.items()
        for p, r in entry["partitions"].items()
    ]
    return {
        "run": run_id,
        "kind": kind,
        "directory": str(root),
        "cluster_id": cluster_id,
        "topics": len(chosen),
        "groups": len(group_snapshot),
        "offsets": sum(p["offsets"] for p in summaries),
        "bytes": sum(p["bytes"] for p in summaries),
        "partitions": summaries,
        "notes": notes,
    }


def print_summary(document: Document, out: TextIO) -> None:
    print(
        f"Backup run {document['run']} ({document['kind']}) of {document['topics']} topics, "
        f"{document['groups']} groups into {document['directory']}: "
        f"{document['offsets']} offsets, {document['bytes']} bytes.",
        file=out,
    )
    print_table(
        ["TOPIC", "PARTITION", "FROM", "TO", "BYTES"],
        [
            [p["topic"], p["partition"], p["from"], p["to"], p["bytes"]]
            for p in document["partitions"]
        ],
        out,
    )
