"""A producer's append to one partition: validation by batch headers, the topic's codec, the
producer-state checks, transaction verification and the per-partition write queues.

Records stay opaque: only the 61-byte batch headers are read and only baseOffset and
partitionLeaderEpoch are rewritten (LogAppendTime topics also restamp maxTimestamp).

Batches with a producer id are checked against the partition's producer state (epoch and
sequence, `log.producer_state`) right before the propose, with no await in between, so no
other request can interleave. A retried duplicate is not appended; its answer carries the
original base offset, as Kafka's does.

A producer's first transactional batch on a partition (no ongoing transaction of it at that
epoch) is verified with the transaction coordinator first (KIP-890): its error is the
partition's answer and nothing is written. Until that batch is appended or refused, the
same producer's later writes to the partition queue behind it (`WriteQueues.verifying`), so
its pipelined batches keep their order; other producers' writes go on meanwhile. After the
await every check runs again right before the append, since the partition may have changed
meanwhile; and if the producer's transaction ended or its epoch changed on the partition
meanwhile (its marker landed), the batch is refused with INVALID_TXN_STATE rather than
opening a transaction no coordinator would end (Kafka's verification guard).

A topic whose `compression.type` is a codec stores batches in it: a batch in another codec
is validated, then its records are recompressed (`log/validation.py`) before the producer
checks and the Raft append, so every replica stores the same bytes. Large batches are
recompressed (and compacted topics' batches scanned for keyless records) in a worker thread;
meanwhile later writes to the partition queue behind them (`WriteQueues.last_queued`), so a
producer's pipelined batches keep their order.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.replica.types import AppendResult, TransactionVerifier
from raftka.broker.topics import Partition, now_ms
from raftka.consensus.core import NotLeaderError, StorageError
from raftka.log import PartitionLog
from raftka.log.producer_state import (
    INVALID_TXN_STATE,
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
    increment_sequence,
    last_sequence_of,
)
from raftka.log.validation import (
    LEVEL_CONFIGS,
    codec_differs,
    keyless_records_of,
    keyless_refusal_message,
    validated_and_recompressed,
    validated_keyless_records,
    worth_a_thread,
)
from raftka.protocol.recompress import TOPIC_CODECS
from raftka.protocol.records import (
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    InvalidRecords,
    set_log_append_time,
    validate_produce_records,
)

logger = logging.getLogger("raftka.produce")

#: What an append's answer waits for: (the end offset of its batch, the epoch it was
#: written in, or None for a duplicate written earlier), and the answer to fill in.
AckWait = tuple[Partition, tuple[int, int | None], AppendResult]


@dataclass(slots=True)
class WriteQueues:
    """The writes waiting on each partition: `last_queued` is set when the last write queued
    behind a worker thread was appended or refused (later writes queue behind it);
    `verifying` maps a producer id to the event set when the last of its writes waiting
    for (or queued behind) a verification was appended or refused."""

    last_queued: dict[Partition, trio.Event] = field(default_factory=dict)
    verifying: dict[Partition, dict[int, trio.Event]] = field(default_factory=dict)
    #: Partitions with batches proposed but not yet written (group commit), each once.
    unwritten: list[Partition] = field(default_factory=list)
    #: Partitions whose unwritten batches could not be written, since the first of those
    #: batches was proposed: their answers fail with the error.
    write_failures: dict[Partition, NotLeaderError] = field(default_factory=dict)
    #: Per partition and idempotent producer, the (epoch, last sequence) of its last batch
    #: proposed unwritten: its next batch in sequence needs no write before its check.
    unwritten_sequences: dict[tuple[Partition, int], tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NeedsVerification:
    """The batch starts a transaction on the partition: the coordinator must confirm the
    partition is in it (the producer id and epoch) before it is appended. `log`, `state`
    and `generation` are what the partition knew of the producer before the await (Kafka's
    verification guard): if any changed meanwhile (a marker ended the transaction, the
    epoch moved, the log was replaced), the verified batch could open a transaction that
    no coordinator will end, so it is refused."""

    producer_id: int
    producer_epoch: int
    log: PartitionLog
    state: ProducerStateManager
    generation: int


def check_producer_state(
    log: PartitionLog, headers: list[BatchHeader], verified: NeedsVerification | None
) -> BatchMetadata | NeedsVerification | None:
    """The retained batch `headers` duplicates, if any, or what to verify for a
    transactional batch that starts a transaction here (unless it was `verified`); raises
    ProducerStateError."""
    state = log.producer_state
    duplicate = state.check(headers)
    if duplicate is not None:
        return duplicate
    for header in headers:
        if not header.is_transactional:
            continue
        entry = state.get(header.producer_id)
        if (
            entry is not None
            and entry.epoch == header.producer_epoch
            and entry.current_txn_first_offset >= 0
        ):
            continue  # joins the producer's ongoing transaction
        if verified is None:
            return NeedsVerification(
                header.producer_id,
                header.producer_epoch,
                log,
                state,
                state.txn_generation(header.producer_id),
            )
        if (
            verified.log is not log
            or verified.state is not state
            or verified.generation != state.txn_generation(header.producer_id)
        ):
            raise ProducerStateError(
                INVALID_TXN_STATE,
                f"the transaction of producer {header.producer_id} (epoch "
                f"{header.producer_epoch}) ended or was fenced on this partition while "
                "the coordinator verified it; the producer must begin a new transaction",
            )
    return None


def too_few_in_sync(partition: Partition, result: AppendResult) -> bool:
    """Whether an acks=all write must be refused for min.insync.replicas (error in `result`)."""
    required = partition.topic.config.min_insync_replicas
    if required <= 1:
        return False  # the leader itself is in sync
    in_sync = len(partition.in_sync_replicas())
    if in_sync >= required:
        return False
    result.fail(
        ErrorCode.not_enough_replicas,
        f"{partition.name} has {in_sync} in-sync replicas, min.insync.replicas is {required}",
    )
    return True


def wait_for(
    partition: Partition, acks: int, end_offset: int, epoch: int | None
) -> tuple[int, int | None] | None:
    """What the answer of an append ending at `end_offset` waits for under `acks`; None
    when it need not wait."""
    if acks == -1:
        return end_offset, epoch
    raft = partition.raft
    if acks == 1 and raft is not None and raft.durable_end < end_offset:
        return end_offset, epoch  # an fsync the flush policy asked for is still running
    return None


def acked_already(
    partition: Partition, acks: int, waiting: tuple[int, int | None], result: AppendResult
) -> bool:
    """Whether the wait `wait_for` asked for is over before it starts (a leader that is its
    partition's only voter commits as it writes): then no task need wait for it. A batch
    replaced meanwhile fails `result` with NOT_LEADER_OR_FOLLOWER, as the wait would."""
    raft = partition.raft
    if raft is None:
        return False  # the wait answers NOT_LEADER_OR_FOLLOWER
    end_offset, epoch = waiting
    try:
        return raft.reached(end_offset, epoch, durable=acks != -1)
    except NotLeaderError:
        result.fail(ErrorCode.not_leader_or_follower)
        return True


def fail_unwritten(partition: Partition, result: AppendResult, exc: NotLeaderError) -> None:
    """Fail `result` for a batch this broker could not write: KAFKA_STORAGE_ERROR when the
    log's storage failed, else NOT_LEADER_OR_FOLLOWER."""
    if isinstance(exc, StorageError):
        result.fail(ErrorCode.kafka_storage_error, f"{partition.name}: {exc}")
    else:
        result.fail(ErrorCode.not_leader_or_follower)


def refuse(client: str, partition: Partition, result: AppendResult, exc: InvalidRecords) -> None:
    """Fill in the answer of a partition whose records Kafka would refuse (logged once)."""
    result.fail(ErrorCode(exc.error_code), exc.message)
    if exc.error_code == ErrorCode.invalid_record:
        result.record_errors = ((0, exc.message),)
    logger.info(
        "rejected produce to %s from %s: %s",
        partition.name,
        client,
        exc.message,
        extra={"partition": partition.name, "topic": partition.topic.name},
    )


def _refuse_keyless(
    client: str, partition: Partition, result: AppendResult, missing: list[int]
) -> None:
    message = keyless_refusal_message(partition.name)
    refuse(client, partition, result, InvalidRecords(ErrorCode.invalid_record, message))
    result.record_errors = tuple((index, message) for index in missing)


def _target_codec(partition: Partition) -> int | None:
    """The codec the partition's topic stores batches in; None for `producer` (as sent)."""
    return TOPIC_CODECS.get(partition.topic.config.compression_type)


def _is_compacted(partition: Partition) -> bool:
    return partition.log is not None and partition.log.config.compact


def _recompression_limits(partition: Partition, codec: int) -> tuple[int | None, int]:
    """(the topic's level for `codec`, if it has one; max.message.bytes), read on the loop."""
    config = partition.topic.config
    level_config = LEVEL_CONFIGS.get(codec)
    level = None if level_config is None else config.get_int(level_config)
    return level, config.get_int("max.message.bytes")


_PRODUCER_ID = struct.Struct(">q")


@dataclass(slots=True, init=False)
class _QueuedWrite:
    """One partition's write that waits for the writes queued before it on the partition
    (`previous`) and maybe for a worker thread; `done` is set once it was appended or
    refused. `result` is the partition's answer, filled in then. `pending`: the batch was
    checked already and waits only for its verification."""

    partition: Partition
    records: bytes
    codec: int | None
    previous: trio.Event | None
    done: trio.Event
    result: AppendResult
    pending: NeedsVerification | None = None

    def __init__(
        self,
        partition: Partition,
        records: bytes,
        codec: int | None,
        previous: trio.Event | None,
        done: trio.Event,
        result: AppendResult,
        pending: NeedsVerification | None = None,
    ) -> None:
        self.partition = partition
        self.records = records
        self.codec = codec
        self.previous = previous
        self.done = done
        self.result = result
        self.pending = pending


class ClientAppends:
    """The producer batches of one Produce request: `start` appends what it can at once
    (no await, so pipelined requests keep their order) and queues the rest; `finish`
    appends the queued ones. The answers' waits for acks collect in `waits`."""

    def __init__(
        self,
        queues: WriteQueues,
        acks: int,
        produce_version: int,
        client: str,
        transactional_id: str | None,
        verifier: TransactionVerifier | None,
        group_commit: bool = False,
    ) -> None:
        self.queues = queues
        # `start` leaves its batches unwritten (`WriteQueues.unwritten`) for the caller to
        # write together with others (`ReplicaManager.write_proposed`).
        self.group_commit = group_commit
        self.acks = acks
        self.version = produce_version
        self.client = client
        self.transactional_id = transactional_id
        self.verifier = verifier
        self.waits: list[AckWait] = []
        self._queued: list[_QueuedWrite] = []
        self._now = now_ms()

    def start(self, partition: Partition, records: bytes) -> AppendResult:
        """Append the batch now, or queue it behind a worker thread or a verification."""
        codec = _target_codec(partition)
        if (
            partition in self.queues.last_queued
            or self._verifying_producer(partition, records) is not None
            or (
                (codec_differs(records, codec) or _is_compacted(partition))
                and worth_a_thread(records)
            )
        ):
            result = AppendResult()
            self._queue(partition, records, codec, result)
            return result
        if codec is not None and codec_differs(records, codec):
            try:
                records = validated_and_recompressed(
                    records, codec, *_recompression_limits(partition, codec), self.version
                )
            except InvalidRecords as exc:
                result = AppendResult()
                refuse(self.client, partition, result, exc)
                return result
        appended = self._append(partition, records, self._now, group_commit=self.group_commit)
        if isinstance(appended, NeedsVerification):
            # Verified as a queued write, so this producer's later (pipelined) writes to
            # the partition wait behind it instead of overtaking it.
            result = AppendResult()
            self._queue(partition, records, None, result, pending=appended)
            return result
        return appended

    def take_waits(self) -> list[AckWait]:
        """The waits for acks collected so far (the caller now owns them)."""
        waits, self.waits = self.waits, []
        return waits

    @property
    def queued(self) -> bool:
        """Whether any write was queued: `finish` must run before the answers are final."""
        return bool(self._queued)

    async def finish(self) -> None:
        """Append (or refuse) every queued write."""
        if not self._queued:
            return
        async with trio.open_nursery() as nursery:
            for queued in self._queued:
                nursery.start_soon(self._append_queued, queued)

    def _queue(
        self,
        partition: Partition,
        records: bytes,
        codec: int | None,
        result: AppendResult,
        pending: NeedsVerification | None = None,
    ) -> None:
        done = trio.Event()
        previous = self.queues.last_queued.get(partition)
        self._queued.append(
            _QueuedWrite(partition, records, codec, previous, done, result, pending)
        )
        self.queues.last_queued[partition] = done

    def _leave_partition_queue(self, queued: _QueuedWrite) -> None:
        queued.done.set()
        if self.queues.last_queued.get(queued.partition) is queued.done:
            del self.queues.last_queued[queued.partition]

    def _verifying_producer(self, partition: Partition, records: bytes) -> int | None:
        """The producer id of the batch in `records` if a write of that producer waits for
        its verification on the partition (one dict check while none does)."""
        verifying = self.queues.verifying.get(partition)
        if not verifying or len(records) < RECORD_BATCH_OVERHEAD:
            return None
        (producer_id,) = _PRODUCER_ID.unpack_from(records, PRODUCER_ID_OFFSET)
        return producer_id if producer_id in verifying else None

    def _append(
        self,
        partition: Partition,
        records: bytes,
        now: int,
        verified: NeedsVerification | None = None,
        keys_checked: bool = False,
        group_commit: bool = False,
    ) -> AppendResult | NeedsVerification:
        """Validate and propose one partition's batch; its answer's wait for acks goes to
        `waits`. A transaction's first batch here returns what to verify (nothing written),
        unless it is the batch `verified` was taken for. `keys_checked`: a compacted
        topic's records were already scanned for missing keys (in a worker thread).
        `group_commit`: the batch is left unwritten (`WriteQueues.unwritten`)."""
        topic = partition.topic
        result = AppendResult()
        try:
            headers = validate_produce_records(
                records, topic.config.max_message_bytes, produce_version=self.version
            )
        except InvalidRecords as exc:
            refuse(self.client, partition, result, exc)
            return result
        log = partition.log
        if not partition.is_leader or log is None:
            if partition.offline:
                result.fail(ErrorCode.kafka_storage_error, f"{partition.name}: log dir offline")
            else:
                result.fail(ErrorCode.not_leader_or_follower)
            return result
        result.log_start_offset = log.log_start_offset
        if log.config.compact and not keys_checked:
            try:
                missing = keyless_records_of(records, headers)
            except InvalidRecords as exc:
                refuse(self.client, partition, result, exc)
                return result
            if missing:
                _refuse_keyless(self.client, partition, result, missing)
                return result
        if self.acks == -1 and too_few_in_sync(partition, result):
            return result
        raft = partition.raft
        chained = False
        if (
            raft is not None
            and raft.unwritten
            and (
                headers[0].producer_id >= 0
                if len(headers) == 1  # a client's request from Produce v3 on
                else any(h.producer_id >= 0 for h in headers)
            )
        ):
            chained = self._next_in_sequence(partition, headers)
            if not chained:
                # The producer state is updated as batches are written: this batch is
                # checked against what was proposed before it.
                try:
                    raft.write_proposed()
                except NotLeaderError as not_leader:
                    self.queues.write_failures[partition] = not_leader
                    fail_unwritten(partition, result, not_leader)
                    return result
        try:
            duplicate = None if chained else check_producer_state(log, headers, verified)
        except ProducerStateError as state_error:
            result.fail(ErrorCode(state_error.error_code), state_error.message)
            logger.info(
                "rejected produce to %s from %s: %s",
                partition.name,
                self.client,
                state_error.message,
                extra={"partition": partition.name, "topic": topic.name},
            )
            return result
        if isinstance(duplicate, NeedsVerification):
            return duplicate
        if duplicate is not None:
            result.base_offset = duplicate.first_offset
            if log.config.message_timestamp_type_log_append:
                result.log_append_time_ms = duplicate.timestamp_ms
            # Written earlier, maybe by an earlier leader: it is committed once the high
            # watermark passes it (producer state forgets batches a truncation removed).
            self._wait(partition, duplicate.last_offset + 1, None, result)
            return result
        # The header as checked, while it still describes `records` exactly.
        checked: BatchHeader | None = headers[0] if len(headers) == 1 else None
        if log.config.message_timestamp_type_log_append:
            # The leader stamps the time before replication so every replica stores the same.
            stamped = bytearray(records)
            set_log_append_time(stamped, headers[0], now)
            records = bytes(stamped)
            result.log_append_time_ms = now
            checked = None
        record_count = headers[0].last_offset_delta + 1
        unwritten = False
        try:
            if group_commit and raft is not None:
                unwritten = True
                queues = self.queues
                if not raft.unwritten:
                    if not queues.unwritten:
                        # A new round of unwritten batches.
                        queues.write_failures.clear()
                        queues.unwritten_sequences.clear()
                    queues.unwritten.append(partition)
                entry = partition.propose_unwritten(records, record_count, checked)
                header = headers[0]
                if len(headers) == 1 and header.producer_id >= 0 and not header.is_transactional:
                    queues.unwritten_sequences[partition, header.producer_id] = (
                        header.producer_epoch,
                        last_sequence_of(header),
                    )
            else:
                entry = partition.propose(records, record_count)
        except NotLeaderError as not_leader:
            fail_unwritten(partition, result, not_leader)
            return result
        result.base_offset = entry.base_offset
        result.appended_bytes = len(records)
        result.appended_records = record_count
        if unwritten:
            # Neither committed nor durable before its write: no wait is over yet.
            waiting = wait_for(partition, self.acks, entry.end_offset, entry.epoch)
            if waiting is not None:
                self.waits.append((partition, waiting, result))
        else:
            self._wait(partition, entry.end_offset, entry.epoch, result)
        return result

    def _next_in_sequence(self, partition: Partition, headers: list[BatchHeader]) -> bool:
        """Whether `headers` is one idempotent, non-transactional batch that continues the
        batch its producer proposed last in this round of unwritten batches (same epoch,
        the next sequence): that batch passed the producer state's check, and nothing
        else changes the producer's state before this one is written, so it is in order
        and not a duplicate without a write first."""
        if len(headers) != 1:
            return False
        header = headers[0]
        if header.is_transactional or header.producer_id < 0:
            return False
        last = self.queues.unwritten_sequences.get((partition, header.producer_id))
        return (
            last is not None
            and last[0] == header.producer_epoch
            and header.base_sequence == increment_sequence(last[1], 1)
        )

    def _wait(
        self, partition: Partition, end_offset: int, epoch: int | None, result: AppendResult
    ) -> None:
        waiting = wait_for(partition, self.acks, end_offset, epoch)
        if waiting is not None and not acked_already(partition, self.acks, waiting, result):
            self.waits.append((partition, waiting, result))

    def _settle(self, queued: _QueuedWrite, appended: AppendResult) -> None:
        """Copy an append's answer into the queued write's (which the caller holds)."""
        result = queued.result
        result.copy_from(appended)
        for index, (partition, waiting, answer) in enumerate(self.waits):
            if answer is appended:
                self.waits[index] = (partition, waiting, result)

    async def _append_queued(self, queued: _QueuedWrite) -> None:
        partition = queued.partition
        try:
            if queued.previous is not None:
                await queued.previous.wait()
            records = queued.records
            if queued.pending is not None:
                # `_append` got as far as the producer checks.
                await self._behind_producer(
                    queued, queued.pending.producer_id, records, queued.pending, True
                )
                return
            if queued.codec is not None and codec_differs(records, queued.codec):
                try:
                    level, max_batch_bytes = _recompression_limits(partition, queued.codec)
                    if worth_a_thread(records):
                        records = await trio.to_thread.run_sync(
                            validated_and_recompressed,
                            records,
                            queued.codec,
                            level,
                            max_batch_bytes,
                            self.version,
                        )
                    else:
                        records = validated_and_recompressed(
                            records, queued.codec, level, max_batch_bytes, self.version
                        )
                except InvalidRecords as exc:
                    refuse(self.client, partition, queued.result, exc)
                    return
            keys_checked = False
            if _is_compacted(partition) and worth_a_thread(records):
                max_batch_bytes = partition.topic.config.get_int("max.message.bytes")
                try:
                    missing = await trio.to_thread.run_sync(
                        validated_keyless_records, records, max_batch_bytes, self.version
                    )
                except InvalidRecords as exc:
                    refuse(self.client, partition, queued.result, exc)
                    return
                if missing:
                    _refuse_keyless(self.client, partition, queued.result, missing)
                    return
                keys_checked = True
            producer_id = self._verifying_producer(partition, records)
            if producer_id is not None:
                await self._behind_producer(queued, producer_id, records, None, keys_checked)
                return
            appended = self._append(partition, records, now_ms(), keys_checked=keys_checked)
            if isinstance(appended, NeedsVerification):
                await self._behind_producer(
                    queued, appended.producer_id, records, appended, keys_checked=True
                )
                return
            self._settle(queued, appended)
        finally:
            self._leave_partition_queue(queued)

    async def _behind_producer(
        self,
        queued: _QueuedWrite,
        producer_id: int,
        records: bytes,
        pending: NeedsVerification | None,
        keys_checked: bool,
    ) -> None:
        """Move a queued write from the partition's queue to its producer's: it waits for
        the producer's writes that wait for a verification there, and then for its own
        verification (`pending`) if it needs one, while other producers' writes go on.
        Without `pending` it is checked again once its turn comes."""
        partition = queued.partition
        verifying = self.queues.verifying.setdefault(partition, {})
        previous = verifying.get(producer_id)
        mine = trio.Event()
        verifying[producer_id] = mine
        # Registered before leaving, so the producer's next write in the partition queue
        # sees it.
        self._leave_partition_queue(queued)
        try:
            if previous is not None:
                await previous.wait()
            if pending is None:
                appended = self._append(partition, records, now_ms(), keys_checked=keys_checked)
                if not isinstance(appended, NeedsVerification):
                    self._settle(queued, appended)
                    return
                pending = appended
            await self._verify_and_append(queued, records, pending)
        finally:
            mine.set()
            if verifying.get(producer_id) is mine:
                del verifying[producer_id]
            if not verifying and self.queues.verifying.get(partition) is verifying:
                del self.queues.verifying[partition]

    async def _verify_and_append(
        self, queued: _QueuedWrite, records: bytes, pending: NeedsVerification
    ) -> None:
        """Ask the transaction coordinator about a batch that starts a transaction on the
        partition, then append it (checked again: another request may have written while
        we waited) or answer the coordinator's error."""
        partition = queued.partition
        transactional_id = self.transactional_id
        assert transactional_id is not None, "transactional batches carry the request's id"
        assert self.verifier is not None, "transactional appends have a verifier"
        verdict = await self.verifier.verify_partition(
            transactional_id,
            pending.producer_id,
            pending.producer_epoch,
            partition.topic.name,
            partition.index,
        )
        if verdict != ErrorCode.none:
            queued.result.fail(
                verdict,
                f"{partition.name}: the transaction coordinator did not confirm producer "
                f"{pending.producer_id} (epoch {pending.producer_epoch}) added this "
                f"partition to its transaction: {verdict.name}",
            )
            return
        appended = self._append(partition, records, now_ms(), verified=pending, keys_checked=True)
        assert not isinstance(appended, NeedsVerification), "verified batches append"
        self._settle(queued, appended)
