"""The classic consumer-group coordinator: Kafka's GroupCoordinator state machine.

A group moves Empty → PreparingRebalance → CompletingRebalance → Stable (and Dead when
deleted). JoinGroup and SyncGroup answers wait for the group (`Reply`); every other
operation answers at once. Deadlines (initial rebalance delay, rebalance timeout, session
timeouts, KIP-394 pending members) are kept as numbers on the groups and fired by `tick()`,
which `run()` calls when the earliest deadline passes; time comes from an injected clock
(trio's by default) so `trio.testing.MockClock` drives the timeouts in tests.

Committed offsets and group metadata are records in `__consumer_offsets` (see
`broker.groups.records`), written through an `OffsetsLog`. As in Kafka's
GroupMetadataManager, a broker coordinates only the groups of the offsets partitions it
leads: when it becomes leader of one (`become_leader`, driven by the topic manager's
leadership listeners) the partition is "loading" -- its groups get
COORDINATOR_LOAD_IN_PROGRESS -- until its log is committed and replayed; when it loses
leadership (`resign`) its groups are dropped from memory. Groups of partitions it does not
own get NOT_COORDINATOR, so clients look the coordinator up again.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
from kio.schema.errors import ErrorCode

from broker.groups.group import (
    Group,
    GroupState,
    JoinedMember,
    JoinResult,
    Member,
    Reply,
    SyncResult,
)
from broker.groups.records import (
    STRING_LENGTH_MAX,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_key,
    partition_for_group,
)
from broker.groups.store import NotCoordinatorError

logger = logging.getLogger("raftka.groups")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # Kafka's offsets.retention.check.interval.ms
GROUP_TYPE_CLASSIC = "classic"

KeyValue = tuple[bytes, bytes | None]


class OffsetsLog(Protocol):
    """Where the coordinator's records go: the partitions of `__consumer_offsets`."""

    num_partitions: int

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


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS

    @classmethod
    def from_broker_config(cls, config: Any) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
        )


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


@dataclass(eq=False)
class _WriteJob:
    partition: int
    records: list[KeyValue]
    done: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None


def valid_group_id(group_id: str | None) -> bool:
    """Non-empty, and short enough for the int16-length strings of the record keys."""
    return bool(group_id) and len(group_id.encode()) <= STRING_LENGTH_MAX  # type: ignore[union-attr]


