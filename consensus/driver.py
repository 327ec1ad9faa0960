"""The trio driver: many Raft groups (partitions) of one node on one `PeerTransport`.

Here "group" always means a Raft group, named by its id (the broker uses the partition's
"<topic>-<partition>" name); consumer groups live in the broker.

Every input -- a tick, an inbound message, a proposal, a transfer -- is fed to the group's
`RaftCore` and its `Ready` is handled at once, synchronously, in the core's order: write hard
state, truncate, append, send messages, apply (high watermark, soft state, waiters,
`on_update`), advance. No await happens in between, so no other input can slip in.

Durability follows the core's contract (consensus.core) and is enforced here only. Writes
land in the page cache on the event loop; whatever must be durable before a message leaves
-- a changed hard state (always), appended entries (when the storage's flush policy says
so) -- becomes a *sync ticket*, and the messages that depend on it are held. One task per
node, `RaftNode.run_syncs`, takes every pending ticket at once and does their work in one
worker thread: one lmdb commit for the hard states of all groups, then the fsyncs the
policies ask for. Only then are the held messages sent and `RaftCore.mark_durable` called,
which lets a leader count itself toward commit and wakes `wait_durable` (acks=1 under
flush.messages=1). fsync and lmdb commits never run on the event loop.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias

import trio

from raftka.consensus.core import (
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Ready,
    SoftState,
    Status,
    StorageError,
    can_send_before_sync,
)
from raftka.consensus.errors import OUT_OF_SPACE, SyncFailedError
from raftka.consensus.progress import ProgressState
from raftka.consensus.storage import RaftLog
from raftka.consensus.transport import PeerTransport
from raftka.consensus.types import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    NodeId,
    Role,
    Snapshot,
)

log = logging.getLogger(__name__)

# After a failed write a replica of a multi-voter group stays a follower this long, so a
# broker with a full disk does not win elections it cannot serve.
STORAGE_FAILURE_CAMPAIGN_PAUSE_S = 5.0


class RaftGroupStorage(Protocol):
    """Durable state of one Raft group; the broker implements it over its segment log."""

    @property
    def raft_log(self) -> RaftLog:
        """The read view the core uses (a plain attribute satisfies this)."""
        ...

    def load_hard_state(self) -> HardState: ...

    def save_hard_state(self, hard_state: HardState) -> None:
        """Stage the new hard state: `load_hard_state` returns it at once, and the node's
        `HardStateCommitter` makes it durable with the next sync ticket."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by `snapshot` (empty, starting at its end, remembering its
        epoch and voters) and hand its data to the state machine. What it writes must be
        durable once the next `sync_job` has run: the acknowledgement waits for that."""
        ...

    def snapshot_data(self, end_offset: int) -> bytes | None:
        """The state-machine data summarizing every offset below `end_offset` (this log's
        start), sent with a snapshot; None when it is not available now (the snapshot is
        then sent again after an election timeout)."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Write entries (they carry their offsets and epoch) to the page cache."""
        ...

    def high_watermark_checkpoint(self) -> int | None: ...

    def entries_need_sync(self) -> bool:
        """Whether the flush policy wants what was written so far fsynced before it is
        acknowledged (flush.messages reached)."""
        ...

    def hard_state_needs_sync(self) -> bool:
        """Whether a changed term or vote must be fsynced, not only committed to the page
        cache, before messages that depend on it leave."""
        ...

    def sync_job(self) -> Callable[[], None] | None:
        """A function, run in a worker thread, that fsyncs everything written so far; None
        when nothing is pending. Called only inside `RaftNode.sync_lock`."""
        ...

    def follow_log_start(self, offset: int) -> None:
        """The leader's log start, bounded by this replica's high watermark: raise this log's
        start to it (DeleteRecords on a follower), or ignore it (a log that truncates
        behind its own snapshots)."""
        ...


class HardStateCommitter(Protocol):
    """Where the staged hard states of all groups of a node are committed, in one go."""

    def commit_job(self, fsync: bool) -> Callable[[], None] | None:
        """A function, run in a worker thread, that commits every hard state staged so far
        (and fsyncs it if asked); None when nothing is staged or in need of a sync."""
        ...


@dataclass(slots=True, init=False)
class _SyncTicket:
    group: RaftGroup
    held: list[Message]
    end_offset: int
    generation: int
    fsync_log: bool
    fsync_hard_state: bool

    def __init__(
        self,
        group: RaftGroup,
        held: list[Message],
        end_offset: int,
        generation: int,
        fsync_log: bool,
        fsync_hard_state: bool,
    ) -> None:
        self.group = group
        self.held = held
        self.end_offset = end_offset
        self.generation = generation
        self.fsync_log = fsync_log
        self.fsync_hard_state = fsync_hard_state


@dataclass(slots=True, init=False, unsafe_hash=True)
class RaftGroupUpdate:
    """What changed in one Ready: a new high watermark and/or new soft state (None = same)."""

    group: Final[str]  # the Raft group id
    high_watermark: Final[int | None]
    soft_state: Final[SoftState | None]

    def __init__(
        self,
        group: str,
        high_watermark: int | None,
        soft_state: SoftState | None,
    ) -> None:
        self.group = group
        self.high_watermark = high_watermark
        self.soft_state = soft_state


@dataclass(slots=True)
class DriverStats:
    messages_unknown_group: int = 0
    messages_misaddressed: int = 0


class _Waiter:
    """A task waiting (`RaftGroup._wait_mark`) for a mark to reach `end_offset`."""

    __slots__ = ("end_offset", "done", "error", "as_leader")

    def __init__(self, end_offset: int, as_leader: bool) -> None:
        self.end_offset = end_offset
        self.done = trio.Event()
        self.error: NotLeaderError | None = None
        self.as_leader = as_leader

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def reached(self) -> None:
        self.done.set()

    def failed(self, error: NotLeaderError) -> None:
        self.error = error
        self.done.set()


