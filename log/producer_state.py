"""Per-partition state of idempotent producers (KIP-98), from batch headers only.

For each producer id the partition remembers its epoch and the sequence and offset ranges of
its last `BATCHES_KEPT` batches (Kafka keeps 5, the client's max.in.flight limit), which is
what Kafka's ProducerStateManager / ProducerAppendInfo check a client's batch against:

- an epoch older than the known one -> INVALID_PRODUCER_EPOCH;
- the same epoch and the same (first, last) sequence as a retained batch -> a duplicate: it
  is not appended and the caller answers with the original offsets;
- a newer epoch must start at sequence 0, the same epoch must continue right after the last
  sequence (sequences wrap from INT32_MAX to 0) -> else OUT_OF_ORDER_SEQUENCE_NUMBER;
- an unknown producer may start at any sequence (its state may have expired or been lost to
  retention, as Kafka allows since KIP-360).

Replicated batches and batches replayed from the log update the state without checks.

Transactions (KIP-98): a producer's first transactional batch starts its ongoing transaction
at that batch's first offset; its COMMIT or ABORT control batch (the transaction marker) ends
it. Until the high watermark passes the marker, the completed transaction still holds back
the last stable offset (Kafka's firstUnstableOffset), so read_committed consumers never see
data whose fate a truncation could still change.

Snapshots (`<offset>.snapshot`, 20-digit offset, like Kafka's) hold the state as of an
offset, so that opening a log replays only the batch headers after the newest snapshot.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c

from raftka.protocol.batch_builder import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from raftka.protocol.records import BatchHeader

from .epochs import write_file_atomically

#: Batches remembered per producer (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
BATCHES_KEPT = 5
INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1
#: Kafka's producer.id.expiration.ms default (one day).
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

# Kafka error codes raised by `check` and `check_marker`.
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52

NO_OFFSET = -1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
# version int16 | crc32c uint32 (of everything after it) | producer count int32
_SNAPSHOT_HEADER = struct.Struct(">hIi")
# producer id int64 | epoch int16 | last timestamp int64 | coordinator epoch int32 |
# ongoing transaction's first offset int64 (-1: none) | batch count int8
_SNAPSHOT_ENTRY = struct.Struct(">qhqiqb")
# first seq int32 | last seq int32 | first offset int64 | last offset int64 | timestamp int64
_SNAPSHOT_BATCH = struct.Struct(">iiqqq")
#: Snapshot files kept per partition; older ones are deleted when a new one is written.
SNAPSHOTS_KEPT = 2


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment`, wrapping past INT32_MAX to 0 (Kafka's incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


def last_sequence_of(header: BatchHeader) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return increment_sequence(header.base_sequence, header.last_offset_delta)


class BatchMetadata(NamedTuple):
    """Where one producer batch landed: its sequence range and offset range."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int  # the batch's max timestamp (its append time with LogAppendTime)


class CompletedTxn(NamedTuple):
    """A transaction ended by the marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(eq=False, slots=True)
class ProducerEntry:
    """A producer's epoch, its newest batches (oldest first) and its ongoing transaction."""

    producer_id: int
    epoch: int
    last_timestamp_ms: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET  # first offset of the ongoing transaction
    # Bumped when a transaction ends or the epoch changes (memory only): a Produce that
    # awaited the coordinator's verification appends only if it has not moved since.
    txn_generation: int = 0

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(
        self, epoch: int, first_sequence: int, last_sequence: int
    ) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


