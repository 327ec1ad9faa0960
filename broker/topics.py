"""Topics and their partitions on this broker: names, ids, configs and partition logs.

Topic metadata (name, id, partition count, config overrides) is kept in lmdb under the data
directory so that it survives restarts; each partition's records live in its own segment log
folder `<data-dir>/<topic>-<partition>/`, as in Kafka.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import trio
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig, ConfigError, TopicConfig, validate_topic_configs
from log import LogConfig, PartitionLog

logger = logging.getLogger("raftka.topics")

TOPIC_NAME_MAX_LENGTH = 249
#: Producer ids reserved durably at a time, so a restart never hands out one twice.
PRODUCER_ID_BLOCK_SIZE = 1000
_NEXT_PRODUCER_ID_KEY = b"producer-ids/next-block"
MAX_PARTITIONS = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__cluster_metadata"})


class TopicError(Exception):
    """A topic operation that Kafka answers with an error code and message."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules (kafka.common.internals.Topic.validate)."""
    if not name:
        raise TopicError(
            ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise TopicError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LENGTH} characters",
        )
    if not _LEGAL_TOPIC.match(name):
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def log_config_for(config: TopicConfig) -> LogConfig:
    return LogConfig(
        producer_id_expiration_ms=config.broker.get("producer.id.expiration.ms"),
        segment_bytes=config.get("segment.bytes"),
        segment_ms=config.get("segment.ms"),
        retention_ms=config.get("retention.ms"),
        retention_bytes=config.get("retention.bytes"),
        flush_messages=config.get("flush.messages"),
        flush_ms=config.get("flush.ms"),
        index_interval_bytes=config.get("index.interval.bytes"),
        segment_index_bytes=config.get("segment.index.bytes"),
        message_timestamp_type_log_append=config.get("message.timestamp.type") == "LogAppendTime",
    )


@dataclass(eq=False)
class Partition:
    """One partition replica on this broker and what Fetch long-polls wait on."""

    topic: Topic
    index: int
    log: PartitionLog
    leader_epoch: int = 0
    waiters: set[trio.Event] = field(default_factory=set)

    @property
    def high_watermark(self) -> int:
        # A single replica is its own majority: everything appended is committed.
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    def notify_appended(self) -> None:
        """Wake the Fetch requests long-polling this partition."""
        for waiter in self.waiters:
            waiter.set()
        self.waiters.clear()


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    config: TopicConfig
    partitions: list[Partition] = field(default_factory=list)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def describe(self) -> dict[str, Any]:
        return {
            "id": str(self.topic_id),
            "partitions": len(self.partitions),
            "configs": {k: str(v) for k, v in self.config.overrides.items()},
        }


