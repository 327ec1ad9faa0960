"""Deterministic Raft core for one partition, whose Raft log is the Kafka partition log.

The core does no I/O and reads no clock: inputs are `step(message)`, `tick()`, `propose(...)`,
`propose_config_change(...)` and `transfer_leadership(...)`; outputs are collected into a
`Ready`. Election timeouts are randomized from the seed in `RaftConfig`, so a run is a pure
function of its inputs.

Positions are Kafka offsets. An entry is a record batch covering [base_offset, last_offset]
whose epoch is the Raft term (partitionLeaderEpoch). The commit index is the high watermark:
one past the last offset of the highest committed batch.

How a driver uses it -- the durability contract, stated once:

    while running:
        feed inputs (step / tick / propose ...)
        if core.has_ready():
            rd = core.ready()
            1. write rd.hard_state (if set), install rd.snapshot (if set: the log becomes
               empty, starting at its end, and the state machine takes its data), truncate
               the log to rd.truncate_to (if set) and append rd.entries; a follower's log
               start rises to rd.log_start_offset (if set: committed offsets only);
            2. send rd.messages -- but only once what they depend on is durable:
               - if rd.hard_state is set, every message waits until the hard state is durable
                 (a vote or a term must never be forgotten after it was acted on);
               - if rd.snapshot is set, every message waits until the install is durable
                 (the follower's APPEND_RESPONSE acknowledges it);
               - if rd.entries must be synced (the flush policy says so), every message except
                 a leader's APPEND and HEARTBEAT (`can_send_before_sync`) waits for that sync:
                 a follower's APPEND_RESPONSE claims its log holds the entries;
            3. apply: expose rd.high_watermark to consumers / acks=all waiters, note
               rd.soft_state (role, leader) for Metadata;
            4. core.advance(rd, durable=...): durable=False when step 2 still waits for a
               sync; later, once the sync is done, core.mark_durable(end, generation) with the
               log end and `log_generation` read right after advance().

A leader counts itself toward the high watermark only up to `durable_end`, so with a
sync-every-append policy an entry commits only once a majority has synced it (the leader's
own sync included, Raft thesis §10.2.1). "Durable" is whatever the driver's flush policy
promises: the page cache for Kafka's default, an fsync with flush.messages=1.

No input may be fed between `ready()` and `advance()` (RaftInvariantError otherwise): a driver that
persists asynchronously queues inputs meanwhile. Entries not yet written are kept inside the
core (`LogView.unstable`); the written log is only read, never written, by the core.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from raftka.consensus.errors import RaftInvariantError
from raftka.consensus.progress import Progress, ProgressState
from raftka.consensus.quorum import VoteResult, committed_end, majority_size, vote_result
from raftka.consensus.raft_log import LogView
from raftka.consensus.storage import RaftLog
from raftka.consensus.types import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    NodeId,
    Role,
    Snapshot,
    decode_config,
    encode_config,
)

#: Messages that carry their sender's log start (a follower follows the leader's, the
#: leader learns its replicas').
_LOG_START_CARRIERS = frozenset(
    {
        MessageType.APPEND,
        MessageType.HEARTBEAT,
        MessageType.APPEND_RESPONSE,
        MessageType.HEARTBEAT_RESPONSE,
    }
)


def can_send_before_sync(m: Message) -> bool:
    """Whether `m` may leave before the sync its Ready waits for (step 2 above).

    A leader's APPEND and HEARTBEAT claim nothing about its own durable log: it counts
    itself toward commit only up to `durable_end`. Everything else (responses, votes,
    TIMEOUT_NOW) waits.
    """
    return m.type is MessageType.APPEND or m.type is MessageType.HEARTBEAT


class NotLeaderError(Exception):
    """This node cannot accept the request now (Kafka NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self, leader_id: NodeId | None, reason: str = "not leader") -> None:
        super().__init__(f"{reason} (leader: {leader_id})")
        self.leader_id = leader_id


class StorageError(NotLeaderError):
    """This node could not write to its log (a full disk, an I/O error): nothing of the
    request was stored (Kafka KAFKA_STORAGE_ERROR)."""