def _trio_clock_ms() -> float:
    return trio.current_time() * 1000


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    def __init__(
        self,
        offsets_log: OffsetsLog,
        config: CoordinatorConfig | None = None,
        *,
        clock_ms: Callable[[], float] = _trio_clock_ms,
        wall_clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.offsets_log = offsets_log
        self.config = config or CoordinatorConfig()
        self.clock_ms = clock_ms
        self.wall_clock_ms = wall_clock_ms
        self.groups: dict[str, Group] = {}
        # Offsets partitions this broker coordinates: leader epoch of the loaded ones, and
        # of the ones whose groups are being loaded.
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        self._deadlines_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._writers: dict[int, trio.MemorySendChannel[_WriteJob]] = {}
        self._pending_writes: list[_WriteJob] = []
        self._storing: set[tuple[str, int]] = set()  # (group, generation) assignments storing

    # -- ownership of offsets partitions -----------------------------------------------------

    def load(self) -> int:
        """Start loading every offsets partition this broker already leads (the others load
        as leadership arrives); returns how many were scheduled."""
        led = self.offsets_log.led_partitions()
        for partition, epoch in led.items():
            self.become_leader(partition, epoch)
        return len(led)

    def on_partition_leadership(self, partition: Any) -> None:
        """A `TopicManager` leadership listener: follows `__consumer_offsets` partitions."""
        if partition.topic.name != OFFSETS_TOPIC:
            return
        if partition.log is not None and partition.is_leader:
            self.become_leader(partition.index, partition.leader_epoch)
        else:
            self.resign(partition.index)

    def become_leader(self, partition: int, epoch: int) -> None:
        """This broker leads `partition` at `epoch`: load its groups, then serve them."""
        if self.owned.get(partition) == epoch or self.loading.get(partition) == epoch:
            return
        if partition in self.owned:
            self.resign(partition)  # a new term: reload what the log holds now
        self.loading[partition] = epoch
        logger.info("loading groups of %s-%d (epoch %d)", OFFSETS_TOPIC, partition, epoch)
        if self._nursery is not None:
            self._nursery.start_soon(self._load_partition, partition, epoch)
        # Otherwise run() starts the load.

    def resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its groups at once."""
        was_owned = self.owned.pop(partition, None) is not None
        was_loading = self.loading.pop(partition, None) is not None
        dropped = 0
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            dropped += 1
            for member in group.members.values():
                if member.join_reply is not None:
                    member.join_reply.set(JoinResult(ErrorCode.not_coordinator, member.member_id))
                    member.join_reply = None
                if member.sync_reply is not None:
                    member.sync_reply.set(SyncResult(ErrorCode.not_coordinator))
                    member.sync_reply = None
        if was_owned or was_loading or dropped:
            logger.info(
                "no longer coordinating %s-%d: dropped %d groups", OFFSETS_TOPIC, partition, dropped
            )
        self._wake()

    async def _load_partition(self, partition: int, epoch: int) -> None:
        try:
            caught_up = await self.offsets_log.wait_caught_up(partition, epoch)
        except Exception:
            logger.exception("cannot load %s-%d", OFFSETS_TOPIC, partition)
            caught_up = False
        if self.loading.get(partition) != epoch:
            return  # resigned, or a newer term's load took over
        if not caught_up:
            self.resign(partition)
            return
        try:
            count = self._replay(partition)
        except Exception:
            logger.exception("cannot replay %s-%d", OFFSETS_TOPIC, partition)
            self.resign(partition)
            return
        del self.loading[partition]
        self.owned[partition] = epoch
        if count:
            logger.info(
                "loaded %s-%d (epoch %d): %d records",
                OFFSETS_TOPIC,
                partition,
                epoch,
                count,
            )
        self._wake()

    def _replay(self, partition: int) -> int:
        """Rebuild the groups of one partition from its records; returns how many were read."""
        loaded: dict[str, Group] = {}
        metadata: dict[str, GroupMetadataValue | None] = {}
        count = 0
        for key, value in self.offsets_log.replay(partition):
            count += 1
            try:
                decoded = decode_key(key)
                if isinstance(decoded, OffsetKey):
                    group = loaded.setdefault(decoded.group_id, Group(decoded.group_id))
                    tp = (decoded.topic, decoded.partition)
                    if value is None:
                        group.offsets.pop(tp, None)
                    else:
                        group.offsets[tp] = OffsetValue.decode(value)
                else:
                    metadata[decoded.group_id] = (
                        None if value is None else GroupMetadataValue.decode(value)
                    )
            except (RecordFormatError, UnicodeDecodeError) as exc:
                logger.warning("skipping unreadable %s record: %s", OFFSETS_TOPIC, exc)
        now = self.clock_ms()
        for group_id, stored in metadata.items():
            if stored is None:
                deleted = loaded.get(group_id)
                if deleted is not None and not deleted.offsets:
                    del loaded[group_id]
                continue
            group = loaded.setdefault(group_id, Group(group_id))
            self._restore(group, stored, now)
        for group_id in [g for g, group in loaded.items() if not group.offsets]:
            if group_id not in metadata or metadata[group_id] is None:
                del loaded[group_id]
        for group_id, group in loaded.items():
            if self.partition_for(group_id) == partition:
                self.groups[group_id] = group
        return count

    def is_loading(self) -> bool:
        return bool(self.loading)

    def owner_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates the group; NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS otherwise."""
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        epoch = self.owned.get(partition)
        if epoch is None:
            return ErrorCode.not_coordinator
        if self.offsets_log.leader_epoch(partition) != epoch:
            # Leadership moved without this broker hearing of it (or the partition is gone).
            self.resign(partition)
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _restore(self, group: Group, stored: GroupMetadataValue, now: float) -> None:
        group.generation_id = stored.generation
        group.protocol_type = stored.protocol_type or None
        group.protocol_name = stored.protocol
        group.current_state_timestamp_ms = stored.current_state_timestamp_ms
        for record in stored.members:
            member = Member(
                member_id=record.member_id,
                group_instance_id=record.group_instance_id,
                client_id=record.client_id,
                client_host=record.client_host,
                rebalance_timeout_ms=record.rebalance_timeout_ms,
                session_timeout_ms=record.session_timeout_ms,
                protocol_type=stored.protocol_type,
                protocols=[(stored.protocol or "", record.subscription)],
                assignment=record.assignment,
                session_deadline_ms=now + record.session_timeout_ms,
            )
            group.add(member)
        group.leader_id = stored.leader if stored.leader in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    async def run(self) -> None:
        """Load partitions, persist records, fire deadlines and expire offsets until
        cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for partition, epoch in list(self.loading.items()):
                    nursery.start_soon(self._load_partition, partition, epoch)
                for job in self._pending_writes:
                    self._submit(job)
                self._pending_writes.clear()
                nursery.start_soon(self._expire_offsets_periodically)
                while True:
                    self._deadlines_changed = trio.Event()
                    deadline = self.next_deadline_ms()
                    with trio.move_on_after(
                        max(0.0, (deadline - self.clock_ms()) / 1000) if deadline else math.inf
                    ):
                        await self._deadlines_changed.wait()
                    self.tick()
        finally:
            self._nursery = None
            self._writers.clear()

    async def _write_records(self, receive: trio.MemoryReceiveChannel[_WriteJob]) -> None:
        """Appends of one partition, one at a time and in order."""
        async for job in receive:
            try:
                await self.offsets_log.append(job.partition, job.records)
            except NotCoordinatorError as exc:
                logger.info("cannot append to %s-%d: %s", OFFSETS_TOPIC, job.partition, exc)
                job.error = exc
            except Exception as exc:
                logger.exception("cannot append to %s-%d", OFFSETS_TOPIC, job.partition)
                job.error = exc
            job.done.set()

    async def _expire_offsets_periodically(self) -> None:
        while True:
            await trio.sleep(self.config.retention_check_interval_ms / 1000)
            self.expire_offsets()

    def _wake(self) -> None:
        self._deadlines_changed.set()

    def _submit(self, job: _WriteJob) -> None:
        if self._nursery is None:
            self._pending_writes.append(job)
            return
        send = self._writers.get(job.partition)
        if send is None:
            send, receive = trio.open_memory_channel[_WriteJob](math.inf)
            self._writers[job.partition] = send
            self._nursery.start_soon(self._write_records, receive)
        send.send_nowait(job)

    def _persist(self, group_id: str, records: list[KeyValue]) -> _WriteJob:
        job = _WriteJob(self.partition_for(group_id), records)
        self._submit(job)
        return job

    def _persist_group(self, group: Group) -> _WriteJob:
        return self._persist(
            group.group_id,
            [(GroupMetadataKey(group.group_id).encode(), group.to_record().encode())],
        )

    @staticmethod
    def write_error(job: _WriteJob) -> ErrorCode:
        """Kafka's mapping of a failed append to `__consumer_offsets`: NOT_LEADER_OR_FOLLOWER
        becomes NOT_COORDINATOR, anything else COORDINATOR_NOT_AVAILABLE."""
        if job.error is None:
            return ErrorCode.none
        if isinstance(job.error, NotCoordinatorError):
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.offsets_log.num_partitions)

    # -- deadlines -------------------------------------------------------------------------

    def next_deadline_ms(self) -> float | None:
        deadlines: list[float] = []
        for group in self.groups.values():
            if group.rebalance_deadline_ms is not None:
                deadlines.append(group.rebalance_deadline_ms)
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.session_deadline_ms
                for m in group.members.values()
                if not m.is_awaiting_join and not m.is_awaiting_sync
            )
        return min(deadlines, default=None)

    def tick(self) -> None:
        """Fire every deadline that has passed."""
        now = self.clock_ms()
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now:
                    del group.pending_members[member_id]
                    logger.info("pending member %s of group %s expired", member_id, group.group_id)
                    self._maybe_complete_join(group)
            for member in list(group.members.values()):
                if member.is_awaiting_join or member.is_awaiting_sync:
                    continue  # Kafka keeps members alive while they wait on the group
                if member.session_deadline_ms <= now and member.member_id in group.members:
                    logger.info(
                        "member %s of group %s failed to heartbeat within %d ms; removing it",
                        member.member_id,
                        group.group_id,
                        member.session_timeout_ms,
                    )
                    self._remove_member_and_update(group, member)
            if group.rebalance_deadline_ms is not None and group.rebalance_deadline_ms <= now:
                group.rebalance_deadline_ms = None
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._on_join_deadline(group)
                elif group.is_(GroupState.COMPLETING_REBALANCE):
                    self._on_sync_deadline(group)

    def _on_join_deadline(self, group: Group) -> None:
        if group.in_initial_delay:
            if group.new_member_added and group.initial_delay_remaining_ms > 0:
                delay = min(
                    self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms
                )
                group.initial_delay_remaining_ms -= delay
                group.new_member_added = False
                group.rebalance_deadline_ms = self.clock_ms() + delay
                return
            group.in_initial_delay = False
        self._complete_join(group)

    def _on_sync_deadline(self, group: Group) -> None:
        missing = [m for m in group.pending_sync if m in group.members]
        logger.info(
            "group %s: members %s did not sync within the rebalance timeout",
            group.group_id,
            missing,
        )
        for member_id in missing:
            group.remove(member_id)
        self._prepare_rebalance(group)

    # -- the state machine -----------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_reply is not None:
                    member.sync_reply.set(SyncResult(ErrorCode.rebalance_in_progress))
                    member.sync_reply = None
        group.pending_sync.clear()
        now = self.clock_ms()
        if group.is_(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.rebalance_deadline_ms = now + delay
        else:
            group.in_initial_delay = False
            group.rebalance_deadline_ms = now + group.max_rebalance_timeout_ms()
        group.transition(GroupState.PREPARING_REBALANCE, self.wall_clock_ms())
        self._wake()
        self._maybe_complete_join(group)

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and not group.in_initial_delay
            and group.all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in [m for m in group.members.values() if not m.is_awaiting_join]:
            logger.info(
                "group %s: member %s did not rejoin in time; removing it",
                group.group_id,
                member.member_id,
            )
            group.remove(member.member_id)
        group.rebalance_deadline_ms = None
        group.in_initial_delay = False
        group.generation_id += 1
        wall = self.wall_clock_ms()
        if not group.members:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, wall)
            logger.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self._persist_group(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, wall)
        group.pending_sync = set(group.members)
        now = self.clock_ms()
        group.rebalance_deadline_ms = now + group.max_rebalance_timeout_ms()
        logger.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            reply = member.join_reply
            member.join_reply = None
            member.session_deadline_ms = now + member.session_timeout_ms
            if reply is not None:
                reply.set(self._join_result(group, member, member.member_id == group.leader_id))
        self._wake()

    def _join_result(self, group: Group, member: Member, as_leader: bool) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if as_leader:
            protocol = group.protocol_name or ""
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol))
                for m in group.members.values()
            )
        return JoinResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    def _remove_member_and_update(self, group: Group, member: Member) -> None:
        if member.join_reply is not None:
            member.join_reply.set(JoinResult(ErrorCode.unknown_member_id, member.member_id))
            member.join_reply = None
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(ErrorCode.unknown_member_id))
            member.sync_reply = None
        group.remove(member.member_id)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -- JoinGroup -------------------------------------------------------------------------

    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult | Reply[JoinResult]:
        if not valid_group_id(group_id):
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return JoinResult(error, member_id)
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = Group(group_id)
        if group.is_(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        self.groups.setdefault(group_id, group)
        spec = dict(
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        if not member_id:
            return self._join_unknown_member(group, require_known_member_id, **spec)  # type: ignore[arg-type]
        return self._join_known_member(group, member_id, **spec)  # type: ignore[arg-type]

    def _join_unknown_member(
        self,
        group: Group,
        require_known_member_id: bool,
        *,
        group_instance_id: str | None,
        client_id: str,
        **spec: Any,
    ) -> JoinResult | Reply[JoinResult]:
        new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            if group_instance_id in group.static_members:
                return self._rejoin_static_member(group, group_instance_id, new_id, **spec)
        elif require_known_member_id:
            # KIP-394: hand out the id first so a client that loses this answer leaves no
            # orphan member behind to wait out a session timeout.
            group.pending_members[new_id] = self.clock_ms() + spec["session_timeout_ms"]
            self._wake()
            return JoinResult(ErrorCode.member_id_required, new_id)
        return self._add_member_and_rebalance(
            group, new_id, group_instance_id=group_instance_id, client_id=client_id, **spec
        )

    def _join_known_member(
        self, group: Group, member_id: str, *, group_instance_id: str | None, **spec: Any
    ) -> JoinResult | Reply[JoinResult]:
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(
                group, member_id, group_instance_id=group_instance_id, **spec
            )
        if group.is_static_member_fenced(member_id, group_instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY, GroupState.DEAD):
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        protocols = spec["protocols"]
        if group.is_(GroupState.COMPLETING_REBALANCE) and member.matches(protocols):
            # A lost JoinGroup answer: give the same one again.
            return self._join_result(group, member, member_id == group.leader_id)
        if (
            group.is_(GroupState.STABLE)
            and member_id != group.leader_id
            and member.matches(protocols)
        ):
            return self._join_result(group, member, False)
        return self._update_member_and_rebalance(group, member, **spec)

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> Reply[JoinResult]:
        reply: Reply[JoinResult] = Reply()
        member = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            session_deadline_ms=self.clock_ms() + session_timeout_ms,
            join_reply=reply,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.in_initial_delay:
            group.new_member_added = True
        group.add(member)
        logger.info("group %s: member %s joins", group.group_id, member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._maybe_prepare_rebalance(group)
        return reply

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        **_: Any,
    ) -> Reply[JoinResult]:
        if member.join_reply is not None:
            # A second JoinGroup while the first waits: the newer one is the one answered.
            member.join_reply.set(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        reply: Reply[JoinResult] = Reply()
        member.join_reply = reply
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._maybe_prepare_rebalance(group)
        return reply

    def _rejoin_static_member(
        self,
        group: Group,
        instance_id: str,
        new_id: str,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        **_: Any,
    ) -> JoinResult | Reply[JoinResult]:
        """KIP-345: a known group.instance.id with a new member id takes over its old place."""
        old_id = group.static_members[instance_id]
        old_leader = group.leader_id
        member = group.members[old_id]
        protocols_unchanged = member.matches(protocols)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocols = protocols
        member.session_deadline_ms = self.clock_ms() + session_timeout_ms
        logger.info(
            "group %s: static member %s rejoins as %s (was %s)",
            group.group_id,
            instance_id,
            new_id,
            old_id,
        )
        if group.is_(GroupState.STABLE) and protocols_unchanged:
            # No rebalance: the member gets its old assignment from SyncGroup. The old leader
            # id is returned so a rejoining leader does not compute an assignment that a
            # stable group would never distribute.
            self._persist_group(group)
            return JoinResult(
                error=ErrorCode.none,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=old_leader or "",
            )
        reply: Reply[JoinResult] = Reply()
        member.join_reply = reply
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        else:
            self._maybe_prepare_rebalance(group)
        return reply

    # -- SyncGroup -------------------------------------------------------------------------

    def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | Reply[SyncResult]:
        if not valid_group_id(group_id):
            return SyncResult(ErrorCode.invalid_group_id)
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(GroupState.DEAD):
            return SyncResult(ErrorCode.coordinator_not_available)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return SyncResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.is_(GroupState.EMPTY):
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        member.session_deadline_ms = self.clock_ms() + member.session_timeout_ms
        group.pending_sync.discard(member_id)
        if group.is_(GroupState.STABLE):
            return self._sync_result(group, member)
        # CompletingRebalance: wait for the leader's assignment.
        reply: Reply[SyncResult] = Reply()
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_reply = reply
        if member_id == group.leader_id and (group_id, group.generation_id) not in self._storing:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.rebalance_deadline_ms = None
            group.pending_sync.clear()
            # As Kafka: the group turns Stable (and members get their assignment) once its
            # metadata with the assignment is committed to `__consumer_offsets`.
            job = self._persist_group(group)
            if self._nursery is None:
                self._complete_sync(group)
            else:
                # A repeated leader SyncGroup meanwhile waits for this store.
                self._storing.add((group_id, group.generation_id))
                self._nursery.start_soon(self._finish_sync, group, group.generation_id, job)
        return reply

    async def _finish_sync(self, group: Group, generation: int, job: _WriteJob) -> None:
        try:
            await job.done.wait()
        finally:
            self._storing.discard((group.group_id, generation))
        if (
            self.groups.get(group.group_id) is not group
            or group.generation_id != generation
            or not group.is_(GroupState.COMPLETING_REBALANCE)
        ):
            return  # the group moved on (or is no longer coordinated here) meanwhile
        if job.error is None:
            self._complete_sync(group)
            return
        error = self.write_error(job)
        logger.info(
            "group %s: cannot store the assignment of generation %d (%s); rebalancing",
            group.group_id,
            generation,
            error.name,
        )
        for m in group.members.values():
            m.assignment = b""
            if m.sync_reply is not None:
                m.sync_reply.set(SyncResult(error))
                m.sync_reply = None
        self._prepare_rebalance(group)

    def _complete_sync(self, group: Group) -> None:
        group.transition(GroupState.STABLE, self.wall_clock_ms())
        now = self.clock_ms()
        for m in group.members.values():
            if m.sync_reply is not None:
                m.sync_reply.set(self._sync_result(group, m))
                m.sync_reply = None
                m.session_deadline_ms = now + m.session_timeout_ms
        self._wake()
        logger.info("group %s is stable at generation %d", group.group_id, group.generation_id)

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
        )

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not valid_group_id(group_id):
            return ErrorCode.invalid_group_id
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        # A later deadline needs no wake-up: the timer finds it when the old one fires.
        member.session_deadline_ms = self.clock_ms() + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, group instance id) leaving)."""
        members = list(members)
        if not valid_group_id(group_id):
            return ErrorCode.invalid_group_id, [ErrorCode.invalid_group_id] * len(members)
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error, [error] * len(members)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(
                members
            )
        return ErrorCode.none, [self._leave_one(group, m, i) for m, i in members]

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != current:
                return ErrorCode.fenced_instance_id
            member_id = current
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        logger.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member_and_update(group, member)
        return ErrorCode.none

    # -- offsets ---------------------------------------------------------------------------

    def validate_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka's group checks for an OffsetCommit (doCommitOffsets), without changes."""
        if not valid_group_id(group_id):
            return ErrorCode.invalid_group_id
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.none  # a group that only stores offsets (no group management)
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetValue],
    ) -> ErrorCode:
        """Validate, append the offsets to the group's partition, then apply them."""
        error = self.validate_commit(group_id, generation_id, member_id, group_instance_id)
        if error != ErrorCode.none or not offsets:
            return error
        group = self.groups.setdefault(group_id, Group(group_id))
        member = group.members.get(member_id)
        if member is not None:
            member.session_deadline_ms = self.clock_ms() + member.session_timeout_ms
        records: list[KeyValue] = [
            (OffsetKey(group_id, topic, partition).encode(), value.encode())
            for (topic, partition), value in offsets.items()
        ]
        job = self._persist(group_id, records)
        await job.done.wait()
        if job.error is not None:
            return self.write_error(job)
        # A group deleted while the append waited keeps it deleted.
        if self.groups.get(group_id) is group:
            group.offsets.update(offsets)
        return ErrorCode.none

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None
    ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetValue | None]]:
        """Committed offsets of the given partitions (None: all the group has)."""
        if not valid_group_id(group_id):
            return ErrorCode.invalid_group_id, {}
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        stored = {} if group is None else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(sorted(stored.items()))
        return ErrorCode.none, {tp: stored.get(tp) for tp in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        if not valid_group_id(group_id):
            return ErrorCode.invalid_group_id, {}
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, {}
            subscribed = topics
        results: dict[tuple[str, int], ErrorCode] = {}
        deleted = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if tp in group.offsets:
                    deleted.append(tp)
        if deleted:
            job = self._persist(
                group_id, [(OffsetKey(group_id, t, p).encode(), None) for t, p in deleted]
            )
            await job.done.wait()
            if job.error is not None:
                return self.write_error(job), {}
            for tp in deleted:
                group.offsets.pop(tp, None)
        return ErrorCode.none, results

    def expire_offsets(self) -> int:
        """Drop offsets of empty groups older than offsets.retention.minutes; tombstone them."""
        now = self.wall_clock_ms()
        retention = self.config.offsets_retention_ms
        expired_total = 0
        for group in list(self.groups.values()):
            if (
                not group.is_(GroupState.EMPTY)
                or self.partition_for(group.group_id) not in self.owned
            ):
                continue
            expired = [
                tp
                for tp, value in group.offsets.items()
                if (
                    group.current_state_timestamp_ms
                    if group.protocol_type and group.current_state_timestamp_ms >= 0
                    else value.commit_timestamp_ms
                )
                + retention
                <= now
            ]
            records: list[KeyValue] = [
                (OffsetKey(group.group_id, t, p).encode(), None) for t, p in expired
            ]
            for tp in expired:
                del group.offsets[tp]
            if not group.offsets and not group.members:
                group.transition(GroupState.DEAD, now)
                del self.groups[group.group_id]
                records.append((GroupMetadataKey(group.group_id).encode(), None))
            if records:
                self._persist(group.group_id, records)
            expired_total += len(expired)
        if expired_total:
            logger.info("removed %d expired offsets", expired_total)
        return expired_total

    # -- listing, describing, deleting -----------------------------------------------------

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every live group matching the filters."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and GROUP_TYPE_CLASSIC not in wanted_types:
            return []
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not g.is_(GroupState.DEAD)
            and self.partition_for(g.group_id) in self.owned
            and (not wanted_states or g.state.value.lower() in wanted_states)
        ]

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error = self.owner_error(group_id)
        if error != ErrorCode.none:
            return error, GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.is_(GroupState.STABLE)
        protocol = group.protocol_name or ""
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return ErrorCode.none, GroupDescription(
            group_id, group.state.value, group.protocol_type or "", protocol, members
        )

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        jobs = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not valid_group_id(group_id):
                results[group_id] = ErrorCode.invalid_group_id
            elif (error := self.owner_error(group_id)) != ErrorCode.none:
                results[group_id] = error
            elif group is None or group.is_(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_(GroupState.EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                records: list[KeyValue] = [
                    (OffsetKey(group_id, t, p).encode(), None) for t, p in group.offsets
                ]
                records.append((GroupMetadataKey(group_id).encode(), None))
                group.transition(GroupState.DEAD, self.wall_clock_ms())
                del self.groups[group_id]
                jobs.append((group_id, self._persist(group_id, records)))
                results[group_id] = ErrorCode.none
                logger.info("deleted group %s", group_id)
        for group_id, job in jobs:
            await job.done.wait()
            if job.error is not None:
                results[group_id] = self.write_error(job)
        return results
