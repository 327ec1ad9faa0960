"""Topics and their partitions as this broker sees them.

What topics exist, their ids, replica sets and configs come from the cluster metadata image
(`broker.cluster`); this module turns it into local state: for every partition replica placed
on this broker, a segment log folder `<log-dir>/<topic>-<partition>/` (Kafka's layout) in one
of the broker's log directories (`broker.log_directories`) and the partition's Raft group,
whose log that folder is. Partitions hosted elsewhere are known by their replica sets only.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from raftka.broker.config import BrokerConfig, TopicConfig, validate_topic_configs
from raftka.broker.log_directories import find_partition_folders, next_log_dir
from raftka.broker.long_polls import Wakeable
from raftka.broker.replication import HardStateStore, PartitionRaftStorage
from raftka.consensus.core import NotLeaderError
from raftka.consensus.driver import RaftGroup, RaftGroupUpdate, RaftNode
from raftka.consensus.types import Entry, EntryKind, Role
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import BatchHeader

logger = logging.getLogger("raftka.topics")
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_time_ns: Final = time.time_ns

# Threads that close partition logs at shutdown (each close fsyncs a few files).
CLOSE_THREADS = 8

# Kafka's internal topics: consumer-group state, and (as a partition name) the metadata log.
OFFSETS_TOPIC = "__consumer_offsets"
METADATA_TOPIC = "__cluster_metadata"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset(
    {OFFSETS_TOPIC, METADATA_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC}
)
#: The internal topics a coordinator creates on first use, with its own partition count and
#: configs; nothing else creates them.
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})


class PartitionNotHostedError(Exception):
    """A partition's local state (its log and Raft group) was used on a broker that does not
    host it; callers check `Partition.is_local` first."""


def now_ms() -> int:
    return _time_ns() // 1_000_000


def log_config_for(config: TopicConfig) -> LogConfig:
    timestamp_type = config.get_str("message.timestamp.type")
    return LogConfig(
        producer_id_expiration_ms=config.broker.get_int("producer.id.expiration.ms"),
        segment_bytes=config.get_int("segment.bytes"),
        segment_ms=config.get_int("segment.ms"),
        retention_ms=config.get_int("retention.ms"),
        retention_bytes=config.get_int("retention.bytes"),
        flush_messages=config.get_int("flush.messages"),
        flush_ms=config.get_int("flush.ms"),
        index_interval_bytes=config.get_int("index.interval.bytes"),
        segment_index_bytes=config.get_int("segment.index.bytes"),
        message_timestamp_type_log_append=timestamp_type == "LogAppendTime",
        compact="compact" in config.get_str("cleanup.policy"),
        delete="delete" in config.get_str("cleanup.policy"),
    )


@dataclass(eq=False)
class Partition:
    """One partition: its replica set and, when hosted here, its log and Raft group."""

    topic: Topic
    index: int
    replicas: tuple[int, ...]
    #: Raft voters before any membership change in the log, when they differ from
    #: `replicas` (a reassignment is in progress); None: the replicas.
    raft_voters: tuple[int, ...] | None = None
    log: PartitionLog | None = None
    storage: PartitionRaftStorage | None = None
    raft: RaftGroup | None = None
    #: What waits for an append here: fetches' long polls (and share fetches' events).
    waiters: set[Wakeable] = field(default_factory=set)
    #: The epoch of the last leader this broker knew of; 0 while the partition has had none
    #: (a new one electing its first), as Kafka numbers a new partition's leader epoch.
    last_leader_epoch: int = 0
    #: That leader, while it may still lead: None before this broker knew one, and once
    #: this broker, having led at that epoch, stepped down.
    last_leader_id: int | None = None
    #: This broker's replica is in a log directory taken offline by an I/O error: it has
    #: no log or Raft group here until the broker restarts (Kafka's offline partition).
    offline: bool = False

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"

    @property
    def is_local(self) -> bool:
        return self.raft is not None

    @property
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.role is Role.LEADER

    @property
    def leader_id(self) -> int | None:
        return None if self.raft is None else self.raft.leader_id

    @property
    def leader_epoch(self) -> int:
        return -1 if self.raft is None else self.raft.term

    @property
    def hosted_log(self) -> PartitionLog:
        """The partition's log; PartitionNotHostedError when this broker does not host it."""
        if self.log is None:
            raise PartitionNotHostedError(f"{self.name} is not hosted on this broker")
        return self.log

    @property
    def hosted_raft(self) -> RaftGroup:
        """The partition's Raft group; PartitionNotHostedError when this broker does not
        host it."""
        if self.raft is None:
            raise PartitionNotHostedError(f"{self.name} is not hosted on this broker")
        return self.raft

    @property
    def high_watermark(self) -> int:
        # Committed offsets the log holds; a restarted follower may lag its own log.
        return min(self.hosted_raft.high_watermark, self.hosted_log.log_end_offset)

    @property
    def high_watermark_behind_epoch_start(self) -> bool:
        """A new leader has not yet committed up to where its epoch started: its high
        watermark may be below what the previous leader reported (Kafka answers
        ListOffsets with OFFSET_NOT_AVAILABLE then, KAFKA-7703)."""
        start = None if self.raft is None else self.raft.leader_epoch_start_offset
        return start is not None and self.high_watermark < start

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: read_committed consumers read below it (every transaction before it
        is decided and its marker committed)."""
        return self.hosted_log.last_stable_offset(self.high_watermark)

    def in_sync_replicas(self) -> tuple[int, ...]:
        if self.raft is not None and self.raft.role is Role.LEADER:
            isr = self.raft.status().in_sync_replicas
            if isr:
                return tuple(r for r in self.replicas if r in isr)
        return self.replicas

    def propose(self, records: bytes, record_count: int, kind: EntryKind = EntryKind.DATA) -> Entry:
        """Append one batch as leader: persisted locally before this returns; raises
        NotLeaderError when this broker does not lead the partition. `kind` must be what
        followers derive from the stored bytes (`replication.entry_kind_of`)."""
        if self.raft is None:
            raise NotLeaderError(None, f"{self.name} is not hosted on this broker")
        return self.raft.propose(record_count, records, kind)

    def propose_unwritten(
        self, records: bytes, record_count: int, header: BatchHeader | None = None
    ) -> Entry:
        """`propose` of a client's batch, written by the next `write_proposed` with the
        others proposed meanwhile (`RaftGroup.propose_unwritten`). `header`: the batch's
        header as validated from `records` (one batch, not stamped since), so that its
        write need not read it again."""
        if self.raft is None:
            raise NotLeaderError(None, f"{self.name} is not hosted on this broker")
        entry = self.raft.propose_unwritten(record_count, records)
        if header is not None and self.storage is not None:
            self.storage.expect(entry, header)
        return entry

    def write_proposed(self) -> None:
        """Write what `propose_unwritten` left (StorageError as `propose`)."""
        if self.raft is not None:
            self.raft.write_proposed()

    async def wait_committed(self, entry: Entry, timeout_s: float) -> bool:
        """Whether `entry` (proposed here) committed in time; NotLeaderError if leadership
        was lost first or the entry was replaced by a later leader's."""
        if self.raft is None:
            raise NotLeaderError(None, f"{self.name} is no longer hosted on this broker")
        return await self.raft.wait_committed(entry.end_offset, timeout_s, entry.epoch)

    async def wait_durable(self, entry: Entry, timeout_s: float) -> bool:
        """Whether `entry` (proposed here) is stored as durably as the flush policy requires
        (after its fsync under flush.messages=1) in time; NotLeaderError as above."""
        if self.raft is None:
            raise NotLeaderError(None, f"{self.name} is no longer hosted on this broker")
        return await self.raft.wait_durable(entry.end_offset, timeout_s, entry.epoch)

    async def wait_high_watermark(
        self, end_offset: int, timeout_s: float, epoch: int | None = None
    ) -> bool:
        """Whether the high watermark reached `end_offset` in time (with `epoch`: and the
        batch ending there is still the one written in that epoch)."""
        if self.raft is None:
            raise NotLeaderError(None, f"{self.name} is no longer hosted on this broker")
        return await self.raft.wait_committed(end_offset, timeout_s, epoch)

    def notify_appended(self) -> None:
        """Wake the Fetch requests long-polling this partition (a woken poll leaves the
        waiter sets of all its partitions, so this one is swapped out first)."""
        waiters, self.waiters = self.waiters, set()
        for waiter in waiters:
            waiter.set()


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    config: TopicConfig
    partitions: list[Partition] = field(default_factory=list)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicManager:
    """Local state of every topic: follows the metadata image, owns the partition logs."""

    def __init__(
        self,
        data_dir: Path,
        broker_config: BrokerConfig,
        node: RaftNode,
        hard_states: HardStateStore,
        more_log_dirs: Sequence[Path] = (),
    ) -> None:
        """`data_dir` is the first log directory (it holds the metadata log too),
        `more_log_dirs` the others. LogDirectoryError when a partition is in two of them."""
        self.data_dir = data_dir
        self.broker_config = broker_config
        self.node = node
        self.node_id = node.node_id
        self.hard_states = hard_states
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        # Called with a partition whenever its Raft role, leader or term changes here.
        self.leadership_listeners: list[Callable[[Partition], None]] = []
        #: Log directory (absolute path) -> the I/O error that took it offline.
        self.offline_log_dirs: dict[str, str] = {}
        # The logs of offline partitions: never flushed or closed again (see
        # `take_log_dir_offline`), kept so their descriptors stay valid for readers.
        self._abandoned_logs: list[PartitionLog] = []
        #: Every log directory (absolute paths), in the configured order.
        self.log_dirs: list[str] = [str(d.absolute()) for d in (data_dir, *more_log_dirs)]
        for log_dir in self.log_dirs:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
        # Partition folder name -> the log directory holding (or chosen for) it.
        self._placed: dict[str, str] = find_partition_folders(self.log_dirs)
        self._placed.pop(f"{METADATA_TOPIC}-0", None)  # the controller's, not a replica

    def close(self) -> None:
        """Close every partition (clean shutdown). Each log close fsyncs a few files, so
        the logs are closed by CLOSE_THREADS threads at once, as Kafka's recovery threads
        do: one after another, thousands of partitions took minutes."""
        partitions = [p for topic in self.topics.values() for p in topic.partitions]
        for partition in partitions:
            self._detach_partition(partition)
        logs = [(p, p.log) for p in partitions if p.log is not None]
        with ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="close-log") as pool:
            for _ in pool.map(lambda item: self._close_log(*item), logs):
                pass
        for partition in partitions:
            partition.log = None
            partition.notify_appended()
        # Offline logs are never flushed; their descriptors go with the broker.
        while self._abandoned_logs:
            self._abandoned_logs.pop().abandon()

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

    def local_partitions(self) -> Iterator[Partition]:
        for partition in self.all_partitions():
            if partition.log is not None:
                yield partition

    @property
    def log_dir(self) -> str:
        """The first log directory's name as Kafka reports it (its absolute path)."""
        return self.log_dirs[0]

    def log_dir_of(self, partition_name: str) -> str | None:
        """The log directory holding the partition's folder here (None: none does)."""
        return self._placed.get(partition_name)

    def _log_folder(self, partition: Partition) -> Path | None:
        """The partition's folder: where it is, else in the live log directory with the
        fewest partitions (recorded here); None when every directory is offline."""
        log_dir = self._placed.get(partition.name)
        if log_dir is None:
            live = [d for d in self.log_dirs if d not in self.offline_log_dirs]
            log_dir = next_log_dir(live, self._placed.values())
            if log_dir is None:
                return None
            self._placed[partition.name] = log_dir
        return Path(log_dir) / partition.name

    # -- a failed log directory ----------------------------------------------------------

    def take_log_dir_offline(
        self, log_dir: str, reason: str, error: NotLeaderError
    ) -> list[Partition]:
        """Stop every replica in the log directory `log_dir` (Kafka's
        LogManager.handleLogDirFailure): its Raft group is removed (no votes, appends or
        acknowledgements from here; its waiters get `error`) and its log is dropped without
        a flush or a close, which would fsync again and could write a recovery point over
        data the kernel lost. The partitions answer KAFKA_STORAGE_ERROR here until the
        broker restarts; those in the other directories go on. Returns the partitions taken
        offline (none when the directory already was)."""
        if log_dir in self.offline_log_dirs:
            return []
        self.offline_log_dirs[log_dir] = reason
        taken = []
        for partition in self.all_partitions():
            if self.node_id not in partition.replicas:
                continue
            if self._placed.get(partition.name) != log_dir:
                continue
            partition.offline = True
            if partition.raft is not None:
                self.node.remove_raft_group(partition.name, error)
                partition.raft = None
            if partition.log is not None:
                self._abandoned_logs.append(partition.log)
                partition.log = None
                taken.append(partition)
            partition.notify_appended()
        for partition in taken:
            for listener in self.leadership_listeners:
                listener(partition)
        return taken

    def _host_offline(self, partition: Partition) -> bool:
        """A replica whose folder is in an offline log directory is offline, and so is a new
        one placed here while every directory is offline (Kafka creates no log in a failed
        directory). So is one whose Raft state this broker keeps (it voted or followed a
        leader here) but whose folder is in none of the directories: a replaced or emptied
        disk lost its log, and an empty log that still votes could help elect a leader
        lacking records this replica acknowledged. It stays offline until it is reassigned
        away (and may then come back as a new replica)."""
        if partition.offline:
            return True
        log_dir = self._placed.get(partition.name)
        if log_dir is None and self.hard_states.load(partition.name).term > 0:
            partition.offline = True
            logger.error(
                "%s: this broker keeps the replica's Raft state (epoch %d) but its log is in "
                "none of the log directories (%s): a replaced or emptied disk? The replica "
                "stays offline here; reassign the partition away from broker %d (and back, "
                "if wanted, as a new replica) to recover",
                partition.name,
                self.hard_states.load(partition.name).term,
                ", ".join(self.log_dirs),
                self.node_id,
                extra={"partition": partition.name, "topic": partition.topic.name},
            )
            return True
        live = [d for d in self.log_dirs if d not in self.offline_log_dirs]
        if log_dir in self.offline_log_dirs or not live:
            partition.offline = True
            return True
        return False

    # -- following the metadata image ----------------------------------------------------
    # Called by the controller's apply task, one change at a time. Partition logs are opened
    # (directory scan, recovery) and deleted in worker threads, so a topic of thousands of
    # partitions does not stall the event loop; until its log is open a partition hosted
    # here answers as if it were not (clients retry).

    async def add_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        replicas: Sequence[Sequence[int]],
        configs: Mapping[str, str],
        raft_voters: Sequence[Sequence[int]] | None = None,
    ) -> Topic:
        overrides = validate_topic_configs(configs)
        topic = Topic(
            name=name, topic_id=topic_id, config=TopicConfig(self.broker_config, overrides)
        )
        self.topics[name] = topic
        self.topics_by_id[topic_id] = topic
        await self.add_partitions(name, replicas, raft_voters)
        return topic

    async def add_partitions(
        self,
        name: str,
        replicas: Sequence[Sequence[int]],
        raft_voters: Sequence[Sequence[int]] | None = None,
    ) -> None:
        topic = self.topics[name]
        started = time.monotonic()
        hosted = []
        for i, replica_set in enumerate(replicas):
            partition = Partition(
                topic=topic, index=len(topic.partitions), replicas=tuple(replica_set)
            )
            if raft_voters is not None and tuple(raft_voters[i]) != partition.replicas:
                partition.raft_voters = tuple(raft_voters[i])
            topic.partitions.append(partition)
            if self.node_id in partition.replicas:
                hosted.append(partition)
        opened = 0
        for partition in hosted:
            if self._host_offline(partition):
                continue
            log = await self._open_log(partition)
            if self.topics_by_id.get(topic.topic_id) is not topic:
                log.close()  # deleted meanwhile
                return
            if self._host_offline(partition):
                continue  # the directory failed while the log was opened
            self._attach_partition(partition, log)
            opened += 1
        if opened:
            logger.info(
                "topic %s: hosting %d of %d partitions (%.2f s)",
                name,
                opened,
                len(topic.partitions),
                time.monotonic() - started,
                extra={"topic": name},
            )

    async def set_replicas(
        self,
        name: str,
        index: int,
        replicas: Sequence[int],
        raft_voters: Sequence[int],
    ) -> None:
        """A partition's replica list changed (reassignment): host it here when this broker
        is newly listed (its Raft group starts outside the voters and learns its membership
        from the leader's log), drop the local copy when it no longer is.

        A new, empty copy below the leader's log start (retention, DeleteRecords) is sent a
        snapshot, which restarts it there."""
        partition = self.partition(name, index)
        if partition is None:
            return
        partition.replicas = tuple(replicas)
        voters = tuple(raft_voters)
        partition.raft_voters = None if voters == partition.replicas else voters
        if self.node_id in partition.replicas and partition.log is None:
            if self._host_offline(partition):
                return
            log = await self._open_log(partition)
            if self.partition(name, index) is not partition or partition.log is not None:
                log.close()
                return
            if self._host_offline(partition):
                return
            self._attach_partition(partition, log)
            logger.info(
                "%s: hosting a new replica (replicas %s)",
                partition.name,
                list(partition.replicas),
                extra={"partition": partition.name, "topic": name},
            )
        elif self.node_id not in partition.replicas and partition.offline:
            # Moved away; its folder (in an offline directory) goes at the next start.
            partition.offline = False
            self.hard_states.delete(partition.name)
            if self._placed.get(partition.name) not in self.offline_log_dirs:
                self._placed.pop(partition.name, None)
        elif self.node_id not in partition.replicas and partition.log is not None:
            directory = partition.log.directory
            self._close_partition(partition)
            self.hard_states.delete(partition.name)
            self._placed.pop(partition.name, None)
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)
            logger.info(
                "%s: no longer a replica here (replicas %s); its log was deleted",
                partition.name,
                list(partition.replicas),
                extra={"partition": partition.name, "topic": name},
            )

    async def remove_stray_replicas(self) -> None:
        """Delete the log folders of partitions of known topics that this broker is not a
        replica of (their reassignment completed while it was down). Call only once every
        metadata record committed before this start is applied."""
        strays = []
        for topic in list(self.topics.values()):
            for partition in topic.partitions:
                log_dir = self._placed.get(partition.name)
                if log_dir is None or log_dir in self.offline_log_dirs:
                    continue
                if self.node_id not in partition.replicas and partition.log is None:
                    strays.append(Path(log_dir) / partition.name)
        for directory in strays:
            if await trio.to_thread.run_sync(directory.is_dir):
                await trio.to_thread.run_sync(shutil.rmtree, directory, True)
                self.hard_states.delete(directory.name)
                self._placed.pop(directory.name, None)
                logger.info(
                    "%s: deleted the log of a partition this broker is no longer a replica of",
                    directory.name,
                    extra={"partition": directory.name},
                )

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self.topics[name]
        self._set_config(topic, TopicConfig(self.broker_config, validate_topic_configs(configs)))

    def refresh_broker_defaults(self) -> None:
        """The broker's dynamic configs changed: every topic's configs are made again over
        them, so a topic without an override of a config takes its new broker value."""
        for topic in list(self.topics.values()):
            self._set_config(topic, TopicConfig(self.broker_config, topic.config.overrides))

    def _set_config(self, topic: Topic, config: TopicConfig) -> None:
        topic.config = config
        log_config = log_config_for(config)
        for partition in topic.partitions:
            if partition.log is not None:
                partition.log.update_config(log_config)

    async def remove_topic(self, topic_id: uuid.UUID) -> Topic | None:
        topic = self.topics_by_id.pop(topic_id, None)
        if topic is None:
            return None
        del self.topics[topic.name]
        directories = []
        for partition in topic.partitions:
            if partition.log is not None:
                directories.append(partition.log.directory)
                self._close_partition(partition)
                self.hard_states.delete(partition.name)
                self._placed.pop(partition.name, None)
        for directory in directories:
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)
        logger.info("deleted topic %s", topic.name, extra={"topic": topic.name})
        return topic

    async def _open_log(self, partition: Partition) -> PartitionLog:
        """Open (or create) the partition's log in a worker thread (call after
        `_host_offline` said no); a failure (a full disk) is logged and retried until it
        succeeds, so the replica comes back by itself."""
        folder = self._log_folder(partition)
        assert folder is not None  # `_host_offline` found a live directory
        failures = 0
        while True:
            try:
                return await trio.to_thread.run_sync(
                    PartitionLog.open,
                    folder,
                    log_config_for(partition.topic.config),
                    now_ms(),
                )
            except OSError as exc:
                failures += 1
                delay_s = min(10.0, 0.2 * 2**failures)
                logger.error(
                    "%s: cannot open the log (%s); retrying in %.1f s",
                    partition.name,
                    exc,
                    delay_s,
                    extra={"partition": partition.name, "topic": partition.topic.name},
                )
                await trio.sleep(delay_s)

    def _attach_partition(self, partition: Partition, log: PartitionLog) -> None:
        """Host `partition` on its opened log: its Raft group starts here."""
        partition.log = log
        storage = PartitionRaftStorage(
            partition.name, log, self.hard_states, partition.replicas == (self.node_id,)
        )
        partition.storage = storage
        logged_leadership: tuple[int, int] | None = None  # (epoch, leader) last logged
        # A restarted or internal partition's first leader here is part of the broker's
        # start (told in one line per topic); a new topic's, and later ones, a line each.
        quiet_first_leader = partition.topic.is_internal

        def on_update(update: RaftGroupUpdate) -> None:
            nonlocal logged_leadership
            if update.high_watermark is not None:
                storage.on_high_watermark(update.high_watermark)
            if update.high_watermark is not None or update.soft_state is not None:
                partition.notify_appended()
            soft_state = update.soft_state
            if soft_state is not None:
                leader = soft_state.leader_id
                # One line per new leader, none per election round without one.
                if leader is not None:
                    partition.last_leader_epoch = soft_state.term
                    partition.last_leader_id = leader
                elif partition.last_leader_id == self.node_id:
                    partition.last_leader_id = None
                if leader is not None and logged_leadership != (soft_state.term, leader):
                    first = logged_leadership is None
                    level = logging.DEBUG if first and quiet_first_leader else logging.INFO
                    logged_leadership = (soft_state.term, leader)
                    logger.log(
                        level,
                        "%s: leader is node %d at epoch %d",
                        partition.name,
                        leader,
                        soft_state.term,
                        extra={"partition": partition.name, "topic": partition.topic.name},
                    )
                for listener in self.leadership_listeners:
                    listener(partition)

        partition.raft = self.node.add_raft_group(
            partition.name,
            frozenset(partition.raft_voters or partition.replicas),
            storage,
            on_update,
            # A partition's followers need its high watermark only lazily (clients read at the
            # leader; the log start they follow waits for it at most a tick).
            commit_notice_at_once=False,
        )
        if partition.raft.term > 0:
            # Elected before this start (its term is kept): its leader is not a first one.
            partition.last_leader_epoch = partition.raft.term
            quiet_first_leader = True
        if partition.replicas == (self.node_id,):
            # A single replica is its own majority: no reason to wait an election timeout.
            partition.raft.campaign()
        elif partition.raft.term == 0 and self.node_id in (
            partition.raft_voters or partition.replicas
        ):
            # A new partition (never elected) is first led by its preferred replica, as
            # Kafka's controller makes it: that replica campaigns at once and the others
            # wait two election timeouts more than usual, so a new topic's leaders spread as
            # placement spread its preferred replicas, not by which timer fired first. (If
            # the preferred replica is down, the others elect one after 3-4 s, not 1-2.)
            if partition.replicas[0] == self.node_id:
                partition.raft.campaign()
            else:
                partition.raft.defer_election(2 * self.node.election_timeout_ticks)

    def _close_partition(self, partition: Partition) -> None:
        self._detach_partition(partition)
        if partition.log is not None:
            self._close_log(partition, partition.log)
            partition.log = None
        partition.notify_appended()

    def _detach_partition(self, partition: Partition) -> None:
        """Checkpoint the high watermark and stop the partition's Raft group (on the event
        loop's thread: it wakes waiters)."""
        try:
            if partition.raft is not None and partition.storage is not None:
                partition.storage.save_high_watermark(partition.raft.high_watermark)
        except OSError as exc:
            logger.error(
                "%s: high watermark checkpoint not saved: %s",
                partition.name,
                exc,
                extra={"partition": partition.name, "topic": partition.topic.name},
            )
        if partition.raft is not None:
            self.node.remove_raft_group(partition.name)
            partition.raft = None

    @staticmethod
    def _close_log(partition: Partition, log: PartitionLog) -> None:
        """Flush and close one log; safe in a worker thread (it touches only the log)."""
        try:
            log.close()
        except OSError as exc:
            logger.error(
                "%s: not closed cleanly (%s); the next start recovers it",
                partition.name,
                exc,
                extra={"partition": partition.name, "topic": partition.topic.name},
            )
