"""The trio driver: many Raft groups (partitions) of one node on one `PeerTransport`.

Every input -- a tick, an inbound message, a proposal, a transfer -- is fed to the group's
`RaftCore` and its `Ready` is handled at once, synchronously, in the core's order: persist hard
state, truncate, append (durable on return), send messages, apply (high watermark, soft state,
waiters, `on_update`), advance. No await happens in between, so no other input can slip in.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from consensus.core import NotLeaderError, RaftConfig, RaftCore, Ready, SoftState, Status
from consensus.storage import RaftLog
from consensus.transport import PeerTransport
from consensus.types import Entry, HardState, Message, NodeId, Role

log = logging.getLogger(__name__)


class GroupStorage(Protocol):
    """Durable state of one group; the broker implements it over its segment log."""

    @property
    def raft_log(self) -> RaftLog:
        """The read view the core uses (a plain attribute satisfies this)."""
        ...

    def load_hard_state(self) -> HardState: ...

    def save_hard_state(self, hard_state: HardState) -> None:
        """Durable on return."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Entries carry their offsets and epoch; durable on return."""
        ...

    def high_watermark_checkpoint(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class GroupUpdate:
    """What changed in one Ready: a new high watermark and/or new soft state (None = same)."""

    group: str
    high_watermark: int | None
    soft_state: SoftState | None


@dataclass(slots=True)
class DriverStats:
    messages_unknown_group: int = 0
    messages_misaddressed: int = 0


class _Waiter:
    __slots__ = ("end_offset", "done", "error", "as_leader")

    def __init__(self, end_offset: int, as_leader: bool) -> None:
        self.end_offset = end_offset
        self.done = trio.Event()
        self.error: NotLeaderError | None = None
        self.as_leader = as_leader


class RaftGroup:
    """One partition's Raft group on this node. All methods are synchronous except waits."""

    def __init__(
        self,
        name: str,
        core: RaftCore,
        storage: GroupStorage,
        transport: PeerTransport,
        on_update: Callable[[GroupUpdate], None] | None,
        on_soft_state: Callable[[], None],
    ) -> None:
        self.name = name
        self._core = core
        self._storage = storage
        self._transport = transport
        self._on_update = on_update
        self._on_soft_state = on_soft_state
        self._waiters: list[tuple[int, int, _Waiter]] = []  # heap by end offset
        self._seq = itertools.count()
        self.removed = False
        self._drive()

    # ------------------------------------------------------------------ views
    @property
    def high_watermark(self) -> int:
        return self._core.high_watermark

    @property
    def leader_id(self) -> NodeId | None:
        return self._core.leader_id

    @property
    def term(self) -> int:
        return self._core.term

    @property
    def role(self) -> Role:
        return self._core.role

    @property
    def log_end_offset(self) -> int:
        return self._core.log.log_end_offset()

    def status(self) -> Status:
        return self._core.status()

    def deletable_end(self) -> int:
        """Offset below which the log may be deleted (retention): committed, and on a leader
        also held by every follower, since without snapshots a follower can only catch up
        from the leader's log."""
        end = self._core.high_watermark
        if self._core.role is Role.LEADER:
            for progress in self._core.progress.values():
                end = min(end, progress.match_end)
        return end

    def _up_to_date_follower(self) -> NodeId | None:
        """The follower known to hold the most of our log, preferring recently active ones."""
        best: tuple[bool, int, int] | None = None
        for node, pr in self._core.progress.items():
            key = (pr.recent_active, pr.match_end, -node)
            if best is None or key > best:
                best = key
        return None if best is None else -best[2]

    # ------------------------------------------------------------------ inputs
    def propose(self, record_count: int, payload: bytes) -> Entry:
        """Append a batch as leader; persisted (storage.append) and sent before returning.

        Raises NotLeaderError when this node is not the leader or is handing leadership over.
        """
        self._check_live()
        entry = self._core.propose(record_count, payload)
        self._drive()
        return entry

    def transfer_leadership(self, to: NodeId) -> None:
        self._check_live()
        self._core.transfer_leadership(to)
        self._drive()

    def campaign(self) -> None:
        """Start an election now (tests, operators' preferred-leader election)."""
        self._check_live()
        self._core.campaign()
        self._drive()

    async def wait_committed(
        self, end_offset: int, timeout_s: float, epoch: int | None = None
    ) -> bool:
        """True once high_watermark >= end_offset; False on timeout.

        With `epoch` (the proposed entry's), True also means the log still holds that entry:
        a high watermark that passed the offset under a later leader, after the entry was
        truncated, raises NotLeaderError instead. Waiting as leader (acks=all): raises
        NotLeaderError if this node loses leadership (or its term changes) first -- the entry
        may yet commit or be truncated, as in Kafka. Waiting as follower: only the high
        watermark or the timeout ends the wait.
        """
        if self._core.high_watermark < end_offset:
            self._check_live()
            waiter = _Waiter(end_offset, as_leader=self._core.role is Role.LEADER)
            heapq.heappush(self._waiters, (end_offset, next(self._seq), waiter))
            with trio.move_on_after(timeout_s):
                await waiter.done.wait()
            if waiter.error is not None:
                raise waiter.error
            if not waiter.done.is_set():
                self._waiters = [w for w in self._waiters if w[2] is not waiter]
                heapq.heapify(self._waiters)
                if self._core.high_watermark < end_offset:
                    return False
        last = end_offset - 1
        log = self._core.log
        if epoch is not None and last >= log.log_start_offset() and log.epoch_at(last) != epoch:
            raise NotLeaderError(
                self._core.leader_id,
                f"{self.name}: the entry ending at {last} was replaced by a later leader's",
            )
        return True

    def _tick(self) -> None:
        core = self._core
        core.tick()
        if core.has_ready():
            self._drive()

    def _step(self, m: Message) -> None:
        self._core.step(m)
        self._drive()

    def _check_live(self) -> None:
        if self.removed:
            raise NotLeaderError(None, f"group {self.name} was removed from this node")

    # ------------------------------------------------------------------ Ready
    def _drive(self) -> None:
        core = self._core
        while core.has_ready():
            rd = core.ready()
            self._persist(rd)
            for m in rd.messages:
                self._transport.send(m)
            self._apply(rd)
            core.advance(rd)

    def _persist(self, rd: Ready) -> None:
        storage = self._storage
        if rd.hard_state is not None:
            storage.save_hard_state(rd.hard_state)
        if rd.truncate_to is not None:
            storage.truncate_to(rd.truncate_to)
        if rd.entries:
            storage.append(rd.entries)

    def _apply(self, rd: Ready) -> None:
        # Leadership first: a leader's waiter must not be woken by a high watermark that a
        # later leader moved past an entry it truncated, in the same Ready.
        if rd.soft_state is not None:
            if rd.soft_state.role is not Role.LEADER:
                self._fail_leader_waiters(NotLeaderError(rd.soft_state.leader_id))
            self._on_soft_state()
        if rd.high_watermark is not None:
            hw = rd.high_watermark
            while self._waiters and self._waiters[0][0] <= hw:
                _, _, waiter = heapq.heappop(self._waiters)
                waiter.done.set()
        if self._on_update is not None and (
            rd.high_watermark is not None or rd.soft_state is not None
        ):
            self._on_update(GroupUpdate(self.name, rd.high_watermark, rd.soft_state))

    def _fail_leader_waiters(self, error: NotLeaderError) -> None:
        keep = []
        for item in self._waiters:
            waiter = item[2]
            if waiter.as_leader:
                waiter.error = error
                waiter.done.set()
            else:
                keep.append(item)
        if len(keep) != len(self._waiters):
            heapq.heapify(keep)
            self._waiters = keep

    def _remove(self) -> None:
        self.removed = True
        error = NotLeaderError(None, f"group {self.name} was removed from this node")
        for _, _, waiter in self._waiters:
            waiter.error = error
            waiter.done.set()
        self._waiters = []


class RaftNode:
    """Hosts this node's Raft groups on one transport and drives their clocks."""

    def __init__(
        self,
        node_id: NodeId,
        transport: PeerTransport,
        tick_ms: int = 100,
        seed: int = 0,
        election_timeout_ticks: int = 10,
        heartbeat_interval_ticks: int = 1,
    ) -> None:
        assert transport.node_id == node_id, (transport.node_id, node_id)
        self.node_id = node_id
        self.transport = transport
        self.tick_ms = tick_ms
        self.seed = seed
        self.election_timeout_ticks = election_timeout_ticks
        self.heartbeat_interval_ticks = heartbeat_interval_ticks
        self.stats = DriverStats()
        self._groups: dict[str, RaftGroup] = {}
        self._soft_state_changed = trio.Event()
        transport.set_message_handler(self._on_message)

    # ------------------------------------------------------------------ groups
    def add_group(
        self,
        group: str,
        voters: frozenset[NodeId],
        storage: GroupStorage,
        on_update: Callable[[GroupUpdate], None] | None = None,
    ) -> RaftGroup:
        """Start hosting `group` from its durable state. `voters` is the replica set used
        until the log holds a membership (CONFIG) batch."""
        if group in self._groups:
            raise ValueError(f"group {group!r} is already hosted on node {self.node_id}")
        config = RaftConfig(
            node_id=self.node_id,
            group=group,
            voters=voters,
            election_timeout_ticks=self.election_timeout_ticks,
            heartbeat_interval_ticks=self.heartbeat_interval_ticks,
            seed=self.seed,  # the core mixes group and node id into its random stream
            skip_noop_when_committed=True,
        )
        core = RaftCore(
            config,
            storage.raft_log,
            storage.load_hard_state(),
            storage.high_watermark_checkpoint(),
        )
        raft_group = RaftGroup(
            group, core, storage, self.transport, on_update, self._note_soft_state
        )
        self._groups[group] = raft_group
        return raft_group

    def remove_group(self, group: str) -> None:
        """Stop hosting `group`; its waiters get NotLeaderError, later messages are dropped."""
        raft_group = self._groups.pop(group, None)
        if raft_group is not None:
            raft_group._remove()

    def group(self, name: str) -> RaftGroup | None:
        return self._groups.get(name)

    @property
    def groups(self) -> dict[str, RaftGroup]:
        return dict(self._groups)

    # ------------------------------------------------------------------ running
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick every group each tick_ms until cancelled. Runs the transport too unless it is
        already running (then its owner keeps it)."""
        async with trio.open_nursery() as nursery:
            if not self.transport.running:
                await nursery.start(self.transport.run)
            task_status.started()
            interval_s = self.tick_ms / 1000
            deadline = trio.current_time()
            while True:
                deadline += interval_s
                now = trio.current_time()
                if deadline < now - interval_s:
                    deadline = now  # fell behind (paused or overloaded): do not burst ticks
                await trio.sleep_until(deadline)
                self.tick()

    def tick(self) -> None:
        """One tick of every group (run() calls this; tests and benchmarks may too)."""
        for raft_group in list(self._groups.values()):
            raft_group._tick()

    async def shutdown(self, timeout_s: float) -> None:
        """Hand every group this node leads to its most up-to-date follower and wait up to
        `timeout_s` for the handovers. The transport must still be running; cancel run()
        afterwards."""
        with trio.move_on_after(timeout_s):
            for raft_group in list(self._groups.values()):
                if raft_group.role is not Role.LEADER:
                    continue
                target = raft_group._up_to_date_follower()
                if target is None:
                    continue  # a single-voter group has nobody to hand over to
                try:
                    raft_group.transfer_leadership(target)
                except (NotLeaderError, ValueError) as exc:
                    log.info("node %s: no transfer for %s: %s", self.node_id, raft_group.name, exc)
            while self._led_with_followers():
                event = self._soft_state_changed
                await event.wait()

    def _led_with_followers(self) -> list[RaftGroup]:
        return [
            g
            for g in self._groups.values()
            if g.role is Role.LEADER and g._up_to_date_follower() is not None
        ]

    # ------------------------------------------------------------------ inbound
    def _on_message(self, m: Message) -> None:
        if m.to != self.node_id:
            self.stats.messages_misaddressed += 1
            return
        raft_group = self._groups.get(m.group)
        if raft_group is None:
            self.stats.messages_unknown_group += 1
            return
        raft_group._step(m)

    def _note_soft_state(self) -> None:
        self._soft_state_changed.set()
        self._soft_state_changed = trio.Event()


__all__ = ["DriverStats", "GroupStorage", "GroupUpdate", "RaftGroup", "RaftNode"]
