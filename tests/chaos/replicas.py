"""Replicas byte-identical at rest: compare each partition's segment files across brokers.

A partition's log is the concatenation of its `.log` segments in base-offset order (segment
boundaries may differ between replicas; the bytes may not). Where replicas differ, the batch
headers after their common prefix say what each one holds that the others do not.
"""

from __future__ import annotations

import hashlib
import struct
import time
from pathlib import Path
from typing import Any

BATCH_HEADER_BYTES = 61
CONTROL_FLAG = 0x20
MAX_BATCHES_SHOWN = 6


def partition_logs(data_dir: Path) -> dict[str, list[Path]]:
    """{partition directory name: its .log segments in order} of one broker."""
    logs = {}
    if not data_dir.is_dir():
        return logs
    for child in sorted(data_dir.iterdir()):
        if child.is_dir():
            segments = sorted(child.glob("*.log"))
            if segments:
                logs[child.name] = segments
    return logs


def log_bytes(segments: list[Path]) -> bytes:
    return b"".join(segment.read_bytes() for segment in segments)


def digest(segments: list[Path]) -> tuple[int, str]:
    """(bytes, sha256 prefix) of the concatenated segments."""
    h = hashlib.sha256()
    size = 0
    for segment in segments:
        with open(segment, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
    return size, h.hexdigest()[:16]


def batches(data: bytes, start: int) -> list[dict[str, int | bool]]:
    """Headers of the record batches in `data` from byte `start` (which must be a boundary)."""
    found = []
    pos = start
    while pos + BATCH_HEADER_BYTES <= len(data):
        base_offset, length, epoch = struct.unpack_from(">qii", data, pos)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        (records,) = struct.unpack_from(">i", data, pos + 57)
        found.append(
            {
                "base_offset": base_offset,
                "last_offset": base_offset + last_delta,
                "leader_epoch": epoch,
                "records": records,
                "control": bool(attributes & CONTROL_FLAG),
                "bytes": 12 + length,
            }
        )
        if length <= 0:
            break
        pos += 12 + length
    return found


def batch_boundary_before(data: bytes, limit: int) -> int:
    """The start of the batch that contains byte `limit` (walking from the beginning)."""
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if end > limit or length <= 0:
            return pos
        pos = end
    return pos


def describe_divergence(name: str, logs: dict[int, list[Path]]) -> dict[str, Any]:
    """Where the replicas of one partition part ways, and the batches each holds after that."""
    contents = {node: log_bytes(segments) for node, segments in logs.items()}
    shortest = min(len(c) for c in contents.values())
    reference = next(iter(contents.values()))
    common = 0
    step = 1 << 16
    while common < shortest:  # whole chunks first, then bytes in the first differing chunk
        end = min(common + step, shortest)
        if all(c[common:end] == reference[common:end] for c in contents.values()):
            common = end
        elif step > 1:
            step = 1
        else:
            break
    boundary = min(batch_boundary_before(c, common) for c in contents.values())
    after = {}
    for node, content in contents.items():
        tail = batches(content, boundary)
        after[node] = tail[:MAX_BATCHES_SHOWN] + (
            [f"... {len(tail)} batches"] if len(tail) > MAX_BATCHES_SHOWN else []
        )
    return {
        "partition": name,
        "bytes": {node: len(c) for node, c in contents.items()},
        "common_prefix_bytes": common,
        "batches_after_common_prefix": after,
    }


def compare_replicas(
    data_dirs: dict[int, Path], quiet_timeout_s: float
) -> tuple[dict[str, dict[int, tuple[int, str]]], list[dict[str, Any]]]:
    """Compare every partition present on two or more brokers until all agree or time is up.

    Returns (per partition, per node: (bytes, digest)) of the last look, and one
    `describe_divergence` per partition that still differed.
    """
    deadline = time.monotonic() + quiet_timeout_s
    while True:
        logs_by_node = {node: partition_logs(path) for node, path in data_dirs.items()}
        names = sorted({name for logs in logs_by_node.values() for name in logs})
        table: dict[str, dict[int, tuple[int, str]]] = {}
        differing = []
        for name in names:
            replicas = {node: logs[name] for node, logs in logs_by_node.items() if name in logs}
            if len(replicas) < 2:
                continue
            table[name] = {node: digest(segments) for node, segments in replicas.items()}
            if len({d for d in table[name].values()}) > 1:
                differing.append((name, replicas))
        if not differing or time.monotonic() >= deadline:
            return table, [describe_divergence(name, replicas) for name, replicas in differing]
        time.sleep(1.0)


def producers_at(segments: list[Path], offsets: set[int]) -> dict[int, tuple[int, int, int]]:
    """{offset: (producer id, producer epoch, sequence)} of the records at `offsets`.

    From batch headers only: a record's sequence is its batch's base sequence plus its offset
    delta (no compaction, so offsets in a batch are contiguous).
    """
    found: dict[int, tuple[int, int, int]] = {}
    data = log_bytes(segments)
    pos = 0
    while pos + BATCH_HEADER_BYTES <= len(data) and len(found) < len(offsets):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        producer_id, producer_epoch, base_sequence = struct.unpack_from(">qhi", data, pos + 43)
        for offset in offsets:
            if base_offset <= offset <= base_offset + last_delta:
                delta = offset - base_offset
                found[offset] = (producer_id, producer_epoch, base_sequence + delta)
        if length <= 0:
            break
        pos += 12 + length
    return found
