"""A partition's segment log as a Raft group's storage.

The Raft log *is* the partition log: an entry is one record batch, its position the batch's
offset range, its term the batch's partitionLeaderEpoch. This module adapts `PartitionLog`
to the consensus package's storage protocol (read view + durable writes) and keeps each
group's hard state (term, vote) in lmdb.

Entries travel between replicas as batch bytes. Every replica stamps baseOffset and
partitionLeaderEpoch itself when it persists an entry (both lie outside the CRC), so a batch
proposed unstamped and the same batch read back from a leader's log persist identically.
A leader's no-op and a voter-set change are Kafka control batches (LEADER_CHANGE and
KRAFT_VOTERS), which consumers skip like transaction markers. Any other control batch (one
`raftka restore` copied: a transaction marker, another cluster's LEADER_CHANGE) is a DATA
entry that travels as its own bytes.

A follower that needs offsets below the leader's log start is sent a snapshot: for a
partition it carries no data, and installing it empties the follower's log and restarts it at
the leader's log start, as Kafka's follower does on OFFSET_OUT_OF_RANGE
(truncateFullyAndStartAt). The metadata log plugs its image in through `snapshot_source` and
`on_snapshot`.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import lmdb

from raftka.consensus.errors import OUT_OF_SPACE, RaftInvariantError
from raftka.consensus.types import (
    Entry,
    EntryKind,
    HardState,
    NodeId,
    Snapshot,
    encode_config,
)
from raftka.log import PartitionLog, checked_fsync
from raftka.protocol.batch_builder import (
    build_batch,
    control_key,
    control_record_type,
    decode_batch,
)
from raftka.protocol.records import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    PARTITION_LEADER_EPOCH_OFFSET,
    BatchHeader,
    read_batch_header,
    scan_batches,
    stamped_header,
)

logger = logging.getLogger("raftka.replication")

#: A batch's base offset and partition leader epoch, which an entry's stamp sets.
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
#: A batch's first 16 bytes, its base offset, length and partition leader epoch: the stamp
#: of a batch whose header is known, in one call.
_STAMP: Final = struct.Struct(">qii")
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_time_ns: Final = time.time_ns

CONTROL_LEADER_CHANGE = 2
CONTROL_KRAFT_VOTERS = 6
ATTRIBUTES_OFFSET = 21
NO_TIMESTAMP = -1
HIGH_WATERMARK_CHECKPOINT = "high-watermark-checkpoint"
#: (offset, epoch, payload) of the partition's CONFIG batches, so a restart finds its Raft
#: membership without scanning the log for control batches.
RAFT_CONFIG_CHECKPOINT = "raft-config-checkpoint"


#: How many of the last appended batches `PartitionRaftStorage.entry_at` answers from
#: memory (between this and twice this many are kept).
RECENT_ENTRIES: Final = 256


def _base_offset(entry: Entry) -> int:
    return entry.base_offset


def control_batch(kind: EntryKind, payload: bytes) -> bytes:
    """A one-record control batch for a NOOP (LEADER_CHANGE) or CONFIG (KRAFT_VOTERS) entry.

    Every replica builds it from the entry alone, so it carries no timestamp (-1): the bytes
    must come out identical everywhere.
    """
    control_type = CONTROL_KRAFT_VOTERS if kind is EntryKind.CONFIG else CONTROL_LEADER_CHANGE
    return build_batch([(control_key(control_type), payload)], NO_TIMESTAMP, control=True)


#: A no-op's batch from the attributes on (the part every replica rebuilds identically).
_NOOP_BODY = control_batch(EntryKind.NOOP, b"")[ATTRIBUTES_OFFSET:]


def entry_kind_of(header: BatchHeader, batch: bytes | memoryview) -> tuple[EntryKind, bytes]:
    """Entry kind and the payload the Raft core expects for a stored batch.

    Only a batch identical to the one `control_batch` builds for a no-op is a NOOP (its bytes
    are rebuilt from the kind alone); any other control batch but KRAFT_VOTERS is DATA, so
    replicas copy its bytes verbatim.
    """
    if not header.attributes & CONTROL_FLAG_MASK:
        return EntryKind.DATA, bytes(batch)
    if bytes(batch[ATTRIBUTES_OFFSET:]) == _NOOP_BODY:
        return EntryKind.NOOP, b""
    if control_record_type(batch) == CONTROL_KRAFT_VOTERS:
        records = decode_batch(batch, check_crc=False)
        return EntryKind.CONFIG, records[0].value or b""
    return EntryKind.DATA, bytes(batch)


class HardStateStore:
    """Term and vote of every Raft group on this broker, in one lmdb environment.

    `save` and `delete` only stage a change (and `load` sees it at once); `commit_job`
    returns the function that commits every staged change in one transaction, run in a
    worker thread by the Raft driver before any message that depends on them leaves. The
    environment does not fsync on commit (a process crash keeps what was committed, from the
    page cache); a commit job asked to fsync syncs everything committed so far.
    """

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(
            str(path), map_size=1 << 28, subdir=True, max_dbs=1, sync=False, metasync=False
        )
        self._latest: dict[str, HardState] = {}  # staged or committed, as load() sees it
        self._staged: dict[str, HardState | None] = {}  # None: delete
        self._unsynced = False

    def load(self, raft_group_id: str) -> HardState:
        hard_state = self._latest.get(raft_group_id)
        if hard_state is not None:
            return hard_state
        if raft_group_id in self._staged:
            return HardState()  # deleted, not yet committed
        with self._env.begin() as txn:
            raw = txn.get(raft_group_id.encode())
        if raw is None:
            return HardState()
        term, voted_for = struct.unpack(">qi", raw)
        return HardState(term=term, voted_for=None if voted_for < 0 else voted_for)

    def save(self, raft_group_id: str, hard_state: HardState) -> None:
        self._latest[raft_group_id] = hard_state
        self._staged[raft_group_id] = hard_state

    def delete(self, raft_group_id: str) -> None:
        self._latest.pop(raft_group_id, None)
        self._staged[raft_group_id] = None

    def commit_job(self, fsync: bool) -> Callable[[], None] | None:
        if not self._staged and not (fsync and self._unsynced):
            return None
        batch, self._staged = self._staged, {}
        self._unsynced = not fsync
        env, staged = self._env, self._staged

        def commit() -> None:
            try:
                with env.begin(write=True) as txn:
                    for raft_group_id, hard_state in batch.items():
                        key = raft_group_id.encode()
                        if hard_state is None:
                            txn.delete(key)
                            continue
                        voted_for = -1 if hard_state.voted_for is None else hard_state.voted_for
                        txn.put(key, struct.pack(">qi", hard_state.term, voted_for))
            except lmdb.Error as exc:
                for raft_group_id, hard_state in batch.items():
                    staged.setdefault(raft_group_id, hard_state)  # a newer staged value wins
                # lmdb reports a system error as its strerror text: keep a full disk's errno
                # (the sync driver retries that one, and stops the broker on any other).
                code = next((c for c in OUT_OF_SPACE if str(exc).endswith(os.strerror(c))), 0)
                raise OSError(code, f"hard state commit failed: {exc}") from exc
            if fsync:
                try:
                    env.sync(True)
                except lmdb.Error as exc:
                    # Whatever its cause (a full disk's too), the pages it could not write
                    # back may be gone: never retried (`raftka.log.epochs.checked_fsync`).
                    raise OSError(errno.EIO, f"hard state fsync failed: {exc}") from exc

        return commit

    def close(self) -> None:
        """Commit and fsync whatever is staged, then close (on shutdown, after the driver)."""
        job = self.commit_job(fsync=True)
        if job is not None:
            job()
        self._env.close()


def _stamp_and_read(buffer: bytearray, start: int, base_offset: int, epoch: int) -> BatchHeader:
    """Stamp the batch at `start` with its offset and epoch (both outside the CRC) and read
    its header as stored."""
    _INT64.pack_into(buffer, start, base_offset)
    _INT32.pack_into(buffer, start + PARTITION_LEADER_EPOCH_OFFSET, epoch)
    return read_batch_header(buffer, start)


class PartitionRaftStorage:
    """`PartitionLog` as a Raft group's storage: the core's read view and its writes."""

    def __init__(
        self,
        raft_group_id: str,
        log: PartitionLog,
        hard_states: HardStateStore,
        single_voter: bool = False,
        snapshot_source: Callable[[int], bytes | None] | None = None,
        on_snapshot: Callable[[Snapshot], None] | None = None,
    ) -> None:
        """`snapshot_source(end)` gives the state-machine data below offset `end` (None: not
        available now); `on_snapshot` installs received data into the state machine, durably,
        before the log is emptied. Without them snapshots carry no data (a partition)."""
        self.raft_group_id = raft_group_id
        self.snapshot_source = snapshot_source
        self.on_snapshot = on_snapshot
        self.log = log
        self.hard_states = hard_states
        self.single_voter = single_voter
        self.raft_log = self
        # The last batches written through `append` (at most RECENT_ENTRIES, in offset
        # order), as `entry_at` would read them back: the core asks for the last one on
        # every append it sends (prev epoch) or receives (log match), and a leader for the
        # one its followers' acknowledgements reach (the commit rule's epoch check), which
        # trails the log end while appends are pipelined. Answering from here spares a seek
        # and a read of the segment per message. Emptied by anything but an append.
        self._recent: list[Entry] = []
        # Headers of client batches proposed and not yet written, by base offset, with the
        # payload each describes (`expect`).
        self._expected: dict[int, tuple[bytes, BatchHeader]] = {}
        self._raft_start: tuple[int, int] | None = None  # (log start, its batch's base)
        self._configs: list[Entry] = self._load_configs()

    # -- the core's read view (consensus.storage.RaftLog) ---------------------------------

    def log_start_offset(self) -> int:
        """Where the Raft log starts: the base offset of the batch holding the partition's
        log start offset, which DeleteRecords may leave inside a batch. Batches travel
        whole, so a follower's log restarts (by snapshot) at a batch boundary."""
        start = self.log.log_start_offset
        cached = self._raft_start
        if cached is not None and cached[0] == start:
            return cached[1]
        header = self.log.batch_header_at(start)
        raft_start = start if header is None else header.base_offset
        self._raft_start = (start, raft_start)
        return raft_start

    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def entry_at(self, offset: int) -> Entry:
        recent = self._recent
        if recent and offset >= recent[0].base_offset and offset >= self.log_start_offset():
            last = recent[-1]
            if offset >= last.base_offset:
                if offset <= last.last_offset:
                    return last
            else:
                entry = recent[bisect.bisect_right(recent, offset, key=_base_offset) - 1]
                if offset <= entry.last_offset:
                    return entry
        # Offsets between the Raft log start and the partition's lie in its first batch.
        header = self.log.batch_header_at(max(offset, self.log.log_start_offset))
        if header is None:
            raise RaftInvariantError(
                f"{self.raft_group_id}: the core asked for the entry at offset {offset}, which "
                f"no batch of the log [{self.log.log_start_offset}, {self.log.log_end_offset}) "
                "covers"
            )
        kind = EntryKind.DATA
        payload = b""
        if header.attributes & CONTROL_FLAG_MASK:
            batch = self.log.read(header.base_offset, 1, self.log.log_end_offset, True)
            kind, payload = entry_kind_of(header, batch[: header.size_bytes])
        return Entry(
            header.base_offset, header.last_offset, header.partition_leader_epoch, payload, kind
        )

    def entries_from(self, offset: int, max_bytes: int) -> list[Entry]:
        if offset < self.log_start_offset():
            return []  # the core sends a snapshot instead
        # Reading from inside the first batch returns that batch whole.
        start = max(offset, self.log.log_start_offset)
        data = self.log.read(start, max_bytes, self.log.log_end_offset, True)
        entries = []
        view = memoryview(data)
        for header in scan_batches(data, verify_crc=False).headers:
            batch = view[header.position : header.end_position]
            kind, payload = entry_kind_of(header, batch)
            entries.append(
                Entry(
                    header.base_offset,
                    header.last_offset,
                    header.partition_leader_epoch,
                    payload,
                    kind,
                )
            )
        return entries

    def config_entries(self) -> list[Entry]:
        return list(self._configs)

    # -- the CONFIG checkpoint ---------------------------------------------------------------
    # Written (and fsynced) before a CONFIG batch reaches the log and before a truncation, so
    # it never lacks a CONFIG batch the log holds; entries the log does not hold (a crash
    # before the append, a torn tail recovered away) are dropped when it is loaded. The
    # newest CONFIG batch stays listed after retention deleted its segment: it is still the
    # group's membership. An installed snapshot's configuration is listed as a CONFIG entry
    # at its end - 1 (below the new log start).

    def _config_path(self) -> Path:
        return self.log.directory / RAFT_CONFIG_CHECKPOINT

    def _load_configs(self) -> list[Entry]:
        try:
            text = self._config_path().read_text()
        except FileNotFoundError:
            return []
        entries: list[Entry] = []
        for line in text.splitlines():
            offset_text, epoch_text, payload_text = line.split(" ", 2)
            entries.append(
                Entry(
                    int(offset_text),
                    int(offset_text),
                    int(epoch_text),
                    payload_text.encode("ascii"),
                    EntryKind.CONFIG,
                )
            )
        start, end = self.log.log_start_offset, self.log.log_end_offset
        kept = [e for e in entries if e.base_offset < start][-1:]
        for entry in entries:
            if not start <= entry.base_offset < end:
                continue
            stored = self.entry_at(entry.base_offset)
            if stored.kind is EntryKind.CONFIG and stored.epoch == entry.epoch:
                kept.append(stored)
        if kept != entries:
            self._save_configs(kept)
        return kept

    def _save_configs(self, entries: list[Entry]) -> None:
        path = self._config_path()
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as out:
            for e in entries:
                out.write(f"{e.base_offset} {e.epoch} {e.payload.decode('ascii')}\n")
            out.flush()
            checked_fsync(out.fileno())
        tmp.replace(path)

    def log_start_epoch(self) -> int:
        log = self.log
        start = self.log_start_offset()
        if start == 0:
            return 0  # nothing was ever removed
        epoch = log.epoch_for_offset(start - 1)
        if epoch is not None:
            return epoch
        if start < log.log_end_offset:
            # The epoch cache starts at the log start; the epoch of the batch there bounds
            # the one below it, which is all elections and log matching need.
            return self.entry_at(start).epoch
        return max(log.last_batch_epoch(), 0)

    def log_start_config(self) -> tuple[frozenset[NodeId], frozenset[NodeId]] | None:
        # The checkpoint keeps the CONFIG entry in force at the log start (retention, or the
        # one a snapshot carried), and config_entries lists it.
        return None

    # -- durable writes (consensus.driver.RaftGroupStorage) -----------------------------------

    def load_hard_state(self) -> HardState:
        return self.hard_states.load(self.raft_group_id)

    def save_hard_state(self, hard_state: HardState) -> None:
        self.hard_states.save(self.raft_group_id, hard_state)

    def truncate_to(self, offset: int) -> None:
        self._recent = []
        self._raft_start = None
        if self._configs and self._configs[-1].base_offset >= offset:
            self._configs = [e for e in self._configs if e.base_offset < offset]
            self._save_configs(self._configs)
        self.log.truncate_to(offset)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """The leader's log starts past our log end, or ours diverges below its start: the
        CONFIG checkpoint takes the snapshot's configuration and the state machine its data,
        then the log restarts empty at its end."""
        self._recent = []
        self._raft_start = None
        self._install_config(snapshot)
        if self.on_snapshot is not None:
            self.on_snapshot(snapshot)
        logger.info(
            "%s: the leader's log starts at %d: restarting this replica's log there"
            " (it held [%d, %d))",
            self.raft_group_id,
            snapshot.end_offset,
            self.log.log_start_offset,
            self.log.log_end_offset,
            extra={"partition": self.raft_group_id, "raft_group": self.raft_group_id},
        )
        self.log.truncate_fully_and_start_at(
            snapshot.end_offset, _time_ns() // 1_000_000, epoch=snapshot.epoch
        )

    def _install_config(self, snapshot: Snapshot) -> None:
        """Checkpoint the snapshot's configuration (fsynced) before the log is emptied. The
        old entries stay listed around it, so a crash before the log restarts loads exactly
        what the old log still holds (`_load_configs` drops the snapshot's entry, which that
        log does not hold), and one after loads the snapshot's entry, the last below the new
        log start (the old entries at or past it are gone with the log)."""
        end = snapshot.end_offset
        below = [e for e in self._configs if e.base_offset < end - 1]
        above = [e for e in self._configs if e.base_offset >= end]
        if snapshot.voters:
            payload = encode_config(snapshot.voters, snapshot.learners)
            entry = Entry(end - 1, end - 1, snapshot.epoch, payload, EntryKind.CONFIG)
            configs, self._configs = [*below, entry, *above], [entry]
        else:
            # The group's configured voters (a leader always names them; kept for safety):
            # no entry below the new start may outlive the install.
            configs, self._configs = above, []
        self._save_configs(configs)

    def snapshot_data(self, end_offset: int) -> bytes | None:
        if end_offset != self.log_start_offset():
            return None  # the log start moved on since the core asked: it asks again
        if self.snapshot_source is not None:
            return self.snapshot_source(end_offset)
        return b""

    def record_log_start(self) -> int:
        return self.log.log_start_offset

    def follow_log_start(self, offset: int) -> None:
        """A follower's log start follows the leader's (bounded by its high watermark), as
        Kafka's does, so records DeleteRecords removed stay removed when this replica leads.
        A log whose snapshots carry state (the metadata log) truncates behind its own
        snapshots instead. Retention stays local to each replica."""
        if self.snapshot_source is not None or offset <= self.log.log_start_offset:
            return
        self.log.delete_records_before(min(offset, self.log.log_end_offset))

    def entries_need_sync(self) -> bool:
        return self.log.flush_due_by_messages()

    def hard_state_needs_sync(self) -> bool:
        # Only a log synced on every append makes promises a forgotten vote could break.
        return self.log.config.flush_messages <= 1

    def sync_job(self) -> Callable[[], None] | None:
        return self.log.flush_job()

    def append(self, entries: Sequence[Entry]) -> None:
        """Write entries as stamped batches with one write; the driver asks the flush policy
        (`entries_need_sync`) whether they must be fsynced before they are acknowledged."""
        if not entries:
            return
        now = _time_ns() // 1_000_000
        buffer = bytearray()
        headers: list[BatchHeader] = []
        configs: list[Entry] = []
        data = EntryKind.DATA
        expected = self._expected
        for entry in entries:
            start = len(buffer)
            base_offset = entry.base_offset
            known = None
            if expected:
                known = expected.get(base_offset)
                if known is not None:
                    del expected[base_offset]
            if entry.kind is data:
                payload = entry.payload
                buffer += payload
                if known is not None and known[0] is payload:
                    # The header checked when the batch was proposed, as stamped now
                    # (offset and epoch lie outside the CRC) with where it lies here.
                    header = stamped_header(known[1], start, base_offset, entry.epoch)
                    _STAMP.pack_into(buffer, start, base_offset, header.batch_length, entry.epoch)
                else:
                    header = _stamp_and_read(buffer, start, base_offset, entry.epoch)
            else:
                if entry.kind is EntryKind.CONFIG:
                    configs.append(entry)
                buffer += control_batch(entry.kind, entry.payload)
                header = _stamp_and_read(buffer, start, base_offset, entry.epoch)
            if (
                header.last_offset_delta != entry.last_offset - base_offset
                or header.batch_length + LOG_OVERHEAD != len(buffer) - start  # size_bytes
            ):
                raise ValueError(
                    f"{self.raft_group_id}: entry {base_offset}-{entry.last_offset} does not "
                    "hold exactly one batch of its record count"
                )
            headers.append(header)
        if expected:
            expected.clear()  # proposals that never came to be written
        if configs:
            self._save_configs(self._configs + configs)
            self._configs = self._configs + configs
        recent = self._recent
        if recent and recent[-1].last_offset >= entries[0].base_offset:
            recent.clear()  # not an append after them (the core truncates first)
        try:
            self.log.append_replicated(buffer, headers, now)
        except OSError:
            if configs:  # not appended: the checkpoint must not claim them
                self._configs = [e for e in self._configs if e.base_offset < entries[0].base_offset]
            recent.clear()
            raise
        # By index: `headers` holds one header per entry (a list the compiled code indexes
        # natively; zip would make an iterator of each).
        for i in range(len(headers)):
            entry = entries[i]
            header = headers[i]
            if entry.kind is not data:
                recent.append(entry)  # NOOP and CONFIG read back with the payload they carry
            elif not header.attributes & CONTROL_FLAG_MASK:
                recent.append(Entry(entry.base_offset, entry.last_offset, entry.epoch, b""))
            # A control batch proposed as data (a transaction marker) is read back from
            # the log, as `entry_kind_of` tells its kind.
        if len(recent) > 2 * RECENT_ENTRIES:
            del recent[:-RECENT_ENTRIES]

    def expect(self, entry: Entry, header: BatchHeader) -> None:
        """`header`, as `validate_produce_records` read it from `entry`'s payload (one
        batch, offsets and epoch as the client sent them), for the write of `entry`, which
        `propose_unwritten` left to the next `append`: it stamps the batch without
        decoding its header again."""
        self._expected[entry.base_offset] = (entry.payload, header)

    def high_watermark_checkpoint(self) -> int | None:
        """A lower bound of the committed offset, so a restarted replica need not append a
        no-op (an offset gap) before serving what it already committed."""
        if self.single_voter:
            # Its own log is a majority: whatever it persisted was committed.
            return self.log.log_end_offset
        path = self.log.directory / HIGH_WATERMARK_CHECKPOINT
        try:
            value = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        if self.log.log_start_offset <= value <= self.log.log_end_offset:
            return value
        return None

    def on_high_watermark(self, high_watermark: int) -> None:
        """The group committed up to `high_watermark` (every replica hears of it): the log
        forgets the completed transactions it made stable, so their count stays bounded
        on followers and on partitions no read_committed consumer fetches."""
        self.log.on_high_watermark(min(high_watermark, self.log.log_end_offset))

    def save_high_watermark(self, high_watermark: int) -> None:
        """Kafka's replication-offset-checkpoint, per partition: written at clean shutdown."""
        value = max(self.log.log_start_offset, min(high_watermark, self.log.log_end_offset))
        path = self.log.directory / HIGH_WATERMARK_CHECKPOINT
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{value}\n")
        tmp.replace(path)
