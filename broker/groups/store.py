"""`__consumer_offsets` as the coordinator's store: appends through the normal log path.

`TopicOffsetsLog` writes each group of records as one genuine uncompressed v2 batch into the
group's partition (created on first use as an internal topic), honouring the partition's
flush policy before an append returns. A broker serves the groups of the partitions it
leads: on becoming leader it waits for the partition's log to be committed
(`wait_caught_up`) and replays the committed records (`replay`).
`MemoryOffsetsLog` is the in-memory double for tests; it stores real batches too, and
which partitions it "leads" (and at which epoch) is up to the test.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.topics import OFFSETS_TOPIC, Partition, Topic, now_ms
from raftka.consensus.core import NotLeaderError
from raftka.protocol.batch_builder import BatchDecodeError, build_batch, decode_batch, iter_batches

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig
    from raftka.broker.services import ControllerClient, TopicsView

logger = logging.getLogger("raftka.groups")

REPLAY_READ_BYTES = 4 * 1024 * 1024
# Offsets and group metadata must outlive time-based retention: Kafka compacts this topic,
# raftka (delete policy only) keeps it whole and tombstones what expires.
OFFSETS_TOPIC_CONFIGS = {"retention.ms": "-1", "segment.bytes": str(100 * 1024 * 1024)}

KeyValue = tuple[bytes, bytes | None]
COMMIT_TIMEOUT_S = 10.0
CATCH_UP_POLL_S = 1.0


class NotCoordinatorError(Exception):
    """The append was refused or not committed because this broker does not (or no longer)
    lead the partition: Kafka answers NOT_COORDINATOR so clients find the new one."""


class OffsetsLog(Protocol):
    """Where the coordinator's records go: the partitions of `__consumer_offsets`."""

    num_partitions: int

    async def ensure_created(self) -> None:
        """Create the topic if it does not exist yet (Kafka does when a coordinator is first
        looked up); a failure is logged, and appends fail until it exists."""

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        """Append the records as one batch; returns once they are committed (and durable per
        flush policy). Raises NotCoordinatorError when this broker cannot (or no longer)
        lead the partition."""

    def leader_epoch(self, partition: int) -> int | None:
        """The epoch at which this broker leads the partition now; None when it does not."""

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of every partition this broker leads now."""

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        """Wait until the partition's log is committed up to its end; False once this broker
        no longer leads it at `epoch`."""

    def replay(self, partition: int) -> Iterator[KeyValue]:
        """The committed records of one partition, in log order."""


class ReadableLog(Protocol):
    """What replay reads of a partition's log (`log.PartitionLog`)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(
        self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes: ...


def records_of(buf: bytes | memoryview) -> Iterator[KeyValue]:
    """(key, value) of every record of every batch in `buf`; unreadable batches are skipped."""
    for attributes, batch in iter_batches(buf):
        if attributes & 0x20:  # control batch
            continue
        try:
            for record in decode_batch(batch):
                if record.key is not None:
                    yield record.key, record.value
        except BatchDecodeError as exc:
            logger.warning("skipping unreadable %s batch: %s", OFFSETS_TOPIC, exc)


