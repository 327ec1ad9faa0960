"""The cluster metadata Raft group and the controller that writes to it.

`__cluster_metadata` is a Raft group over every voter (like KRaft's controller quorum). Its
committed records are applied, in offset order, to this broker's `MetadataImage` by one
apply loop, and the changes are published to the broker (`publisher.py`: open or delete
partition logs and Raft groups). Admin commands are decided by that Raft group's leader, the
controller, from its image without I/O (`control/`, one module per area: the records to
append and the answer); it appends the records and answers once they are applied here. Every
other broker forwards commands to it over the peer transport and relays the answer. Snapshot
retention (`retention.py`), membership changes of the metadata group (`membership.py`) and
leadership gossip (`leaders.py`) are parts it composes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.clock import SYSTEM_CLOCK, Clock
from raftka.broker.cluster.commands import (
    AlterBrokerConfigsCommand,
    AlterClientQuotaCommand,
    AlterConfigsCommand,
    AlterGroupConfigsCommand,
    AlterScramCredentialsCommand,
    ChangeMetadataVotersCommand,
    Command,
    CommandDecodeError,
    CommandResult,
    CompleteReassignmentCommand,
    CreateAclsCommand,
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteAclsCommand,
    DeleteTopicCommand,
    RaiseProducerIdFloorCommand,
    ReassignPartitionCommand,
    RegisterBrokerCommand,
    UnregisterBrokerCommand,
)
from raftka.broker.cluster.control.acls import create_acls, delete_acls
from raftka.broker.cluster.control.brokers import register_broker, unregister_broker
from raftka.broker.cluster.control.configs import (
    alter_broker_configs,
    alter_group_configs,
    alter_topic_configs,
)
from raftka.broker.cluster.control.producer_ids import raise_producer_id_floor
from raftka.broker.cluster.control.quotas import alter_client_quota
from raftka.broker.cluster.control.reassignment import complete_reassignment, reassign_partition
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.control.scram import alter_scram_credentials
from raftka.broker.cluster.control.topics import create_partitions, create_topic, delete_topic
from raftka.broker.cluster.control.voters import change_voters
from raftka.broker.cluster.image import (
    ConfigsChanged,
    MetadataImage,
    PartitionsAdded,
    ReplicasChanged,
    TopicCreated,
    TopicDeleted,
)
from raftka.broker.cluster.leaders import LEADERS_RPC, LeaderGossip
from raftka.broker.cluster.membership import MetadataMembership
from raftka.broker.cluster.publisher import MetadataPublisher
from raftka.broker.cluster.quorum import QuorumView
from raftka.broker.cluster.reassign import ReassignmentMover
from raftka.broker.cluster.rebalance import ElectionResult, PreferredLeaderElections
from raftka.broker.cluster.records import MetadataRecord, encode_batch, iter_log_records
from raftka.broker.cluster.retention import SnapshotRetention
from raftka.broker.cluster.snapshot import SnapshotError, SnapshotStore, deserialize, serialize
from raftka.broker.cluster.validation import TopicError
from raftka.broker.config import BrokerConfig
from raftka.broker.replication import HardStateStore, PartitionRaftStorage
from raftka.broker.topics import METADATA_TOPIC, TopicManager
from raftka.consensus.core import NotLeaderError
from raftka.consensus.driver import RaftGroup, RaftGroupUpdate, RaftNode
from raftka.consensus.transport import ForwardError, ForwardRemoteError
from raftka.consensus.types import Role, Snapshot
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import scan_batches

logger = logging.getLogger("raftka.controller")

METADATA_GROUP = f"{METADATA_TOPIC}-0"  # the metadata Raft group and its log folder
CONTROLLER_RPC = "__controller"
QUORUM_RPC = "__quorum"  # the controller's view of the metadata quorum (DescribeQuorum)
QUORUM_TIMEOUT_S = 5.0
COMMIT_TIMEOUT_S = 10.0
FORWARD_TIMEOUT_S = 15.0
REPLAY_READ_BYTES = 4 * 1024 * 1024
#: How long a committed registration may take to be applied here before it is sent again.
REGISTRATION_APPLY_WAIT_S = 5.0

C = TypeVar("C", bound=Command)
CommandHandler = Callable[[Command], Awaitable[CommandResult]]
# Serves one named peer RPC: payload -> (error code, payload).
RpcHandler = Callable[[bytes], Awaitable[tuple[int, bytes]]]


class MetadataApplyError(RuntimeError):
    """A committed metadata change could not be applied on this broker. Its state would
    differ from the cluster metadata from here on, so the apply loop (and the broker) stops;
    the cause is chained."""


class Controller:
    """This broker's view of cluster metadata, and the controller when it leads the metadata
    Raft group. It reads time only from `clock` (deadlines, retention intervals, record
    timestamps)."""

    def __init__(
        self,
        node: RaftNode,
        voters: frozenset[int],
        data_dir: Path,
        broker_config: BrokerConfig,
        topics: TopicManager,
        hard_states: HardStateStore,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.node = node
        self.clock = clock
        self.node_id = node.node_id
        self.voters = voters
        self.broker_config = broker_config
        self.topics = topics
        self.applied = trio.Event()
        self._snapshot_due = trio.Event()  # the image changed since the last snapshot
        self._committed = trio.Event()  # the high watermark moved: records to apply
        # The image as of the last snapshot: start-up need not replay the whole log.
        self.snapshots = SnapshotStore(data_dir)
        self.image = self.snapshots.load()
        self.applied_end = self.image.applied_offset + 1
        self._restored = False
        self.log = PartitionLog.open(
            data_dir / METADATA_GROUP,
            LogConfig(
                retention_ms=-1,
                segment_bytes=broker_config.get_int("metadata.log.segment.bytes"),
            ),
            clock.wall_ms(),
        )
        # The retained snapshot: the image at the log start - 1, what a broker that needs
        # offsets below the log start is sent. The log is truncated only behind it.
        self.retention = SnapshotRetention(
            broker_config.get_int("metadata.log.max.record.bytes.between.snapshots"),
            broker_config.get_int("metadata.log.max.snapshot.interval.ms") / 1000,
            self.snapshots.load_retained(),
        )
        if self.retention.retained is not None:
            retained_end = self.retention.retained_end
            if self.log.log_start_offset < retained_end <= self.log.log_end_offset:
                # Truncated, but the new log start was not on disk yet at a crash.
                self.log.delete_records_before(retained_end)
        if self.applied_end < self.log.log_start_offset:
            raise SnapshotError(
                f"the metadata snapshot in {self.snapshots.path} ends at offset "
                f"{self.applied_end}, below the metadata log's start "
                f"{self.log.log_start_offset}: the records between are gone. Restore the "
                "data directory or remove it so the broker rejoins from its peers."
            )
        # Bumped by every snapshot installed from the controller; an apply pass that sees
        # it change stops (the image it was applying to was replaced).
        self._install_generation = 0
        self._reconcile_pending = False
        self.storage = PartitionRaftStorage(
            METADATA_GROUP,
            self.log,
            hard_states,
            # Alone: no observers either (a voter with observers may later gain voters, so
            # its log end is not always committed).
            voters == frozenset({self.node_id}) and not node.transport.peer_ids,
            snapshot_source=self.retention.snapshot_ending_at,
            on_snapshot=self._install_snapshot,
        )
        self._logged_leadership: tuple[int, int | None] | None = None  # (term, leader) logged
        self.raft: RaftGroup = node.add_raft_group(
            METADATA_GROUP, voters, self.storage, self._on_update
        )
        self.membership = MetadataMembership(self.raft, self.node_id, clock)
        if voters == frozenset({self.node_id}):
            self.raft.campaign()
        self.gossip = LeaderGossip(self.node_id, node.transport, topics, lambda: self.image.brokers)
        self.publisher = MetadataPublisher(node, topics, broker_config, lambda: self.image)
        # Set when a change failed to apply: the image is ahead of this broker's state, so
        # it must not be saved as a snapshot (a restart replays the log from the last one).
        self.diverged = False
        self._command_handlers: dict[type[Command], CommandHandler] = dict(
            [
                _route(CreateTopicCommand, self._create_topic),
                _route(DeleteTopicCommand, self._decided(delete_topic)),
                _route(AlterConfigsCommand, self._decided(alter_topic_configs)),
                _route(CreatePartitionsCommand, self._decided(create_partitions)),
                _route(RegisterBrokerCommand, self._register_broker),
                _route(RaiseProducerIdFloorCommand, self._decided(raise_producer_id_floor)),
                _route(AlterScramCredentialsCommand, self._decided(alter_scram_credentials)),
                _route(CreateAclsCommand, self._decided(create_acls)),
                _route(DeleteAclsCommand, self._decided(delete_acls)),
                _route(AlterClientQuotaCommand, self._decided(alter_client_quota)),
                _route(ReassignPartitionCommand, self._reassign_partition),
                _route(CompleteReassignmentCommand, self._complete_reassignment),
                _route(AlterBrokerConfigsCommand, self._decided(alter_broker_configs)),
                _route(AlterGroupConfigsCommand, self._decided(alter_group_configs)),
                _route(ChangeMetadataVotersCommand, self._change_metadata_voters),
                _route(UnregisterBrokerCommand, self._unregister_broker),
            ]
        )
        # Peer RPCs of other parts of the broker, sharing the transport's forward handler.
        self._rpc_handlers: dict[str, RpcHandler] = {}
        node.transport.set_forward_handler(self._serve_forward)
        # Preferred-leader elections (ElectLeaders, auto rebalance) over their own peer RPC.
        self.elections = PreferredLeaderElections(self)
        # Membership steps of the reassignments of partitions this broker leads.
        self.reassignments = ReassignmentMover(self)
        self.publisher.apply_broker_configs()
        self.register_rpc(QUORUM_RPC, self._serve_quorum)

    def register_rpc(self, rpc: str, handler: RpcHandler) -> None:
        """Serve the peer RPC named `rpc` (sent with `transport.forward`) with `handler`."""
        if rpc in (CONTROLLER_RPC, LEADERS_RPC) or rpc in self._rpc_handlers:
            raise ValueError(f"peer rpc {rpc!r} is already served")
        self._rpc_handlers[rpc] = handler

    # -- applying committed records -----------------------------------------------------

    async def apply_metadata(
        self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Apply committed metadata records, in offset order, until cancelled. Reports
        started once the snapshot's topics are open and every record committed before a
        restart is applied. Runs outside the metadata Raft group's Ready, so opening or deleting
        many partitions never holds up Raft.

        Raises MetadataApplyError if a change cannot be applied here (after logging it): the
        broker must stop rather than serve from state that differs from the metadata."""
        if not self._restored:
            self._restored = True
            self.retention.start(self.clock.now_s())
            await self._reconcile_image()
            if self.image.topics:
                logger.info(
                    "restored %d topics from the metadata snapshot at offset %d",
                    len(self.image.topics),
                    self.image.applied_offset,
                )
        await self._apply_committed()
        task_status.started()
        while True:
            await self._committed.wait()
            self._committed = trio.Event()
            await self._apply_committed()

    def close(self) -> None:
        try:
            if self._snapshot_due.is_set() and not self.diverged:
                self.snapshots.save(self.image)
            self.storage.save_high_watermark(self.raft.high_watermark)
        except OSError as exc:
            logger.error("metadata state not saved at shutdown (replayed at start): %s", exc)
        self.snapshots.close()
        try:
            self.log.close()
        except OSError as exc:
            # As a partition's log (Topics._close_log): left unmarked, recovered at start.
            logger.error(
                "%s: not closed cleanly (%s); the next start recovers it", METADATA_GROUP, exc
            )

    async def save_snapshots(self, min_interval_s: float = 1.0) -> None:
        """Snapshot the image after changes, at most once per `min_interval_s`, in a worker
        thread. A failure (a full disk) is logged and retried: the log stays the truth.

        Every `metadata.log.max.record.bytes.between.snapshots` applied bytes (or
        `metadata.log.max.snapshot.interval.ms`) the snapshot is also retained, and the
        metadata log is truncated behind it: its whole segments below go."""
        while True:
            await self._snapshot_due.wait()
            self._snapshot_due = trio.Event()
            retain = self._retain_due()
            raw = serialize(self.image)
            applied_offset = self.image.applied_offset
            generation = self._install_generation
            try:
                await trio.to_thread.run_sync(
                    self.snapshots.save_raw_job(raw, applied_offset, retain)
                )
            except OSError as exc:
                logger.error("%s; retrying", exc)
                self._snapshot_due.set()
            else:
                if retain and generation == self._install_generation:
                    self._truncate_behind(applied_offset + 1, raw)
            await trio.sleep(min_interval_s)

    def _retain_due(self) -> bool:
        if self.diverged:
            return False
        return self.retention.due(self.applied_end, self.log.log_start_offset, self.clock.now_s())

    def _truncate_behind(self, end: int, raw: bytes) -> None:
        """The snapshot of everything below `end` is durable and retained: the metadata log
        now starts at `end` (whole segments below it are deleted)."""
        self.retention.retain(end, raw, self.clock.now_s())
        before = len(self.log.segments)
        self.log.delete_records_before(min(end, self.raft.high_watermark))
        logger.info(
            "%s: retained the metadata snapshot at offset %d (%d bytes); the log now starts"
            " there (%d segments deleted)",
            METADATA_GROUP,
            end - 1,
            len(raw),
            before - len(self.log.segments),
            extra={"raft_group": METADATA_GROUP},
        )

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        """The controller sent a snapshot (this broker needs offsets below its log start):
        it becomes the image, durably, before the metadata log is emptied; the apply task
        then reconciles topics with it, as at start-up."""
        end = snapshot.end_offset
        try:
            image = deserialize(snapshot.data, f"the controller (a snapshot ending at {end})")
        except SnapshotError as exc:
            raise OSError(str(exc)) from exc
        if image.applied_offset != end - 1:
            raise OSError(
                f"the controller's metadata snapshot ending at {end} holds the image at"
                f" offset {image.applied_offset}"
            )
        self.snapshots.save_raw_job(snapshot.data, image.applied_offset, True)()
        self.retention.retain(end, snapshot.data, self.clock.now_s())
        self.image = image
        self.applied_end = end
        self._install_generation += 1
        self._reconcile_pending = True
        self._committed.set()
        logger.info(
            "installed the controller's metadata snapshot at offset %d (%d topics, %d bytes)",
            end - 1,
            len(image.topics),
            len(snapshot.data),
            extra={"raft_group": METADATA_GROUP},
        )

    async def _reconcile_image(self) -> None:
        """Bring TopicManager in line with the whole image (start-up from a snapshot, or a
        snapshot installed from the controller): topics it hosts that the image lacks are
        deleted, the image's topics created, grown or reconfigured."""
        for broker in list(self.image.brokers.values()):
            self.publisher.reach(broker)
        # Topics are opened with the dynamic broker configs they fall back to.
        self.publisher.apply_broker_configs()
        while True:
            generation = self._install_generation
            image = self.image
            ids = {topic.topic_id for topic in image.topics.values()}
            try:
                for topic_id, local in list(self.topics.topics_by_id.items()):
                    if topic_id not in ids:
                        replicas = tuple(p.replicas for p in local.partitions)
                        await self.publisher.publish(TopicDeleted(local.name, topic_id, replicas))
                for topic in list(image.topics.values()):
                    hosted = self.topics.topics_by_id.get(topic.topic_id)
                    if hosted is None:
                        await self.publisher.publish(
                            TopicCreated(
                                topic.name,
                                topic.topic_id,
                                tuple(topic.replicas),
                                dict(topic.configs),
                                tuple(topic.raft_voters(i) for i in range(topic.num_partitions)),
                            )
                        )
                        continue
                    known = len(hosted.partitions)
                    for index, partition in enumerate(hosted.partitions):
                        # A reassignment started, completed or cancelled in the image.
                        wanted = tuple(topic.replicas[index])
                        voters = tuple(topic.raft_voters(index))
                        if (
                            partition.replicas != wanted
                            or (partition.raft_voters or partition.replicas) != voters
                        ):
                            await self.publisher.publish(
                                ReplicasChanged(topic.name, topic.topic_id, index, wanted, voters)
                            )
                    if len(topic.replicas) > known:
                        await self.publisher.publish(
                            PartitionsAdded(
                                topic.name, topic.topic_id, known, tuple(topic.replicas[known:])
                            )
                        )
                    if hosted.config.overrides != dict(topic.configs):
                        await self.publisher.publish(
                            ConfigsChanged(topic.name, topic.topic_id, dict(topic.configs))
                        )
            except Exception as exc:
                raise self._apply_failed(
                    f"the metadata snapshot at offset {image.applied_offset}", exc
                ) from exc
            if generation == self._install_generation:
                return

    def _on_update(self, update: RaftGroupUpdate) -> None:
        if update.high_watermark is not None:
            self._committed.set()
        soft_state = update.soft_state
        if soft_state is None:
            return
        leadership = (soft_state.term, soft_state.leader_id)
        if leadership == self._logged_leadership:
            return
        if soft_state.leader_id is not None:  # one line per new controller
            self._logged_leadership = leadership
            logger.info(
                "%s: controller is node %d at term %d",
                METADATA_GROUP,
                soft_state.leader_id,
                soft_state.term,
                extra={"raft_group": METADATA_GROUP},
            )
        elif self._logged_leadership is not None and self._logged_leadership[1] is not None:
            # One line when a known controller is lost, not one per failed election.
            self._logged_leadership = leadership
            logger.info(
                "%s: no controller at term %d (an election runs); admin requests wait for one",
                METADATA_GROUP,
                soft_state.term,
                extra={"raft_group": METADATA_GROUP},
            )

    async def _apply_committed(self) -> None:
        if self._reconcile_pending:
            self._reconcile_pending = False
            await self._reconcile_image()
        generation = self._install_generation
        high_watermark = min(self.raft.high_watermark, self.log.log_end_offset)
        changed = False
        while self.applied_end < high_watermark:
            data = self.log.read(self.applied_end, REPLAY_READ_BYTES, high_watermark, True)
            if not data:
                break
            end = self.applied_end
            for offset, record in iter_log_records(data):
                try:
                    for change in self.image.apply(record, offset):
                        await self.publisher.publish(change)
                except Exception as exc:
                    raise self._apply_failed(
                        f"metadata record {record} at offset {offset}", exc
                    ) from exc
                if generation != self._install_generation:
                    return  # a snapshot replaced the image meanwhile: start over from it
            self.retention.applied(len(data))
            # Batch ends (control batches included) from the raw headers.
            headers = scan_batches(data, verify_crc=False).headers
            if headers:
                end = headers[-1].next_offset
            if end <= self.applied_end:
                break
            self.applied_end = end
            changed = True
        if changed:
            self._snapshot_due.set()
        self.applied.set()
        self.applied = trio.Event()

    def _apply_failed(self, what: str, exc: Exception) -> MetadataApplyError:
        """Log a failed apply as critical and return the error that stops the apply loop."""
        self.diverged = True
        logger.critical(
            "cannot apply %s: %r. This broker stops: it would otherwise serve from state that "
            "differs from the cluster metadata. Fix the cause (the traceback follows) and "
            "restart it; it applies the metadata log again from its last snapshot.",
            what,
            exc,
            exc_info=exc,
        )
        return MetadataApplyError(f"cannot apply {what}: {exc!r}")

    # -- views ----------------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        """The metadata quorum's leader; -1 while there is none (an election runs)."""
        leader = self.raft.leader_id
        return -1 if leader is None else leader

    @property
    def advertised_controller_id(self) -> int:
        """The controller a client is told of (Metadata, DescribeCluster): the quorum's
        leader while this broker is in touch with it, else this broker. Any broker takes an
        admin request and forwards it to the controller once one is elected (KIP-590), and
        librdkafka holds an admin request for the controller it was told of until a later
        Metadata names another: told -1 (Kafka's brokers in KRaft mode never answer -1
        either), or told of a leader that has just died, it waited out the request's whole
        timeout. So a leader is named only while its connection from this broker is open
        (it closes as the leader's process dies) and its last message is within an election
        timeout."""
        leader = self.raft.leader_id
        if leader is None or leader == self.node_id:
            return self.node_id
        if not self.raft.leader_heard_recently() or not self.node.transport.connected_to(leader):
            return self.node_id
        return leader

    @property
    def is_controller(self) -> bool:
        return self.raft.role is Role.LEADER

    def live_brokers(self) -> list[int]:
        return sorted(self.image.brokers)

    def quorum(self) -> QuorumView:
        status = self.raft.status()
        ends = dict(self.raft.follower_match_ends()) if self.is_controller else {}
        ends[self.node_id] = status.log_end_offset
        contact: dict[int, tuple[int, int]] = {}
        if self.is_controller:
            now_ms = self.clock.wall_ms()
            contact = self.raft.replica_contact_ms(now_ms)
            contact[self.node_id] = (now_ms, now_ms)  # as Kafka's leader reports itself
        return QuorumView(
            -1 if status.leader_id is None else status.leader_id,
            status.term,
            status.high_watermark,
            status.voters,
            status.learners,
            ends,
            contact,
        )

    async def controller_quorum(self) -> QuorumView:
        """The metadata quorum as the controller sees it (every replica's log end offset), as
        Kafka's brokers forward DescribeQuorum to the controller: asked of the controller when
        this broker is not it, this broker's own view (the others' log ends unknown) when
        there is no controller or it does not answer within QUORUM_TIMEOUT_S."""
        leader = self.raft.leader_id
        if leader is None or leader == self.node_id:
            return self.quorum()
        try:
            raw = await self.node.transport.forward(leader, QUORUM_RPC, b"", QUORUM_TIMEOUT_S)
            return QuorumView.from_wire(raw)
        except ForwardError as exc:
            logger.info(
                "DescribeQuorum: controller %s did not answer (%s); answered with this "
                "broker's own view of the quorum",
                leader,
                exc,
                extra={"peer": leader},
            )
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "DescribeQuorum: controller %s answered what is not a quorum view (%s); "
                "answered with this broker's own view of the quorum",
                leader,
                exc,
                extra={"peer": leader},
            )
        return self.quorum()

    async def _serve_quorum(self, payload: bytes) -> tuple[int, bytes]:
        if not self.is_controller:
            return int(ErrorCode.not_controller), b"not the controller"
        return 0, self.quorum().to_wire()

    async def elect_preferred_leaders(
        self, partitions: Sequence[tuple[str, int]], timeout_s: float
    ) -> dict[tuple[str, int], ElectionResult]:
        """Elect each partition's preferred replica (by its current leader, wherever that
        is), waiting up to `timeout_s`: per partition Kafka's error code and message."""
        return await self.elections.elect(partitions, timeout_s)

    # -- executing admin operations -------------------------------------------------------

    async def execute(self, command: Command) -> CommandResult:
        """Run an admin command on the controller (here, or forwarded to it) and return its
        result; failures are results with Kafka's error code and message. A controller that
        loses its role while running the command answers NOT_CONTROLLER: the command is run
        again by the next controller (until FORWARD_TIMEOUT_S), as Kafka's brokers re-send a
        forwarded request answered NOT_CONTROLLER. Commands decide from the metadata image,
        so one that committed before the role was lost is decided again from what it did
        (`Command.identified`: a created topic is recognised by the id chosen here)."""
        command = command.identified()
        deadline = self.clock.now_s() + FORWARD_TIMEOUT_S
        refused_by: set[int] = set()
        waited_for_election = False

        def final(result: CommandResult, leader: int) -> bool:
            if result.error_code != ErrorCode.not_controller:
                return True
            if leader not in refused_by:
                # Once per broker: a command that waits for a controller says why in the log.
                refused_by.add(leader)
                logger.info(
                    "%s: broker %s answered NOT_CONTROLLER (%s); sent again to the "
                    "controller for up to %.0f s more",
                    type(command).__name__,
                    leader,
                    result.error_message,
                    max(0.0, deadline - self.clock.now_s()),
                    extra={"peer": leader},
                )
            return self.clock.now_s() >= deadline

        while True:
            if self.is_controller:
                result = await self._execute_here(command)
                if final(result, self.node_id):
                    return result
                await trio.sleep(0.05)
                continue
            leader = self.raft.leader_id
            if leader is not None and leader != self.node_id:
                try:
                    raw = await self.node.transport.forward(
                        leader, CONTROLLER_RPC, command.to_wire(), FORWARD_TIMEOUT_S
                    )
                    result = CommandResult.from_wire(raw)
                    if final(result, leader):
                        return result
                except ForwardRemoteError as exc:
                    message = exc.payload.decode(errors="replace")
                    if exc.error_code != ErrorCode.not_controller:
                        return CommandResult.error(ErrorCode(exc.error_code), message)
                    final(CommandResult.error(ErrorCode.not_controller, message), leader)
                except ForwardError as exc:
                    logger.info(
                        "forwarding to controller %s failed: %s",
                        leader,
                        exc,
                        extra={"peer": leader},
                    )
            elif leader is None and self.node_id not in self.raft.status().voters:
                # Not a voter (a broker joining the cluster): no leader contacts it until it
                # is a member, so it asks the brokers it knows in turn.
                found = await self._execute_at_any_peer(command)
                if found is not None and (
                    found.error_code != ErrorCode.not_controller or self.clock.now_s() >= deadline
                ):
                    return found
            elif leader is None and not waited_for_election:
                waited_for_election = True
                logger.info(
                    "%s waits for the metadata quorum to elect a controller (up to %.0f s)",
                    type(command).__name__,
                    max(0.0, deadline - self.clock.now_s()),
                )
            if self.clock.now_s() >= deadline:
                logger.warning(
                    "%s: no controller ran it within %.0f s (the metadata quorum's leader: %s); "
                    "answered NOT_CONTROLLER",
                    type(command).__name__,
                    FORWARD_TIMEOUT_S,
                    "none" if leader is None else leader,
                )
                return CommandResult.error(
                    ErrorCode.not_controller,
                    "No controller is available: the metadata quorum has no leader",
                )
            await trio.sleep(0.05)

    async def _execute_at_any_peer(self, command: Command) -> CommandResult | None:
        """`command` run by whichever known broker is the controller; None if none is."""
        for peer in sorted(self.node.transport.peer_ids):
            try:
                raw = await self.node.transport.forward(
                    peer, CONTROLLER_RPC, command.to_wire(), FORWARD_TIMEOUT_S
                )
                return CommandResult.from_wire(raw)
            except ForwardRemoteError as exc:
                if exc.error_code != ErrorCode.not_controller:
                    return CommandResult.error(
                        ErrorCode(exc.error_code), exc.payload.decode(errors="replace")
                    )
            except ForwardError as exc:
                logger.debug("asking broker %s for the controller failed: %s", peer, exc)
        return None

    async def _serve_forward(self, group: str, payload: bytes) -> tuple[int, bytes]:
        if group == LEADERS_RPC:
            return 0, self.gossip.serve()
        handler = self._rpc_handlers.get(group)
        if handler is not None:
            return await handler(payload)
        if group != CONTROLLER_RPC:
            return int(ErrorCode.invalid_request), f"unknown rpc {group}".encode()
        if not self.is_controller:
            return int(ErrorCode.not_controller), b"not the controller"
        try:
            command = Command.from_wire(payload)
        except CommandDecodeError as exc:
            return 0, CommandResult.error(ErrorCode.invalid_request, str(exc)).to_wire()
        result = await self._execute_here(command)
        return 0, result.to_wire()

    async def _execute_here(self, command: Command) -> CommandResult:
        handler = self._command_handlers.get(type(command))
        if handler is None:
            return CommandResult.error(
                ErrorCode.invalid_request, f"unknown controller operation {command!r}"
            )
        try:
            await self._caught_up()
            return await handler(command)
        except TopicError as exc:
            return CommandResult.error(exc.error_code, exc.message)
        except NotLeaderError:
            return CommandResult.error(
                ErrorCode.not_controller, "this broker lost the controller role"
            )

    async def _caught_up(self) -> None:
        """Wait until this controller has applied every entry of earlier leaders (its
        epoch's start offset committed and applied), as Kafka's controller becomes active
        only then: a new leader's log may hold entries a former controller appended but
        never saw commit, which commit with the new epoch's first entry, and a command
        decided before they are applied would be decided from an image without them."""
        start = self.raft.leader_epoch_start_offset
        if start is None:
            raise NotLeaderError(self.raft.leader_id)
        if self.applied_end >= start:
            return
        if not await self.raft.wait_committed(start, COMMIT_TIMEOUT_S):
            raise TopicError(
                ErrorCode.request_timed_out,
                "The new controller's log did not commit in time; a majority of brokers may "
                "be down",
            )
        while self.applied_end < start:
            await self.applied.wait()

    async def _commit(self, records: list[MetadataRecord]) -> None:
        """Propose records as one batch and wait until they are applied here."""
        entry = self.raft.propose(
            len(records), encode_batch(records, timestamp_ms=self.clock.wall_ms())
        )
        if not await self.raft.wait_committed(entry.end_offset, COMMIT_TIMEOUT_S, entry.epoch):
            raise TopicError(
                ErrorCode.request_timed_out,
                "The metadata change did not commit in time; a majority of brokers may be down",
            )
        while self.applied_end < entry.end_offset:
            await self.applied.wait()

    def _decided(
        self, decide: Callable[[MetadataImage, C], ControllerResult]
    ) -> Callable[[C], Awaitable[CommandResult]]:
        """A command decided from the image alone: its records appended, its result."""

        async def run(command: C) -> CommandResult:
            return await self._append(decide(self.image, command))

        return run

    async def _append(self, decision: ControllerResult) -> CommandResult:
        """Append the decision's records as one batch (none: nothing) and, once they are
        applied here, answer its result."""
        if decision.records:
            await self._commit(list(decision.records))
        return decision.result

    async def _create_topic(self, command: CreateTopicCommand) -> CommandResult:
        decision = create_topic(
            self.image,
            command,
            command.topic_id or uuid.uuid4(),
            default_num_partitions=self.broker_config.get_int("num.partitions"),
            default_replication_factor=self.broker_config.get_int("default.replication.factor"),
        )
        return await self._append(decision)

    async def _reassign_partition(self, command: ReassignPartitionCommand) -> CommandResult:
        decision = reassign_partition(self.image, command)
        result = await self._append(decision)
        if decision.records:
            logger.info(
                "%s-%d: reassignment %s",
                command.topic,
                command.partition,
                "cancelled" if command.replicas is None else f"to {list(command.replicas)}",
                extra={"topic": command.topic},
            )
        return result

    async def _complete_reassignment(self, command: CompleteReassignmentCommand) -> CommandResult:
        decision = complete_reassignment(self.image, command)
        result = await self._append(decision)
        if decision.records:
            logger.info(
                "%s-%d: reassignment complete, replicas %s",
                command.topic,
                command.partition,
                list(command.replicas),
                extra={"topic": command.topic},
            )
        return result

    async def _register_broker(self, command: RegisterBrokerCommand) -> CommandResult:
        await self._append(register_broker(self.image, command))
        status = self.raft.status()
        if command.node_id not in status.voters | status.learners:
            # A broker joining a running cluster: it replicates the metadata as an observer
            # (a learner of the metadata Raft group) until it is made a voter.
            if command.raft_address is not None:
                self.node.transport.add_peer(command.node_id, command.raft_address)
            await self.membership.change(add_learner=command.node_id)
        return CommandResult()

    async def _unregister_broker(self, command: UnregisterBrokerCommand) -> CommandResult:
        node = command.node_id
        decision = unregister_broker(self.image, command, self.raft.status().voters)
        if not decision.records:
            return decision.result
        await self._append(decision)
        if node in self.raft.status().learners:
            await self.membership.change(remove=node)
        logger.info("broker %d unregistered", node)
        return decision.result

    async def _change_metadata_voters(self, command: ChangeMetadataVotersCommand) -> CommandResult:
        status = self.raft.status()
        change = change_voters(self.image, command, status.voters, status.learners, self.node_id)
        for step in change.steps:
            if step.action == "hand_off":
                # The new controller makes the change.
                await self.membership.hand_off()
                return await self.execute(command)
            await self.membership.take(step)
        if change.steps and command.action == "add":
            logger.info("broker %d is a metadata voter now", command.node_id)
        elif change.steps:
            logger.info("broker %d left the metadata voters (an observer now)", command.node_id)
        return change.result

    # -- registration and leadership gossip -----------------------------------------------

    async def register(
        self,
        host: str,
        port: int,
        rack: str | None,
        listeners: Mapping[str, tuple[str, int]] | None = None,
        raft_address: tuple[str, int] | None = None,
    ) -> None:
        """Register this broker's client address (and each listener's) under a new
        incarnation, retried until this broker has applied its own registration record.

        Every start writes one, as Kafka's brokers do: having applied it, the broker has
        applied everything committed before it, so it never serves clients (or checks their
        ACLs) from metadata older than the cluster's when it started."""
        incarnation = uuid.uuid4().hex
        started = self.clock.now_s()
        listeners = dict(listeners or {})
        wanted = (host, port, rack, listeners, incarnation, raft_address)
        while True:
            current = self.image.brokers.get(self.node_id)
            if (
                current is not None
                and (
                    current.host,
                    current.port,
                    current.rack,
                    current.listeners,
                    current.incarnation_id,
                    current.raft_address,
                )
                == wanted
            ):
                logger.info("registered with the cluster in %.2f s", self.clock.now_s() - started)
                # Everything committed before the registration is applied: a copy of a
                # partition this broker is no longer a replica of (it was reassigned while
                # this broker was down) can go.
                await self.topics.remove_stray_replicas()
                return
            result = await self.execute(
                RegisterBrokerCommand(
                    self.node_id, host, port, rack, incarnation, listeners, raft_address
                )
            )
            if result.error_code != ErrorCode.none:
                logger.info("registration not accepted yet: %s", result.error_message)
                await trio.sleep(0.2)
                continue
            # Committed: wait (a while) for this broker to apply it.
            with trio.move_on_after(REGISTRATION_APPLY_WAIT_S):
                while True:
                    now = self.image.brokers.get(self.node_id)
                    if now is not None and now.incarnation_id == incarnation:
                        break
                    await self.applied.wait()

    async def gossip_leaders(self, interval_s: float = 0.5) -> None:
        """Learn the leader, epoch and in-sync replicas of every partition this broker does
        not lead by asking every peer, so any broker answers Metadata as its leader would."""
        await self.gossip.run(interval_s)

    async def learn_leaders(self, replicas: Iterable[int]) -> None:
        """Ask `replicas` now which partitions they lead (see `LeaderGossip.learn`)."""
        await self.gossip.learn(replicas)

    @property
    def leader_hints(self) -> dict[str, tuple[int, int]]:
        """Partition name -> (leader id, leader epoch) of partitions led elsewhere."""
        return self.gossip.leader_hints

    @property
    def isr_hints(self) -> dict[str, tuple[int, ...]]:
        """Partition name -> in-sync replicas, as their leaders elsewhere report them."""
        return self.gossip.isr_hints


def _route(
    command_type: type[C], handler: Callable[[C], Awaitable[CommandResult]]
) -> tuple[type[Command], CommandHandler]:
    """One entry of the dispatch table: `handler` runs the commands of `command_type`."""

    async def run(command: Command) -> CommandResult:
        if not isinstance(command, command_type):
            raise TypeError(f"{command!r} routed to the handler of {command_type.__name__}")
        return await handler(command)

    return command_type, run