class ConfigChangeError(Exception):
    """A membership change was refused: one change at a time, after the leader's no-op."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: NodeId
    # The Raft group id (the broker uses the partition's "<topic>-<partition>" name); it
    # travels in every Message so that many groups share one connection.
    group: str
    # Voter set used until the log holds a CONFIG batch (the partition's replica set).
    voters: frozenset[NodeId]
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 1
    max_append_bytes: int = 1 << 20
    max_inflight_appends: int = 16
    pre_vote: bool = True
    check_quorum: bool = True
    seed: int = 0
    # A new leader whose log is known committed to its end appends no no-op: it has nothing
    # to commit, and a Kafka partition then keeps offsets without gaps (a new topic starts at
    # offset 0). The broker sets this; the classic behaviour (always a no-op) is the default.
    skip_noop_when_committed: bool = False
    # When the leader's high watermark moves, followers with nothing new to receive are
    # told at once by an empty APPEND (classic Raft). False: they learn it with their next
    # APPEND or heartbeat (within a tick), as Kafka's followers learn it with their next
    # fetch: under a stream of one-record requests that saves up to two messages per follower
    # per request. The broker's partitions set it; the metadata log, whose followers apply what
    # is committed, keeps the default.
    commit_notice_at_once: bool = True


@dataclass(slots=True, init=False, unsafe_hash=True)
class SoftState:
    role: Final[Role]
    leader_id: Final[NodeId | None]
    term: Final[int]

    def __init__(self, role: Role, leader_id: NodeId | None, term: int) -> None:
        self.role = role
        self.leader_id = leader_id
        self.term = term


@dataclass(slots=True, init=False)
class Ready:
    """Work for the driver; fields are None / empty when there is nothing of that kind.
    The driver only reads it (not frozen: one is made for every write, and a frozen
    dataclass's constructor costs about three times a plain one's)."""

    hard_state: HardState | None
    truncate_to: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    high_watermark: int | None
    soft_state: SoftState | None
    snapshot: Snapshot | None = None
    # A follower's log may now start here (the leader's log start, bounded by this
    # replica's high watermark): raise it to that, never lower it.
    log_start_offset: int | None = None

    def __init__(
        self,
        hard_state: HardState | None,
        truncate_to: int | None,
        entries: tuple[Entry, ...],
        messages: tuple[Message, ...],
        high_watermark: int | None,
        soft_state: SoftState | None,
        snapshot: Snapshot | None = None,
        log_start_offset: int | None = None,
    ) -> None:
        self.hard_state = hard_state
        self.truncate_to = truncate_to
        self.entries = entries
        self.messages = messages
        self.high_watermark = high_watermark
        self.soft_state = soft_state
        self.snapshot = snapshot
        self.log_start_offset = log_start_offset


@dataclass(frozen=True, slots=True)
class Status:
    """What Metadata needs: leader, leader epoch (= term), in-sync replicas."""

    node_id: NodeId
    role: Role
    leader_id: NodeId | None
    term: int
    high_watermark: int
    log_end_offset: int
    voters: frozenset[NodeId]
    # Leader only: itself plus the followers that answered within the last election timeout
    # and hold all the leader's log held when it began. Empty on other roles (they do not
    # know).
    in_sync_replicas: tuple[NodeId, ...] = field(default=())
    # Non-voting replicas of the current configuration.
    learners: frozenset[NodeId] = field(default=frozenset())


class RaftCore:
    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        hard_state: HardState | None = None,
        high_watermark: int | None = None,
    ) -> None:
        """Start as a follower from durable state.

        `high_watermark` may be a checkpoint of a previously applied high watermark (Kafka's
        replication-offset-checkpoint); without it the node relearns it from the leader.
        """
        hard_state = hard_state or HardState()
        self.config = config
        self.id = config.node_id
        self.log = LogView(log)
        self.term = hard_state.term
        self.voted_for = hard_state.voted_for
        last_epoch = self.log.last_offset_and_epoch()[1]
        if last_epoch > self.term:
            # Entries may reach the log before the hard state that adopted their term is
            # committed (a crash in between). No vote in that term was acted on then: messages
            # depending on a vote wait for its commit.
            self.term, self.voted_for = last_epoch, None
        self.leader_id: NodeId | None = None
        self.role = Role.FOLLOWER
        self.high_watermark = self.log.log_start_offset()
        # What the driver confirmed durable (see the contract above); what a restart finds
        # on disk counts. Bumped generation = a truncation made older confirmations stale.
        self.durable_end = self.log.log_end_offset()
        self.log_generation = 0
        if high_watermark is not None:
            if not self.high_watermark <= high_watermark <= self.log.log_end_offset():
                raise RaftInvariantError(
                    f"group {config.group!r} node {config.node_id}: high watermark checkpoint"
                    f" {high_watermark} outside the log [{self.high_watermark},"
                    f" {self.log.log_end_offset()}]"
                )
            self.high_watermark = high_watermark
        self.progress: dict[NodeId, Progress] = {}
        self.votes: dict[NodeId, bool] = {}
        self.lead_transferee: NodeId | None = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.leader_ticks = 0
        # As leader: its log end at each of the last election timeout's ticks, oldest first
        # (the in-sync rule of `status`).
        self._recent_ends: deque[int] = deque(maxlen=config.election_timeout_ticks + 1)
        self.term_start_offset = 0  # offset of this leader's no-op
        self._rng = random.Random(f"{config.seed}:{config.group}:{config.node_id}")
        self.randomized_election_timeout = config.election_timeout_ticks
        # (offset, voters, learners) of every CONFIG entry the log holds, ascending.
        self._configs: list[tuple[int, frozenset[NodeId], frozenset[NodeId]]] = [
            (e.base_offset, *decode_config(e.payload)) for e in log.config_entries()
        ]
        start_config = log.log_start_config()
        if start_config is not None:
            # The CONFIG batch in force at the log start went with a snapshot, which kept it.
            self._configs.insert(0, (log.log_start_offset() - 1, *start_config))
        self.voters = self._configs[-1][1] if self._configs else config.voters
        self.learners: frozenset[NodeId] = self._configs[-1][2] if self._configs else frozenset()
        self._messages: list[Message] = []
        # Entries appended as leader that no APPEND carries yet (sent by ready()).
        self._append_unsent = False
        self._awaiting_advance = False
        self._step_role: Callable[[Message], None] = self._step_follower
        self._prev_hard_state = hard_state
        self._prev_soft_state = self._soft_state()
        self._prev_high_watermark = self.high_watermark
        # The leader's log start as its last APPEND or HEARTBEAT told it (-1: not told), and
        # the follower log start last handed to the driver in a Ready.
        self.leader_log_start = -1
        self._follow_log_start = -1
        self._prev_follow_log_start = -1
        self._reset_election_timeout()

    # ---------------------------------------------------------------- read-only views
    def status(self) -> Status:
        isr: tuple[NodeId, ...] = ()
        if self.role is Role.LEADER:
            # Kafka's replica.lag.time.max.ms rule over an election timeout: in sync are the
            # followers that answered within it and hold all the leader held when it began
            # (a follower trailing a steady stream keeps pace though it never has the end).
            recent = self.leader_ticks - self.config.election_timeout_ticks
            held_then = self._recent_ends[0]
            isr = tuple(
                sorted(
                    [self.id]
                    + [
                        node
                        for node, pr in self.progress.items()
                        if pr.match_end >= held_then
                        and pr.last_response_tick is not None
                        and pr.last_response_tick >= recent
                    ]
                )
            )
        return Status(
            node_id=self.id,
            role=self.role,
            leader_id=self.leader_id,
            term=self.term,
            high_watermark=self.high_watermark,
            log_end_offset=self.log.log_end_offset(),
            voters=self.voters,
            in_sync_replicas=isr,
            learners=self.learners,
        )

    @property
    def promotable(self) -> bool:
        return self.id in self.voters

    # ---------------------------------------------------------------- Ready handshake
    def has_ready(self) -> bool:
        if (
            self._messages
            or self._append_unsent
            or self.log.unstable
            or self.log.pending_truncate is not None
            or self.log.pending_snapshot is not None
            or self.high_watermark != self._prev_high_watermark
            or self._follow_log_start != self._prev_follow_log_start
        ):
            return True
        hs, ss = self._prev_hard_state, self._prev_soft_state
        return (
            hs.term != self.term
            or hs.voted_for != self.voted_for
            or ss.role is not self.role
            or ss.leader_id != self.leader_id
        )

    def take_commit(self) -> int | None:
        """The high watermark, when a commit is all that changed since the last Ready (a
        single voter's entries just counted durable by `advance`): taken as a Ready holding
        only it would be, with nothing to write, send or advance. None when the high
        watermark did not move or anything else changed too (then take a whole Ready)."""
        taken = self._prev_high_watermark
        if self.high_watermark == taken or self._awaiting_advance:
            return None
        self._prev_high_watermark = self.high_watermark
        if self.has_ready():  # more than the commit: it goes with the rest
            self._prev_high_watermark = taken
            return None
        return self.high_watermark

    def ready(self) -> Ready:
        if self._awaiting_advance:
            raise RaftInvariantError(f"{self._name()}: ready() before the last Ready's advance()")
        if self._append_unsent:
            self._append_unsent = False
            if self.role is Role.LEADER:
                self._broadcast_append(send_if_empty=False)
        # Unchanged states are the common case (every append): the previous objects serve.
        hard_state = self._prev_hard_state
        if hard_state.term != self.term or hard_state.voted_for != self.voted_for:
            hard_state = self._hard_state()
        soft_state = self._prev_soft_state
        if (
            soft_state.role is not self.role
            or soft_state.leader_id != self.leader_id
            or soft_state.term != self.term
        ):
            soft_state = self._soft_state()
        rd = Ready(
            hard_state=hard_state if hard_state is not self._prev_hard_state else None,
            truncate_to=self.log.pending_truncate,
            entries=tuple(self.log.unstable),
            messages=tuple(self._messages),
            high_watermark=(
                self.high_watermark if self.high_watermark != self._prev_high_watermark else None
            ),
            soft_state=soft_state if soft_state is not self._prev_soft_state else None,
            snapshot=self.log.pending_snapshot,
            log_start_offset=(
                self._follow_log_start
                if self._follow_log_start != self._prev_follow_log_start
                else None
            ),
        )
        self._prev_follow_log_start = self._follow_log_start
        self._messages = []
        self._prev_hard_state = hard_state
        self._prev_soft_state = soft_state
        self._prev_high_watermark = self.high_watermark
        self._awaiting_advance = True
        return rd

    def advance(self, rd: Ready, durable: bool = True) -> None:
        """The driver wrote, sent and applied `rd`. `durable`: its entries (and every entry
        written before them) are as durable as the flush policy requires; pass False while a
        sync is still pending and call `mark_durable` when it is done."""
        if not self._awaiting_advance:
            raise RaftInvariantError(f"{self._name()}: advance() without a ready() before it")
        self._awaiting_advance = False
        if rd.entries or rd.truncate_to is not None or rd.snapshot is not None:
            self.log.persisted()
        if durable:
            self._set_durable_end(self.log.log_end_offset())

    def mark_durable(self, end_offset: int, generation: int) -> None:
        """Entries below `end_offset` are durable, as of `log_generation` == `generation`
        (read after the advance() that wrote them); stale confirmations are ignored."""
        self._check_input()
        if generation == self.log_generation:
            self._set_durable_end(min(end_offset, self.log.unstable_offset))

    def _set_durable_end(self, end_offset: int) -> None:
        if end_offset <= self.durable_end:
            return
        self.durable_end = end_offset
        if self.role is Role.LEADER and self._maybe_commit():
            self._broadcast_append()

    # ---------------------------------------------------------------- inputs
    def tick(self) -> None:
        self._check_input()
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now (as an election timeout would)."""
        self._check_input()
        self._hup()

    def defer_election(self, ticks: int) -> None:
        """Make the running election timeout `ticks` longer (until the next term, whose
        timeout is drawn as usual), to leave an election to a node that campaigns at once."""
        self._check_input()
        self.randomized_election_timeout += ticks

    def propose(self, record_count: int, payload: bytes, kind: EntryKind = EntryKind.DATA) -> Entry:
        """Append a client batch; returns it with its assigned offsets and epoch.

        `record_count` is the number of offsets the batch covers. `kind` NOOP appends a no-op
        (a restored batch identical to one); a CONFIG entry goes through
        `propose_config_change` only.
        """
        self._check_input()
        if record_count < 1:
            raise ValueError(f"a batch holds at least one record, not {record_count}")
        if kind is EntryKind.CONFIG:
            raise ValueError("voter-set changes go through propose_config_change")
        self._require_leader()
        return self._append_as_leader(record_count, payload, kind)

    def propose_config_change(
        self,
        add: NodeId | None = None,
        remove: NodeId | None = None,
        add_learner: NodeId | None = None,
        promote: NodeId | None = None,
        demote: NodeId | None = None,
    ) -> Entry:
        """One single-server membership change, which takes effect on append: `add` a voter,
        `remove` a voter or a learner, `add_learner` (a replica that receives the log but
        never campaigns and counts toward neither elections nor commit), `promote` a
        learner to voter or `demote` a voter other than this leader to learner (one entry:
        it leaves the voters and keeps receiving the log, with no moment between the two).
        The next change is accepted only once this one committed."""
        self._check_input()
        self._require_leader()
        requested = [
            (kind, node)
            for kind, node in (
                ("add", add),
                ("remove", remove),
                ("add_learner", add_learner),
                ("promote", promote),
                ("demote", demote),
            )
            if node is not None
        ]
        if len(requested) != 1:
            raise ConfigChangeError("exactly one of add / remove / add_learner / promote / demote")
        kind, node = requested[0]
        if self.high_watermark <= self.term_start_offset:
            # Safety (single-server changes): an entry of this term must commit first, or an
            # uncommitted change from an earlier term could still win with another majority.
            if self.log.log_end_offset() == self.term_start_offset:
                # No no-op was appended at election (skip_noop_when_committed): add one now
                # so an idle partition can still change membership once it commits.
                self._append_as_leader(1, b"", EntryKind.NOOP)
            raise ConfigChangeError("leader has not committed an entry of its term yet; retry")
        if self.pending_config_change():
            raise ConfigChangeError("previous membership change not committed yet")
        voters, learners = self.voters, self.learners
        if kind in ("add", "add_learner"):
            if node in voters or node in learners:
                raise ConfigChangeError(f"{node} is already a member")
            if kind == "add":
                voters = voters | {node}
            else:
                learners = learners | {node}
        elif kind == "promote":
            if node not in learners:
                raise ConfigChangeError(f"{node} is not a learner")
            voters, learners = voters | {node}, learners - {node}
        elif kind == "demote":
            if node not in voters:
                raise ConfigChangeError(f"{node} is not a voter")
            if node == self.id:
                raise ConfigChangeError("the leader cannot demote itself; transfer leadership")
            voters, learners = voters - {node}, learners | {node}
        elif node in learners:
            learners = learners - {node}
        else:
            if node not in voters:
                raise ConfigChangeError(f"{node} is not a member")
            if len(voters) == 1:
                raise ConfigChangeError("cannot remove the last voter")
            voters = voters - {node}
        return self._append_as_leader(1, encode_config(voters, learners), EntryKind.CONFIG)

    def pending_config_change(self) -> bool:
        """Whether the last CONFIG entry is not yet committed (no new change is accepted)."""
        return bool(self._configs) and self._configs[-1][0] >= self.high_watermark

    def transfer_leadership(self, to: NodeId) -> None:
        """Hand leadership to `to` (clean shutdown): catch it up, then send TimeoutNow.

        Proposals are refused meanwhile; the transfer is abandoned after an election timeout.
        """
        self._check_input()
        self._require_leader()
        if to == self.id or self.lead_transferee == to:
            return
        if to not in self.progress or to not in self.voters:
            raise ValueError(f"{to} is not a voter")
        self.lead_transferee = to
        self.election_elapsed = 0
        if self.progress[to].match_end == self.log.log_end_offset():
            self._send(MessageType.TIMEOUT_NOW, to)
        else:
            self._send_append(to)

    def step(self, m: Message) -> None:
        self._check_input()
        if m.to != self.id or m.group != self.config.group:
            raise RaftInvariantError(
                f"{self._name()}: stepped a {m.type.name} for node {m.to} of group {m.group!r}"
            )
        if m.term > self.term:
            if m.type in (MessageType.PRE_VOTE, MessageType.VOTE):
                in_lease = (
                    self.config.check_quorum
                    and self.leader_id is not None
                    and self.election_elapsed < self.config.election_timeout_ticks
                )
                if in_lease and not m.force:
                    return  # a healthy leader exists: do not let a rejoining node disrupt it
            if m.type is MessageType.PRE_VOTE or (
                m.type is MessageType.PRE_VOTE_RESPONSE and not m.reject
            ):
                pass  # pre-vote terms are hypothetical: never adopt them
            elif m.type in (MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT):
                self._become_follower(m.term, m.from_id)
            else:
                self._become_follower(m.term, None)
        elif m.term < self.term:
            if m.type in (MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT) and (
                self.config.check_quorum or self.config.pre_vote
            ):
                # A stale leader must learn our term, or it would never step down when its
                # messages (ours ignored) are all it sees.
                self._send(MessageType.APPEND_RESPONSE, m.from_id)
            elif m.type is MessageType.PRE_VOTE:
                self._send(MessageType.PRE_VOTE_RESPONSE, m.from_id, reject=True)
            return
        if m.type in (MessageType.PRE_VOTE, MessageType.VOTE):
            self._handle_vote_request(m)
            return
        self._step_role(m)

    # ---------------------------------------------------------------- role changes
    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.voted_for = None
        self.leader_id = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._reset_election_timeout()
        self.lead_transferee = None
        self.votes = {}
        self.progress = {}

    def _become_follower(self, term: int, leader_id: NodeId | None) -> None:
        self._reset(term)
        self.leader_id = leader_id
        self.role = Role.FOLLOWER
        self._step_role = self._step_follower

    def _become_pre_candidate(self) -> None:
        # Term and vote stay: a pre-vote changes nothing durable.
        self.votes = {}
        self.leader_id = None
        self.role = Role.PRE_CANDIDATE
        self._step_role = self._step_candidate

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.voted_for = self.id
        self.role = Role.CANDIDATE
        self._step_role = self._step_candidate

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.leader_id = self.id
        self.role = Role.LEADER
        self._step_role = self._step_leader
        self.leader_ticks = 0
        self._recent_ends.clear()
        self._recent_ends.append(self.log.log_end_offset())
        self._sync_progress()
        self.term_start_offset = self.log.log_end_offset()
        # Control batch of the new epoch: committing it commits every earlier entry.
        if not self.config.skip_noop_when_committed or (
            self.high_watermark < self.log.log_end_offset()
        ):
            self._append_as_leader(1, b"", EntryKind.NOOP)
        else:
            # Announce the new leader at once (an empty append probes each follower's log).
            self._broadcast_append(send_if_empty=True)

    def _sync_progress(self) -> None:
        """Track exactly the voters and learners other than this node."""
        members = self.voters | self.learners
        for node in list(self.progress):
            if node not in members:
                del self.progress[node]
        for node in sorted(members):
            if node != self.id and node not in self.progress:
                self.progress[node] = Progress(
                    next_offset=self.log.log_end_offset(),
                    max_inflight=self.config.max_inflight_appends,
                    # Nothing known: a follower may lack even what lies below our log start.
                    match_end=0,
                )
        if self.lead_transferee is not None and self.lead_transferee not in self.voters - {self.id}:
            self.lead_transferee = None

    def leader_heard_recently(self) -> bool:
        """Whether this node leads, or heard from its leader within the last election timeout.
        A voter cut off from its leader campaigns and forgets it after about that long; a
        learner never campaigns, so it keeps a dead leader's id until a new leader writes."""
        if self.role is Role.LEADER:
            return True
        return self.leader_id is not None and (
            self.election_elapsed < self.config.election_timeout_ticks
        )

    # ---------------------------------------------------------------- ticks and elections
    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self._hup()

    def _tick_leader(self) -> None:
        self.leader_ticks += 1
        self._recent_ends.append(self.log.log_end_offset())
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_timeout_ticks:
            self.election_elapsed = 0
            if self.config.check_quorum:
                if not self._quorum_active():
                    self._become_follower(self.term, None)
                    return
                for pr in self.progress.values():
                    pr.recent_active = False
            self.lead_transferee = None  # a transfer that took this long has failed
        if self.heartbeat_elapsed >= self.config.heartbeat_interval_ticks:
            self.heartbeat_elapsed = 0
            retry = self.leader_ticks - self.config.election_timeout_ticks
            for node, pr in self.progress.items():
                if pr.state is ProgressState.SNAPSHOT and pr.snapshot_sent_tick <= retry:
                    pr.become_probe()  # the snapshot or its answer was lost: send it again
                    self._send_append(node)
                hw = min(pr.match_end, self.high_watermark)
                self._send(MessageType.HEARTBEAT, node, high_watermark=hw)

    def _quorum_active(self) -> bool:
        active = {node: pr.recent_active for node, pr in self.progress.items()}
        active[self.id] = True
        return sum(1 for v in self.voters if active.get(v)) >= majority_size(len(self.voters))

    def _reset_election_timeout(self) -> None:
        timeout = self.config.election_timeout_ticks
        self.randomized_election_timeout = timeout + self._rng.randrange(timeout)

    def _hup(self, transfer: bool = False) -> None:
        if self.role is Role.LEADER or not self.promotable:
            return
        self._campaign(pre_vote=self.config.pre_vote and not transfer, transfer=transfer)

    def _campaign(self, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term, request = self.term + 1, MessageType.PRE_VOTE
        else:
            self._become_candidate()
            vote_term, request = self.term, MessageType.VOTE
        self.votes[self.id] = True
        if self._tally() is not VoteResult.PENDING:
            return
        last_offset, last_epoch = self.log.last_offset_and_epoch()
        for node in sorted(self.voters):
            if node != self.id:
                self._messages.append(
                    Message(
                        group=self.config.group,
                        type=request,
                        from_id=self.id,
                        to=node,
                        term=vote_term,
                        last_offset=last_offset,
                        last_epoch=last_epoch,
                        force=transfer,
                    )
                )

    def _tally(self) -> VoteResult:
        result = vote_result(self.voters, self.votes)
        if result is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False, transfer=False)
            else:
                self._become_leader()
        elif result is VoteResult.LOST:
            self._become_follower(self.term, None)
        return result

    def _handle_vote_request(self, m: Message) -> None:
        response = (
            MessageType.PRE_VOTE_RESPONSE
            if m.type is MessageType.PRE_VOTE
            else MessageType.VOTE_RESPONSE
        )
        can_vote = (
            self.voted_for == m.from_id
            or (self.voted_for is None and self.leader_id is None)
            or (m.type is MessageType.PRE_VOTE and m.term > self.term)
        )
        last_offset, last_epoch = self.log.last_offset_and_epoch()
        up_to_date = (m.last_epoch, m.last_offset) >= (last_epoch, last_offset)
        if can_vote and up_to_date:
            self._send(response, m.from_id, term=m.term)
            if m.type is MessageType.VOTE:
                self.election_elapsed = 0
                self.voted_for = m.from_id
        else:
            self._send(response, m.from_id, reject=True)

    # ---------------------------------------------------------------- per-role steps
    def _step_follower(self, m: Message) -> None:
        if m.type is MessageType.APPEND:
            self.election_elapsed = 0
            self.leader_id = m.from_id
            self._handle_append(m)
        elif m.type is MessageType.HEARTBEAT:
            self.election_elapsed = 0
            self.leader_id = m.from_id
            self._handle_heartbeat(m)
        elif m.type is MessageType.SNAPSHOT:
            self.election_elapsed = 0
            self.leader_id = m.from_id
            self._handle_snapshot(m)
        elif m.type is MessageType.TIMEOUT_NOW:
            self._hup(transfer=True)

    def _step_candidate(self, m: Message) -> None:
        expected = (
            MessageType.PRE_VOTE_RESPONSE
            if self.role is Role.PRE_CANDIDATE
            else MessageType.VOTE_RESPONSE
        )
        if m.type is MessageType.APPEND:
            self._become_follower(m.term, m.from_id)
            self._handle_append(m)
        elif m.type is MessageType.HEARTBEAT:
            self._become_follower(m.term, m.from_id)
            self._handle_heartbeat(m)
        elif m.type is MessageType.SNAPSHOT:
            self._become_follower(m.term, m.from_id)
            self._handle_snapshot(m)
        elif m.type is expected:
            self.votes.setdefault(m.from_id, not m.reject)
            self._tally()

    def _step_leader(self, m: Message) -> None:
        pr = self.progress.get(m.from_id)
        if pr is None:
            return
        if m.type is MessageType.APPEND_RESPONSE:
            pr.recent_active = True
            previous_tick = pr.last_response_tick
            pr.last_response_tick = self.leader_ticks
            if m.reject:
                probe = self.log.find_conflict_by_epoch(m.hint_offset, m.hint_epoch)
                if pr.maybe_decrease(m.prev_offset, probe):
                    if pr.state is ProgressState.REPLICATE:
                        pr.become_probe()
                    start = self.log.log_start_offset()
                    if m.prev_offset < start or m.hint_offset < start - 1:
                        # The follower's log diverges or ends below our log start: only a
                        # snapshot can bring it back.
                        self._send_snapshot(m.from_id)
                    else:
                        self._send_append(m.from_id)
                return
            was_paused = pr.paused
            if pr.state is ProgressState.SNAPSHOT:
                pr.maybe_update(m.match_end)
                if pr.match_end < pr.pending_snapshot:
                    return  # answers an append sent before the snapshot
                pr.become_replicate()
            else:
                # A successful probe that confirms the known match (an empty log, or a new
                # leader's empty append) also ends probing, as in etcd's MsgAppResp handling.
                confirms_probe = pr.state is ProgressState.PROBE and m.match_end == pr.match_end
                if not pr.maybe_update(m.match_end) and not confirms_probe:
                    return
                if pr.state is ProgressState.PROBE:
                    pr.become_replicate()
                else:
                    pr.inflights.free_to(m.match_end)
            pr.answered(self.leader_ticks, previous_tick, self.log.log_end_offset())
            if self._maybe_commit():
                self._broadcast_append(send_if_empty=self.config.commit_notice_at_once)
            elif was_paused:
                self._send_append(m.from_id)
            if self.role is not Role.LEADER:
                return  # stepped down after committing its own removal
            while self._send_append(m.from_id, send_if_empty=False):
                pass
            if m.from_id == self.lead_transferee and pr.match_end == self.log.log_end_offset():
                self._send(MessageType.TIMEOUT_NOW, m.from_id)
        elif m.type is MessageType.HEARTBEAT_RESPONSE:
            pr.recent_active = True
            pr.answered(self.leader_ticks, pr.last_response_tick, self.log.log_end_offset())
            pr.last_response_tick = self.leader_ticks
            pr.probe_sent = False
            if pr.state is ProgressState.REPLICATE and pr.inflights.full:
                pr.inflights.free_first()
            if pr.match_end < self.log.log_end_offset():
                self._send_append(m.from_id)

    # ---------------------------------------------------------------- replication
    def _append_as_leader(self, record_count: int, payload: bytes, kind: EntryKind) -> Entry:
        base = self.log.log_end_offset()
        entry = Entry(base, base + record_count - 1, self.term, payload, kind)
        self._append_entries([entry])
        # Sent by the next ready(): the entries proposed until then leave in one APPEND
        # per follower (requests read together, written together, sent together).
        self._append_unsent = True
        self._maybe_commit()
        return entry

    def _append_entries(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        self.log.append(entries)
        changed = False
        for entry in entries:
            if entry.kind is EntryKind.CONFIG:
                self._configs.append((entry.base_offset, *decode_config(entry.payload)))
                changed = True
        if changed:
            self._apply_config()

    def _truncate_to(self, offset: int) -> None:
        if offset < self.high_watermark:
            raise RaftInvariantError(
                f"{self._name()}: truncation to {offset} would drop committed entries below"
                f" the high watermark {self.high_watermark}"
            )
        self.log.truncate_to(offset)
        self.durable_end = min(self.durable_end, offset)
        self.log_generation += 1
        if self._configs and self._configs[-1][0] >= offset:
            self._configs = [c for c in self._configs if c[0] < offset]
            self._apply_config()

    def _apply_config(self) -> None:
        self.voters = self._configs[-1][1] if self._configs else self.config.voters
        self.learners = self._configs[-1][2] if self._configs else frozenset()
        if self.role is Role.LEADER:
            self._sync_progress()
            for node, pr in self.progress.items():
                if pr.state is ProgressState.PROBE and not pr.probe_sent:
                    self._send_append(node)

    def _send_append(self, to: NodeId, send_if_empty: bool = True) -> bool:
        pr = self.progress[to]
        if pr.paused:
            return False
        if pr.next_offset < self.log.log_start_offset():
            return self._send_snapshot(to)
        end = self.log.log_end_offset()
        entries = (
            self.log.entries_from(pr.next_offset, self.config.max_append_bytes)
            if pr.next_offset < end
            else []
        )
        if not entries and not send_if_empty:
            return False
        prev = pr.next_offset - 1
        sent_end = entries[-1].end_offset if entries else pr.next_offset
        self._send(
            MessageType.APPEND,
            to,
            prev_offset=prev,
            prev_epoch=self.log.epoch_at(prev),
            entries=tuple(entries),
            high_watermark=self.high_watermark,
            at_leader_end=sent_end == end,
        )
        pr.sent_append(sent_end)
        return True

    def _send_snapshot(self, to: NodeId) -> bool:
        """InstallSnapshot: everything below our log start (committed) as one snapshot; the
        sending driver fills in the state-machine data. Nothing else goes to `to` until it is
        acknowledged or an election timeout passes (then it is sent again)."""
        start = self.log.log_start_offset()
        voters, learners = self._config_before(start)
        self._send(
            MessageType.SNAPSHOT,
            to,
            prev_offset=start - 1,
            prev_epoch=self.log.log_start_epoch(),
            high_watermark=self.high_watermark,
            snapshot_voters=voters,
            snapshot_learners=learners,
        )
        self.progress[to].become_snapshot(start, self.leader_ticks)
        return True

    def _config_before(self, offset: int) -> tuple[frozenset[NodeId], frozenset[NodeId]]:
        """(voters, learners) in force for the entries below `offset`."""
        for config_offset, voters, learners in reversed(self._configs):
            if config_offset < offset:
                return voters, learners
        return self.config.voters, frozenset()

    def _broadcast_append(self, send_if_empty: bool = True) -> None:
        progress = self.progress
        if not progress:
            return  # a single voter: called for every proposal, and a list of none is a call
        for node in list(progress):
            self._send_append(node, send_if_empty)

    def _maybe_commit(self) -> bool:
        own = min(self.durable_end, self.log.log_end_offset())
        hw = self.high_watermark
        if own <= hw:
            # A loop, not all() over a generator: called for every proposal.
            for pr in self.progress.values():
                if pr.match_end > hw:
                    break
            else:
                return False  # nobody holds more than is committed (every append as leader)
        if len(self.voters) == 1 and self.id in self.voters:
            end = own  # the only voter is a majority
        else:
            match_ends = {node: pr.match_end for node, pr in self.progress.items()}
            match_ends[self.id] = own
            end = committed_end(self.voters, match_ends)
        # Raft §5.4.2: only an entry of the leader's own term is committed by counting. From
        # its no-op on, the log holds the leader's own entries (it only grows while this
        # node leads): the log's epoch is asked only of an end before them.
        if end <= self.high_watermark or (
            end <= self.term_start_offset and self.log.epoch_at(end - 1) != self.term
        ):
            return False
        self.high_watermark = end
        if (
            self.id not in self.voters
            and self._configs
            and self._configs[-1][0] < self.high_watermark
        ):
            self._become_follower(self.term, None)  # its own removal is committed
        return True

    def _handle_append(self, m: Message) -> None:
        self._follow_leader_log_start(m)
        if m.prev_offset < self.high_watermark - 1:
            # Already committed here; tell the leader how far we certainly match.
            self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=self.high_watermark)
            return
        # A batch ending at high_watermark - 1 is committed, and the high watermark is a batch
        # end in every log that holds it, so it matches the leader's whatever epoch the leader
        # names: a leader whose log start passed that batch (DeleteRecords, retention up to its
        # log end) no longer knows its epoch and sends 0.
        consistent = m.prev_offset == self.high_watermark - 1 or self.log.is_batch_end(
            m.prev_offset, m.prev_epoch
        )
        if not consistent:
            hint = self.log.find_conflict_by_epoch(m.prev_offset, m.prev_epoch)
            self._send(
                MessageType.APPEND_RESPONSE,
                m.from_id,
                reject=True,
                prev_offset=m.prev_offset,
                hint_offset=hint,
                hint_epoch=self.log.epoch_at(hint),
            )
            return
        for i, entry in enumerate(m.entries):
            if entry.base_offset < self.log.log_end_offset():
                existing = self.log.entry_at(entry.base_offset)
                if existing.epoch == entry.epoch:
                    if existing.last_offset != entry.last_offset:
                        raise RaftInvariantError(
                            f"{self._name()}: log matching broken: the batch at"
                            f" {entry.base_offset} of epoch {entry.epoch} ends at"
                            f" {existing.last_offset} here but at {entry.last_offset} in an"
                            f" append from node {m.from_id}"
                        )
                    continue
                self._truncate_to(entry.base_offset)
            self._append_entries(m.entries[i:])
            break
        last_new_end = m.entries[-1].end_offset if m.entries else m.prev_offset + 1
        if (
            m.at_leader_end
            and last_new_end < self.log.log_end_offset()
            and last_new_end >= self.high_watermark
            and self.log.epoch_at(last_new_end) < m.term
        ):
            # A suffix of an older epoch that the leader's log never held (a deposed leader's
            # unreplicated tail): it can never commit, so drop it now rather than wait for a
            # write that conflicts with it -- replicas converge with no further writes.
            # Entries of the leader's own term beyond it came from later appends: kept.
            self._truncate_to(last_new_end)
        new_hw = min(m.high_watermark, last_new_end)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
        self._follow_leader_log_start(m)
        self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=last_new_end)

    def _handle_snapshot(self, m: Message) -> None:
        end = m.prev_offset + 1
        if end <= self.high_watermark:
            # Stale or duplicate: we hold (committed) at least as much already.
            self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=self.high_watermark)
            return
        if self.log.is_batch_end(m.prev_offset, m.prev_epoch):
            # Our log holds the snapshot's last batch (Raft §7): keep it and what follows;
            # the leader probes the suffix from the snapshot's end.
            self.high_watermark = end
            self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=end)
            return
        self.log.install_snapshot(
            Snapshot(end, m.prev_epoch, m.snapshot_voters, m.snapshot_data, m.snapshot_learners)
        )
        self.durable_end = min(self.durable_end, end)
        self.log_generation += 1
        self.high_watermark = end
        self._configs = (
            [(end - 1, m.snapshot_voters, m.snapshot_learners)] if m.snapshot_voters else []
        )
        self._apply_config()
        # Waits in the driver until the install is durable (the Ready's snapshot).
        self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=end)

    def _handle_heartbeat(self, m: Message) -> None:
        # The leader capped the value at what it knows we hold, so it is safe to take.
        new_hw = min(m.high_watermark, self.log.log_end_offset())
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
        self._follow_leader_log_start(m)
        self._send(MessageType.HEARTBEAT_RESPONSE, m.from_id)

    def _follow_leader_log_start(self, m: Message) -> None:
        """Kafka's follower raises its log start to the leader's (maybeIncrementLogStartOffset):
        records a user deleted must not come back when this replica leads. Only committed
        offsets go (below the high watermark, which the leader's log holds too), and the
        start only ever rises."""
        if m.log_start_offset < 0:
            return
        self.leader_log_start = m.log_start_offset
        target = min(m.log_start_offset, self.high_watermark)
        if target > self._follow_log_start:
            self._follow_log_start = target

    # ---------------------------------------------------------------- helpers
    def _send(
        self,
        type: MessageType,
        to: NodeId,
        term: int | None = None,
        **fields: object,
    ) -> None:
        if type in _LOG_START_CARRIERS:
            fields["log_start_offset"] = self.log.record_log_start()
        self._messages.append(
            Message(
                group=self.config.group,
                type=type,
                from_id=self.id,
                to=to,
                term=self.term if term is None else term,
                **fields,  # type: ignore[arg-type]
            )
        )

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        if self.lead_transferee is not None:
            raise NotLeaderError(self.leader_id, "leadership transfer in progress")

    def _check_input(self) -> None:
        if self._awaiting_advance:
            raise RaftInvariantError(f"{self._name()}: input between ready() and advance()")

    def _name(self) -> str:
        return f"group {self.config.group!r} node {self.id}"

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.voted_for)

    def _soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)
