"""Raft groups whose storage is the real segment log: entries are stamped batches on disk."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from batches import encode_batch
from log_replicas import GROUP, Replica, leader_of, run

from raftka.broker.replication import RECENT_ENTRIES, HardStateStore, PartitionRaftStorage
from raftka.consensus.errors import RaftInvariantError
from raftka.consensus.types import Entry, EntryKind, HardState
from raftka.protocol.records import CONTROL_FLAG_MASK, scan_batches, validate_produce_records


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, Replica]]:
    voters = frozenset({1, 2, 3})
    replicas = {i: Replica(i, tmp_path / f"node-{i}", voters) for i in voters}
    yield replicas
    for replica in replicas.values():
        replica.close()


def test_hard_state_survives_reopen(tmp_path: Path) -> None:
    store = HardStateStore(tmp_path / "raft.lmdb")
    store.save("t-0", HardState(term=7, voted_for=2))
    store.close()
    reopened = HardStateStore(tmp_path / "raft.lmdb")
    assert reopened.load("t-0") == HardState(term=7, voted_for=2)
    reopened.close()


class _EnvFailing:
    """An lmdb environment whose transactions or fsync fail as a full disk fails them (lmdb
    reports a system error by its strerror text)."""

    def __init__(self, env: Any, failing: str) -> None:
        self.env, self.failing = env, failing

    def begin(self, write: bool = False) -> Any:
        if write and self.failing == "commit":
            raise lmdb.Error(f"mdb_txn_commit: {os.strerror(errno.ENOSPC)}")
        return self.env.begin(write=write)

    def sync(self, force: bool) -> None:
        raise lmdb.Error(f"mdb_env_sync: {os.strerror(errno.ENOSPC)}")


@pytest.mark.parametrize(
    ("failing", "code"),
    [("commit", errno.ENOSPC), ("sync", errno.EIO)],
    ids=["commit", "fsync"],
)
def test_a_full_disk_refusing_the_hard_state_commit_is_retried_but_not_its_failed_fsync(
    tmp_path: Path, failing: str, code: int
) -> None:
    # A commit refused for space wrote nothing: the driver retries it once space returns.
    # An fsync that failed, for space too, may have lost pages lmdb had written: EIO, which
    # stops the broker instead of a retry that could report lost hard states as durable.
    store = HardStateStore(tmp_path / "raft.lmdb")
    real_env = store._env
    store._env = _EnvFailing(real_env, failing)
    try:
        store.save("t-0", HardState(term=3, voted_for=1))
        job = store.commit_job(fsync=True)
        assert job is not None
        with pytest.raises(OSError) as failed:
            job()
        assert failed.value.errno == code, failed.value
    finally:
        store._env = real_env
        store.close()


def test_replicated_batches_are_identical_on_every_replica(cluster: dict[int, Replica]) -> None:
    run(cluster, 40)
    leader = leader_of(cluster)
    proposed = []
    for i in range(20):
        batch = encode_batch([(b"k%d" % i, b"v" * i)] * (i % 3 + 1))
        count = len(validate_produce_records(batch, 1 << 20))
        entry = leader.core.propose(i % 3 + 1, batch)
        proposed.append(entry)
        assert count == 1
        leader.drain([])
        run(cluster, 1)
    run(cluster, 5)
    end = leader.log.log_end_offset
    assert leader.high_watermark == end
    contents = {
        node_id: replica.log.read(0, 1 << 30, end, True) for node_id, replica in cluster.items()
    }
    assert len(set(contents.values())) == 1, "replicas hold different bytes"
    scan = scan_batches(contents[leader.node_id])
    assert scan.error is None, scan
    headers = scan.headers
    assert headers[0].attributes & CONTROL_FLAG_MASK, "a new leader's no-op is a control batch"
    data = [h for h in headers if not h.attributes & CONTROL_FLAG_MASK]
    assert [(h.base_offset, h.partition_leader_epoch) for h in data] == [
        (e.base_offset, e.epoch) for e in proposed
    ]
    assert scan_batches(contents[leader.node_id], verify_crc=True).error is None


def test_a_batch_written_with_its_checked_header_is_stored_as_one_read_back(
    cluster: dict[int, Replica],
) -> None:
    """A client's batch proposed with the header checked when it came (`expect`) is stamped
    from that header instead of one decoded again: the leader's log holds the bytes the
    followers (which decode every header) hold, and the headers it keeps for its readers
    are the ones its file gives. A header offered for other bytes at the entry's offset,
    even of the same length, is not taken."""
    run(cluster, 40)
    leader = leader_of(cluster)
    for i in range(6):
        records = [(b"k%d" % i, b"v" * i)] * (i % 3 + 1)
        batch = encode_batch(records, producer_id=7, producer_epoch=0, base_sequence=i * 3)
        (header,) = validate_produce_records(batch, 1 << 20)
        entry = leader.core.propose(i % 3 + 1, batch)
        if i == 4:
            # Its producer and time are the log's to record if its header were taken.
            other = encode_batch(
                records,
                producer_id=9,
                producer_epoch=0,
                base_sequence=0,
                base_timestamp=1_900_000_000_000,
            )
            assert len(other) == len(batch) and other != batch
            (other_header,) = validate_produce_records(other, 1 << 20)
            stale = Entry(entry.base_offset, entry.last_offset, entry.epoch, other)
            leader.storage.expect(stale, other_header)
        else:
            leader.storage.expect(entry, header)
        leader.drain([])
        run(cluster, 1)
    run(cluster, 5)
    end = leader.log.log_end_offset
    contents = {
        node_id: replica.log.read(0, 1 << 30, end, True) for node_id, replica in cluster.items()
    }
    assert len(set(contents.values())) == 1, "replicas hold different bytes"
    scan = scan_batches(contents[leader.node_id], verify_crc=True)
    assert scan.error is None, scan
    assert len(scan.headers) == 7  # the new leader's no-op and the six
    for stored in scan.headers:
        assert leader.log.batch_header_at(stored.base_offset) == stored
    for replica in cluster.values():
        assert replica.log.producer_state.get(9) is None
        seven = replica.log.producer_state.get(7)
        assert seven is not None and seven.last_sequence == 5 * 3 + 5 % 3
        assert replica.log.segments[-1].max_timestamp == 1_700_000_000_000


def test_new_leader_after_crash_and_rejoin_truncates_nothing_committed(
    cluster: dict[int, Replica],
) -> None:
    run(cluster, 40)
    old = leader_of(cluster)
    for i in range(5):
        old.core.propose(1, encode_batch([(None, b"before-%d" % i)]))
        old.drain([])
    run(cluster, 3)
    committed = old.high_watermark
    down = frozenset({old.node_id})
    run(cluster, 60, down)
    new = leader_of(cluster, down)
    assert new.node_id != old.node_id
    assert new.core.term > old.core.term
    new.core.propose(1, encode_batch([(None, b"after")]))
    new.drain([])
    run(cluster, 3, down)
    # The old leader restarts from its durable state and catches up.
    old.log.close()
    old.open()
    run(cluster, 30)
    end = new.log.log_end_offset
    assert old.log.log_end_offset == end
    assert old.log.read(0, 1 << 30, end, True) == new.log.read(0, 1 << 30, end, True)
    assert old.high_watermark >= committed


def test_entry_kinds_read_back_from_the_log(cluster: dict[int, Replica]) -> None:
    run(cluster, 40)
    leader = leader_of(cluster)
    leader.core.propose(2, encode_batch([(None, b"a"), (None, b"b")]))
    leader.drain([])
    entries = leader.storage.entries_from(0, 1 << 20)
    assert [e.kind for e in entries] == [EntryKind.NOOP, EntryKind.DATA]
    assert leader.storage.entry_at(entries[1].last_offset).base_offset == entries[1].base_offset
    assert leader.storage.entry_at(0).kind is EntryKind.NOOP


def test_fresh_partition_starts_at_offset_zero_without_a_noop(tmp_path: Path) -> None:
    voters = frozenset({1, 2, 3})
    replicas = {i: Replica(i, tmp_path / f"node-{i}", voters, skip_noop=True) for i in voters}
    try:
        run(replicas, 40)
        leader = leader_of(replicas)
        entry = leader.core.propose(1, encode_batch([(None, b"first")]))
        leader.drain([])
        run(replicas, 3)
        assert entry.base_offset == 0
        assert all(r.high_watermark == 1 for r in replicas.values())
    finally:
        for replica in replicas.values():
            replica.close()


def test_the_last_written_entry_reads_back_as_from_disk(cluster: dict[int, Replica]) -> None:
    """entry_at answers the batch just appended without reading the segment: the answer is
    the one a fresh reader of the same log gives, also after a truncation."""
    run(cluster, 40)
    leader = leader_of(cluster)
    for i in range(3):
        leader.core.propose(2, encode_batch([(None, b"a%d" % i), (None, b"b%d" % i)]))
        leader.drain([])
    fresh = PartitionRaftStorage(GROUP, leader.log, leader.hard_states)
    for offset in range(leader.log.log_end_offset):
        assert leader.storage.entry_at(offset) == fresh.entry_at(offset), offset
    last = leader.storage.entry_at(leader.log.log_end_offset - 1)
    leader.storage.truncate_to(last.base_offset)
    end = leader.log.log_end_offset
    assert end == last.base_offset
    assert leader.storage.entry_at(end - 1) == fresh.entry_at(end - 1)


def test_recent_entries_read_back_as_from_disk_through_appends_truncations_and_trims(
    cluster: dict[int, Replica],
) -> None:
    """entry_at answers the last few hundred batches from memory (the commit rule asks for
    the epoch of the batch the followers' acknowledgements reach, behind the log end):
    every answer is the one a fresh reader of the same log gives, across appends of several
    batches at once, more batches than it keeps, a truncation inside them and a log start
    moved past some of them."""
    run(cluster, 40)
    leader = leader_of(cluster)
    storage = leader.storage

    def check() -> None:
        fresh = PartitionRaftStorage(GROUP, leader.log, leader.hard_states)
        start = storage.log_start_offset()
        for offset in range(start, leader.log.log_end_offset):
            assert storage.entry_at(offset) == fresh.entry_at(offset), offset
        with pytest.raises(RaftInvariantError):
            storage.entry_at(leader.log.log_end_offset)

    proposed = 0
    while proposed < 2 * RECENT_ENTRIES + 50:
        together = proposed % 5 + 1  # 1 to 5 batches written with one append
        for i in range(together):
            count = (proposed + i) % 3 + 1
            leader.core.propose(count, encode_batch([(None, b"r%d" % i)] * count))
        proposed += together
        leader.drain([])
    check()
    middle = storage.entry_at(leader.log.log_end_offset - 40)
    storage.truncate_to(middle.base_offset)
    check()
    end = leader.log.log_end_offset
    storage.append([Entry(end, end, leader.core.term, encode_batch([(None, b"after")]))])
    check()
    leader.log.delete_records_before(end - 20)
    check()