#: What a subscription's callback is told: None when the mark reached its offset (and the
#: entry is still there), the NotLeaderError its wait would raise, or TIMED_OUT.
MarkOutcome: TypeAlias = NotLeaderError | None | Literal["timed out"]
TIMED_OUT: Literal["timed out"] = "timed out"


def _finished(outcome: MarkOutcome) -> None:
    """The callback of a subscription that has had its answer."""


class _Subscription:
    """A callback waiting for a mark (`RaftGroup.on_committed`, `on_durable`): what a
    waiting task does, without a task. Called once, from the code that moved the mark (or
    failed the group, or the node's tick when its deadline passed); it must not block and
    must not drive the group."""

    __slots__ = ("end_offset", "as_leader", "epoch", "group", "callback", "finished")

    def __init__(
        self,
        end_offset: int,
        as_leader: bool,
        epoch: int | None,
        group: RaftGroup,
        callback: Callable[[MarkOutcome], None],
    ) -> None:
        self.end_offset = end_offset
        self.as_leader = as_leader
        self.epoch = epoch
        self.group = group
        self.callback = callback
        self.finished = False

    def reached(self) -> None:
        if self.finished:
            return
        self.settle()
        self.group._node._subscription_done()  # after `finished`, so compaction drops it

    def settle(self) -> None:
        """Finish now the mark is reached (`reached` once the subscription is queued)."""
        try:
            self.group._check_epoch(self.end_offset, self.epoch)
        except NotLeaderError as exc:
            self._finish(exc)
        else:
            self._finish(None)

    def failed(self, error: NotLeaderError) -> None:
        if not self.finished:
            self._finish(error)
            self.group._node._subscription_done()

    def timed_out(self) -> None:
        if not self.finished:
            self._finish(TIMED_OUT)
            self.group._subscriptions_expired()

    def _finish(self, outcome: MarkOutcome) -> None:
        self.finished = True
        # A finished subscription may stay in the node's deadline heap for a while (until
        # the heap is compacted, or its deadline): it must not keep its callback, which
        # holds the request it answers, records and all, that long.
        callback, self.callback = self.callback, _finished
        try:
            callback(outcome)
        except Exception:
            # The mark moved and the group goes on; only this waiter's answer is lost.
            log.exception(
                "%s: a commit callback failed",
                self.group.name,
                extra={"raft_group": self.group.name},
            )


class _WaiterHeap:
    """Waiters (tasks or callbacks) for a mark (high watermark, durable end) to reach their
    offset. A callback whose deadline passed stays until the mark or a failure reaches it,
    or until expired ones are the majority (`compact`)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, _Waiter | _Subscription]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, end_offset: int, as_leader: bool) -> _Waiter:
        waiter = _Waiter(end_offset, as_leader)
        heapq.heappush(self._heap, (end_offset, next(self._seq), waiter))
        return waiter

    def subscribe(self, subscription: _Subscription) -> None:
        heapq.heappush(self._heap, (subscription.end_offset, next(self._seq), subscription))

    def discard(self, waiter: _Waiter) -> None:
        self._heap = [w for w in self._heap if w[2] is not waiter]
        heapq.heapify(self._heap)

    def compact(self) -> None:
        """Drop the finished waiters (callbacks whose deadline passed)."""
        self._heap = [w for w in self._heap if not w[2].finished]
        heapq.heapify(self._heap)

    def release_through(self, mark: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= mark:
            heapq.heappop(heap)[2].reached()

    def fail(self, error: NotLeaderError, only_leaders: bool) -> None:
        keep = []
        failed = []
        for item in self._heap:
            waiter = item[2]
            if waiter.as_leader or not only_leaders:
                failed.append(waiter)
            else:
                keep.append(item)
        if failed:
            heapq.heapify(keep)
            self._heap = keep
            for waiter in failed:
                waiter.failed(error)


class AppendThrottle:
    """A token bucket over the bytes of APPEND messages sent to throttled replicas (Kafka's
    leader.replication.throttled.rate), shared by every group of a node. At most one
    second of the rate may be sent in a burst; a message larger than that leaves once the
    bucket is full and leaves it in debt. Only appends that stream a matched log count:
    a probe (one in flight) and a snapshot (for a partition, no data) are never held back,
    so a learner below the leader's log start is not starved of its snapshot."""

    def __init__(self, rate_bytes_per_s: float, clock: Callable[[], float] = time.monotonic):
        self.rate_bytes_per_s = rate_bytes_per_s
        self._clock = clock
        self._tokens = rate_bytes_per_s
        self._last = clock()
        self.bytes_sent = 0

    def set_rate(self, rate_bytes_per_s: float) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._tokens = min(self._tokens, rate_bytes_per_s)

    def try_take(self, size_bytes: int) -> bool:
        now = self._clock()
        capacity = self.rate_bytes_per_s
        self._tokens = min(capacity, self._tokens + (now - self._last) * capacity)
        self._last = now
        if self._tokens < min(size_bytes, capacity):
            return False
        self._tokens -= size_bytes
        self.bytes_sent += size_bytes
        return True


_LOG_START_RESPONSES: Final = frozenset(
    {MessageType.APPEND_RESPONSE, MessageType.HEARTBEAT_RESPONSE}
)


def _append_bytes(m: Message) -> int:
    return sum(e.size_bytes for e in m.entries)


