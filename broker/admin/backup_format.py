"""What `raftka backup` writes and `raftka restore` reads: the backup directory, its
manifest, and the pure decisions both make from it (where a run starts, which ranges a
restore takes, how a record batch is rewritten for a restore-mode topic).

Layout of a backup directory DIR:

    DIR/manifest.json                         the only index: a run not listed is ignored
    DIR/runs/<run>/topics.json                topics: name, topic id, partitions, RF, configs
    DIR/runs/<run>/groups.json                committed offsets per group/topic/partition
    DIR/runs/<run>/data/<topic>/<p>.batches   raw v2 record batches as fetched, concatenated

manifest.json is {"format": 1, "cluster_id": ..., "runs": [run, ...]}, oldest run first; a
run is {"run", "time" (UTC, ISO 8601), "kind" (full|incremental), "topics": {name:
{"topic_id", "fresh", "partitions": {"<p>": range}}}, "deleted_topics": [...], "notes":
[...]} and a range is {"from", "to", "base", "file", "bytes", "offsets", "gap"}: the
partition's offsets [from, to) this run holds, `base` the first batch's base offset in the
file (<= from; a log start can fall inside a batch), `file` relative to DIR (null when the
range is empty), `offsets` how many offsets of the range the file covers, and `gap` the
offsets [a, b) lost to retention between the previous run's `to` and this run's `from`
(null when there is none). `fresh` marks a topic copied from its log start in this run (first
seen, or recreated with a new topic id): earlier runs of that name do not belong to it.

Every file is written under a temporary name, fsynced and renamed; the manifest is written
last, so a run interrupted before it is never seen (and its directory is removed by the next
backup).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from raftka.broker.admin.common import AdminError, Document
from raftka.log import fsync_directory
from raftka.protocol.batch_builder import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, build_batch
from raftka.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
RESTORE_FLAG = "raftka.restore.in.progress"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__cluster_metadata", "__transaction_state"})

# Control record types a restore-mode topic accepts as they are (ABORT, COMMIT,
# LEADER_CHANGE); every other control batch is replaced by a LEADER_CHANGE one.
CONTROL_LEADER_CHANGE = 2
_KEPT_CONTROL_TYPES = (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, CONTROL_LEADER_CHANGE)

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_BASE_TIMESTAMP_OFFSET = 27


# -- record batches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One whole v2 batch and the offsets [base_offset, last_offset] it covers."""

    base_offset: int
    last_offset: int
    raw: bytes

    @property
    def is_control(self) -> bool:
        return bool(_INT16.unpack_from(self.raw, ATTRIBUTES_OFFSET)[0] & CONTROL_FLAG_MASK)


def split_batches(buf: bytes | memoryview) -> tuple[list[Batch], int]:
    """The whole batches at the front of `buf` and the bytes they take; a trailing partial
    batch (Fetch may cut one at max_bytes) is left out."""
    view = memoryview(buf)
    batches: list[Batch] = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + batch_length
        if batch_length < MIN_BATCH_LENGTH or end > len(view):
            break
        last_delta = _INT32.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)[0]
        batches.append(Batch(base_offset, base_offset + last_delta, bytes(view[pos:end])))
        pos = end
    return batches, pos


def read_batches(path: Path) -> Iterator[Batch]:
    """The batches of one `.batches` file, read a few MiB at a time."""
    chunk_bytes = 4 << 20
    with path.open("rb") as f:
        pending = b""
        while True:
            chunk = f.read(chunk_bytes)
            if not chunk:
                break
            pending += chunk
            batches, used = split_batches(pending)
            yield from batches
            pending = pending[used:]
        if pending:
            raise AdminError(f"{path} ends with {len(pending)} bytes that are not a whole batch")


def control_type(batch: Batch) -> int | None:
    """The control record type of a control batch (its first record's key), or None."""
    if not batch.is_control or len(batch.raw) <= RECORD_BATCH_OVERHEAD:
        return None
    # The first record: length, attributes, timestamp delta, offset delta, key length, key.
    from raftka.protocol.batch_builder import decode_varint

    pos = RECORD_BATCH_OVERHEAD
    _, pos = decode_varint(batch.raw, pos)
    pos += 1
    _, pos = decode_varint(batch.raw, pos)
    _, pos = decode_varint(batch.raw, pos)
    key_length, pos = decode_varint(batch.raw, pos)
    if key_length != _CONTROL_KEY.size:
        return None
    return int(_CONTROL_KEY.unpack_from(batch.raw, pos)[1])