class TopicManager:
    """Owns every topic and partition log of this broker."""

    def __init__(self, data_dir: Path, broker_config: BrokerConfig) -> None:
        self.data_dir = data_dir
        self.broker_config = broker_config
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(data_dir / "metadata.lmdb"), map_size=1 << 30, subdir=True)
        self._producer_ids = range(0)  # the unused rest of the reserved block

    # -- producer ids (InitProducerId) ---------------------------------------------------

    def next_producer_id(self) -> int:
        """A producer id never handed out before by this data directory.

        Ids are reserved in blocks of PRODUCER_ID_BLOCK_SIZE, committed to lmdb before any
        id of the block is used (ids of a block unused at shutdown are skipped).
        """
        if not self._producer_ids:
            with self._env.begin(write=True) as txn:
                raw = txn.get(_NEXT_PRODUCER_ID_KEY)
                start = int(raw) if raw is not None else 0
                end = start + PRODUCER_ID_BLOCK_SIZE
                txn.put(_NEXT_PRODUCER_ID_KEY, str(end).encode())
            self._producer_ids = range(start, end)
        producer_id = self._producer_ids[0]
        self._producer_ids = self._producer_ids[1:]
        return producer_id

    # -- lifecycle ---------------------------------------------------------------------

    def load(self) -> None:
        """Open every topic recorded in the metadata store, recovering its logs."""
        with self._env.begin() as txn:
            records = [
                (k.decode(), json.loads(v)) for k, v in txn.cursor() if k.startswith(b"topic/")
            ]
        started = time.monotonic()
        for key, record in records:
            name = key.removeprefix("topic/")
            overrides = validate_topic_configs(record["configs"])
            self._open_topic(name, uuid.UUID(record["id"]), record["partitions"], overrides)
        if records:
            logger.info(
                "opened %d topics (%d partitions) in %.2f s",
                len(records),
                sum(len(t.partitions) for t in self.topics.values()),
                time.monotonic() - started,
            )

    def close(self) -> None:
        for topic in self.topics.values():
            for partition in topic.partitions:
                partition.log.close()
        self._env.close()

    # -- queries -----------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, name: str, index: int) -> Partition | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def all_partitions(self) -> Iterator[Partition]:
        for topic in list(self.topics.values()):
            yield from topic.partitions

    # -- changes -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
    ) -> Topic | None:
        """Create a topic; raises TopicError with Kafka's error code for bad requests.

        num_partitions / replication_factor of -1 mean the broker defaults (KIP-464).
        """
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if num_partitions == -1:
            num_partitions = self.broker_config.get("num.partitions")
        if replication_factor == -1:
            replication_factor = self.broker_config.get("default.replication.factor")
        if num_partitions <= 0:
            raise TopicError(
                ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
            )
        if num_partitions > MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Number of partitions {num_partitions} is above the limit of {MAX_PARTITIONS}.",
            )
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                "Replication factor must be larger than 0.",
            )
        if replication_factor > 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): "
                "The target replication factor of "
                f"{replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        try:
            overrides = validate_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return None
        topic = self._open_topic(name, uuid.uuid4(), num_partitions, overrides)
        self._store(topic)
        logger.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition, "This server does not host this topic."
            )
        with self._env.begin(write=True) as txn:
            txn.delete(f"topic/{name}".encode())
        del self.topics[name]
        self.topics_by_id.pop(topic.topic_id, None)
        for partition in topic.partitions:
            partition.log.close()
            shutil.rmtree(partition.log.directory, ignore_errors=True)
            partition.notify_appended()
        logger.info("deleted topic %s", name)
        return topic

    def _store(self, topic: Topic) -> None:
        record = {
            "id": str(topic.topic_id),
            "partitions": len(topic.partitions),
            "configs": {k: topic.config.render(k) for k in topic.config.overrides},
        }
        with self._env.begin(write=True) as txn:
            txn.put(f"topic/{topic.name}".encode(), json.dumps(record).encode())

    def alter_topic_configs(self, name: str, overrides: Mapping[str, Any]) -> None:
        """Replace a topic's config overrides (already validated) and apply them to its logs."""
        topic = self.topics[name]
        topic.config = TopicConfig(self.broker_config, overrides)
        self._store(topic)
        log_config = log_config_for(topic.config)
        for partition in topic.partitions:
            partition.log.update_config(log_config)
        logger.info("altered configs of topic %s: %s", name, dict(overrides))

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow a topic to `total` partitions (CreatePartitions); raises TopicError."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            )
        current = len(topic.partitions)
        if total < current:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than the "
                f"requested {total}.",
            )
        if total == current:
            raise TopicError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partitions."
            )
        if total > MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Number of partitions {total} is above the limit of {MAX_PARTITIONS}.",
            )
        if validate_only:
            return
        log_config = log_config_for(topic.config)
        now = now_ms()
        for index in range(current, total):
            log = PartitionLog.open(self.data_dir / f"{name}-{index}", log_config, now)
            topic.partitions.append(Partition(topic=topic, index=index, log=log))
        self._store(topic)
        logger.info("topic %s now has %d partitions", name, total)

    def _open_topic(
        self, name: str, topic_id: uuid.UUID, num_partitions: int, overrides: Mapping[str, Any]
    ) -> Topic:
        config = TopicConfig(self.broker_config, overrides)
        topic = Topic(name=name, topic_id=topic_id, config=config)
        log_config = log_config_for(config)
        now = now_ms()
        for index in range(num_partitions):
            log = PartitionLog.open(self.data_dir / f"{name}-{index}", log_config, now)
            topic.partitions.append(Partition(topic=topic, index=index, log=log))
        self.topics[name] = topic
        self.topics_by_id[topic_id] = topic
        return topic
