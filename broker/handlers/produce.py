"""Produce: validate each partition's batch by its header, propose it to the partition's
Raft group, answer per partition.

Records stay opaque: only the 61-byte batch headers are read and only baseOffset and
partitionLeaderEpoch are rewritten (LogAppendTime topics also restamp maxTimestamp). acks=1
answers once the leader has stored the batch as durably as the flush policy requires (written
to the page cache by default; fsynced with flush.messages=1); acks=all once a majority of
the replicas has, by the same measure (the partition's high watermark passed it). Only the
leader accepts writes: any other broker answers NOT_LEADER_OR_FOLLOWER so the client
refreshes its metadata.

Batches with a producer id are checked against the partition's producer state (epoch and
sequence, `log.producer_state`) right before the append, with no await in between, so no
other request can interleave. A retried duplicate is not appended; its answer carries the
original base offset, as Kafka's does.

Transactional batches (KIP-98) need the request's transactional id (else every partition
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka) and one producer id across the
request (else INVALID_PRODUCER_ID_MAPPING). A producer's first transactional batch on a
partition (no ongoing transaction of it at that epoch) is verified with the transaction
coordinator first (KIP-890): its error is the partition's answer and nothing is written.
Until that batch is appended or refused, the same producer's later writes to the partition
queue behind it (`Partition.verifying_producers`), so its pipelined batches keep their order;
other producers' writes go on meanwhile. After the await every check runs again right
before the append, since the partition may have changed meanwhile; and if the producer's
transaction ended or its epoch changed on the partition meanwhile (its marker landed), the
batch is refused with INVALID_TXN_STATE rather than opening a transaction no coordinator
would end (Kafka's verification guard).

With an authorizer (`authorizer.class.name`) the request's ACLs are asked first, as in
Kafka: transactional batches need WRITE on the transactional id (else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE (else its partitions answer
TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists); each once per request, nothing
of a refused partition is written. An acks=0 request has no answer to carry the error, so
the connection is closed after it, as Kafka does. Idempotent batches need nothing more:
InitProducerId checked IDEMPOTENT_WRITE when it handed out the producer id (Kafka dropped the
Produce check with KIP-679).

A topic whose `compression.type` is a codec (`gzip`, `snappy`, `lz4`, `zstd`, or
`uncompressed`) stores batches in it: a batch in another codec is validated, then its records
are recompressed (`protocol/recompress.py`; header fields kept, attributes, length and CRC
rebuilt) before the producer checks and the Raft append, so every replica stores the same
bytes. A batch already in the topic's codec, or any batch of a `producer` topic, costs one
attribute read. Large batches are recompressed in a worker thread; meanwhile later writes to
the partition queue behind them, so a producer's pipelined batches keep their order.

A topic with `raftka.restore.in.progress=true` is in restore mode (`raftka restore` writes
it): the records may hold several batches, each must start at the offset the partition's log
ends at (checked for all before any is written: INVALID_RECORD otherwise), and each is
proposed as is, one Raft entry per batch. Producer state is not checked (it still learns
from the stored batches on every replica), transactional batches and control batches other
than KRAFT_VOTERS are allowed, and timestamps are kept even under LogAppendTime. Before the
answer, the cluster's producer id floor is raised past the largest producer id written, so
no broker later hands out an id the restored data uses.
"""

from __future__ import annotations

import datetime
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import RaiseProducerIdFloorCommand
from raftka.broker.config import RESTORE_IN_PROGRESS
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    denied_message,
    response_schema,
)
from raftka.broker.replication import CONTROL_KRAFT_VOTERS, entry_kind_of
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.topics import Partition, now_ms
from raftka.consensus.core import NotLeaderError, StorageError
from raftka.consensus.types import EntryKind
from raftka.log.producer_state import (
    INVALID_TXN_STATE,
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
)
from raftka.protocol.api import build
from raftka.protocol.batch_builder import control_record_type
from raftka.protocol.compacted import keyless_records, records_section
from raftka.protocol.recompress import TOPIC_CODECS, recompress_batch
from raftka.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_ZSTD,
    CONTROL_FLAG_MASK,
    MAGIC_OFFSET,
    MAGIC_V2,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    InvalidRecords,
    UnsupportedBatch,
    read_batch_header,
    set_log_append_time,
    validate_produce_records,
)

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext
    from raftka.log import PartitionLog

