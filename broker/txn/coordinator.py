"""The transaction coordinator: Kafka's TransactionCoordinator and TransactionStateManager.

A broker coordinates the transactional ids of the `__transaction_state` partitions it leads
(`partition_for_transaction`); the coordinator epoch of an id is that partition's leader
epoch. On gaining a partition it is "loading" (COORDINATOR_LOAD_IN_PROGRESS) until the log
is committed and replayed; transactions found in PrepareCommit/PrepareAbort resume their
markers. Requests for ids of other partitions get NOT_COORDINATOR.

Every transition is written to the id's partition first (through the groups' `WriteQueue`,
one ordered queue per partition) and adopted only once committed; while a write is pending
the id answers CONCURRENT_TRANSACTIONS. EndTxn answers once Prepare* is written; the
markers then go to every partition of the transaction (`MarkerWriter`, retried with backoff
until each partition answered), then Complete* is written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio
from kio.schema.errors import ErrorCode

import raftka.broker.txn.metadata as transitions
from raftka.broker.groups.store import OffsetsLog, StoredRecord
from raftka.broker.groups.writes import WriteQueue
from raftka.broker.replica import leads
from raftka.broker.topics import (  # the topic's name, named from here by txn/ and handlers
    TRANSACTION_STATE_TOPIC as TRANSACTION_STATE_TOPIC,
)
from raftka.broker.topics import now_ms
from raftka.broker.txn.metadata import TopicPartition, TxnMetadata
from raftka.broker.txn.records import (
    STRING_BYTES_MAX,
    RecordFormatError,
    TxnKey,
    TxnState,
    TxnValue,
    fits_in_record,
    partition_for_transaction,
)

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig
    from raftka.broker.topics import Partition

logger = logging.getLogger("raftka.txn")

# Kept whole (raftka has no compaction); the last record of an id is its state.
TRANSACTION_STATE_TOPIC_CONFIGS = {"retention.ms": "-1", "segment.bytes": str(100 * 1024 * 1024)}
MARKER_BACKOFF_MIN_S = 0.05
MARKER_BACKOFF_MAX_S = 2.0
LOAD_BACKOFF_MIN_S = 0.1
LOAD_BACKOFF_MAX_S = 10.0
# A long replay lets requests and Raft's timers run this often.
REPLAY_YIELD_RECORDS = 1000


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    abort_check_interval_ms: int = 10_000
    marker_timeout_s: float = 10.0

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TxnConfig:
        return cls(
            max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
            abort_check_interval_ms=config.get_int(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"
            ),
        )


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """The markers that end one transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: frozenset[TopicPartition]


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int:
        """An id no broker of the cluster has handed out, before or after a restart."""
        ...


class MarkerWriter(Protocol):
    """Writes a transaction's markers: each partition's leader appends one."""

    async def write(self, job: MarkerJob) -> Mapping[TopicPartition, ErrorCode]:
        """Try every partition of `job` once; its outcome per partition (NONE: the marker
        is committed). A partition missing from the answer is retried."""
        ...


class RemoteVerifier(Protocol):
    """Asks the coordinator of a transactional id elsewhere (KIP-890 verification)."""

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode: ...


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Listing:
    transactional_id: str
    producer_id: int
    state: TxnState


@dataclass(eq=False)
class _Partition:
    epoch: int
    loaded: bool = False
    transactions: dict[str, TxnMetadata] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids whose next state is being written