def leader_change_batch(base_offset: int, last_offset: int, timestamp_ms: int = -1) -> Batch:
    """A one-record LEADER_CHANGE control batch spanning [base_offset, last_offset]."""
    assert 0 <= base_offset <= last_offset, (base_offset, last_offset)
    raw = bytearray(build_batch([(_CONTROL_KEY.pack(0, CONTROL_LEADER_CHANGE), b"")], timestamp_ms))
    _INT64.pack_into(raw, 0, base_offset)
    attributes = _INT16.unpack_from(raw, ATTRIBUTES_OFFSET)[0] | CONTROL_FLAG_MASK
    _INT16.pack_into(raw, ATTRIBUTES_OFFSET, attributes)
    _INT32.pack_into(raw, LAST_OFFSET_DELTA_OFFSET, last_offset - base_offset)
    _CRC.pack_into(raw, ATTRIBUTES_OFFSET - 4, crc32c.crc32c(bytes(raw[ATTRIBUTES_OFFSET:])))
    return Batch(base_offset, last_offset, bytes(raw))


def restorable(batch: Batch) -> Batch:
    """`batch` as a restore-mode topic accepts it: data and ABORT/COMMIT/LEADER_CHANGE
    control batches unchanged, any other control batch (a Raft configuration entry, say)
    replaced by a LEADER_CHANGE batch over the same offsets."""
    if not batch.is_control or control_type(batch) in _KEPT_CONTROL_TYPES:
        return batch
    timestamp_ms = _INT64.unpack_from(batch.raw, _BASE_TIMESTAMP_OFFSET)[0]
    return leader_change_batch(batch.base_offset, batch.last_offset, timestamp_ms)


def restore_stream(batches: Iterable[Batch], start: int, resume_at: int) -> Iterator[Batch]:
    """The batches to append to a log whose end is `resume_at`, for a partition restored
    from offset `start`: offsets before the first batch and between batches are covered by
    LEADER_CHANGE fillers, batches wholly below `resume_at` are skipped. A `resume_at`
    inside a batch means the log does not match the backup: AdminError."""
    expected = 0
    for batch in batches:
        if batch.last_offset < start:
            continue
        if batch.base_offset < expected:
            raise AdminError(
                f"backup batches overlap: one starts at offset {batch.base_offset}, "
                f"before {expected}"
            )
        pieces = []
        if batch.base_offset > expected:
            pieces.append(leader_change_batch(expected, batch.base_offset - 1))
        pieces.append(restorable(batch))
        for piece in pieces:
            if piece.last_offset < resume_at:
                continue
            if piece.base_offset < resume_at:
                raise AdminError(
                    f"the log ends at offset {resume_at}, inside the backup's batch "
                    f"{piece.base_offset}..{piece.last_offset}: it was not written by this "
                    "restore; delete the topic and run the restore again"
                )
            yield piece
        expected = batch.last_offset + 1
    if expected < start:
        # Nothing at or after `start` was backed up: cover [0, start) so the log ends there.
        filler = leader_change_batch(expected, start - 1)
        if filler.last_offset >= resume_at:
            if filler.base_offset < resume_at:
                filler = leader_change_batch(resume_at, start - 1)
            yield filler


# -- manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    """The offsets [start, end) of one partition that one run holds, and its file."""

    start: int
    end: int
    base: int
    file: str | None
    bytes: int = 0
    offsets: int = 0
    gap: tuple[int, int] | None = None

    def as_json(self) -> Document:
        return {
            "from": self.start,
            "to": self.end,
            "base": self.base,
            "file": self.file,
            "bytes": self.bytes,
            "offsets": self.offsets,
            "gap": list(self.gap) if self.gap else None,
        }

    @classmethod
    def from_json(cls, doc: Document) -> Range:
        gap = doc.get("gap")
        return cls(
            int(doc["from"]),
            int(doc["to"]),
            int(doc["base"] if "base" in doc else doc["from"]),
            doc.get("file"),
            int(doc.get("bytes", 0)),
            int(doc.get("offsets", 0)),
            (int(gap[0]), int(gap[1])) if gap else None,
        )


def next_range_start(
    previous_end: int | None, log_start: int
) -> tuple[int, tuple[int, int] | None]:
    """Where a run copies a partition from, and the gap retention left since the previous
    run (None when there is none): from the previous run's end, unless the log no longer
    starts that early."""
    if previous_end is None or log_start > previous_end:
        gap = (previous_end, log_start) if previous_end is not None else None
        return log_start, gap
    return previous_end, None


