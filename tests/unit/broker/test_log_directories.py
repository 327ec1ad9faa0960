"""Several log directories per broker: where a new replica goes (the live directory with the
fewest partitions, as Kafka's LogManager.nextLogDirs), a partition found in two directories
refused with both named, and each directory's meta.properties identity."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raftka.broker.log_directories import (
    LogDirectoryError,
    check_first_dir_only,
    ensure_directory_ids,
    find_partition_folders,
    next_log_dir,
    read_properties,
)


def test_a_new_replica_goes_to_the_directory_with_the_fewest_partitions() -> None:
    assert next_log_dir(["/a", "/b", "/c"], ["/a", "/a", "/b", "/c", "/c"]) == "/b"
    # A tie goes to the first listed; an empty directory has none.
    assert next_log_dir(["/a", "/b"], ["/a", "/b"]) == "/a"
    assert next_log_dir(["/a", "/b"], ["/a"]) == "/b"
    # Offline directories are not offered, and what they hold is not counted.
    assert next_log_dir(["/b"], ["/a", "/b", "/b"]) == "/b"
    assert next_log_dir([], ["/a"]) is None


def test_placement_spreads_partitions_one_after_another() -> None:
    placed: list[str] = []
    for _ in range(7):
        chosen = next_log_dir(["/a", "/b", "/c"], placed)
        assert chosen is not None
        placed.append(chosen)
    assert placed == ["/a", "/b", "/c", "/a", "/b", "/c", "/a"]


def test_partitions_are_found_in_whichever_directory_holds_them(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a / "orders-0", a / "orders-2", b / "orders-1", b / "raft.lmdb"):
        folder.mkdir(parents=True)
    (b / "meta.properties").write_text("version=1\n")
    (a / "not-a-dir-3").write_text("")  # a file, not a partition folder
    found = find_partition_folders([str(a), str(b)])
    assert found == {"orders-0": str(a), "orders-2": str(a), "orders-1": str(b)}


def test_a_partition_in_two_directories_is_refused_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "orders-1").mkdir(parents=True)
    (b / "orders-1").mkdir(parents=True)
    with pytest.raises(LogDirectoryError) as refused:
        find_partition_folders([str(a), str(b)])
    message = str(refused.value)
    assert f"{a / 'orders-1'} and {b / 'orders-1'}" in message
    assert "partition orders-1 is in two log directories" in message


def test_each_directory_gets_an_identity_of_its_own(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "meta.properties").write_text("version=1\ncluster.id=C1\nnode.id=1\n")
    ids = ensure_directory_ids([a, b], "C1", 1)
    assert set(ids) == {str(a), str(b)}
    assert len(set(ids.values())) == 2
    assert read_properties(b / "meta.properties") == {
        "version": "1",
        "cluster.id": "C1",
        "node.id": "1",
        "directory.id": ids[str(b)],
    }
    assert read_properties(a / "meta.properties")["directory.id"] == ids[str(a)]
    # The ids stay with the directories.
    assert ensure_directory_ids([a, b], "C1", 1) == ids


@pytest.mark.parametrize(
    ("second", "complaint"),
    [
        ("version=1\ncluster.id=OTHER\nnode.id=1\n", "belongs to cluster OTHER, not to"),
        ("version=1\ncluster.id=C1\nnode.id=2\n", "is node 2's, not this broker's (node.id 1)"),
    ],
)
def test_a_disk_of_another_cluster_or_broker_is_refused(
    tmp_path: Path, second: str, complaint: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "meta.properties").write_text(second)
    with pytest.raises(LogDirectoryError, match=re.escape(complaint)):
        ensure_directory_ids([a, b], "C1", 1)
    assert (b / "meta.properties").read_text() == second  # nothing changed


def test_a_copied_directory_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "meta.properties").write_text("cluster.id=C1\nnode.id=1\ndirectory.id=D\n")
    (b / "meta.properties").write_text("cluster.id=C1\nnode.id=1\ndirectory.id=D\n")
    with pytest.raises(LogDirectoryError, match="have the same directory.id D"):
        ensure_directory_ids([a, b], "C1", 1)


def test_reordered_log_dirs_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "orders-0").mkdir(parents=True)
    (b / "raft.lmdb").mkdir(parents=True)
    (b / "__cluster_metadata-0").mkdir()
    check_first_dir_only([b, a])  # the metadata directory first: as it should be
    with pytest.raises(LogDirectoryError) as refused:
        check_first_dir_only([a, b])
    assert str(refused.value) == (
        f"log directory {b} holds this broker's __cluster_metadata-0 and raft.lmdb, which "
        f"live in the first log directory ({a}): list {b} first in log.dirs"
    )