class ProducerStateError(Exception):
    """A client batch the producer rules reject; `error_code` is the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class ProducerStateManager:
    """Producer entries of one partition. Not thread-safe; owned by the partition log."""

    def __init__(self, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its ongoing transaction (the entries' own field,
        # indexed so the LSO costs the few open transactions, not every producer).
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker the high watermark has not passed yet, in
        # marker order (`on_high_watermark` drops the replicated ones).
        self.unreplicated_txns: deque[CompletedTxn] = deque()

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self.unreplicated_txns.clear()

    # -- transactions ---------------------------------------------------------------------
    def txn_generation(self, producer_id: int) -> int:
        """The producer's `txn_generation`, -1 while the partition does not know it."""
        entry = self.producers.get(producer_id)
        return -1 if entry is None else entry.txn_generation

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker lies below `high_watermark`."""
        txns = self.unreplicated_txns
        while txns and txns[0].last_offset < high_watermark:
            txns.popleft()

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The smallest first offset of an ongoing transaction or of a completed one whose
        marker is not yet replicated (below `high_watermark`, when given: those not yet
        forgotten by `on_high_watermark` count as replicated) (Kafka's
        firstUnstableOffset); None if there is none. Changes nothing."""
        found = min(self._ongoing.values()) if self._ongoing else None
        for txn in self.unreplicated_txns:
            if high_watermark is not None and txn.last_offset < high_watermark:
                continue
            if found is None or txn.first_offset < found:
                found = txn.first_offset
        return found

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO an aborted-transaction index entry records for `completed`: the first
        offset of the earliest other ongoing transaction, else just past the marker."""
        found = completed.last_offset + 1
        for producer_id, first in self._ongoing.items():
            if producer_id != completed.producer_id:
                found = min(found, first)
        return found

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Check a transaction marker the leader is about to write; raises
        ProducerStateError for an epoch older than the producer's (INVALID_PRODUCER_EPOCH)
        or a coordinator epoch older than the last marker's (TRANSACTION_COORDINATOR_FENCED).
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} is {epoch}, which is smaller than the last "
                f"seen epoch {entry.epoch}: the marker is from a fenced producer",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                TRANSACTION_COORDINATOR_FENCED,
                f"Coordinator epoch {coordinator_epoch} of the marker for producer "
                f"{producer_id} is older than the last seen {entry.coordinator_epoch}",
            )

    # -- checking a client's batches ------------------------------------------------------
    def check(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Check client batches before they are appended; nothing is changed.

        Returns the metadata of the original batch when `headers` is one batch that is a
        duplicate of a retained one (do not append it; answer its offsets). Raises
        ProducerStateError for a fenced epoch, a sequence out of order, or a
        non-transactional batch of a producer inside a transaction (INVALID_TXN_STATE).
        Batches without a producer id pass.
        """
        # Later batches of the same request continue after earlier ones.
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence)
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            epoch = header.producer_epoch
            first = header.base_sequence
            last = last_sequence_of(header)
            if producer_id in pending:
                known_epoch, known_last = pending[producer_id]
                entry = None
            else:
                entry = self.producers.get(producer_id)
                if entry is None:
                    pending[producer_id] = (epoch, last)
                    continue
                known_epoch, known_last = entry.epoch, entry.last_sequence
                duplicate = entry.find_duplicate(epoch, first, last)
                if duplicate is not None:
                    if len(headers) != 1:
                        raise ProducerStateError(
                            DUPLICATE_SEQUENCE_NUMBER,
                            f"batch of producer {producer_id} with sequences {first}..{last} "
                            "is a duplicate inside a request of several batches",
                        )
                    return duplicate
            if epoch < known_epoch:
                raise ProducerStateError(
                    INVALID_PRODUCER_EPOCH,
                    f"Epoch of producer {producer_id} is {epoch}, which is smaller than "
                    f"the last seen epoch {known_epoch}",
                )
            if epoch != known_epoch:
                if first != 0:
                    raise ProducerStateError(
                        OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"Invalid sequence number for new epoch of producer {producer_id}: "
                        f"{epoch} (request epoch), {first} (seq. number), "
                        f"{known_epoch} (current producer epoch)",
                    )
            elif known_last != NO_SEQUENCE and not in_sequence(known_last, first):
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Out of order sequence number for producer {producer_id}: {first} "
                    f"(incoming seq. number), {known_last} (current end sequence number)",
                )
            if (
                entry is not None
                and not header.is_transactional
                and entry.current_txn_first_offset != NO_OFFSET
            ):
                raise ProducerStateError(
                    INVALID_TXN_STATE,
                    f"Expected a transactional write from producer {producer_id}: its "
                    f"transaction from offset {entry.current_txn_first_offset} is ongoing",
                )
            pending[producer_id] = (epoch, last)
        return None

    # -- recording appended batches -------------------------------------------------------
    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        timestamp_ms: int,
        marker: tuple[int, int] | None = None,
    ) -> CompletedTxn | None:
        """Record a batch appended at `first_offset` (client, replicated or replayed).

        A control batch needs `marker`, its (control type, coordinator epoch), to end the
        producer's transaction; returns the transaction a COMMIT or ABORT marker completed
        (None when the producer had none ongoing: nothing becomes visible or hidden).
        """
        producer_id = header.producer_id
        if producer_id < 0:
            return None
        if header.is_control:
            if marker is None or marker[0] not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
                return None
            return self._end_txn(header, first_offset, timestamp_ms, *marker)
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, header.producer_epoch)
            self.producers[producer_id] = entry
        elif header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
            entry.txn_generation += 1
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                last_sequence_of(header),
                first_offset,
                first_offset + header.last_offset_delta,
                timestamp_ms,
            )
        )
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset
        return None

    def _end_txn(
        self,
        header: BatchHeader,
        offset: int,
        timestamp_ms: int,
        control_type: int,
        coordinator_epoch: int,
    ) -> CompletedTxn | None:
        producer_id = header.producer_id
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, header.producer_epoch)
            self.producers[producer_id] = entry
        completed = None
        if entry.current_txn_first_offset != NO_OFFSET:
            aborted = control_type == CONTROL_TYPE_ABORT
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset, aborted)
            self.unreplicated_txns.append(completed)
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.txn_generation += 1
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = NO_OFFSET
        self._ongoing.pop(producer_id, None)
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        return completed

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for `expiration_ms` or longer (never one inside a
        transaction, as Kafka); returns how many went."""
        limit = now_ms - self.expiration_ms
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.last_timestamp_ms <= limit and e.current_txn_first_offset == NO_OFFSET
        ]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    # -- snapshots ------------------------------------------------------------------------
    def serialize(self) -> bytes:
        body = bytearray()
        for entry in self.producers.values():
            body += _SNAPSHOT_ENTRY.pack(
                entry.producer_id,
                entry.epoch,
                entry.last_timestamp_ms,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(entry.batches),
            )
            for batch in entry.batches:
                body += _SNAPSHOT_BATCH.pack(*batch)
        count = struct.pack(">i", len(self.producers))
        crc = crc32c.crc32c(count + body)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc) + count + bytes(body)

    @classmethod
    def deserialize(
        cls, data: bytes, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> ProducerStateManager | None:
        """The state in a snapshot, or None if it is malformed or fails its CRC."""
        try:
            version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
            if version != SNAPSHOT_VERSION or crc32c.crc32c(data[6:]) != crc or count < 0:
                return None
            state = cls(expiration_ms)
            pos = _SNAPSHOT_HEADER.size
            for _ in range(count):
                fields = _SNAPSHOT_ENTRY.unpack_from(data, pos)
                producer_id, epoch, last_ts, coordinator_epoch, txn_first, n = fields
                pos += _SNAPSHOT_ENTRY.size
                if not 0 <= n <= BATCHES_KEPT:
                    return None
                entry = ProducerEntry(
                    producer_id,
                    epoch,
                    last_ts,
                    coordinator_epoch=coordinator_epoch,
                    current_txn_first_offset=txn_first,
                )
                for _ in range(n):
                    entry.batches.append(BatchMetadata(*_SNAPSHOT_BATCH.unpack_from(data, pos)))
                    pos += _SNAPSHOT_BATCH.size
                state.producers[producer_id] = entry
                if txn_first != NO_OFFSET:
                    state._ongoing[producer_id] = txn_first
            if pos != len(data):
                return None
        except struct.error:
            return None
        return state


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    offsets = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        match = _SNAPSHOT_FILE.match(name)
        if match is not None:
            offsets.append(int(match.group(1)))
    return sorted(offsets)


def write_snapshot(
    directory: Path, offset: int, state: ProducerStateManager, durable: bool = True
) -> Path:
    """Store `state` as of `offset` (fsynced unless `durable` is False) and keep only the
    newest SNAPSHOTS_KEPT files; returns the snapshot's path."""
    path = snapshot_path(directory, offset)
    write_file_atomically(path, state.serialize(), durable)
    for old in list_snapshots(directory)[:-SNAPSHOTS_KEPT]:
        snapshot_path(directory, old).unlink(missing_ok=True)
    return path


def delete_snapshots_after(directory: Path, offset: int) -> None:
    """Remove snapshots taken beyond `offset` (their state describes data that is gone)."""
    for found in list_snapshots(directory):
        if found > offset:
            snapshot_path(directory, found).unlink(missing_ok=True)


def load_latest_snapshot(
    directory: Path, max_offset: int, expiration_ms: int
) -> tuple[int, ProducerStateManager] | None:
    """The newest readable snapshot at or below `max_offset` as (offset, state).

    Snapshots above `max_offset` and unreadable ones are deleted.
    """
    for found in reversed(list_snapshots(directory)):
        path = snapshot_path(directory, found)
        if found > max_offset:
            path.unlink(missing_ok=True)
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        state = ProducerStateManager.deserialize(data, expiration_ms)
        if state is None:
            path.unlink(missing_ok=True)
            continue
        return found, state
    return None