@dataclass(frozen=True)
class PartitionPlan:
    """What a restore writes to one partition: the ranges to append, oldest first, all
    contiguous; the restored log runs [start, end)."""

    ranges: tuple[Range, ...]
    start: int
    end: int
    dropped_gap: tuple[int, int] | None


def contiguous_ranges(ranges: Sequence[Range]) -> PartitionPlan:
    """The newest contiguous run of `ranges` (oldest first): a gap left by retention cuts off
    everything before it."""
    assert ranges, "a partition plan needs at least one range"
    chosen = [ranges[-1]]
    dropped: tuple[int, int] | None = None
    for earlier in reversed(ranges[:-1]):
        if earlier.end != chosen[0].start or chosen[0].gap is not None:
            dropped = chosen[0].gap or (earlier.end, chosen[0].start)
            break
        chosen.insert(0, earlier)
    if dropped is None and chosen[0].gap is not None:
        dropped = chosen[0].gap
    return PartitionPlan(tuple(chosen), chosen[0].start, chosen[-1].end, dropped)


class Manifest:
    """manifest.json of one backup directory."""

    def __init__(self, root: Path, doc: Document) -> None:
        self.root = root
        self.doc = doc

    @property
    def cluster_id(self) -> str | None:
        return self.doc.get("cluster_id")

    @property
    def runs(self) -> list[Document]:
        return list(self.doc["runs"])

    @classmethod
    def new(cls, root: Path, cluster_id: str | None) -> Manifest:
        return cls(root, {"format": FORMAT_VERSION, "cluster_id": cluster_id, "runs": []})

    @classmethod
    def load(cls, root: Path) -> Manifest:
        """The manifest of `root`; AdminError when `root` is not a backup directory."""
        if not root.is_dir():
            raise AdminError(f"backup directory {root} does not exist")
        path = root / MANIFEST
        if not path.exists():
            raise AdminError(f"{root} is not a raftka backup: it has no {MANIFEST}")
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise AdminError(f"cannot read {path}: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
            raise AdminError(f"{path} is not a raftka backup manifest")
        if doc.get("format") != FORMAT_VERSION:
            raise AdminError(
                f"{path} has format {doc.get('format')!r}; this raftka reads format "
                f"{FORMAT_VERSION}"
            )
        return cls(root, doc)

    def save(self) -> None:
        write_atomically(self.root / MANIFEST, json.dumps(self.doc, indent=2).encode())

    def add_run(self, run: Document) -> None:
        self.doc["runs"].append(run)

    def latest_ranges(self) -> dict[tuple[str, int], tuple[str | None, Range]]:
        """(topic, partition) -> (topic id, newest range) over every run."""
        latest: dict[tuple[str, int], tuple[str | None, Range]] = {}
        for run in self.doc["runs"]:
            for name, topic in run["topics"].items():
                for p, doc in topic["partitions"].items():
                    latest[(name, int(p))] = (topic.get("topic_id"), Range.from_json(doc))
        return latest

    def topic_ids(self) -> dict[str, str | None]:
        """The newest topic id of every topic any run holds."""
        ids: dict[str, str | None] = {}
        for run in self.doc["runs"]:
            for name, topic in run["topics"].items():
                ids[name] = topic.get("topic_id")
        return ids

    def partition_ranges(self, topic: str) -> dict[int, list[Range]]:
        """partition -> the ranges of `topic` since it was last copied fresh, oldest first."""
        ranges: dict[int, list[Range]] = {}
        for run in self.doc["runs"]:
            entry = run["topics"].get(topic)
            if entry is None:
                continue
            if entry.get("fresh"):
                ranges = {}
            for p, doc in entry["partitions"].items():
                ranges.setdefault(int(p), []).append(Range.from_json(doc))
        return ranges

    def run_file(self, run_id: str, name: str) -> Path:
        return self.root / "runs" / run_id / name

    def load_run_json(self, run_id: str, name: str) -> Any:  # Any: JSON, shaped by the file
        path = self.run_file(run_id, name)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise AdminError(f"cannot read {path}: {exc}") from None

    def stray_runs(self) -> list[Path]:
        """Run directories the manifest does not list (a backup interrupted before it)."""
        listed = {run["run"] for run in self.doc["runs"]}
        runs_dir = self.root / "runs"
        if not runs_dir.is_dir():
            return []
        return sorted(p for p in runs_dir.iterdir() if p.name not in listed)


def write_atomically(path: Path, content: bytes) -> None:
    """`content` at `path`: written to a temporary name, fsynced, renamed, directory synced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)
