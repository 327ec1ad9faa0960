"""Appends in restore mode: a topic with `raftka.restore.in.progress=true` (`raftka restore`
writes it) takes batches as they were stored.

The records may hold several batches, each must start at the offset the partition's log
ends at (checked for all before any is written: INVALID_RECORD otherwise), and each is
proposed as is, one Raft entry per batch. Producer state is not checked (it still learns
from the stored batches on every replica), transactional batches and control batches other
than KRAFT_VOTERS are allowed, and timestamps are kept even under LogAppendTime. The
largest producer id written is returned, so the caller raises the cluster's producer id
floor past it before answering.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from raftka.broker.replica.append import AckWait, too_few_in_sync, wait_for
from raftka.broker.replica.types import AppendResult
from raftka.broker.replication import CONTROL_KRAFT_VOTERS, entry_kind_of
from raftka.broker.topics import Partition, Topic
from raftka.consensus.core import NotLeaderError, StorageError
from raftka.consensus.types import EntryKind
from raftka.protocol.batch_builder import control_record_type
from raftka.protocol.records import BatchHeader, InvalidRecords, validate_produce_records

logger = logging.getLogger("raftka.produce")

#: Control types a restore may write: ABORT and COMMIT markers, LEADER_CHANGE.
RESTORABLE_CONTROL_TYPES = frozenset({0, 1, 2})


def in_restore_mode(topic: Topic) -> bool:
    """Whether the topic takes batches as stored (`raftka.restore.in.progress=true`)."""
    return topic.config.restore_in_progress


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


def append_restore(
    partition: Partition, records: bytes, acks: int, client: str, waits: list[AckWait]
) -> tuple[AppendResult, int | None]:
    """Propose a restore write's batches: (the answer, the producer id floor the answer
    needs first, if any); the answer's wait for acks goes to `waits`. No await."""
    topic = partition.topic
    result = AppendResult()
    log = partition.log
    if not partition.is_leader or log is None:
        result.fail(ErrorCode.not_leader_or_follower)
        return result, None
    result.log_start_offset = log.log_start_offset
    try:
        entries = _restore_entries(
            partition, records, log.log_end_offset, topic.config.get_int("max.message.bytes")
        )
    except _Rejected as exc:
        result.fail(exc.error_code, exc.message)
        if exc.error_code == ErrorCode.invalid_record:
            result.record_errors = ((0, exc.message),)
        logger.info(
            "rejected restore produce to %s from %s: %s",
            partition.name,
            client,
            exc.message,
            extra={"partition": partition.name, "topic": topic.name},
        )
        return result, None
    if acks == -1 and too_few_in_sync(partition, result):
        return result, None
    producer_ids = [header.producer_id for header, *_ in entries if header.producer_id >= 0]
    floor = max(producer_ids) + 1 if producer_ids else None
    last = None
    for header, _batch, kind, payload in entries:
        try:
            entry = partition.propose(payload, header.last_offset_delta + 1, kind)
        except StorageError as exc:
            result.fail(ErrorCode.kafka_storage_error, str(exc))
            return result, None
        except NotLeaderError:
            # Batches proposed before stay; the next restore write starts where they end.
            result.fail(ErrorCode.not_leader_or_follower)
            return result, None
        if entry.base_offset != header.base_offset:
            raise AssertionError(
                f"{partition.name}: restored batch at {header.base_offset} was appended at "
                f"{entry.base_offset}"
            )
        if last is None:
            result.base_offset = entry.base_offset
        last = entry
    assert last is not None, "a restore write holds at least one batch"
    result.appended_bytes = len(records)
    result.appended_records = sum(header.records_count for header, *_ in entries)
    waiting = wait_for(partition, acks, last.end_offset, last.epoch)
    if waiting is not None:
        waits.append((partition, waiting, result))
    return result, floor
