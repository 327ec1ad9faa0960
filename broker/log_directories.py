"""Several log directories per broker (Kafka's `log.dirs`, JBOD): which directory holds each
partition, where a new replica goes, and each directory's identity.

A partition's folder `<topic>-<partition>` lives in exactly one of the directories. At start
every directory is listed once: a partition found in two of them stops the start, naming
both (Kafka's LogManager refuses to start on duplicate log directories too), since either
could be the stale copy. A new replica goes to the live directory holding the fewest
partitions, the first listed on a tie (Kafka's LogManager.nextLogDirs); nothing is moved
afterwards.

Each directory holds a `meta.properties` (Kafka's, KIP-858's `directory.id` included): a
directory of another cluster or another node stops the start, and two directories with one
`directory.id` (one copied from the other) do too. A directory without one is new (an added
or replaced disk) and is given one.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

logger = logging.getLogger("raftka.server")

META_PROPERTIES = "meta.properties"
#: A partition folder's name: Kafka's `<topic>-<partition>`.
_PARTITION_FOLDER = re.compile(r"^.+-\d+$")


class LogDirectoryError(ValueError):
    """The log directories cannot be used as they are (the start stops with this message)."""


def find_partition_folders(log_dirs: Sequence[str]) -> dict[str, str]:
    """Partition folder name -> the log directory holding it, over every directory in
    `log_dirs` (absolute paths). LogDirectoryError when one partition is in two."""
    found: dict[str, str] = {}
    for log_dir in log_dirs:
        with os.scandir(log_dir) as entries:
            for entry in entries:
                if not _PARTITION_FOLDER.match(entry.name) or not entry.is_dir():
                    continue
                other = found.setdefault(entry.name, log_dir)
                if other != log_dir:
                    raise LogDirectoryError(
                        f"partition {entry.name} is in two log directories: "
                        f"{os.path.join(other, entry.name)} and "
                        f"{os.path.join(log_dir, entry.name)}; one is a stale copy. Move the "
                        "one that is not this broker's current replica out of the log "
                        "directories, then start again"
                    )
    return found


#: What only the first log directory holds: the metadata log and the Raft hard states.
FIRST_DIR_ONLY = ("__cluster_metadata-0", "raft.lmdb")


def check_first_dir_only(log_dirs: Sequence[Path]) -> None:
    """LogDirectoryError when a directory other than the first holds the metadata log or the
    Raft hard states: `log.dirs` was reordered, and starting would forget the votes this
    broker cast (the first directory would get new, empty ones)."""
    for log_dir in log_dirs[1:]:
        found = [name for name in FIRST_DIR_ONLY if (log_dir / name).exists()]
        if found:
            raise LogDirectoryError(
                f"log directory {log_dir} holds this broker's {' and '.join(found)}, which "
                f"live in the first log directory ({log_dirs[0]}): list {log_dir} first "
                "in log.dirs"
            )


def next_log_dir(live_dirs: Sequence[str], placed: Iterable[str]) -> str | None:
    """The live directory a new replica goes to: the one with the fewest partitions placed
    in it (`placed` names each partition's directory), the first in `live_dirs` on a tie;
    None when no directory is live."""
    counts = dict.fromkeys(live_dirs, 0)
    for log_dir in placed:
        if log_dir in counts:
            counts[log_dir] += 1
    return min(live_dirs, key=counts.__getitem__, default=None)


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style .properties file of `name=value` lines (comments and blanks skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            name, value = line.split("=", 1)
            values[name.strip()] = value.strip()
    return values


def _write_properties(path: Path, values: Mapping[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    tmp.replace(path)


def new_directory_id() -> str:
    """A directory id as Kafka writes one: a random UUID in URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def ensure_directory_ids(
    log_dirs: Sequence[Path], cluster_id: str, node_id: int, check_node_of_first: bool = False
) -> dict[str, str]:
    """Check each directory's meta.properties against this broker and give each directory
    without a `directory.id` one; returns absolute path -> directory id. The first directory's
    cluster id was checked (or written) already; its node id is checked only with
    `check_node_of_first` (a single directory keeps the checks it always had).
    LogDirectoryError names a directory of another cluster or node, or two with one id."""
    ids: dict[str, str] = {}
    for i, log_dir in enumerate(log_dirs):
        meta = log_dir / META_PROPERTIES
        values = read_properties(meta) if meta.exists() else {}
        found_cluster = values.get("cluster.id")
        if found_cluster is not None and found_cluster != cluster_id:
            raise LogDirectoryError(
                f"log directory {log_dir} belongs to cluster {found_cluster}, not to this "
                f"broker's cluster {cluster_id} (a disk of another cluster?)"
            )
        found_node = values.get("node.id")
        if found_node is not None and found_node != str(node_id) and (i > 0 or check_node_of_first):
            raise LogDirectoryError(
                f"log directory {log_dir} is node {found_node}'s, not this broker's (node.id "
                f"{node_id}): a disk of another broker?"
            )
        directory_id = values.get("directory.id")
        if directory_id is None:
            directory_id = new_directory_id()
            updated = {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id)}
            updated.update(values)
            updated["directory.id"] = directory_id
            _write_properties(meta, updated)
            # An added or replaced disk is worth a line; the single directory's id is not.
            logger.log(
                logging.INFO if i > 0 else logging.DEBUG,
                "log directory %s%s: given directory.id %s",
                log_dir,
                "" if values else " is new (no meta.properties)",
                directory_id,
            )
        absolute = str(log_dir.absolute())
        twin = next((d for d, other in ids.items() if other == directory_id), None)
        if twin is not None:
            raise LogDirectoryError(
                f"log directories {twin} and {absolute} have the same directory.id "
                f"{directory_id}: one is a copy of the other"
            )
        ids[absolute] = directory_id
    return ids
