"""DescribeLogDirs (`kafka-log-dirs --describe`, Admin.describeLogDirs): the partitions
this broker holds in its log directory, each with its size on disk, and the directory's
total and usable bytes.

raftka has one log directory (`--data-dir`), named by its absolute path as Kafka names
its own; every hosted replica is a current one (raftka never moves a replica between
directories, so no future replica is ever reported). Once an I/O error took the directory
offline it is reported with KAFKA_STORAGE_ERROR and no partitions, as Kafka reports an
offline directory. As in Kafka, it needs DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED and no results)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import NO_THROTTLE, response_entity, response_module
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Partition
    from raftka.protocol.messages.requests import DescribeLogDirsRequest
    from raftka.protocol.messages.responses import DescribeLogDirsResponse

DESCRIBE_LOG_DIRS_MIN_VERSION = 1  # v0 was removed in Kafka 4 (KIP-896)
DESCRIBE_LOG_DIRS_MAX_VERSION = 4


def offset_lag(partition: Partition) -> int:
    """How far the replica's log end is behind the committed offset it knows of (Kafka:
    max(high watermark - log end offset, 0) for a current replica)."""
    if partition.log is None or partition.raft is None:
        return -1
    return max(partition.raft.high_watermark - partition.log.log_end_offset, 0)


def _wanted(context: RequestContext, request: DescribeLogDirsRequest) -> Iterable[Partition]:
    """The hosted partitions the request asks about (all of them for a null topic list)."""
    topics = context.services.topics
    if request.topics is None:
        for topic in list(topics.topics.values()):
            yield from (p for p in topic.partitions if p.log is not None)
        return
    for entry in request.topics:
        for index in entry.partitions:
            partition = topics.partition(entry.topic, index)
            if partition is not None and partition.log is not None:
                yield partition


async def handle_describe_log_dirs(
    context: RequestContext, request: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    entity: type[DescribeLogDirsResponse] = response_entity(context)
    module = response_module(context)
    if not context.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    topics = context.services.topics
    if topics.log_dir in topics.offline_log_dirs:
        # Kafka's answer for an offline directory: its name and the error, nothing more.
        offline = build(
            module.DescribeLogDirsResult,
            error_code=ErrorCode.kafka_storage_error,
            log_dir=topics.log_dir,
            topics=(),
            total_bytes=-1,
            usable_bytes=-1,
        )
        return build(
            entity, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(offline,)
        )
    by_topic: dict[str, list[object]] = {}
    for partition in _wanted(context, request):
        assert partition.log is not None  # _wanted yields hosted partitions only
        by_topic.setdefault(partition.topic.name, []).append(
            build(
                module.DescribeLogDirsPartition,
                partition_index=partition.index,
                partition_size=partition.log.size_bytes,
                offset_lag=offset_lag(partition),
                is_future_key=False,
            )
        )
    usage = shutil.disk_usage(topics.log_dir)
    result = build(
        module.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=topics.log_dir,
        topics=tuple(
            build(module.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
            for name, partitions in by_topic.items()
        ),
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
    return build(entity, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))
