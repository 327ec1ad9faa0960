"""`__consumer_offsets` as the coordinator's store: appends through the normal log path.

`TopicOffsetsLog` writes each group of records as one genuine uncompressed v2 batch into the
group's partition (created on first use as an internal topic), honouring the partition's
flush policy before an append returns. A TxnOffsetCommit's batch is transactional: it carries
the producer's id and epoch, and the transaction's COMMIT or ABORT marker (a control batch
the transaction coordinator writes) decides later whether its offsets count. A broker
serves the groups of the partitions it leads: on becoming leader it waits for the
partition's log to be committed (`wait_caught_up`) and replays the committed records and
markers (`replay_log`).
`MemoryOffsetsLog` is the in-memory double for tests; it stores real batches too, and
which partitions it "leads" (and at which epoch) is up to the test.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterConfigsCommand, CreateTopicCommand
from raftka.broker.replica import AppendOrigin, ReplicaManager, leads
from raftka.broker.topics import OFFSETS_TOPIC as OFFSETS_TOPIC  # named from here by groups/
from raftka.broker.topics import Partition, Topic, now_ms
from raftka.consensus.core import NotLeaderError
from raftka.protocol.batch_builder import (
    CONTROL_TYPE_COMMIT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    BatchDecodeError,
    build_batch,
    build_end_txn_marker,
    decode_batch,
    end_txn_marker,
    iter_batches,
)
from raftka.protocol.records import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    read_batch_header,
)

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig
    from raftka.broker.replica.types import CoordinatorController, PartitionSource

logger = logging.getLogger("raftka.groups")

REPLAY_READ_BYTES = 4 * 1024 * 1024
# Offsets and group metadata must outlive time-based retention: as in Kafka, the topic is
# compacted (the latest commit per group and partition stays; tombstones remove the rest).
# Its segment size is the broker config `offsets.topic.segment.bytes`.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1"}
#: The configs of an internal topic its coordinator's records rely on: its state would
#: otherwise be deleted with time. Others (segment sizes) are the operator's to change.
REQUIRED_CONFIGS = frozenset({"cleanup.policy", "retention.ms"})

KeyValue = tuple[bytes, bytes | None]
COMMIT_TIMEOUT_S = 10.0
CATCH_UP_POLL_S = 1.0
# The base sequence of the coordinator's transactional batches, as Kafka's coordinator
# writes it (its own appends skip the producer's sequence checks).
TXN_OFFSETS_BASE_SEQUENCE = 0


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a data batch; `producer_id` is the transaction's producer when the
    batch is transactional (a TxnOffsetCommit), else -1."""

    offset: int
    producer_id: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT (`committed`) or ABORT marker ending `producer_id`'s transaction."""

    offset: int
    producer_id: int
    committed: bool


LoggedEntry = StoredRecord | TxnMarker


class NotCoordinatorError(Exception):
    """The append was refused or not committed because this broker does not (or no longer)
    lead the partition: Kafka answers NOT_COORDINATOR so clients find the new one."""


class StaleProducerEpochError(Exception):
    """A transactional append of a producer at an epoch older than the one the partition has
    seen: the producer was fenced (Kafka's INVALID_PRODUCER_EPOCH)."""


def check_producer_epoch(
    name: str, producer_id: int, producer_epoch: int, known_epoch: int | None
) -> None:
    """Raise StaleProducerEpochError when `producer_epoch` is older than `known_epoch`."""
    if known_epoch is not None and producer_epoch < known_epoch:
        raise StaleProducerEpochError(
            f"{name}: epoch {producer_epoch} of producer {producer_id} is older than the "
            f"epoch {known_epoch} seen last; the producer was fenced by a newer instance"
        )


def check_leader_epoch(name: str, expected: int | None, current: int | None) -> None:
    """Raise NotCoordinatorError when a write meant for leader epoch `expected` (None: any)
    would be appended while this broker leads at `current` (None: not at all)."""
    if expected is not None and current != expected:
        where = "no longer leads it" if current is None else f"leads it at epoch {current}"
        raise NotCoordinatorError(
            f"{name}: the write was decided at leader epoch {expected}, this broker {where}"
        )