class TopicOffsetsLog:
    """The coordinator's records in `__consumer_offsets`, proposed to each partition's Raft
    group and acknowledged once committed (a majority of its replicas hold them)."""

    def __init__(
        self, topics: TopicsView, controller: ControllerClient, config: BrokerConfig
    ) -> None:
        self.topics = topics
        self.controller = controller
        self.config = config
        self.num_partitions: int = config.get_int("offsets.topic.num.partitions")

    def topic(self) -> Topic | None:
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is not None and len(topic.partitions) != self.num_partitions:
            # The topic's own count wins over a changed offsets.topic.num.partitions, as in
            # Kafka: moving groups between partitions would lose their records.
            self.num_partitions = len(topic.partitions)
        return topic

    async def ensure_topic(self) -> Topic | None:
        """The offsets topic, created through the controller on first use (Kafka creates it
        when a coordinator is first looked up). None while it cannot be created."""
        topic = self.topic()
        if topic is not None:
            return topic
        wanted_rf = int(self.config.get_str("offsets.topic.replication.factor"))
        live = max(1, len(self.controller.live_brokers()))
        result = await self.controller.execute(
            CreateTopicCommand(
                name=OFFSETS_TOPIC,
                num_partitions=self.num_partitions,
                replication_factor=max(1, min(wanted_rf, live)),
                configs=OFFSETS_TOPIC_CONFIGS,
            )
        )
        if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            logger.warning(
                "cannot create %s: %s",
                OFFSETS_TOPIC,
                result.error_message,
                extra={"topic": OFFSETS_TOPIC},
            )
        return self.topic()

    async def ensure_created(self) -> None:
        await self.ensure_topic()

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        topic = await self.ensure_topic()
        if topic is None:
            raise OSError(f"{OFFSETS_TOPIC} does not exist yet")
        target = topic.partitions[partition]
        batch = build_batch(records, now_ms())
        try:
            entry = target.propose(batch, len(records))
            committed = await target.wait_committed(entry, COMMIT_TIMEOUT_S)
        except NotLeaderError as exc:
            raise NotCoordinatorError(f"{target.name}: {exc}") from exc
        if not committed:
            raise NotCoordinatorError(f"{target.name}: the records did not commit in time")

    def _partition(self, partition: int) -> Partition | None:
        topic = self.topic()
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def leader_epoch(self, partition: int) -> int | None:
        """The epoch at which this broker leads the partition; None when it does not."""
        target = self._partition(partition)
        if target is None or target.log is None or not target.is_leader:
            return None
        return target.leader_epoch

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of every offsets partition this broker leads now."""
        topic = self.topic()
        if topic is None:
            return {}
        return {
            p.index: p.leader_epoch for p in topic.partitions if p.log is not None and p.is_leader
        }

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        """Wait until the partition's high watermark reaches its log end (a new leader's log
        is committed once an entry of its own term is); False once this broker no longer
        leads it at `epoch`."""
        while True:
            target = self._partition(partition)
            if (
                target is None
                or target.log is None
                or not target.is_leader
                or target.leader_epoch != epoch
            ):
                return False
            end = target.log.log_end_offset
            if target.high_watermark >= end:
                return True
            try:
                await target.wait_high_watermark(end, CATCH_UP_POLL_S)
            except NotLeaderError:
                return False

    def replay(self, partition: int) -> Iterator[KeyValue]:
        """The committed records of one partition, in log order."""
        target = self._partition(partition)
        if target is None or target.log is None or not target.is_local:
            return
        yield from read_partition(target.log, target.high_watermark)


def read_partition(log: ReadableLog, end: int | None = None) -> Iterator[KeyValue]:
    """Records of the batches below `end` (default: the log end)."""
    offset = log.log_start_offset
    end = log.log_end_offset if end is None else min(end, log.log_end_offset)
    while offset < end:
        data = log.read(offset, REPLAY_READ_BYTES, end, True)
        if not data:
            break
        last = offset
        for _, batch in iter_batches(data):
            # baseOffset + lastOffsetDelta + 1 is where the next batch starts.
            base = int.from_bytes(batch[0:8], "big", signed=True)
            last_delta = int.from_bytes(batch[23:27], "big", signed=True)
            last = base + last_delta + 1
        yield from records_of(data)
        if last <= offset:
            break
        offset = last


class MemoryOffsetsLog:
    """An in-memory `__consumer_offsets`: real v2 batches per partition, for tests.

    It leads every partition at epoch 0 unless told otherwise (`epochs`); `caught_up`
    gates `wait_caught_up`, `fail_appends` makes appends fail with that exception."""

    def __init__(self, num_partitions: int = 50) -> None:
        self.num_partitions = num_partitions
        self.batches: dict[int, list[bytes]] = {}
        self.fail_appends: bool | BaseException = False
        self.epochs: dict[int, int] | None = None  # None: leads every partition at epoch 0
        self.caught_up: dict[int, trio.Event] = {}
        self.append_gate: trio.Event | None = None

    async def ensure_created(self) -> None:
        await trio.lowlevel.checkpoint()

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        await trio.lowlevel.checkpoint()
        if self.append_gate is not None:
            await self.append_gate.wait()
        if isinstance(self.fail_appends, BaseException):
            raise self.fail_appends
        if self.fail_appends:
            raise OSError("append failed (test)")
        if self.leader_epoch(partition) is None:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition}: not the leader (test)")
        self.batches.setdefault(partition, []).append(build_batch(records, now_ms()))

    def leader_epoch(self, partition: int) -> int | None:
        if self.epochs is None:
            return 0 if 0 <= partition < self.num_partitions else None
        return self.epochs.get(partition)

    def led_partitions(self) -> dict[int, int]:
        if self.epochs is None:
            return dict.fromkeys(range(self.num_partitions), 0)
        return dict(self.epochs)

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        gate = self.caught_up.get(partition)
        if gate is not None:
            await gate.wait()
        await trio.lowlevel.checkpoint()
        return self.leader_epoch(partition) == epoch

    def replay(self, partition: int) -> Iterator[KeyValue]:
        for batch in self.batches.get(partition, []):
            yield from records_of(batch)