logger = logging.getLogger("raftka.produce")


def _append_time(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


@dataclass(frozen=True, slots=True)
class _NeedsVerification:
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


def _check_producer_state(
    log: PartitionLog, headers: Sequence[BatchHeader], verified: _NeedsVerification | None
) -> BatchMetadata | _NeedsVerification | None:
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
            return _NeedsVerification(
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


def _too_few_in_sync(partition: Partition, fields: dict[str, Any]) -> bool:
    """Whether an acks=all write must be refused for min.insync.replicas (error in `fields`)."""
    in_sync = len(partition.in_sync_replicas())
    required = partition.topic.config.get_int("min.insync.replicas")
    if in_sync >= required:
        return False
    fields.update(
        error_code=ErrorCode.not_enough_replicas,
        error_message=f"{partition.name} has {in_sync} in-sync replicas, "
        f"min.insync.replicas is {required}",
    )
    return True


def _append(
    context: RequestContext,
    partition: Partition,
    records: bytes,
    acks: int,
    now: int,
    version: int,
    verified: _NeedsVerification | None = None,
    keys_checked: bool = False,
) -> tuple[dict[str, Any], tuple[int, int | None] | None] | _NeedsVerification:
    """Validate and propose one partition's batch: (response fields, what the answer waits
    for: the end offset and the epoch of the batch there, or None when it need not wait).
    A transaction's first batch here returns what to verify (nothing written), unless it is
    the batch `verified` was taken for. `keys_checked`: a compacted topic's records were
    already scanned for missing keys (in a worker thread)."""
    topic = partition.topic
    fields: dict[str, Any] = {"error_code": ErrorCode.none}
    try:
        headers = validate_produce_records(
            records, topic.config.get_int("max.message.bytes"), produce_version=version
        )
    except InvalidRecords as exc:
        return _rejected_fields(context, partition, exc), None
    log = partition.log
    if not partition.is_leader or log is None:
        fields["error_code"] = ErrorCode.not_leader_or_follower
        return fields, None
    fields["log_start_offset"] = log.log_start_offset
    if log.config.compact and not keys_checked:
        try:
            missing = _keyless_records(records, headers)
        except InvalidRecords as exc:
            return _rejected_fields(context, partition, exc), None
        if missing:
            return _keyless_refusal(context, partition, missing), None
    if acks == -1 and _too_few_in_sync(partition, fields):
        return fields, None
    try:
        duplicate = _check_producer_state(log, headers, verified)
    except ProducerStateError as exc:
        fields.update(error_code=ErrorCode(exc.error_code), error_message=exc.message)
        logger.info(
            "rejected produce to %s from %s: %s",
            partition.name,
            context.client_host,
            exc.message,
            extra={"partition": partition.name, "topic": topic.name},
        )
        return fields, None
    if isinstance(duplicate, _NeedsVerification):
        return duplicate
    if duplicate is not None:
        fields["base_offset"] = duplicate.first_offset
        if log.config.message_timestamp_type_log_append:
            fields["log_append_time"] = _append_time(duplicate.timestamp_ms)
        # Written earlier, maybe by an earlier leader: it is committed once the high
        # watermark passes it (producer state forgets batches a truncation removed).
        return fields, _wait_for(partition, acks, duplicate.last_offset + 1, None)
    if log.config.message_timestamp_type_log_append:
        # The leader stamps the time before replication so every replica stores the same batch.
        stamped = bytearray(records)
        set_log_append_time(stamped, headers[0], now)
        records = bytes(stamped)
        fields["log_append_time"] = _append_time(now)
    try:
        entry = partition.propose(records, headers[0].last_offset_delta + 1)
    except StorageError as exc:
        fields.update(error_code=ErrorCode.kafka_storage_error, error_message=str(exc))
        return fields, None
    except NotLeaderError:
        fields["error_code"] = ErrorCode.not_leader_or_follower
        return fields, None
    fields["base_offset"] = entry.base_offset
    context.services.metrics.produced(topic.name, len(records), headers[0].last_offset_delta + 1)
    return fields, _wait_for(partition, acks, entry.end_offset, entry.epoch)


def _keyless_records(records: bytes, headers: list[BatchHeader]) -> list[int]:
    """KIP-467: the indexes (in their batch) of the records without a key; InvalidRecords
    when the records cannot be read. Compressed batches are decompressed for the scan, as
    Kafka does. Plain values only: large batches are scanned in a worker thread."""
    view = memoryview(records)
    missing: list[int] = []
    try:
        for header in headers:
            batch = view[header.position : header.end_position]
            missing += keyless_records(records_section(batch), header.records_count)
    except UnsupportedBatch as exc:
        raise InvalidRecords(ErrorCode.invalid_record, f"records cannot be read: {exc}") from None
    return missing


def _validated_keyless_records(records: bytes, max_batch_bytes: int, version: int) -> list[int]:
    headers = validate_produce_records(records, max_batch_bytes, produce_version=version)
    return _keyless_records(records, headers)


def _keyless_refusal(
    context: RequestContext, partition: Partition, missing: list[int]
) -> dict[str, Any]:
    """The answer refusing a batch with records without a key for a compacted topic."""
    message = (
        f"Compacted topic cannot accept message without key in topic partition {partition.name}."
    )
    fields = _rejected_fields(context, partition, InvalidRecords(ErrorCode.invalid_record, message))
    fields["record_errors"] = tuple((index, message) for index in missing)
    return fields


def _is_compacted(partition: Partition) -> bool:
    return partition.log is not None and partition.log.config.compact


def _rejected_fields(
    context: RequestContext, partition: Partition, exc: InvalidRecords
) -> dict[str, Any]:
    """The answer of a partition whose records Kafka would refuse (logged once)."""
    fields: dict[str, Any] = {
        "error_code": ErrorCode(exc.error_code),
        "error_message": exc.message,
    }
    if exc.error_code == ErrorCode.invalid_record:
        fields["record_errors"] = ((0, exc.message),)
    logger.info(
        "rejected produce to %s from %s: %s",
        partition.name,
        context.client_host,
        exc.message,
        extra={"partition": partition.name, "topic": partition.topic.name},
    )
    return fields


#: Batches whose records are larger than this are recompressed in a worker thread, so the
#: event loop keeps serving meanwhile; smaller ones cost less than the hand-over.
RECOMPRESS_IN_THREAD_BYTES = 64 * 1024
#: A compressed records section is taken to hold this many times its size of records.
_ASSUMED_COMPRESSION_RATIO = 4


def _recompress_in_thread(records: bytes) -> bool:
    """Whether recompressing (or scanning) the batch in `records` is worth a worker thread;
    never for records too short to hold a batch header, which validation refuses."""
    size = len(records)
    if size < RECORD_BATCH_OVERHEAD:
        return False
    if records[_ATTRIBUTES_LOW_BYTE] & COMPRESSION_MASK:
        size *= _ASSUMED_COMPRESSION_RATIO
    return size > RECOMPRESS_IN_THREAD_BYTES


def _target_codec(partition: Partition) -> int | None:
    """The codec the partition's topic stores batches in; None for `producer` (as sent)."""
    return TOPIC_CODECS.get(partition.topic.config.get_str("compression.type"))


def _codec_differs(records: bytes, codec: int | None) -> bool:
    """Whether the batch in `records` must be recompressed into `codec` (one byte read)."""
    return (
        codec is not None
        and len(records) >= RECORD_BATCH_OVERHEAD
        and records[_ATTRIBUTES_LOW_BYTE] & COMPRESSION_MASK != codec
    )


#: Codec → its KIP-390 level config.
_LEVEL_CONFIGS = {
    COMPRESSION_GZIP: "compression.gzip.level",
    COMPRESSION_LZ4: "compression.lz4.level",
    COMPRESSION_ZSTD: "compression.zstd.level",
}


def _recompressed(partition: Partition, records: bytes, codec: int, version: int) -> bytes:
    """The produced batch with its records in `codec`; raises InvalidRecords (validated
    first, so a batch Kafka refuses gets the same error as on a `producer` topic)."""
    return _validated_and_recompressed(
        records, codec, *_recompression_limits(partition, codec), version
    )


def _recompression_limits(partition: Partition, codec: int) -> tuple[int | None, int]:
    """(the topic's level for `codec`, if it has one; max.message.bytes), read on the loop."""
    config = partition.topic.config
    level_config = _LEVEL_CONFIGS.get(codec)
    level = None if level_config is None else config.get_int(level_config)
    return level, config.get_int("max.message.bytes")


def _validated_and_recompressed(
    records: bytes, codec: int, level: int | None, max_batch_bytes: int, version: int
) -> bytes:
    # Plain values only: this runs in a worker thread for large batches.
    validate_produce_records(records, max_batch_bytes, produce_version=version)
    return recompress_batch(records, codec, level)


@dataclass(slots=True)
class _QueuedWrite:
    """One partition's write that waits for the writes queued before it on the partition
    (`previous`) and maybe for a worker thread; `done` is set once it was appended or
    refused. `fields` is the partition's answer, filled in then. `pending`: the batch was
    checked already and waits only for its verification."""

    partition: Partition
    records: bytes
    codec: int | None
    previous: trio.Event | None
    done: trio.Event
    fields: dict[str, Any]
    pending: _NeedsVerification | None = None


def _queue_write(
    partition: Partition,
    records: bytes,
    codec: int | None,
    fields: dict[str, Any],
    pending: _NeedsVerification | None = None,
) -> _QueuedWrite:
    done = trio.Event()
    queued = _QueuedWrite(
        partition, records, codec, partition.last_queued_write, done, fields, pending
    )
    partition.last_queued_write = done
    return queued


_PRODUCER_ID = struct.Struct(">q")


def _verifying_producer(partition: Partition, records: bytes) -> int | None:
    """The producer id of the batch in `records` if a write of that producer waits for its
    verification on the partition (one dict check while none does)."""
    if not partition.verifying_producers or len(records) < RECORD_BATCH_OVERHEAD:
        return None
    (producer_id,) = _PRODUCER_ID.unpack_from(records, PRODUCER_ID_OFFSET)
    return producer_id if producer_id in partition.verifying_producers else None


def _leave_partition_queue(queued: _QueuedWrite) -> None:
    queued.done.set()
    if queued.partition.last_queued_write is queued.done:
        queued.partition.last_queued_write = None


async def _append_queued(
    context: RequestContext,
    transactional_id: str | None,
    queued: _QueuedWrite,
    acks: int,
    version: int,
    commits: list[tuple[Partition, tuple[int, int | None], dict[str, Any]]],
) -> None:
    partition = queued.partition
    try:
        if queued.previous is not None:
            await queued.previous.wait()
        records = queued.records
        if queued.pending is not None:
            await _behind_producer(
                context,
                transactional_id,
                queued,
                queued.pending.producer_id,
                records,
                acks,
                version,
                commits,
                pending=queued.pending,
                keys_checked=True,  # _append got as far as the producer checks
            )
            return
        if queued.codec is not None and _codec_differs(records, queued.codec):
            try:
                if _recompress_in_thread(records):
                    level, max_batch_bytes = _recompression_limits(partition, queued.codec)
                    records = await trio.to_thread.run_sync(
                        _validated_and_recompressed,
                        records,
                        queued.codec,
                        level,
                        max_batch_bytes,
                        version,
                    )
                else:
                    records = _recompressed(partition, records, queued.codec, version)
            except InvalidRecords as exc:
                queued.fields.update(_rejected_fields(context, partition, exc))
                return
        keys_checked = False
        if _is_compacted(partition) and _recompress_in_thread(records):
            max_batch_bytes = partition.topic.config.get_int("max.message.bytes")
            try:
                missing = await trio.to_thread.run_sync(
                    _validated_keyless_records, records, max_batch_bytes, version
                )
            except InvalidRecords as exc:
                queued.fields.update(_rejected_fields(context, partition, exc))
                return
            if missing:
                queued.fields.update(_keyless_refusal(context, partition, missing))
                return
            keys_checked = True
        producer_id = _verifying_producer(partition, records)
        if producer_id is not None:
            await _behind_producer(
                context,
                transactional_id,
                queued,
                producer_id,
                records,
                acks,
                version,
                commits,
                keys_checked=keys_checked,
            )
            return
        appended = _append(
            context, partition, records, acks, now_ms(), version, keys_checked=keys_checked
        )
        if isinstance(appended, _NeedsVerification):
            await _behind_producer(
                context,
                transactional_id,
                queued,
                appended.producer_id,
                records,
                acks,
                version,
                commits,
                pending=appended,
                keys_checked=True,
            )
            return
        result, wait_for = appended
        queued.fields.update(result)
        if wait_for is not None:
            commits.append((partition, wait_for, queued.fields))
    finally:
        _leave_partition_queue(queued)


async def _behind_producer(
    context: RequestContext,
    transactional_id: str | None,
    queued: _QueuedWrite,
    producer_id: int,
    records: bytes,
    acks: int,
    version: int,
    commits: list[tuple[Partition, tuple[int, int | None], dict[str, Any]]],
    pending: _NeedsVerification | None = None,
    keys_checked: bool = False,
) -> None:
    """Move a queued write from the partition's queue to its producer's: it waits for the
    producer's writes that wait for a verification there, and then for its own verification
    (`pending`) if it needs one, while other producers' writes go on. Without `pending` it
    is checked again once its turn comes."""
    partition = queued.partition
    previous = partition.verifying_producers.get(producer_id)
    mine = trio.Event()
    partition.verifying_producers[producer_id] = mine
    # Registered before leaving, so the producer's next write in the partition queue sees it.
    _leave_partition_queue(queued)
    try:
        if previous is not None:
            await previous.wait()
        if pending is None:
            appended = _append(
                context, partition, records, acks, now_ms(), version, keys_checked=keys_checked
            )
            if not isinstance(appended, _NeedsVerification):
                result, wait_for = appended
                queued.fields.update(result)
                if wait_for is not None:
                    commits.append((partition, wait_for, queued.fields))
                return
            pending = appended
        await _verify_and_append(
            context,
            transactional_id,
            partition,
            records,
            pending,
            queued.fields,
            acks,
            version,
            commits,
            keys_checked=True,
        )
    finally:
        mine.set()
        if partition.verifying_producers.get(producer_id) is mine:
            del partition.verifying_producers[producer_id]


#: Control types a restore may write: ABORT and COMMIT markers, LEADER_CHANGE.
RESTORABLE_CONTROL_TYPES = frozenset({0, 1, 2})


class _Rejected(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _restore_entries(
    partition: Partition, records: bytes, log_end_offset: int, max_batch_bytes: int
) -> list[tuple[BatchHeader, bytes, EntryKind, bytes]]:
    """Each batch of a restore write with its bytes and the entry (kind, payload) to
    propose; raises _Rejected (nothing may be written) when any batch does not fit."""
    try:
        headers = validate_produce_records(records, max_batch_bytes, restore=True)
    except InvalidRecords as exc:
        raise _Rejected(ErrorCode(exc.error_code), exc.message) from None
    if not headers:
        raise _Rejected(ErrorCode.invalid_record, "restore: the records hold no batch")
    entries: list[tuple[BatchHeader, bytes, EntryKind, bytes]] = []
    expected = log_end_offset
    view = memoryview(records)
    for header in headers:
        if header.base_offset != expected:
            raise _Rejected(
                ErrorCode.invalid_record,
                f"restore: batch starts at offset {header.base_offset} but {partition.name} "
                f"ends at {expected}",
            )
        batch = bytes(view[header.position : header.end_position])
        if header.is_control:
            control_type = control_record_type(batch)
            if control_type not in RESTORABLE_CONTROL_TYPES:
                what = "no readable control key" if control_type is None else control_type
                raise _Rejected(
                    ErrorCode.invalid_record,
                    f"restore: control batch at offset {header.base_offset} has control type "
                    f"{what}; only ABORT (0), COMMIT (1) and LEADER_CHANGE (2) can be restored"
                    + (
                        " (KRAFT_VOTERS would change the replica set)"
                        if what == CONTROL_KRAFT_VOTERS
                        else ""
                    ),
                )
        kind, payload = entry_kind_of(header, batch)
        if kind is EntryKind.CONFIG:
            raise AssertionError(f"restore: KRAFT_VOTERS batch at {header.base_offset} passed")
        entries.append((header, batch, kind, payload))
        expected = header.next_offset
    return entries


def _append_restore(
    context: RequestContext, partition: Partition, records: bytes, acks: int
) -> tuple[dict[str, Any], tuple[int, int | None] | None, int | None]:
    """Restore mode's `_append`: (response fields, what the answer waits for, the producer
    id floor the answer needs first, if any)."""
    topic = partition.topic
    fields: dict[str, Any] = {"error_code": ErrorCode.none}
    log = partition.log
    if not partition.is_leader or log is None:
        fields["error_code"] = ErrorCode.not_leader_or_follower
        return fields, None, None
    fields["log_start_offset"] = log.log_start_offset
    try:
        entries = _restore_entries(
            partition, records, log.log_end_offset, topic.config.get_int("max.message.bytes")
        )
    except _Rejected as exc:
        fields.update(error_code=exc.error_code, error_message=exc.message)
        if exc.error_code == ErrorCode.invalid_record:
            fields["record_errors"] = ((0, exc.message),)
        logger.info(
            "rejected restore produce to %s from %s: %s",
            partition.name,
            context.client_host,
            exc.message,
            extra={"partition": partition.name, "topic": topic.name},
        )
        return fields, None, None
    if acks == -1 and _too_few_in_sync(partition, fields):
        return fields, None, None
    producer_ids = [header.producer_id for header, *_ in entries if header.producer_id >= 0]
    floor = max(producer_ids) + 1 if producer_ids else None
    last = None
    for header, _batch, kind, payload in entries:
        try:
            entry = partition.propose(payload, header.last_offset_delta + 1, kind)
        except StorageError as exc:
            fields.update(error_code=ErrorCode.kafka_storage_error, error_message=str(exc))
            return fields, None, None
        except NotLeaderError:
            # Batches proposed before stay; the next restore write starts where they end.
            fields["error_code"] = ErrorCode.not_leader_or_follower
            return fields, None, None
        if entry.base_offset != header.base_offset:
            raise AssertionError(
                f"{partition.name}: restored batch at {header.base_offset} was appended at "
                f"{entry.base_offset}"
            )
        if last is None:
            fields["base_offset"] = entry.base_offset
        last = entry
    assert last is not None, "a restore write holds at least one batch"
    record_count = sum(header.records_count for header, *_ in entries)
    context.services.metrics.produced(topic.name, len(records), record_count)
    return fields, _wait_for(partition, acks, last.end_offset, last.epoch), floor


async def _raise_producer_id_floor(
    context: RequestContext, floors: list[tuple[Partition, int, dict[str, Any]]]
) -> None:
    """Raise the floor past every producer id the request restored (one command: the floor
    is a maximum); on failure every partition that needed it answers the error."""
    controller = context.services.controller
    floor = max(floor for _, floor, _ in floors)
    if floor <= controller.image.producer_id_floor:
        return
    result = await controller.execute(RaiseProducerIdFloorCommand(floor))
    if result.error_code == ErrorCode.none:
        return
    for partition, _, fields in floors:
        if not fields["error_code"]:
            fields.update(
                error_code=result.error_code,
                error_message=f"{partition.name}: the producer id floor was not raised to "
                f"{floor}: {result.error_message}",
            )


def _wait_for(
    partition: Partition, acks: int, end_offset: int, epoch: int | None
) -> tuple[int, int | None] | None:
    if acks == -1:
        return end_offset, epoch
    raft = partition.raft
    if acks == 1 and raft is not None and raft.durable_end < end_offset:
        return end_offset, epoch  # an fsync the flush policy asked for is still running
    return None


async def _await_ack(
    partition: Partition,
    acks: int,
    wait_for: tuple[int, int | None],
    timeout_s: float,
    fields: dict[str, Any],
) -> None:
    end_offset, epoch = wait_for
    try:
        if acks == -1:
            done = await partition.wait_high_watermark(end_offset, timeout_s, epoch)
            missed = "not replicated to a majority in time"
        else:
            done = await partition.hosted_raft.wait_durable(end_offset, timeout_s, epoch)
            missed = "not synced to disk in time"
        if not done:
            fields.update(
                error_code=ErrorCode.request_timed_out,
                error_message=f"{partition.name}: {missed}",
            )
    except NotLeaderError:
        fields["error_code"] = ErrorCode.not_leader_or_follower


def _count_errors(context: RequestContext, results: list[tuple[str, list[dict[str, Any]]]]) -> None:
    metrics = context.services.metrics
    for _, partition_results in results:
        for fields in partition_results:
            if fields["error_code"]:
                metrics.request_error(context.api_key, fields["error_code"])


_AUTHORIZATION_ERRORS = frozenset(
    {ErrorCode.topic_authorization_failed, ErrorCode.transactional_id_authorization_failed}
)


def _refused(results: list[tuple[str, list[dict[str, Any]]]]) -> bool:
    """Whether an ACL refused any partition of the request."""
    return any(
        fields["error_code"] in _AUTHORIZATION_ERRORS
        for _, partition_results in results
        for fields in partition_results
    )


#: The low byte of a batch's int16 attributes, which holds the transactional and control
#: flags (read before anything else, so non-transactional requests cost one index each).
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1


def _transactional_error(context: RequestContext, request: Any) -> tuple[ErrorCode, str] | None:
    """Kafka's whole-request refusals of transactional batches: no transactional id, no
    WRITE on it, or more than one producer id among them (restore-mode topics take batches
    as stored). Only a batch whose attributes say transactional (and not control) is looked
    at further."""
    producers: set[int] = set()
    for topic_data in request.topic_data or ():
        restore: bool | None = None
        for data in topic_data.partition_data or ():
            records = data.records
            if (
                not records
                or len(records) < RECORD_BATCH_OVERHEAD
                or records[_ATTRIBUTES_LOW_BYTE] & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
                != TRANSACTIONAL_FLAG_MASK
                or records[MAGIC_OFFSET] != MAGIC_V2  # other layouts: validation refuses them
            ):
                continue
            if restore is None:
                topic = context.services.topics.get(topic_data.name)
                restore = topic is not None and topic.config.get_str(RESTORE_IN_PROGRESS) == "true"
            if restore:
                break
            producer_id = read_batch_header(records).producer_id
            if producer_id >= 0:
                producers.add(producer_id)
    if not producers:
        return None
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is None:
        return (
            ErrorCode.transactional_id_authorization_failed,
            "transactional records need the request's transactional id",
        )
    if not context.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return (
            ErrorCode.transactional_id_authorization_failed,
            denied_message(
                context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
            ),
        )
    if len(producers) > 1:
        return (
            ErrorCode.invalid_producer_id_mapping,
            f"transactional records of more than one producer id: {sorted(producers)}",
        )
    return None


async def _verify_and_append(
    context: RequestContext,
    transactional_id: str | None,
    partition: Partition,
    records: bytes,
    pending: _NeedsVerification,
    fields: dict[str, Any],
    acks: int,
    version: int,
    commits: list[tuple[Partition, tuple[int, int | None], dict[str, Any]]],
    keys_checked: bool = False,
) -> None:
    """Ask the transaction coordinator about a batch that starts a transaction on the
    partition, then append it (checked again: another request may have written while we
    waited) or answer the coordinator's error. `keys_checked` as for `_append`."""
    assert transactional_id is not None, "transactional batches carry the request's id"
    verdict = await context.services.transactions.verify_partition(
        transactional_id,
        pending.producer_id,
        pending.producer_epoch,
        partition.topic.name,
        partition.index,
    )
    if verdict != ErrorCode.none:
        fields.update(
            error_code=verdict,
            error_message=f"{partition.name}: the transaction coordinator did not "
            f"confirm producer {pending.producer_id} (epoch {pending.producer_epoch}) "
            f"added this partition to its transaction: {verdict.name}",
        )
        return
    appended = _append(
        context,
        partition,
        records,
        acks,
        now_ms(),
        version,
        verified=pending,
        keys_checked=keys_checked,
    )
    assert not isinstance(appended, _NeedsVerification), "verified batches append"
    result, wait_for = appended
    fields.update(result)
    if wait_for is not None:
        commits.append((partition, wait_for, fields))


async def handle_produce(context: RequestContext, request: Any) -> Any:
    topics = context.services.topics
    entity, module = response_schema(context)
    acks = request.acks
    version = context.api_version
    now = now_ms()
    results: list[tuple[str, list[dict[str, Any]]]] = []
    commits: list[tuple[Partition, tuple[int, int | None], dict[str, Any]]] = []
    floors: list[tuple[Partition, int, dict[str, Any]]] = []
    queued_writes: list[_QueuedWrite] = []
    refused = _transactional_error(context, request)
    may_write = TopicAccess(context, AclOperation.WRITE)
    for topic_data in request.topic_data or ():
        name = topic_data.name
        topic = topics.get(name)
        partition_results = []
        for data in topic_data.partition_data or ():
            partition = None if topic is None else topics.partition(name, data.index)
            fields: dict[str, Any]
            if refused is not None:
                fields = {"error_code": refused[0], "error_message": refused[1]}
            elif not may_write(name):
                # Asked before existence, so a refused client learns nothing of the topic.
                fields = {
                    "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": denied_message(
                        context, AclOperation.WRITE, ResourceType.TOPIC, name
                    ),
                }
            elif acks not in (-1, 0, 1):
                fields = {"error_code": ErrorCode.invalid_required_acks}
            elif partition is None or topic is None:
                fields = {"error_code": ErrorCode.unknown_topic_or_partition}
            elif topic.is_internal:
                fields = {
                    "error_code": ErrorCode.invalid_topic_exception,
                    "error_message": f"Cannot append to internal topic {name}",
                }
            elif topic.config.get_str(RESTORE_IN_PROGRESS) == "true":
                fields, wait_for, floor = _append_restore(
                    context, partition, data.records or b"", acks
                )
                if wait_for is not None:
                    commits.append((partition, wait_for, fields))
                if floor is not None:
                    floors.append((partition, floor, fields))
            else:
                records = data.records or b""
                codec = _target_codec(partition)
                wait_for = None
                if (
                    partition.last_queued_write is not None
                    or _verifying_producer(partition, records) is not None
                    or (
                        (_codec_differs(records, codec) or _is_compacted(partition))
                        and _recompress_in_thread(records)
                    )
                ):
                    fields = {"error_code": ErrorCode.none}
                    queued_writes.append(_queue_write(partition, records, codec, fields))
                    appended = None
                elif codec is not None and _codec_differs(records, codec):
                    try:
                        records = _recompressed(partition, records, codec, version)
                    except InvalidRecords as exc:
                        fields = _rejected_fields(context, partition, exc)
                        appended = None
                    else:
                        appended = _append(context, partition, records, acks, now, version)
                else:
                    appended = _append(context, partition, records, acks, now, version)
                if isinstance(appended, _NeedsVerification):
                    # Verified as a queued write, so this producer's later (pipelined)
                    # writes to the partition wait behind it instead of overtaking it.
                    fields = {"error_code": ErrorCode.none}
                    queued_writes.append(
                        _queue_write(partition, records, None, fields, pending=appended)
                    )
                elif appended is not None:
                    fields, wait_for = appended
                if wait_for is not None:
                    commits.append((partition, wait_for, fields))
            fields["index"] = data.index
            partition_results.append(fields)
        results.append((name, partition_results))
    if queued_writes:
        transactional_id = getattr(request, "transactional_id", None)  # Produce v3+
        async with trio.open_nursery() as nursery:
            for queued in queued_writes:
                nursery.start_soon(
                    _append_queued, context, transactional_id, queued, acks, version, commits
                )
    if commits or floors:
        timeout_s = max(request.timeout.total_seconds(), 0.001)
        async with trio.open_nursery() as nursery:
            for partition, wait_for, fields in commits:
                nursery.start_soon(_await_ack, partition, acks, wait_for, timeout_s, fields)
            if floors:
                nursery.start_soon(_raise_producer_id_floor, context, floors)
    _count_errors(context, results)
    if acks == 0:
        if may_write.enabled and context.session is not None and _refused(results):
            # No answer can tell the client; Kafka closes the connection instead.
            context.session.close_after_response = True
        return None
    topic_responses = []
    for name, partition_results in results:
        responses = []
        for fields in partition_results:
            errors = fields.pop("record_errors", ())
            values = {
                "base_offset": -1,
                "log_append_time": None,
                "log_start_offset": -1,
                "error_message": None,
                **fields,
                "record_errors": tuple(
                    build(
                        module.BatchIndexAndErrorMessage,
                        batch_index=index,
                        batch_index_error_message=message,
                    )
                    for index, message in errors
                )
                if hasattr(module, "BatchIndexAndErrorMessage")  # Produce v8+
                else (),
            }
            responses.append(build(module.PartitionProduceResponse, **values))
        topic_responses.append(
            build(module.TopicProduceResponse, name=name, partition_responses=tuple(responses))
        )
    return build(entity, responses=tuple(topic_responses), throttle_time=NO_THROTTLE)
