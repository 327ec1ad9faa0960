"""A partition's CONFIG batches survive restarts and truncation (the Raft config checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

from batches import encode_batch

from raftka.broker.replication import (
    RAFT_CONFIG_CHECKPOINT,
    HardStateStore,
    PartitionRaftStorage,
)
from raftka.consensus.core import RaftConfig, RaftCore
from raftka.consensus.types import Entry, EntryKind, Snapshot, encode_config
from raftka.log import LogConfig, PartitionLog

GROUP = "moves-0"


def _open(root: Path, hard_states: HardStateStore) -> PartitionRaftStorage:
    log = PartitionLog.open(root / GROUP, LogConfig(), time.time_ns() // 1_000_000)
    return PartitionRaftStorage(GROUP, log, hard_states)


def _data(offset: int) -> Entry:
    return Entry(offset, offset, 1, encode_batch([(None, b"v%d" % offset)]))


def _config(offset: int, voters: set[int], learners: set[int]) -> Entry:
    payload = encode_config(frozenset(voters), frozenset(learners))
    return Entry(offset, offset, 1, payload, EntryKind.CONFIG)


def test_config_entries_are_found_after_a_restart_and_dropped_by_truncation(
    tmp_path: Path,
) -> None:
    hard_states = HardStateStore(tmp_path / "raft.lmdb")
    storage = _open(tmp_path, hard_states)
    storage.append([_data(0), _config(1, {1, 2, 3}, {4}), _data(2)])
    storage.append([_config(3, {1, 2, 3, 4}, set()), _data(4)])
    storage.log.close()

    storage = _open(tmp_path, hard_states)
    assert [(e.base_offset, e.payload) for e in storage.config_entries()] == [
        (1, b"1,2,3;4"),
        (3, b"1,2,3,4"),
    ]
    core = RaftCore(RaftConfig(node_id=4, group=GROUP, voters=frozenset({1, 2, 3})), storage)
    assert core.voters == frozenset({1, 2, 3, 4}) and core.learners == frozenset()

    storage.truncate_to(3)
    storage.log.close()
    storage = _open(tmp_path, hard_states)
    assert [e.base_offset for e in storage.config_entries()] == [1]
    storage.log.close()
    hard_states.close()


def test_a_checkpointed_config_the_log_lost_is_forgotten(tmp_path: Path) -> None:
    """A crash after the checkpoint was written but before the batch reached the log."""
    hard_states = HardStateStore(tmp_path / "raft.lmdb")
    storage = _open(tmp_path, hard_states)
    storage.append([_data(0), _config(1, {1, 2, 3}, {4})])
    storage.log.truncate_to(1)  # behind the storage's back, as a lost page cache would
    storage.log.close()

    storage = _open(tmp_path, hard_states)
    assert storage.config_entries() == []
    assert (tmp_path / GROUP / RAFT_CONFIG_CHECKPOINT).read_text() == ""
    storage.log.close()
    hard_states.close()


def test_an_installed_snapshot_resets_the_checkpoint_to_its_configuration(tmp_path: Path) -> None:
    hard_states = HardStateStore(tmp_path / "raft.lmdb")
    storage = _open(tmp_path, hard_states)
    # A divergent tail holding a CONFIG batch the leader's history lacks.
    storage.append([_data(0), _config(1, {1, 2, 3}, {5}), _data(2)])
    snapshot = Snapshot(10, 4, frozenset({1, 2, 3}), b"", frozenset({4}))
    storage.install_snapshot(snapshot)
    expected = [(9, 4, b"1,2,3;4")]
    assert [(e.base_offset, e.epoch, e.payload) for e in storage.config_entries()] == expected
    storage.log.close()

    storage = _open(tmp_path, hard_states)
    assert storage.log.log_start_offset == 10
    assert [(e.base_offset, e.epoch, e.payload) for e in storage.config_entries()] == expected
    core = RaftCore(RaftConfig(node_id=4, group=GROUP, voters=frozenset({1, 2, 3})), storage)
    assert core.voters == frozenset({1, 2, 3}) and core.learners == frozenset({4})
    # Retention past the snapshot's end keeps the configuration in force at the new start.
    storage.append([_data(10), _data(11)])
    storage.log.delete_records_before(11)
    storage.log.close()
    storage = _open(tmp_path, hard_states)
    assert [(e.base_offset, e.payload) for e in storage.config_entries()] == [(9, b"1,2,3;4")]
    storage.log.close()
    hard_states.close()


def test_a_crash_before_the_log_restarts_keeps_the_old_logs_configuration(
    tmp_path: Path,
) -> None:
    """The checkpoint is written first; the install never reached the log."""
    hard_states = HardStateStore(tmp_path / "raft.lmdb")
    storage = _open(tmp_path, hard_states)
    storage.append([_data(0), _config(1, {1, 2, 3}, {5}), _data(2)])
    storage._install_config(Snapshot(10, 4, frozenset({1, 2, 3}), b"", frozenset({4})))
    storage.log.close()

    storage = _open(tmp_path, hard_states)
    assert storage.log.log_start_offset == 0
    assert [(e.base_offset, e.payload) for e in storage.config_entries()] == [(1, b"1,2,3;5")]
    storage.log.close()
    hard_states.close()