class OffsetsLog(Protocol):
    """Where the coordinator's records go: the partitions of `__consumer_offsets`."""

    num_partitions: int

    async def ensure_created(self) -> None:
        """Create the topic if it does not exist yet (Kafka does when a coordinator is first
        looked up); a failure is logged, and appends fail until it exists."""

    async def append(
        self,
        partition: int,
        records: list[KeyValue],
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        leader_epoch: int | None = None,
    ) -> int:
        """Append the records as one batch (a transactional one of `producer_id` at
        `producer_epoch` when a producer is given); returns the batch's base offset once
        it is committed (and durable per flush policy). Raises NotCoordinatorError when
        this broker cannot (or no longer) lead the partition, or does not lead it at
        `leader_epoch` (when given: the coordinator epoch the write was decided in),
        StaleProducerEpochError when the producer's epoch is older than one the partition
        has seen."""

    def leader_epoch(self, partition: int) -> int | None:
        """The epoch at which this broker leads the partition now; None when it does not."""

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of every partition this broker leads now."""

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        """Wait until the partition's log is committed up to its end; False once this broker
        no longer leads it at `epoch`."""

    def replay_log(self, partition: int) -> Iterator[LoggedEntry]:
        """The committed records and transaction markers of one partition, in log order."""


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
    for entry in entries_of(buf):
        if isinstance(entry, StoredRecord):
            yield entry.key, entry.value


def entries_of(buf: bytes | memoryview) -> Iterator[LoggedEntry]:
    """The records and transaction markers of the batches in `buf`; unreadable batches and
    other control batches (a Raft leader's LEADER_CHANGE) are skipped."""
    for attributes, batch in iter_batches(buf):
        header = read_batch_header(batch)
        transactional = bool(attributes & TRANSACTIONAL_FLAG_MASK) and header.producer_id >= 0
        if attributes & CONTROL_FLAG_MASK:
            marker = end_txn_marker(batch) if transactional else None
            if marker is not None:
                committed = marker[0] == CONTROL_TYPE_COMMIT
                yield TxnMarker(header.base_offset, header.producer_id, committed)
            continue
        producer_id = header.producer_id if transactional else NO_PRODUCER_ID
        try:
            for record in decode_batch(batch):
                if record.key is not None:
                    yield StoredRecord(record.offset, producer_id, record.key, record.value)
        except BatchDecodeError as exc:
            logger.warning("skipping unreadable %s batch: %s", OFFSETS_TOPIC, exc)


def offsets_batch(
    records: list[KeyValue],
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
) -> bytes:
    """The batch the coordinator appends: plain, or transactional for a producer."""
    if producer_id < 0:
        return build_batch(records, timestamp_ms, base_offset=base_offset)
    return build_batch(
        records,
        timestamp_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=TXN_OFFSETS_BASE_SEQUENCE,
        transactional=True,
    )


def marker_batch(
    producer_id: int,
    producer_epoch: int,
    committed: bool,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
) -> bytes:
    """`build_end_txn_marker` with the coordinator epoch last (tests' marker batches)."""
    return build_end_txn_marker(
        producer_id,
        producer_epoch,
        coordinator_epoch,
        committed,
        timestamp_ms,
        base_offset=base_offset,
    )


def offsets_marker_listener(
    on_transaction_completed: Callable[[int, int, bool], None],
) -> Callable[[str, int, int, bool], None]:
    """A replica manager's marker listener telling the group coordinator
    (`on_transaction_completed(partition, producer id, committed)`) of each marker committed
    on a `__consumer_offsets` partition."""

    def on_marker(topic: str, partition: int, producer_id: int, committed: bool) -> None:
        if topic == OFFSETS_TOPIC:
            on_transaction_completed(partition, producer_id, committed)

    return on_marker


class TopicOffsetsLog:
    """The coordinator's records in `__consumer_offsets`, proposed to each partition's Raft
    group and acknowledged once committed (a majority of its replicas hold them)."""

    def __init__(
        self,
        topics: PartitionSource,
        controller: CoordinatorController,
        config: BrokerConfig,
        topic_name: str = OFFSETS_TOPIC,
        config_prefix: str = "offsets.topic",
        topic_configs: Mapping[str, str] = OFFSETS_TOPIC_CONFIGS,
        replica_manager: ReplicaManager | None = None,
    ) -> None:
        """`topic_name` and the broker configs `<config_prefix>.num.partitions` and
        `<config_prefix>.replication.factor` name another internal topic kept the same way
        (the transaction coordinator's `__transaction_state`). Appends go through
        `replica_manager` (the broker's; without one, a manager of `topics` of its own,
        which behaves the same for a coordinator's appends)."""
        self.topics = topics
        self.replica_manager = (
            ReplicaManager(topics, controller) if replica_manager is None else replica_manager
        )
        self.controller = controller
        self.config = config
        self.topic_name = topic_name
        self.config_prefix = config_prefix
        self.topic_configs = topic_configs
        self.num_partitions: int = config.get_int(f"{config_prefix}.num.partitions")
        # Whether the existing topic's configs were checked (and put right) by this broker.
        self._checked = False

    def topic(self) -> Topic | None:
        topic = self.topics.get(self.topic_name)
        if topic is not None and len(topic.partitions) != self.num_partitions:
            # The topic's own count wins over a changed offsets.topic.num.partitions, as in
            # Kafka: moving groups between partitions would lose their records.
            self.num_partitions = len(topic.partitions)
        return topic

    def _creation_configs(self) -> dict[str, str]:
        configs = dict(self.topic_configs)
        if "segment.bytes" not in configs:
            name = f"{self.config_prefix}.segment.bytes"
            configs["segment.bytes"] = str(self.config.get_int(name))
        return configs

    async def ensure_topic(self) -> Topic | None:
        """The offsets topic, created through the controller on first use (Kafka creates it
        when a coordinator is first looked up). None while it cannot be created. The first
        time this broker finds it made otherwise, it says so in its log and puts back the
        configs the coordinator relies on."""
        topic = self.topic()
        if topic is not None:
            if not self._checked:
                await self._check(topic)
            return topic
        wanted_rf = self.config.get_int(f"{self.config_prefix}.replication.factor")
        live = max(1, len(self.controller.live_brokers()))
        result = await self.controller.execute(
            CreateTopicCommand(
                name=self.topic_name,
                num_partitions=self.num_partitions,
                replication_factor=max(1, min(wanted_rf, live)),
                configs=self._creation_configs(),
            )
        )
        if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            logger.warning(
                "cannot create %s: %s",
                self.topic_name,
                result.error_message,
                extra={"topic": self.topic_name},
            )
        return self.topic()

    async def ensure_created(self) -> None:
        await self.ensure_topic()

    async def _check(self, topic: Topic) -> None:
        configured = self.config.get_int(f"{self.config_prefix}.num.partitions")
        if len(topic.partitions) != configured:
            # Records are placed by partition count: changing it would lose them.
            logger.warning(
                "%s has %d partitions where %s.num.partitions is %d; kept as it is",
                self.topic_name,
                len(topic.partitions),
                self.config_prefix,
                configured,
                extra={"topic": self.topic_name},
            )
        wrong = {
            name: value
            for name, value in self.topic_configs.items()
            if name in REQUIRED_CONFIGS and topic.config.render(name) != value
        }
        if not wrong:
            self._checked = True
            return
        for name, value in wrong.items():
            logger.warning(
                "%s has %s=%s where its coordinator needs %s; setting it back",
                self.topic_name,
                name,
                topic.config.render(name),
                value,
                extra={"topic": self.topic_name},
            )
        overrides: dict[str, str | None] = {
            name: topic.config.render(name) for name in topic.config.overrides
        }
        overrides.update(wrong)
        result = await self.controller.execute(
            AlterConfigsCommand(name=self.topic_name, configs=overrides)
        )
        if result.error_code == ErrorCode.none:
            self._checked = True
        else:
            logger.warning(
                "cannot set the configs of %s back: %s",
                self.topic_name,
                result.error_message,
                extra={"topic": self.topic_name},
            )

    async def append(
        self,
        partition: int,
        records: list[KeyValue],
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        leader_epoch: int | None = None,
    ) -> int:
        topic = await self.ensure_topic()
        if topic is None:
            raise OSError(f"{self.topic_name} does not exist yet")
        if not 0 <= partition < len(topic.partitions):
            raise NotCoordinatorError(
                f"{self.topic_name} has {len(topic.partitions)} partitions, not {partition + 1}"
            )
        target = topic.partitions[partition]
        batch = offsets_batch(
            records, now_ms(), producer_id=producer_id, producer_epoch=producer_epoch
        )
        (result,) = await self.replica_manager.append_records(
            AppendOrigin.COORDINATOR,
            -1,
            COMMIT_TIMEOUT_S,
            [(target, batch)],
            leader_epoch=leader_epoch,
        )
        if result.error_code == ErrorCode.invalid_producer_epoch:
            raise StaleProducerEpochError(result.error_message)
        if result.error_code == ErrorCode.request_timed_out:
            raise NotCoordinatorError(f"{target.name}: the records did not commit in time")
        if result.error_code != ErrorCode.none:
            raise NotCoordinatorError(result.error_message or f"{target.name}: not the leader")
        return result.base_offset

    def _partition(self, partition: int) -> Partition | None:
        topic = self.topic()
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def leader_epoch(self, partition: int) -> int | None:
        """The epoch at which this broker leads the partition; None when it does not."""
        target = self._partition(partition)
        if target is None or not leads(target):
            return None
        return target.leader_epoch

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of every offsets partition this broker leads now."""
        topic = self.topic()
        if topic is None:
            return {}
        return {p.index: p.leader_epoch for p in topic.partitions if leads(p)}

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        """Wait until the partition's high watermark reaches its log end (a new leader's log
        is committed once an entry of its own term is); False once this broker no longer
        leads it at `epoch`."""
        while True:
            target = self._partition(partition)
            log = None if target is None else self.replica_manager.get_log(target)
            if (
                target is None
                or log is None
                or not target.is_leader
                or target.leader_epoch != epoch
            ):
                return False
            end = log.log_end_offset
            if target.high_watermark >= end:
                return True
            try:
                await target.wait_high_watermark(end, CATCH_UP_POLL_S)
            except NotLeaderError:
                return False

    def replay_log(self, partition: int) -> Iterator[LoggedEntry]:
        """The committed records and transaction markers of one partition, in log order."""
        target = self._partition(partition)
        log = None if target is None else self.replica_manager.get_log(target)
        if target is None or log is None:
            return
        yield from read_entries(log, target.high_watermark)

    def replay(self, partition: int) -> Iterator[KeyValue]:
        """The committed records of one partition, in log order (markers left out)."""
        for entry in self.replay_log(partition):
            if isinstance(entry, StoredRecord):
                yield entry.key, entry.value


def read_partition(log: ReadableLog, end: int | None = None) -> Iterator[KeyValue]:
    """Records of the batches below `end` (default: the log end)."""
    for entry in read_entries(log, end):
        if isinstance(entry, StoredRecord):
            yield entry.key, entry.value


def read_entries(log: ReadableLog, end: int | None = None) -> Iterator[LoggedEntry]:
    """Records and transaction markers of the batches below `end` (default: the log end)."""
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
        yield from entries_of(data)
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
        self.end_offsets: dict[int, int] = {}
        self.producer_epochs: dict[tuple[int, int], int] = {}  # (partition, producer) -> epoch
        self.fail_appends: bool | BaseException = False
        self.epochs: dict[int, int] | None = None  # None: leads every partition at epoch 0
        self.caught_up: dict[int, trio.Event] = {}
        self.append_gate: trio.Event | None = None

    async def ensure_created(self) -> None:
        await trio.lowlevel.checkpoint()

    async def append(
        self,
        partition: int,
        records: list[KeyValue],
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        leader_epoch: int | None = None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        if self.append_gate is not None:
            await self.append_gate.wait()
        if isinstance(self.fail_appends, BaseException):
            raise self.fail_appends
        if self.fail_appends:
            raise OSError("append failed (test)")
        if self.leader_epoch(partition) is None:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{partition}: not the leader (test)")
        check_leader_epoch(
            f"{OFFSETS_TOPIC}-{partition}", leader_epoch, self.leader_epoch(partition)
        )
        if producer_id >= 0:
            key = (partition, producer_id)
            name = f"{OFFSETS_TOPIC}-{partition}"
            check_producer_epoch(name, producer_id, producer_epoch, self.producer_epochs.get(key))
            self.producer_epochs[key] = producer_epoch
        base_offset = self.end_offsets.get(partition, 0)
        batch = offsets_batch(
            records,
            now_ms(),
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
        self._store(partition, batch, len(records))
        return base_offset

    def write_marker(
        self, partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> int:
        """Append a COMMIT or ABORT marker, as the transaction coordinator would; returns
        its offset. (The caller tells the coordinator: `on_transaction_completed`.)"""
        offset = self.end_offsets.get(partition, 0)
        batch = marker_batch(producer_id, producer_epoch, committed, now_ms(), base_offset=offset)
        self._store(partition, batch, 1)
        return offset

    def _store(self, partition: int, batch: bytes, record_count: int) -> None:
        self.batches.setdefault(partition, []).append(batch)
        self.end_offsets[partition] = self.end_offsets.get(partition, 0) + record_count

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

    def replay_log(self, partition: int) -> Iterator[LoggedEntry]:
        for batch in self.batches.get(partition, []):
            yield from entries_of(batch)

    def replay(self, partition: int) -> Iterator[KeyValue]:
        for batch in self.batches.get(partition, []):
            yield from records_of(batch)