class RaftGroup:
    """One partition's Raft group on this node. All methods are synchronous except waits."""

    def __init__(
        self,
        name: str,
        core: RaftCore,
        storage: RaftGroupStorage,
        transport: PeerTransport,
        on_update: Callable[[RaftGroupUpdate], None] | None,
        node: RaftNode,
    ) -> None:
        self.name = name
        self._core = core
        self._storage = storage
        self._transport = transport
        self._on_update = on_update
        self._node = node
        self._commit_waiters = _WaiterHeap()
        self._durable_waiters = _WaiterHeap()
        # Subscriptions whose deadline passed, still in the heaps.
        self._expired = 0
        self._tickets_pending = 0
        self._no_campaign_until = 0.0
        self.removed = False
        # (term, leader) of the last leader this node learned of; counted for monitoring.
        self._known_leadership: tuple[int, NodeId] | None = None
        self.leader_changes = 0
        self._ticked = False
        # Learners whose APPENDs pass the node's AppendThrottle (set by the broker for the
        # replicas a reassignment adds), and per replica the APPENDs waiting for it, in order.
        self.throttled_peers: frozenset[NodeId] = frozenset()
        self._throttled: dict[NodeId, collections.deque[Message]] = {}
        # As leader: each replica's log start as its last response reported it.
        self._peer_log_starts: dict[NodeId, int] = {}
        # Batches proposed by `propose_unwritten` that no drive has written yet.
        self.unwritten = False
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

    def leader_heard_recently(self) -> bool:
        return self._core.leader_heard_recently()

    @property
    def role(self) -> Role:
        return self._core.role

    @property
    def log_end_offset(self) -> int:
        return self._core.log.log_end_offset()

    @property
    def leader_epoch_start_offset(self) -> int | None:
        """As leader: the log end offset when it was elected (Kafka's leader epoch start
        offset); None on other roles."""
        core = self._core
        return core.term_start_offset if core.role is Role.LEADER else None

    @property
    def durable_end(self) -> int:
        """Offsets below it are as durable as the flush policy requires."""
        return self._core.durable_end

    def status(self) -> Status:
        return self._core.status()

    def follower_match_ends(self) -> dict[NodeId, int]:
        """As leader: each follower's log end offset known to match ours; empty on other
        roles (they do not track followers)."""
        if self._core.role is not Role.LEADER:
            return {}
        return {node: pr.match_end for node, pr in self._core.progress.items()}

    def replica_contact_ms(self, now_ms: int) -> dict[NodeId, tuple[int, int]]:
        """As leader: each follower's last answer and the last time it held this leader's
        whole log, in wall-clock ms to within a tick (-1: never), as Kafka's DescribeQuorum
        reports them; empty on other roles."""
        core = self._core
        if core.role is not Role.LEADER:
            return {}
        tick_ms, now_tick = self._node.tick_ms, core.leader_ticks

        def at(tick: int | None) -> int:
            return -1 if tick is None else now_ms - (now_tick - tick) * tick_ms

        return {
            node: (at(pr.last_response_tick), at(pr.caught_up_tick))
            for node, pr in core.progress.items()
        }

    def deletable_end(self) -> int:
        """Offset below which the log may be deleted (retention, DeleteRecords): the high
        watermark, as in Kafka. A follower that still needs deleted offsets is sent a
        snapshot instead."""
        return self._core.high_watermark

    def low_watermark(self) -> int | None:
        """As leader, Kafka's low watermark (lowWatermarkIfLeader): the lowest log start of
        this replica and every live replica (one that answered within the last election
        timeout; one that never reported its log start counts as 0). DeleteRecords answers
        once it reached the requested offset. None on other roles."""
        core = self._core
        if core.role is not Role.LEADER:
            return None
        low = core.log.record_log_start()
        recent = core.leader_ticks - core.config.election_timeout_ticks
        for node, pr in core.progress.items():
            if pr.last_response_tick is not None and pr.last_response_tick >= recent:
                low = min(low, self._peer_log_starts.get(node, 0))
        return low

    def _handover_target(self) -> NodeId | None:
        """The voter to hand leadership to at shutdown: of those this node's transport is
        connected to, the one known to hold the most of our log, preferring recently active
        ones; None if none is connected. A voter whose process stopped may still count as
        recently active for an election timeout, and a handover to it could never complete,
        so the connection decides (it drops at once when the peer's process exits)."""
        core = self._core
        connected_to = self._transport.connected_to
        best: tuple[bool, int, int] | None = None
        for node, pr in core.progress.items():
            if node not in core.voters or not connected_to(node):
                continue
            key = (pr.recent_active, pr.match_end, -node)
            if best is None or key > best:
                best = key
        return None if best is None else -best[2]

    # ------------------------------------------------------------------ inputs
    def propose(self, record_count: int, payload: bytes, kind: EntryKind = EntryKind.DATA) -> Entry:
        """Append a batch as leader; written (storage.append) before returning, and sent to
        the followers.

        Raises NotLeaderError when this node is not the leader or is handing leadership over,
        StorageError (a NotLeaderError) when the write failed: nothing was stored and this
        node no longer leads.
        """
        self._check_live()
        entry = self._core.propose(record_count, payload, kind)
        self._drive()
        return entry

    def propose_unwritten(
        self, record_count: int, payload: bytes, kind: EntryKind = EntryKind.DATA
    ) -> Entry:
        """`propose` without the write: the batch takes its offsets now and is written and
        sent to the followers by the next `write_proposed` (or whatever drives the group
        first), together with the batches proposed meanwhile: one write and one round of
        messages for requests that arrive together (group commit). The caller must call
        `write_proposed` before it lets other tasks run. Raises NotLeaderError as `propose`.
        """
        self._check_live()
        entry = self._core.propose(record_count, payload, kind)
        self.unwritten = True
        return entry

    def write_proposed(self) -> None:
        """Write and send what `propose_unwritten` left; StorageError as `propose`."""
        if self.unwritten and not self.removed:
            self._drive()

    def propose_config_change(
        self,
        add: NodeId | None = None,
        remove: NodeId | None = None,
        add_learner: NodeId | None = None,
        promote: NodeId | None = None,
        demote: NodeId | None = None,
    ) -> Entry:
        """One membership change as leader (`RaftCore.propose_config_change`); raises
        ConfigChangeError when it cannot be made now, NotLeaderError as `propose`."""
        self._check_live()
        entry = self._core.propose_config_change(
            add=add, remove=remove, add_learner=add_learner, promote=promote, demote=demote
        )
        self._drive()
        return entry

    @property
    def config_change_pending(self) -> bool:
        """The last membership change is not committed yet (no next one is accepted)."""
        return self._core.pending_config_change()

    def transfer_leadership(self, to: NodeId) -> None:
        self._check_live()
        self._core.transfer_leadership(to)
        self._drive()

    def campaign(self) -> None:
        """Start an election now (tests, operators' preferred-leader election)."""
        self._check_live()
        self._core.campaign()
        self._drive()

    def defer_election(self, ticks: int) -> None:
        """This node's running election timeout made `ticks` longer (`RaftCore.defer_election`)."""
        self._check_live()
        self._core.defer_election(ticks)

    async def wait_committed(
        self, end_offset: int, timeout_s: float, epoch: int | None = None
    ) -> bool:
        """True once high_watermark >= end_offset; False on timeout.

        With `epoch` (the proposed entry's), True also means the log still holds that entry:
        a high watermark that passed the offset under a later leader, after the entry was
        truncated, raises NotLeaderError instead. Waiting as leader (acks=all): raises
        NotLeaderError if this node loses leadership (or its term changes) first -- the entry
        may yet commit or be truncated, as in Kafka; with `epoch`, also if it no longer leads
        when the wait begins. Waiting as follower without `epoch`: only the high watermark
        or the timeout ends the wait.
        """
        if not await self._wait_mark(
            self._commit_waiters, self._high_watermark, end_offset, timeout_s, proposer_epoch=epoch
        ):
            return False
        self._check_epoch(end_offset, epoch)
        return True

    async def wait_durable(self, end_offset: int, timeout_s: float, epoch: int | None) -> bool:
        """True once the local log holds everything below `end_offset` as durably as the
        flush policy requires (acks=1); False on timeout. Raises NotLeaderError like
        `wait_committed` when leadership is lost first or the entry was replaced."""
        if not await self._wait_mark(
            self._durable_waiters, self._durable_end, end_offset, timeout_s
        ):
            return False
        self._check_epoch(end_offset, epoch)
        return True

    def on_committed(
        self,
        end_offset: int,
        timeout_s: float,
        epoch: int | None,
        callback: Callable[[MarkOutcome], None],
    ) -> None:
        """`wait_committed` without a task: `callback` is called once with its outcome (None
        when the high watermark reached `end_offset` with the entry in place, the
        NotLeaderError the wait would raise, or TIMED_OUT after `timeout_s`, checked each
        tick of the node). Called at once if the mark is already there; raises
        NotLeaderError at once if the group is no longer hosted."""
        self._subscribe(
            self._commit_waiters,
            self._core.high_watermark,
            end_offset,
            timeout_s,
            epoch,
            callback,
            proposer=True,
        )

    def on_durable(
        self,
        end_offset: int,
        timeout_s: float,
        epoch: int | None,
        callback: Callable[[MarkOutcome], None],
    ) -> None:
        """`wait_durable` without a task, as `on_committed`."""
        self._subscribe(
            self._durable_waiters, self._core.durable_end, end_offset, timeout_s, epoch, callback
        )

    def _subscribe(
        self,
        waiters: _WaiterHeap,
        mark: int,
        end_offset: int,
        timeout_s: float,
        epoch: int | None,
        callback: Callable[[MarkOutcome], None],
        *,
        proposer: bool = False,
    ) -> None:
        self._check_live()
        subscription = _Subscription(
            end_offset, self._core.role is Role.LEADER, epoch, self, callback
        )
        # Neither is queued, so neither is a leftover in the deadline heap.
        if mark >= end_offset:
            subscription.settle()
            return
        deposed = self._deposed_proposer(epoch) if proposer else None
        if deposed is not None:
            subscription._finish(deposed)
            return
        waiters.subscribe(subscription)
        self._node._expire_at(time.monotonic() + timeout_s, subscription)

    def _subscriptions_expired(self) -> None:
        """A subscription's deadline passed: once most of a heap is such leftovers, drop
        them (a group that commits nothing for long would otherwise keep them all)."""
        self._expired += 1
        if self._expired > 64 and 2 * self._expired > len(self._commit_waiters) + len(
            self._durable_waiters
        ):
            self._commit_waiters.compact()
            self._durable_waiters.compact()
            self._expired = 0

    def reached(self, end_offset: int, epoch: int | None, *, durable: bool = False) -> bool:
        """Whether `wait_committed` (or, `durable`, `wait_durable`) would return True at
        once, without waiting: the mark already passed `end_offset`. Raises NotLeaderError
        as they do when the entry was replaced."""
        mark = self._core.durable_end if durable else self._core.high_watermark
        if mark < end_offset:
            return False
        self._check_epoch(end_offset, epoch)
        return True

    def _high_watermark(self) -> int:
        return self._core.high_watermark

    def _durable_end(self) -> int:
        return self._core.durable_end

    def _deposed_proposer(self, epoch: int | None) -> NotLeaderError | None:
        """The error for a wait for the commit of a proposed entry (`epoch` given) that
        begins after this node stopped leading: a step-down fails only the waits begun
        before it, and a follower's wait ends only when the high watermark passes the entry,
        which may not happen until the new leader appends more (its clients may be waiting
        for this very answer first). Kafka answers such a Produce NOT_LEADER_OR_FOLLOWER at
        once. (A durable wait needs no such rule: the local log's own sync moves its mark.)"""
        if epoch is None or self._core.role is Role.LEADER:
            return None
        return NotLeaderError(
            self._core.leader_id,
            f"{self.name}: leadership was lost before the wait for the entry began",
        )

    async def _wait_mark(
        self,
        waiters: _WaiterHeap,
        mark: Callable[[], int],
        end_offset: int,
        timeout_s: float,
        proposer_epoch: int | None = None,
    ) -> bool:
        if mark() >= end_offset:
            return True
        self._check_live()
        deposed = self._deposed_proposer(proposer_epoch)
        if deposed is not None:
            raise deposed
        waiter = waiters.add(end_offset, as_leader=self._core.role is Role.LEADER)
        with trio.move_on_after(timeout_s):
            await waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        if not waiter.done.is_set():
            waiters.discard(waiter)
            return mark() >= end_offset
        return True

    def _check_epoch(self, end_offset: int, epoch: int | None) -> None:
        if epoch is None:
            return
        last = end_offset - 1
        core = self._core
        if core.role is Role.LEADER and epoch == core.term and last >= core.term_start_offset:
            return  # a leader's entries of its own term stay in its log while it leads
        log = core.log
        if last >= log.log_start_offset() and log.epoch_at(last) != epoch:
            raise NotLeaderError(
                self._core.leader_id,
                f"{self.name}: the entry ending at {last} was replaced by a later leader's",
            )

    def _tick(self) -> None:
        core = self._core
        if self._no_campaign_until and core.role is not Role.LEADER:
            if time.monotonic() < self._no_campaign_until:
                return  # no election timer: it must not campaign yet
            self._no_campaign_until = 0.0
        core.tick()
        if core.has_ready():
            self._drive_quietly()

    def _step(self, m: Message) -> None:
        if m.type in _LOG_START_RESPONSES and m.log_start_offset >= 0:
            self._peer_log_starts[m.from_id] = m.log_start_offset
        self._core.step(m)
        self._drive_quietly()

    def _drive_quietly(self) -> None:
        """_drive for inputs that have no caller to tell: a storage failure is logged."""
        with contextlib.suppress(StorageError):
            self._drive()

    def _check_live(self) -> None:
        if self.removed:
            raise NotLeaderError(None, f"group {self.name} was removed from this node")

    # ------------------------------------------------------------------ Ready
    def _send(self, m: Message) -> None:
        if (
            m.to not in self.throttled_peers  # the common case: one set lookup
            or m.type is not MessageType.APPEND  # a snapshot is never held back
            or m.to not in self._core.learners  # a voter is never held back
            or not self._streams_to(m.to)
        ):
            self._transport.send(m)
            return
        throttle = self._node.append_throttle
        if throttle is None:
            self._transport.send(m)
            return
        queue = self._throttled.get(m.to)
        if queue is None and throttle.try_take(_append_bytes(m)):
            self._transport.send(m)
            return
        if queue is None:
            queue = self._throttled[m.to] = collections.deque()
            self._node._throttled_groups[self.name] = self
        queue.append(m)

    def _streams_to(self, peer: NodeId) -> bool:
        """Whether appends to `peer` stream a matched log (the throttled part of a copy);
        the one probe in flight that finds where its log matches is not held back, so a
        learner below the log start learns so and gets its snapshot at once."""
        progress = self._core.progress.get(peer)
        return progress is not None and progress.state is ProgressState.REPLICATE

    def _release_throttled(self) -> bool:
        """Send queued APPENDs as the throttle allows; whether some still wait."""
        throttle = self._node.append_throttle
        for peer, queue in list(self._throttled.items()):
            if (
                self._core.role is not Role.LEADER
                or peer not in self.throttled_peers
                or peer not in self._core.learners
            ):
                # Not leading any more (a follower rejects an old term's appends) or no
                # longer throttled: what waits goes now or never.
                if self._core.role is Role.LEADER:
                    for m in queue:
                        self._transport.send(m)
                queue.clear()
            while queue and (throttle is None or throttle.try_take(_append_bytes(queue[0]))):
                self._transport.send(queue.popleft())
            if not queue:
                del self._throttled[peer]
        return bool(self._throttled)

    def _drive(self) -> None:
        self.unwritten = False
        core = self._core
        storage = self._storage
        send = self._send
        while core.has_ready():
            rd = core.ready()
            try:
                self._write(rd)
            except OSError as exc:
                raise self._storage_failed(exc) from exc
            # An installed snapshot is acknowledged only once it is durable.
            fsync_log = rd.snapshot is not None or (
                bool(rd.entries) and storage.entries_need_sync()
            )
            # Once a ticket is pending, later Readys queue behind it: none may claim more
            # durability than the one before it has.
            needs_ticket = rd.hard_state is not None or fsync_log or self._tickets_pending > 0
            held: list[Message] = []
            messages = rd.messages
            if rd.log_start_offset is not None:
                # The answers report the log start just raised, not the one the core read.
                start = core.log.record_log_start()
                messages = tuple(
                    dataclasses.replace(m, log_start_offset=start)
                    if m.type in _LOG_START_RESPONSES
                    else m
                    for m in messages
                )
            for m in messages:
                if m.type is MessageType.SNAPSHOT:
                    with_data = self._with_snapshot_data(m)
                    if with_data is None:
                        continue  # the core sends it again after an election timeout
                    m = with_data
                if needs_ticket and (rd.hard_state is not None or not can_send_before_sync(m)):
                    held.append(m)
                else:
                    send(m)
            self._apply(rd)
            core.advance(rd, durable=not needs_ticket)
            if needs_ticket:
                self._tickets_pending += 1
                self._node._queue_sync(
                    _SyncTicket(
                        group=self,
                        held=held,
                        end_offset=core.log.log_end_offset(),
                        generation=core.log_generation,
                        fsync_log=fsync_log,
                        fsync_hard_state=rd.hard_state is not None
                        and storage.hard_state_needs_sync(),
                    )
                )
            else:
                self._durable_waiters.release_through(core.durable_end)
                # A single voter's write commits at once: its commit is applied here rather
                # than from one more Ready that holds nothing else.
                committed = core.take_commit()
                if committed is not None:
                    self._commit_waiters.release_through(committed)
                    self._update(RaftGroupUpdate(self.name, committed, None))
        self._refresh_ticked()

    def _refresh_ticked(self) -> None:
        """Keep this group in the node's tick set exactly while its clock matters: a
        leader that is the only voter and has no learners has no followers to heartbeat and
        no election to fear, so ticking it would only cost CPU on a node with many
        partitions. With learners it heartbeats them: a learner never campaigns, so an
        append it lost (it was down) is resent only when a heartbeat's answer asks."""
        core = self._core
        ticked = not self.removed and not (
            core.role is Role.LEADER and len(core.voters) == 1 and not core.learners
        )
        if ticked != self._ticked:
            self._ticked = ticked
            self._node._set_ticked(self, ticked)

    def _with_snapshot_data(self, m: Message) -> Message | None:
        end = m.prev_offset + 1
        data = self._storage.snapshot_data(end)
        if data is None:
            log.warning(
                "%s: no snapshot at offset %d for node %d yet; sent again later",
                self.name,
                end,
                m.to,
                extra={"raft_group": self.name},
            )
            return None
        log.info(
            "%s: node %d needs offsets below the log start %d: sending a snapshot (%d bytes)",
            self.name,
            m.to,
            end,
            len(data),
            extra={"raft_group": self.name},
        )
        budget = self._transport.queue_bytes_max
        if len(data) > budget:
            log.error(
                "%s: the snapshot for node %d is %d bytes, more than the %d bytes one peer's"
                " queue holds: it cannot be sent (snapshots are not chunked)",
                self.name,
                m.to,
                len(data),
                budget,
                extra={"raft_group": self.name},
            )
        return dataclasses.replace(m, snapshot_data=data)

    def _write(self, rd: Ready) -> None:
        storage = self._storage
        if rd.hard_state is not None:
            storage.save_hard_state(rd.hard_state)
        if rd.snapshot is not None:
            storage.install_snapshot(rd.snapshot)
            log.info(
                "%s: installed a snapshot: the log now starts at offset %d",
                self.name,
                rd.snapshot.end_offset,
                extra={"raft_group": self.name},
            )
        if rd.truncate_to is not None:
            storage.truncate_to(rd.truncate_to)
        if rd.entries:
            storage.append(rd.entries)
        if rd.log_start_offset is not None:
            storage.follow_log_start(rd.log_start_offset)

    def _storage_failed(self, exc: OSError) -> StorageError:
        """A write failed mid-Ready: start over from what storage holds, as a restart of
        this group would. The Ready's messages are dropped, unwritten entries forgotten."""
        old = self._core
        storage = self._storage
        error = StorageError(None, f"{self.name}: cannot write to the log: {exc}")
        if self._node.storage_failed(self.name, exc):
            return error  # removed: its waiters failed, it steps no more
        log.error(
            "node %s: %s; this replica restarts as a follower",
            old.id,
            error,
            extra={"raft_group": self.name},
        )
        self._commit_waiters.fail(error, only_leaders=True)
        self._durable_waiters.fail(error, only_leaders=True)
        end = storage.raft_log.log_end_offset()
        self._core = RaftCore(
            old.config, storage.raft_log, storage.load_hard_state(), min(old.high_watermark, end)
        )
        if len(old.voters) > 1:
            self._no_campaign_until = time.monotonic() + STORAGE_FAILURE_CAMPAIGN_PAUSE_S
        if self._on_update is not None:
            self._on_update(RaftGroupUpdate(self.name, None, self._core._soft_state()))
        self._node._note_soft_state()
        self._refresh_ticked()
        return error

    def _synced(self, ticket: _SyncTicket) -> None:
        """The ticket's sync is done: its messages leave, its entries count as durable."""
        self._tickets_pending -= 1
        if self.removed:
            return
        for m in ticket.held:
            self._send(m)
        self._core.mark_durable(ticket.end_offset, ticket.generation)
        self._durable_waiters.release_through(self._core.durable_end)
        self._drive_quietly()

    def _apply(self, rd: Ready) -> None:
        # Leadership first: a leader's waiter must not be woken by a high watermark that a
        # later leader moved past an entry it truncated, in the same Ready.
        if rd.soft_state is not None:
            leader = rd.soft_state.leader_id
            if leader is not None and self._known_leadership != (rd.soft_state.term, leader):
                self._known_leadership = (rd.soft_state.term, leader)
                self.leader_changes += 1
            if rd.soft_state.role is not Role.LEADER:
                error = NotLeaderError(rd.soft_state.leader_id)
                self._commit_waiters.fail(error, only_leaders=True)
                self._durable_waiters.fail(error, only_leaders=True)
            self._node._note_soft_state()
        if rd.high_watermark is not None:
            self._commit_waiters.release_through(rd.high_watermark)
        if rd.high_watermark is not None or rd.soft_state is not None:
            self._update(RaftGroupUpdate(self.name, rd.high_watermark, rd.soft_state))

    def _update(self, update: RaftGroupUpdate) -> None:
        if self._on_update is None:
            return
        try:
            self._on_update(update)
        except Exception:
            # What the update follows is written and sent: the core must go on.
            log.exception(
                "%s: applying an update failed", self.name, extra={"raft_group": self.name}
            )

    def _remove(self, error: NotLeaderError | None = None) -> None:
        self.removed = True
        if error is None:
            error = NotLeaderError(None, f"group {self.name} was removed from this node")
        self._commit_waiters.fail(error, only_leaders=False)
        self._durable_waiters.fail(error, only_leaders=False)


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
        hard_states: HardStateCommitter | None = None,
        on_sync_failure: Callable[[str | None, OSError], None] | None = None,
    ) -> None:
        """`hard_states` commits the groups' staged hard states (None: the storages keep
        them durable themselves, as in-memory test doubles do). `on_sync_failure` is
        called when an I/O error other than a full disk's (OUT_OF_SPACE) meets a group's
        log, in a sync or a write, with the group's name, or when the hard states' commit
        fails, with None. Nothing that waited for the sync may go ahead, and a retry that
        succeeds would not prove the data durable, so it must remove the group (with
        `remove_raft_group(..., error)`: a broker takes its log directory offline) and
        must not return after a hard-state failure (a broker halts). Without one,
        `run_syncs` raises SyncFailedError and a failed write restarts the group as a
        follower."""
        if transport.node_id != node_id:
            raise ValueError(f"node {node_id} given the transport of node {transport.node_id}")
        self.node_id = node_id
        self.transport = transport
        self._on_sync_failure = on_sync_failure
        self.tick_ms = tick_ms
        self.seed = seed
        self.election_timeout_ticks = election_timeout_ticks
        self.heartbeat_interval_ticks = heartbeat_interval_ticks
        self.stats = DriverStats()
        self._raft_groups: dict[str, RaftGroup] = {}
        # The groups whose clock matters (see RaftGroup._refresh_ticked); only they are
        # ticked, so idle single-voter partitions cost nothing per tick.
        self._ticked_groups: dict[str, RaftGroup] = {}
        self._soft_state_changed = trio.Event()
        self._hard_states = hard_states
        self._tickets: list[_SyncTicket] = []
        self._tickets_queued = trio.Event()
        # Set by the broker: the rate of APPENDs to replicas a reassignment adds.
        self.append_throttle: AppendThrottle | None = None
        self._throttled_groups: dict[str, RaftGroup] = {}
        # The groups' subscriptions by deadline (monotonic time), expired by each tick.
        self._deadlines: list[tuple[float, int, _Subscription]] = []
        self._deadline_seq = itertools.count()
        # Entries of `_deadlines` whose subscription already ended.
        self._deadlines_done = 0
        # Held by whoever fsyncs partition logs, so a flush job that finds nothing to do
        # knows no other job is still syncing what it would have covered.
        self.sync_lock = trio.Lock()
        transport.set_message_handler(self._on_message)

    # ------------------------------------------------------------------ groups
    def add_raft_group(
        self,
        group: str,
        voters: frozenset[NodeId],
        storage: RaftGroupStorage,
        on_update: Callable[[RaftGroupUpdate], None] | None = None,
        *,
        commit_notice_at_once: bool = True,
    ) -> RaftGroup:
        """Start hosting Raft group `group` (its id) from its durable state. `voters` is the
        replica set used until the log holds a membership (CONFIG) batch.
        `commit_notice_at_once`: see `RaftConfig`."""
        if group in self._raft_groups:
            raise ValueError(f"group {group!r} is already hosted on node {self.node_id}")
        config = RaftConfig(
            node_id=self.node_id,
            group=group,
            voters=voters,
            election_timeout_ticks=self.election_timeout_ticks,
            heartbeat_interval_ticks=self.heartbeat_interval_ticks,
            seed=self.seed,  # the core mixes group and node id into its random stream
            skip_noop_when_committed=True,
            commit_notice_at_once=commit_notice_at_once,
        )
        core = RaftCore(
            config,
            storage.raft_log,
            storage.load_hard_state(),
            storage.high_watermark_checkpoint(),
        )
        raft_group = RaftGroup(group, core, storage, self.transport, on_update, self)
        self._raft_groups[group] = raft_group
        return raft_group

    def remove_raft_group(self, group: str, error: NotLeaderError | None = None) -> None:
        """Stop hosting `group`; its waiters get `error` (default a NotLeaderError), later
        messages are dropped."""
        raft_group = self._raft_groups.pop(group, None)
        if raft_group is not None:
            raft_group._remove(error)
            self._ticked_groups.pop(group, None)

    def raft_group(self, name: str) -> RaftGroup | None:
        """The Raft group hosted here under id `name`, if any."""
        return self._raft_groups.get(name)

    @property
    def raft_groups(self) -> dict[str, RaftGroup]:
        return dict(self._raft_groups)

    @property
    def ticked_group_count(self) -> int:
        """How many groups each tick visits (single-voter leaders are not among them)."""
        return len(self._ticked_groups)

    # ------------------------------------------------------------------ running
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick every group each tick_ms until cancelled. Runs the transport too unless it is
        already running (then its owner keeps it)."""
        async with trio.open_nursery() as nursery:
            if not self.transport.running:
                await nursery.start(self.transport.run)
            nursery.start_soon(self.run_syncs)
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

    # ------------------------------------------------------------------ durability
    def _queue_sync(self, ticket: _SyncTicket) -> None:
        self._tickets.append(ticket)
        self._tickets_queued.set()

    async def run_syncs(self) -> None:
        """Serve sync tickets until cancelled (run() starts it): every ticket pending at a
        time is served by one worker-thread call, then released in the order queued."""
        while True:
            await self._tickets_queued.wait()
            self._tickets_queued = trio.Event()
            tickets, self._tickets = self._tickets, []
            await self._serve(tickets)

    async def _serve(self, tickets: list[_SyncTicket]) -> None:
        """One sync of everything the tickets wait for, then their release. A job is made
        once and run once: a log's flush job takes its segments' dirty marks when made, so
        a job left out after another failed would leave them unsynced."""
        failures = 0
        async with self.sync_lock:
            jobs = self._sync_jobs(tickets)
            while jobs:
                try:
                    # Shielded: a job made is run even if the driver is being cancelled
                    # (shut down); dropped, the hard states it took would never be committed.
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(_run_all, jobs)
                    break
                except _SyncJobFailed as failed:
                    del jobs[0]  # _run_all keeps the failed job first, the done ones gone
                    exc = failed.error
                    if exc.errno not in OUT_OF_SPACE:
                        # Never retried: see `on_sync_failure`. The others' jobs still run.
                        self._sync_failed(failed.group, exc)
                    else:
                        # A full disk refused the write before anything was synced (lmdb's
                        # commit writes its pages first, a flush job marks its segments
                        # dirty again): nothing waiting may go ahead; retry once space
                        # returns, as a full disk's writes are retried.
                        failures += 1
                        delay_s = min(5.0, 0.1 * 2**failures)
                        log.error(
                            "node %s: sync of %d groups failed (%s); retrying in %.1f s",
                            self.node_id,
                            len({id(t.group) for t in tickets}),
                            exc,
                            delay_s,
                        )
                        await trio.sleep(delay_s)
                        jobs[:0] = self._sync_jobs(tickets, only=failed.group)
                    jobs = [(g, job) for g, job in jobs if g is None or g in self._raft_groups]
        for ticket in tickets:
            ticket.group._synced(ticket)

    def _sync_jobs(
        self, tickets: list[_SyncTicket], only: str | None | bool = False
    ) -> list[tuple[str | None, Callable[[], None]]]:
        """The hard-state commit and log flush jobs the tickets need (`only`: the one of that
        group, None for the hard states), each named by its group (None: hard states)."""
        jobs: list[tuple[str | None, Callable[[], None]]] = []
        if self._hard_states is not None and (only is False or only is None):
            fsync = any(t.fsync_hard_state for t in tickets)
            job = self._hard_states.commit_job(fsync)
            if job is not None:
                jobs.append((None, job))
        synced: set[int] = set()
        for ticket in tickets:
            group = ticket.group
            if only is not False and group.name != only:
                continue
            if ticket.fsync_log and not group.removed and id(group) not in synced:
                synced.add(id(group))
                job = group._storage.sync_job()
                if job is not None:
                    jobs.append((group.name, job))
        return jobs

    def _sync_failed(self, group: str | None, exc: OSError) -> None:
        """A sync other than a full disk's failed: `on_sync_failure` must remove `group`
        (None: the hard states, which it must not survive), or SyncFailedError stops the
        node."""
        what = "the Raft hard states" if group is None else f"the log of {group}"
        if self._on_sync_failure is not None:
            self._on_sync_failure(group, exc)
            if group is not None and group not in self._raft_groups:
                return
        raise SyncFailedError(f"node {self.node_id}: sync of {what} failed") from exc

    def storage_failed(self, group: str, exc: OSError) -> bool:
        """A write to `group`'s log failed with something other than a full disk: tell
        `on_sync_failure`, as for a failed sync (a write error is an I/O error of the same
        disk). Whether the group was removed (else it restarts as a follower)."""
        if self._on_sync_failure is None or exc.errno in OUT_OF_SPACE:
            return False
        self._on_sync_failure(group, exc)
        return group not in self._raft_groups

    def tick(self) -> None:
        """One tick of every group whose clock matters (run() calls this; tests and
        benchmarks may too). A leader that is its group's only voter is not ticked: a tick
        would change nothing it acts on."""
        for raft_group in list(self._ticked_groups.values()):
            if not raft_group.removed:
                raft_group._tick()
        for name, raft_group in list(self._throttled_groups.items()):
            if raft_group.removed or not raft_group._release_throttled():
                del self._throttled_groups[name]
        self._expire_subscriptions(time.monotonic())

    def _expire_at(self, deadline: float, subscription: _Subscription) -> None:
        heapq.heappush(self._deadlines, (deadline, next(self._deadline_seq), subscription))

    def _subscription_done(self) -> None:
        """A subscription ended before its deadline: once most of the deadline heap is
        such leftovers, drop them (they would otherwise stay for the whole timeout)."""
        self._deadlines_done += 1
        if self._deadlines_done > 1024 and 2 * self._deadlines_done > len(self._deadlines):
            self._deadlines = [d for d in self._deadlines if not d[2].finished]
            heapq.heapify(self._deadlines)
            self._deadlines_done = 0

    def _expire_subscriptions(self, now: float) -> None:
        """Tell the subscriptions whose deadline passed (at most a tick late)."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            subscription = heapq.heappop(deadlines)[2]
            if subscription.finished:
                # A leftover counted by `_subscription_done` leaves the heap here.
                self._deadlines_done -= 1
            else:
                subscription.timed_out()

    def _set_ticked(self, raft_group: RaftGroup, ticked: bool) -> None:
        if ticked:
            if self._raft_groups.get(raft_group.name, raft_group) is raft_group:
                self._ticked_groups[raft_group.name] = raft_group
        elif self._ticked_groups.get(raft_group.name) is raft_group:
            del self._ticked_groups[raft_group.name]

    async def shutdown(self, timeout_s: float) -> None:
        """Hand every group this node leads to its most up-to-date follower among those
        still connected (`RaftGroup._handover_target`) and wait up to `timeout_s` for the
        handovers; a group with no such follower stays as it is. The transport must still
        be running; cancel run() afterwards."""
        with trio.move_on_after(timeout_s):
            for raft_group in list(self._raft_groups.values()):
                if raft_group.role is not Role.LEADER:
                    continue
                target = raft_group._handover_target()
                if target is None:
                    continue  # a single voter, or no other voter reachable
                try:
                    raft_group.transfer_leadership(target)
                except (NotLeaderError, ValueError) as exc:
                    log.info(
                        "node %s: no transfer for %s: %s",
                        self.node_id,
                        raft_group.name,
                        exc,
                        extra={"raft_group": raft_group.name},
                    )
            while self._led_with_followers():
                event = self._soft_state_changed
                await event.wait()

    def _led_with_followers(self) -> list[RaftGroup]:
        return [
            g
            for g in self._raft_groups.values()
            if g.role is Role.LEADER and g._handover_target() is not None
        ]

    # ------------------------------------------------------------------ inbound
    def _on_message(self, m: Message) -> None:
        if m.to != self.node_id:
            self.stats.messages_misaddressed += 1
            return
        raft_group = self._raft_groups.get(m.group)
        if raft_group is None:
            self.stats.messages_unknown_group += 1
            return
        raft_group._step(m)

    def _note_soft_state(self) -> None:
        self._soft_state_changed.set()
        self._soft_state_changed = trio.Event()


class _SyncJobFailed(Exception):
    """A sync job failed: `group` is the Raft group whose log it synced (None: the hard
    states), `error` what it raised."""

    def __init__(self, group: str | None, error: OSError) -> None:
        super().__init__(group, error)
        self.group = group
        self.error = error


def _run_all(jobs: list[tuple[str | None, Callable[[], None]]]) -> None:
    """Run the jobs in order, each taken off the list once done; _SyncJobFailed for the
    first that fails (left first on the list, the ones after it not run)."""
    while jobs:
        group, job = jobs[0]
        try:
            job()
        except OSError as exc:
            raise _SyncJobFailed(group, exc) from exc
        del jobs[0]


__all__ = [
    "DriverStats",
    "RaftGroupStorage",
    "RaftGroupUpdate",
    "HardStateCommitter",
    "RaftGroup",
    "RaftNode",
]
