"""Produce: validate each partition's batch by its header, append, answer per partition.

Records stay opaque: only the 61-byte batch headers are read and only baseOffset and
partitionLeaderEpoch are rewritten (LogAppendTime topics also restamp maxTimestamp).

Batches with a producer id are checked against the partition's producer state (epoch and
sequence, `log.producer_state`) right before the append, with no await in between, so no
other request can interleave. A retried duplicate is not appended; its answer carries the
original base offset, as Kafka's does. Transactional batches are refused with
INVALID_TXN_STATE: this broker has no transaction coordinator, so no transaction can be
ongoing (what Kafka answers for a transactional write outside a transaction).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from broker.handlers.common import NO_THROTTLE, response_schema
from broker.topics import now_ms
from log.producer_state import BatchMetadata, ProducerStateError
from protocol.api import build
from protocol.records import InvalidRecords, validate_produce_records

logger = logging.getLogger("raftka.produce")


def _append_time(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _check_producer_state(log: Any, headers: list[Any]) -> BatchMetadata | None:
    """The retained batch `headers` duplicates, if any; raises ProducerStateError."""
    for header in headers:
        if header.is_transactional:
            raise ProducerStateError(
                ErrorCode.invalid_txn_state,
                "Transactional records are not supported: this broker has no transaction "
                "coordinator, so no transaction can be ongoing",
            )
    return log.producer_state.check(headers)


async def handle_produce(context: Any, request: Any) -> Any:
    broker = context.broker
    entity, module = response_schema(context)
    acks = request.acks
    version = context.api_version
    flushes = []
    topic_responses = []
    now = now_ms()
    for topic_data in request.topic_data or ():
        name = topic_data.name
        topic = broker.topics.get(name)
        partition_responses = []
        for data in topic_data.partition_data or ():
            fields: dict[str, Any] = {
                "index": data.index,
                "error_code": ErrorCode.none,
                "base_offset": -1,
                "log_append_time": None,
                "log_start_offset": -1,
                "record_errors": (),
                "error_message": None,
            }
            partition = None if topic is None else broker.topics.partition(name, data.index)
            if acks not in (-1, 0, 1):
                fields["error_code"] = ErrorCode.invalid_required_acks
            elif partition is None:
                fields["error_code"] = ErrorCode.unknown_topic_or_partition
            elif topic.is_internal:
                fields["error_code"] = ErrorCode.invalid_topic_exception
                fields["error_message"] = f"Cannot append to internal topic {name}"
            else:
                records = data.records or b""
                try:
                    headers = validate_produce_records(
                        records,
                        topic.config.get("max.message.bytes"),
                        produce_version=version,
                    )
                except InvalidRecords as exc:
                    fields["error_code"] = ErrorCode(exc.error_code)
                    fields["error_message"] = exc.message
                    if exc.error_code == ErrorCode.invalid_record:
                        fields["record_errors"] = (
                            build(
                                module.BatchIndexAndErrorMessage,
                                batch_index=0,
                                batch_index_error_message=exc.message,
                            ),
                        )
                    logger.info(
                        "rejected produce to %s-%d from %s: %s",
                        name,
                        data.index,
                        context.client_host,
                        exc.message,
                    )
                else:
                    log = partition.log
                    try:
                        duplicate = _check_producer_state(log, headers)
                    except ProducerStateError as exc:
                        fields["error_code"] = ErrorCode(exc.error_code)
                        fields["error_message"] = exc.message
                        fields["log_start_offset"] = log.log_start_offset
                        logger.info(
                            "rejected produce to %s-%d from %s: %s",
                            name,
                            data.index,
                            context.client_host,
                            exc.message,
                        )
                        partition_responses.append(build(module.PartitionProduceResponse, **fields))
                        continue
                    if duplicate is not None:
                        fields["base_offset"] = duplicate.first_offset
                        if log.config.message_timestamp_type_log_append:
                            fields["log_append_time"] = _append_time(duplicate.timestamp_ms)
                        fields["log_start_offset"] = log.log_start_offset
                        partition_responses.append(build(module.PartitionProduceResponse, **fields))
                        continue
                    info = log.append(bytearray(records), headers, partition.leader_epoch, now)
                    partition.notify_appended()
                    fields["base_offset"] = info.first_offset
                    fields["log_append_time"] = _append_time(info.log_append_time_ms)
                    fields["log_start_offset"] = log.log_start_offset
                    if acks != 0 and log.should_flush(now):
                        job = log.flush_job()
                        if job is not None:
                            flushes.append(job)
            partition_responses.append(build(module.PartitionProduceResponse, **fields))
        topic_responses.append(
            build(
                module.TopicProduceResponse,
                name=name,
                partition_responses=tuple(partition_responses),
            )
        )
    # flush.messages / flush.ms due now: the records are on disk before we acknowledge them.
    for job in flushes:
        await trio.to_thread.run_sync(job)
    if acks == 0:
        return None
    return build(entity, responses=tuple(topic_responses), throttle_time=NO_THROTTLE)