class TransactionCoordinator:
    """The transactional ids of the `__transaction_state` partitions this broker leads.
    Loads, markers and the timeout task run in the nursery of `run`."""

    def __init__(
        self,
        log: OffsetsLog,
        producer_ids: ProducerIdSource,
        markers: MarkerWriter,
        config: TxnConfig | None = None,
        clock_ms: Callable[[], int] = lambda: int(now_ms()),
        remote: RemoteVerifier | None = None,
    ) -> None:
        self.log = log
        self.producer_ids = producer_ids
        self.markers = markers
        self.config = config or TxnConfig()
        self.clock_ms = clock_ms
        self.remote = remote
        self.writes = WriteQueue(log, topic_name=TRANSACTION_STATE_TOPIC)
        self.partitions: dict[int, _Partition] = {}
        self._nursery: trio.Nursery | None = None
        self._markers_running: set[tuple[str, int, int, int]] = set()

    # -- ownership -----------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transaction(transactional_id, self.log.num_partitions)

    def owner_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates the id now; else NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS."""
        index = self.partition_for(transactional_id)
        partition = self.partitions.get(index)
        if partition is None:
            return ErrorCode.not_coordinator
        if self.log.leader_epoch(index) != partition.epoch:
            self.resign(index)  # leadership moved without this broker hearing of it
            return ErrorCode.not_coordinator
        if not partition.loaded:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def _owned(self, transactional_id: str) -> _Partition | ErrorCode:
        error = self.owner_error(transactional_id)
        if error != ErrorCode.none:
            return error
        return self.partitions[self.partition_for(transactional_id)]

    def load(self) -> int:
        """Start loading every partition this broker already leads; how many."""
        led = self.log.led_partitions()
        for index, epoch in led.items():
            self.become_leader(index, epoch)
        return len(led)

    def on_partition_leadership(self, partition: Partition) -> None:
        """A `TopicManager` leadership listener: follows `__transaction_state` partitions."""
        if partition.topic.name != TRANSACTION_STATE_TOPIC:
            return
        if leads(partition):
            self.become_leader(partition.index, partition.leader_epoch)
        else:
            self.resign(partition.index)

    def become_leader(self, index: int, epoch: int) -> None:
        current = self.partitions.get(index)
        if current is not None and current.epoch == epoch:
            return
        self.partitions[index] = _Partition(epoch)
        logger.info("loading %s-%d (epoch %d)", TRANSACTION_STATE_TOPIC, index, epoch)
        if self._nursery is not None:
            self._nursery.start_soon(self._load, index, epoch)

    def resign(self, index: int) -> None:
        dropped = self.partitions.pop(index, None)
        if dropped is not None:
            logger.info(
                "no longer coordinating %s-%d: dropped %d transactional ids",
                TRANSACTION_STATE_TOPIC,
                index,
                len(dropped.transactions),
            )

    async def run(self) -> None:
        """Write queues, loads, markers and the timeout task, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                nursery.start_soon(self.writes.run)
                for index, partition in list(self.partitions.items()):
                    if not partition.loaded:
                        nursery.start_soon(self._load, index, partition.epoch)
                nursery.start_soon(self._abort_timed_out_loop)
                await trio.sleep_forever()
            finally:
                # Forgotten before the nursery waits for its tasks, which trio may close
                # before `run` returns: what is heard meanwhile starts nothing.
                self._nursery = None

    def _loading(self, index: int, epoch: int) -> _Partition | None:
        """The partition while this broker still leads and loads it at `epoch`."""
        partition = self.partitions.get(index)
        if partition is None or partition.epoch != epoch or partition.loaded:
            return None
        if self.log.leader_epoch(index) != epoch:
            return None
        return partition

    async def _load(self, index: int, epoch: int) -> None:
        """Wait for the partition's log to be committed, then replay it. A failure is
        logged and retried (with backoff) while this broker still leads at `epoch`; the
        partition is resigned once it does not."""
        backoff_s = LOAD_BACKOFF_MIN_S
        while True:
            try:
                loaded = await self._load_once(index, epoch)
            except Exception:
                logger.exception(
                    "cannot load %s-%d (epoch %d); retrying in %.1f s",
                    TRANSACTION_STATE_TOPIC,
                    index,
                    epoch,
                    backoff_s,
                )
                loaded = False
            if loaded or self._loading(index, epoch) is None:
                break
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, LOAD_BACKOFF_MAX_S)
        partition = self.partitions.get(index)
        if partition is not None and partition.epoch == epoch and not partition.loaded:
            self.resign(index)  # no longer leads at `epoch` (a newer term loads anew)
            return
        if not loaded or partition is None:
            return
        logger.info(
            "loaded %s-%d (epoch %d): %d transactional ids",
            TRANSACTION_STATE_TOPIC,
            index,
            epoch,
            len(partition.transactions),
        )
        for meta in partition.transactions.values():
            if meta.state.is_prepare:
                self._send_markers(meta, epoch)

    async def _load_once(self, index: int, epoch: int) -> bool:
        """One attempt; True once the partition is loaded."""
        if not await self.log.wait_caught_up(index, epoch):
            return False
        if self._loading(index, epoch) is None:
            return False
        transactions = await self._replay(index, epoch)
        partition = self._loading(index, epoch)
        if transactions is None or partition is None:
            return False
        partition.transactions = transactions
        partition.loaded = True
        return True

    async def _replay(self, index: int, epoch: int) -> dict[str, TxnMetadata] | None:
        """The ids of the partition as its committed records leave them; None when this
        broker stopped loading it at `epoch` meanwhile. Yields to other tasks every
        `REPLAY_YIELD_RECORDS` records."""
        loaded: dict[str, TxnMetadata] = {}
        for count, entry in enumerate(self.log.replay_log(index), 1):
            if count % REPLAY_YIELD_RECORDS == 0:
                await trio.sleep(0)
                if self._loading(index, epoch) is None:
                    return None
            if not isinstance(entry, StoredRecord):
                continue  # no transaction writes to this topic, so no markers either
            key, value = entry.key, entry.value
            try:
                transactional_id = TxnKey.decode(key).transactional_id
                if value is None:
                    loaded.pop(transactional_id, None)
                else:
                    loaded[transactional_id] = TxnMetadata.from_value(
                        transactional_id, TxnValue.decode(value)
                    )
            except (RecordFormatError, UnicodeDecodeError) as exc:
                logger.warning("skipping unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)
        return {t: m for t, m in loaded.items() if self.partition_for(t) == index}

    # -- writing a transition --------------------------------------------------------------

    async def _write(self, partition: _Partition, new: TxnMetadata) -> ErrorCode:
        """Write `new` and adopt it once committed (if this broker still coordinates the id
        at the same epoch). The caller has checked nothing else is pending for the id."""
        transactional_id = new.transactional_id
        partition.pending.add(transactional_id)
        try:
            await self.writes.wait_for_room(transactional_id)
            job = self.writes.append(
                transactional_id,
                [(TxnKey(transactional_id).encode(), new.to_value().encode())],
                leader_epoch=partition.epoch,
            )
            error = await job.wait()
        finally:
            partition.pending.discard(transactional_id)
        current = self.partitions.get(self.partition_for(transactional_id))
        if current is not partition:
            return ErrorCode.not_coordinator
        if error == ErrorCode.none:
            partition.transactions[transactional_id] = new
        return error

    # -- InitProducerId ----------------------------------------------------------------------

    def validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> InitResult:
        """InitProducerId with a transactional id. `expected` (KIP-360) is the producer's
        current (producer id, epoch) when it asks to bump its own epoch."""
        if not valid_transactional_id(transactional_id):
            return InitResult(ErrorCode.invalid_request)
        if not self.validate_timeout(timeout_ms):
            return InitResult(ErrorCode.invalid_transaction_timeout)
        allocated: int | None = None  # a producer id taken before deciding again
        while True:
            owned = self._owned(transactional_id)
            if isinstance(owned, ErrorCode):
                return InitResult(owned)
            if transactional_id in owned.pending:
                return InitResult(ErrorCode.concurrent_transactions)
            meta = owned.transactions.get(transactional_id)
            if allocated is not None or not self._needs_producer_id(meta, expected):
                break
            # The id's state may change while the allocator waits (an AddPartitions, a
            # reload): take the id, then decide again on what is there afterwards.
            allocated = await self.producer_ids.next_producer_id()
        now = self.clock_ms()
        if meta is None:
            assert allocated is not None, "a new transactional id has a producer id"
            meta = TxnMetadata(
                transactional_id, allocated, timeout_ms=timeout_ms, last_update_ms=now
            )
            allocated = None
        error = transitions.init_error(meta, expected)
        if error is not None:
            return InitResult(error)
        if meta.state == TxnState.ONGOING:
            # Fence the producer: abort its transaction at a bumped epoch; the client
            # retries on CONCURRENT_TRANSACTIONS and then gets the epoch after that.
            fenced = transitions.prepare_end(transitions.fence_epoch(meta), False, now)
            error = await self._write(owned, fenced)
            if error != ErrorCode.none:
                return InitResult(error)
            self._send_markers(fenced, owned.epoch)
            return InitResult(ErrorCode.concurrent_transactions)
        new: TxnMetadata | ErrorCode
        if transitions.needs_new_producer_id(meta, expected):
            assert allocated is not None, "a rotation has its producer id"
            new = transitions.rotate_producer_id(
                meta, allocated, timeout_ms, now, keep_last=expected is not None
            )
        else:
            new = transitions.bump_epoch(
                meta, timeout_ms, None if expected is None else expected[1], now
            )
        if isinstance(new, ErrorCode):
            return InitResult(new)
        error = await self._write(owned, new)
        if error != ErrorCode.none:
            return InitResult(error)
        logger.info(
            "initialized transactional id %r: producer id %d, epoch %d",
            transactional_id,
            new.producer_id,
            new.producer_epoch,
        )
        return InitResult(ErrorCode.none, new.producer_id, new.producer_epoch)

    @staticmethod
    def _needs_producer_id(meta: TxnMetadata | None, expected: tuple[int, int] | None) -> bool:
        """Whether InitProducerId on `meta` (None: a new id) takes a new producer id."""
        if meta is None:
            return True
        return (
            transitions.init_error(meta, expected) is None
            and meta.state != TxnState.ONGOING
            and transitions.needs_new_producer_id(meta, expected)
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def _producer_error(
        self, owned: _Partition, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> ErrorCode | TxnMetadata:
        meta = owned.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if transactional_id in owned.pending or meta.state.is_prepare:
            return ErrorCode.concurrent_transactions
        return meta

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        """Add partitions to the producer's transaction (starting it)."""
        if not valid_transactional_id(transactional_id):
            return ErrorCode.invalid_request
        owned = self._owned(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        meta = self._producer_error(owned, transactional_id, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return meta
        wanted = frozenset(partitions)
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return ErrorCode.none
        return await self._write(owned, transitions.add_partitions(meta, wanted, self.clock_ms()))

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """KIP-890 verification on this coordinator: is the partition in the producer's
        ongoing transaction? (Kafka's errors for AddPartitionsToTxn v4+ verify_only.)"""
        if not valid_transactional_id(transactional_id):
            return ErrorCode.invalid_request
        owned = self._owned(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        meta = owned.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.state.is_prepare:
            return ErrorCode.concurrent_transactions
        if meta.state == TxnState.ONGOING and tp in meta.partitions:
            return ErrorCode.none
        return ErrorCode.invalid_txn_state

    async def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> ErrorCode:
        """ErrorCode.none when (producer_id, producer_epoch) is the current producer of
        `transactional_id` and its ongoing transaction includes topic-partition; otherwise
        Kafka's error for the produce request (INVALID_TXN_STATE when the partition was not
        added, INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a stale epoch,
        NOT_ENOUGH_REPLICAS when the coordinator cannot answer now, which clients retry)."""
        tp = (topic, partition)
        error = self.verify(transactional_id, producer_id, producer_epoch, tp)
        if error == ErrorCode.not_coordinator and self.remote is not None:
            error = await self.remote.verify(transactional_id, producer_id, producer_epoch, tp)
        return produce_error(error)

    async def verify_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """KIP-890 verification of a TxnOffsetCommit, as Kafka 3.9 makes it: the group's
        `__consumer_offsets` partition `tp` must be in the producer's ongoing transaction
        (added by AddOffsetsToTxn). ErrorCode.none, or the error the TxnOffsetCommit answers
        for every partition (`offset_commit_error`)."""
        error = self.verify(transactional_id, producer_id, producer_epoch, tp)
        if error == ErrorCode.not_coordinator and self.remote is not None:
            error = await self.remote.verify(transactional_id, producer_id, producer_epoch, tp)
        return offset_commit_error(error)

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> InitResult:
        """EndTxn: answers once PrepareCommit/PrepareAbort is written; the markers and the
        Complete* record follow in the background."""
        if not valid_transactional_id(transactional_id):
            return InitResult(ErrorCode.invalid_request)
        owned = self._owned(transactional_id)
        if isinstance(owned, ErrorCode):
            return InitResult(owned)
        meta = owned.transactions.get(transactional_id)
        if meta is None:
            return InitResult(ErrorCode.invalid_producer_id_mapping)
        error = transitions.end_error(meta, producer_id, producer_epoch, commit)
        if error is None and transactional_id in owned.pending:
            error = ErrorCode.concurrent_transactions
        if error == ErrorCode.none:
            return InitResult(error, meta.producer_id, meta.producer_epoch)
        if error is not None:
            if error == ErrorCode.invalid_txn_state:
                logger.info(
                    "EndTxn(%s) of %r refused in state %s",
                    "commit" if commit else "abort",
                    transactional_id,
                    meta.state.kafka_name,
                )
            return InitResult(error)
        prepared = transitions.prepare_end(meta, commit, self.clock_ms())
        error = await self._write(owned, prepared)
        if error != ErrorCode.none:
            return InitResult(error)
        self._send_markers(prepared, owned.epoch)
        return InitResult(ErrorCode.none, prepared.producer_id, prepared.producer_epoch)

    # -- markers -----------------------------------------------------------------------------

    def _send_markers(self, meta: TxnMetadata, coordinator_epoch: int) -> None:
        # Keyed by coordinator epoch too: a job of an earlier term of this broker gives up
        # at its next check, so a reload must not take it for a duplicate.
        key = (meta.transactional_id, meta.producer_id, meta.producer_epoch, coordinator_epoch)
        if key in self._markers_running or self._nursery is None:
            return
        self._markers_running.add(key)
        job = MarkerJob(
            transactional_id=meta.transactional_id,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            coordinator_epoch=coordinator_epoch,
            committed=meta.state == TxnState.PREPARE_COMMIT,
            partitions=meta.partitions,
        )
        self._nursery.start_soon(self._complete, job)

    def _still_preparing(self, job: MarkerJob) -> tuple[_Partition, TxnMetadata] | None:
        index = self.partition_for(job.transactional_id)
        partition = self.partitions.get(index)
        if (
            partition is None
            or partition.epoch != job.coordinator_epoch
            or self.log.leader_epoch(index) != job.coordinator_epoch
        ):
            return None
        meta = partition.transactions.get(job.transactional_id)
        if (
            meta is None
            or not meta.state.is_prepare
            or (meta.producer_id, meta.producer_epoch) != (job.producer_id, job.producer_epoch)
        ):
            return None
        return partition, meta

    async def _complete(self, job: MarkerJob) -> None:
        """Markers to every partition of the transaction, then Complete*; given up once this
        broker no longer coordinates the id at the job's epoch (the next one resumes)."""
        key = (job.transactional_id, job.producer_id, job.producer_epoch, job.coordinator_epoch)
        try:
            remaining = set(job.partitions)
            backoff_s = MARKER_BACKOFF_MIN_S
            while remaining:
                if self._still_preparing(job) is None:
                    return
                answers = await self.markers.write(
                    dataclasses.replace(job, partitions=frozenset(remaining))
                )
                for tp, error in answers.items():
                    if error == ErrorCode.none:
                        remaining.discard(tp)
                    elif error == ErrorCode.unknown_topic_or_partition:
                        logger.info(
                            "no marker for %s-%d of %r: the partition is gone",
                            tp[0],
                            tp[1],
                            job.transactional_id,
                        )
                        remaining.discard(tp)
                    elif error == ErrorCode.invalid_producer_epoch:
                        # The partition saw a newer epoch of this producer: this marker is
                        # obsolete there, as in Kafka's marker completion handler.
                        logger.warning(
                            "marker for %s-%d of %r refused: a newer producer epoch wrote there",
                            tp[0],
                            tp[1],
                            job.transactional_id,
                        )
                        remaining.discard(tp)
                if remaining:
                    await trio.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, MARKER_BACKOFF_MAX_S)
            backoff_s = MARKER_BACKOFF_MIN_S
            while True:
                found = self._still_preparing(job)
                if found is None:
                    return
                partition, meta = found
                if job.transactional_id in partition.pending:
                    await trio.sleep(backoff_s)
                    continue
                error = await self._write(partition, transitions.complete(meta, self.clock_ms()))
                if error == ErrorCode.none:
                    return
                # NOT_COORDINATOR also means "not committed in time" while this broker still
                # leads: retried until `_still_preparing` says this term no longer owns it.
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, MARKER_BACKOFF_MAX_S)
        finally:
            self._markers_running.discard(key)

    # -- timeouts ----------------------------------------------------------------------------

    async def _abort_timed_out_loop(self) -> None:
        interval_s = self.config.abort_check_interval_ms / 1000
        while True:
            await trio.sleep(interval_s)
            await self.abort_timed_out()

    async def abort_timed_out(self) -> int:
        """Abort (with a bumped epoch, fencing the producer) every Ongoing transaction older
        than its timeout, as Kafka's abortTimedOutTransactions; how many were started."""
        now = self.clock_ms()
        expired = [
            (partition, meta)
            for partition in list(self.partitions.values())
            if partition.loaded
            for meta in list(partition.transactions.values())
            if meta.state == TxnState.ONGOING
            and meta.transactional_id not in partition.pending
            and meta.start_ms + meta.timeout_ms < now
        ]
        for partition, meta in expired:
            if self.partitions.get(self.partition_for(meta.transactional_id)) is not partition:
                continue
            current = partition.transactions.get(meta.transactional_id)
            if current != meta or meta.transactional_id in partition.pending:
                continue
            logger.info(
                "aborting transaction of %r (producer id %d, epoch %d): ongoing for longer "
                "than its timeout of %d ms",
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                meta.timeout_ms,
            )
            fenced = transitions.prepare_end(transitions.fence_epoch(meta), False, now)
            if await self._write(partition, fenced) == ErrorCode.none:
                self._send_markers(fenced, partition.epoch)
        return len(expired)

    # -- Describe / List -------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        if not valid_transactional_id(transactional_id):
            return ErrorCode.invalid_request
        owned = self._owned(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        meta = owned.transactions.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return ErrorCode.transactional_id_not_found
        return meta

    def list_transactions(
        self,
        states: Iterable[TxnState] | None = None,
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
    ) -> list[Listing] | ErrorCode:
        """Ids of every loaded partition, filtered as Kafka's ListTransactions: by state
        (None: any; empty: none), producer id (empty: any), and time since the transaction
        started (negative: any). COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""
        if any(not p.loaded for p in self.partitions.values()):
            return ErrorCode.coordinator_load_in_progress
        wanted_states = None if states is None else frozenset(states)
        wanted_ids = frozenset(producer_ids)
        now = self.clock_ms()
        return [
            Listing(meta.transactional_id, meta.producer_id, meta.state)
            for partition in self.partitions.values()
            for meta in partition.transactions.values()
            if meta.state != TxnState.DEAD
            and (wanted_states is None or meta.state in wanted_states)
            and (not wanted_ids or meta.producer_id in wanted_ids)
            and (duration_ms < 0 or now - meta.start_ms > duration_ms)
        ]


def valid_transactional_id(transactional_id: str) -> bool:
    """Whether a request may name this transactional id: not empty, and short enough for
    the key of its `__transaction_state` records (compact strings allow longer ones). Kafka
    answers INVALID_REQUEST for one it refuses; nothing is allocated or written."""
    if transactional_id and fits_in_record(transactional_id):
        return True
    if transactional_id:
        logger.info(
            "refused a transactional id of %d UTF-8 bytes: at most %d fit in a record",
            len(transactional_id.encode()),
            STRING_BYTES_MAX,
        )
    return False


def offset_commit_error(error: ErrorCode) -> ErrorCode:
    """A coordinator's verification answer as a TxnOffsetCommit reports it. Kafka 3.9 passes
    the partition's error through (INVALID_PRODUCER_ID_MAPPING for a producer id that is not
    the transactional id's, INVALID_TXN_STATE for offsets not added to the transaction), a
    fenced epoch as INVALID_PRODUCER_EPOCH, and a coordinator that cannot answer now as
    COORDINATOR_NOT_AVAILABLE, which clients retry."""
    if error in (
        ErrorCode.none,
        ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.invalid_request,
        ErrorCode.concurrent_transactions,
    ):
        return error
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.coordinator_not_available


def produce_error(error: ErrorCode) -> ErrorCode:
    """A coordinator's verification answer as the produce request reports it."""
    if error in (ErrorCode.none, ErrorCode.invalid_txn_state):
        return error
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error in (ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_request):
        return ErrorCode.invalid_txn_state
    # Not coordinator, loading, a transaction ending: the producer retries.
    return ErrorCode.not_enough_replicas
