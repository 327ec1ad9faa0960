"""DescribeLogDirs (`kafka-log-dirs --describe`, Admin.describeLogDirs): every log directory
of this broker (`log.dirs`, by absolute path as Kafka names them) with the partitions it
holds, each with its size on disk, and the directory's total and usable bytes.

Every hosted replica is a current one (raftka never moves a replica between directories, so
no future replica is ever reported). A directory an I/O error took offline is reported with
KAFKA_STORAGE_ERROR and no partitions, as Kafka reports an offline directory; the others as
usual. As in Kafka, it needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED and
no results).

AlterReplicaLogDirs (`kafka-reassign-partitions` with log directories) moves nothing: raftka
keeps a replica in the directory it was placed in. Each partition is answered on its own:
NONE when the replica already is in the named directory, LOG_DIR_NOT_FOUND for a directory
that is not one of this broker's, KAFKA_STORAGE_ERROR for an offline directory or replica,
REPLICA_NOT_AVAILABLE for a partition this broker does not host, and INVALID_REQUEST (with a
broker log line saying why) for an actual move. It needs ALTER on the cluster, as in Kafka."""

from __future__ import annotations

import logging
import os
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
    from raftka.protocol.messages.requests import (
        AlterReplicaLogDirsRequest,
        DescribeLogDirsRequest,
    )
    from raftka.protocol.messages.responses import (
        AlterReplicaLogDirsResponse,
        DescribeLogDirsResponse,
    )

logger = logging.getLogger("raftka.server")

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
    by_dir: dict[str, dict[str, list[object]]] = {d: {} for d in topics.log_dirs}
    for partition in _wanted(context, request):
        assert partition.log is not None  # _wanted yields hosted partitions only
        by_topic = by_dir.get(topics.log_dir_of(partition.name) or "")
        if by_topic is None:
            continue
        by_topic.setdefault(partition.topic.name, []).append(
            build(
                module.DescribeLogDirsPartition,
                partition_index=partition.index,
                partition_size=partition.log.size_bytes,
                offset_lag=offset_lag(partition),
                is_future_key=False,
            )
        )
    results = []
    for log_dir, by_topic in by_dir.items():
        usage = None
        if log_dir not in topics.offline_log_dirs:
            try:
                usage = shutil.disk_usage(log_dir)
            except OSError:
                usage = None  # gone since: answered as offline
        if usage is None:
            # Kafka's answer for an offline directory: its name and the error, nothing more.
            results.append(
                build(
                    module.DescribeLogDirsResult,
                    error_code=ErrorCode.kafka_storage_error,
                    log_dir=log_dir,
                    topics=(),
                    total_bytes=-1,
                    usable_bytes=-1,
                )
            )
            continue
        results.append(
            build(
                module.DescribeLogDirsResult,
                error_code=ErrorCode.none,
                log_dir=log_dir,
                topics=tuple(
                    build(module.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
                    for name, partitions in by_topic.items()
                ),
                total_bytes=usage.total,
                usable_bytes=usage.free,
            )
        )
    return build(
        entity, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results)
    )


def _alter_replica_log_dir(context: RequestContext, topic: str, index: int, path: str) -> ErrorCode:
    topics = context.services.topics
    wanted = os.path.abspath(path)
    if wanted not in topics.log_dirs:
        return ErrorCode.log_dir_not_found
    if wanted in topics.offline_log_dirs:
        return ErrorCode.kafka_storage_error
    partition = topics.partition(topic, index)
    if partition is not None and partition.offline:
        return ErrorCode.kafka_storage_error
    if partition is None or partition.log is None:
        return ErrorCode.replica_not_available
    current = topics.log_dir_of(partition.name)
    if current == wanted:
        return ErrorCode.none
    logger.warning(
        "AlterReplicaLogDirs: %s stays in %s; raftka does not move a replica between log "
        "directories (asked to move it to %s)",
        partition.name,
        current,
        wanted,
    )
    return ErrorCode.invalid_request


async def handle_alter_replica_log_dirs(
    context: RequestContext, request: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    entity: type[AlterReplicaLogDirsResponse] = response_entity(context)
    module = response_module(context)
    allowed = context.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    by_topic: dict[str, list[object]] = {}
    for log_dir in request.dirs:
        for entry in log_dir.topics:
            for index in entry.partitions:
                error = (
                    _alter_replica_log_dir(context, entry.name, index, log_dir.path)
                    if allowed
                    else ErrorCode.cluster_authorization_failed
                )
                by_topic.setdefault(entry.name, []).append(
                    build(
                        module.AlterReplicaLogDirPartitionResult,
                        partition_index=index,
                        error_code=error,
                    )
                )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(module.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )
