"""Deterministic simulation of Raft groups: one seed reproduces a whole run.

A run has a safety phase (message loss, delay, duplication, reordering, crashes with restart
from persisted state, SIGSTOP-like pauses, partitions, client proposals and membership
changes) followed by a liveness phase (faults stop; a leader must be elected and a new
proposal committed on every voter within a bounded number of ticks). Invariants are checked
as every Ready is processed:

- election safety: at most one leader per term;
- vote safety: a node's term never goes back and its vote never changes within a term;
- log matching: two logs with a batch of the same (base offset, epoch) agree on it and on
  everything before it (checked with a hash chain over each durable log);
- leader completeness: a new leader's log holds every entry committed in an earlier term;
- state machine safety: every committed (offset -> epoch, payload) is recorded once and every
  node's committed prefix must match the record; no committed batch is ever truncated;
- high watermark: monotonic per node (a restart starts over) and never past the durable log;
  a leader only moves it to the end of a batch of its own epoch (Raft §5.4.2);
- snapshots: nodes delete committed log prefixes (retention) at random; a follower that
  needs offsets below its leader's log start installs a snapshot whose data is the hash
  chain at its end, checked against the batches committed there;
- convergence: once faults stop, the voters' logs become identical and fully committed with
  no client writes (a deposed leader's unreplicated tail must not outlive it).

Storage is modelled as the broker's is. With Kafka's default flush policy a write is durable
once written (the page cache survives a process crash, which is what a crash is then). With
`sync_every_append` (flush.messages=1) a write becomes durable only when its fsync completes
a few ticks later; the messages that depend on it are held until then (the core's contract),
and a crash is a machine crash that loses everything unsynced -- of one node or of every node
at once. No committed entry may be lost either way.

Run one seed: `python -m raftka.consensus.sim --seed N`; many: `--seeds 1000 --seed-start 0`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from raftka.consensus.core import (
    ConfigChangeError,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Ready,
    can_send_before_sync,
)
from raftka.consensus.errors import RaftInvariantError
from raftka.consensus.storage import MemoryRaftLog
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
)

GROUP = "sim-0"


class SimulationFailure(AssertionError):
    pass


@dataclass(frozen=True, slots=True)
class SimParams:
    """Fault rates are per tick (events) or per message (network)."""

    nodes: int = 3
    spare_nodes: int = 0  # started outside the voter set, for membership changes
    safety_ticks: int = 120
    liveness_ticks_max: int = 250
    election_timeout_ticks: int = 10
    drop_rate: float = 0.05
    duplicate_rate: float = 0.03
    delay_rate: float = 0.3
    max_delay_ticks: int = 4
    crash_rate: float = 0.01
    leader_crash_rate: float = 0.02  # leaders are where interesting histories start
    restart_rate: float = 0.1
    pause_rate: float = 0.01
    partition_rate: float = 0.015
    heal_rate: float = 0.08
    isolate_leader_rate: float = 0.02  # partition one current leader away from everyone
    skip_tick_rate: float = 0.05
    proposal_rate: float = 0.3
    config_change_rate: float = 0.0
    transfer_rate: float = 0.01  # a leader hands over (clean shutdown)
    max_append_bytes: int = 400
    max_inflight_appends: int = 4
    # flush.messages=1: fsync before acknowledging; crashes then lose what was not synced.
    sync_every_append: bool = False
    max_sync_delay_ticks: int = 2
    crash_all_rate: float = 0.0  # every node loses power at once (sync_every_append only)
    convergence_ticks_max: int = 200
    # Per tick: a running node deletes a committed prefix of its log (retention), so
    # followers that lag or diverge below it catch up by snapshot.
    truncate_rate: float = 0.0

    @staticmethod
    def for_seed(seed: int) -> SimParams:
        """Vary the shape of the run with the seed: 3 or 5 voters, membership on some."""
        rng = random.Random(f"params:{seed}")
        nodes = rng.choice((3, 3, 5))
        membership = rng.random() < 0.3
        sync = rng.random() < 0.4
        crash_all_rate = rng.choice((0.0, 0.005, 0.02)) if sync else 0.0
        max_sync_delay_ticks = rng.choice((0, 1, 3))
        truncate_rate = random.Random(f"truncate:{seed}").choice((0.0, 0.05, 0.2))
        return replace(
            SimParams._shape_for(rng, nodes, membership),
            sync_every_append=sync,
            crash_all_rate=crash_all_rate,
            max_sync_delay_ticks=max_sync_delay_ticks,
            truncate_rate=truncate_rate,
        )

    @staticmethod
    def _shape_for(rng: random.Random, nodes: int, membership: bool) -> SimParams:
        if rng.random() < 0.3:
            # Leader churn: one batch per append and frequent leader loss leave old-epoch
            # batches half replicated across many terms (the paper's Figure 8 histories).
            return SimParams(
                nodes=5,
                safety_ticks=300,
                drop_rate=0.1,
                max_append_bytes=1,
                max_inflight_appends=1,
                leader_crash_rate=0.05,
                isolate_leader_rate=0.05,
            )
        return SimParams(
            nodes=nodes,
            spare_nodes=1 if membership else 0,
            config_change_rate=0.05 if membership else 0.0,
            drop_rate=rng.choice((0.0, 0.05, 0.2)),
            duplicate_rate=rng.choice((0.0, 0.03, 0.1)),
            crash_rate=rng.choice((0.0, 0.01, 0.03)),
            leader_crash_rate=rng.choice((0.0, 0.02, 0.08)),
            isolate_leader_rate=rng.choice((0.0, 0.02, 0.06)),
            partition_rate=rng.choice((0.0, 0.015, 0.04)),
            max_append_bytes=rng.choice((1, 400, 4096)),
            max_inflight_appends=rng.choice((1, 4, 64)),
            safety_ticks=rng.choice((150, 300)),
        )


@dataclass
class PendingSync:
    """An fsync in flight: what it makes durable and the messages that wait for it."""

    done_at: int
    log: MemoryRaftLog
    chain: list[int]
    chain_base: int
    hard_state: HardState
    end_offset: int
    generation: int
    held: list[Message]


@dataclass
class SimNode:
    node_id: NodeId
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)  # as written (page cache)
    hard_state: HardState = field(default_factory=HardState)
    durable_log: MemoryRaftLog = field(default_factory=MemoryRaftLog)  # as last synced
    durable_chain: list[int] = field(default_factory=list)
    durable_chain_base: int = 0
    durable_hard_state: HardState = field(default_factory=HardState)
    syncs: deque[PendingSync] = field(default_factory=deque)
    chain: list[int] = field(default_factory=list)  # hash chain parallel to log entries
    chain_base: int = 0  # the chain's value just below the log start
    core: RaftCore | None = None
    high_watermark: int = 0
    paused_until: int = -1


@dataclass(order=True)
class InFlight:
    deliver_at: int
    seq: int
    message: Message = field(compare=False)


class Simulation:
    def __init__(self, seed: int, params: SimParams | None = None) -> None:
        self.seed = seed
        self.params = params or SimParams.for_seed(seed)
        self.rng = random.Random(seed)
        self.now = 0
        self.seq = 0
        p = self.params
        self.initial_voters = frozenset(range(1, p.nodes + 1))
        self.nodes = {n: SimNode(n) for n in range(1, p.nodes + p.spare_nodes + 1)}
        self.network: list[InFlight] = []
        self.partition: dict[NodeId, int] | None = None  # node -> side
        self.faults = True
        self.proposing = True
        # Invariant records.
        self.leader_of_term: dict[int, NodeId] = {}
        self.committed: dict[int, tuple[int, int, bytes]] = {}  # base -> (last, epoch, payload)
        # base -> (voters, learners) of every committed CONFIG batch.
        self.committed_configs: dict[int, tuple[frozenset[NodeId], frozenset[NodeId]]] = {}
        # Term of the leader that first committed each batch (the first node to see it
        # committed is always that leader: followers learn the high watermark from it).
        self.commit_term: dict[int, int] = {}
        self.batch_chain: dict[tuple[int, int], tuple[int, int]] = {}  # (base, epoch) -> ...
        self.trace: deque[str] = deque(maxlen=60)
        self.proposals = 0
        self.steps = 0
        self.snapshots_installed = 0
        for node in self.nodes.values():
            self._start(node)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, node: SimNode) -> None:
        config = RaftConfig(
            node_id=node.node_id,
            group=GROUP,
            voters=self.initial_voters,
            election_timeout_ticks=self.params.election_timeout_ticks,
            max_append_bytes=self.params.max_append_bytes,
            max_inflight_appends=self.params.max_inflight_appends,
            seed=self.seed,
            # Odd seeds run the broker's setting: no no-op when the log is known committed.
            skip_noop_when_committed=self.seed % 2 == 1,
            # Seeds 2 and 3 modulo 4 run the broker partitions' setting.
            commit_notice_at_once=self.seed % 4 < 2,
        )
        node.core = RaftCore(config, node.log, node.hard_state)
        node.high_watermark = node.core.high_watermark
        node.paused_until = -1

    def _crash(self, node: SimNode) -> None:
        node.core = None
        node.syncs.clear()
        if not self.params.sync_every_append:
            self._note(f"crash {node.node_id}")
            return  # a process crash: the page cache keeps every write
        lost = node.log.log_end_offset() - node.durable_log.log_end_offset()
        self._note(f"power loss {node.node_id} (log back to its last sync, {lost} offsets)")
        node.log = node.durable_log.copy()
        node.hard_state = node.durable_hard_state
        node.chain = list(node.durable_chain)
        node.chain_base = node.durable_chain_base

    @staticmethod
    def _chain_hash(node: SimNode, e: Entry) -> int:
        prev = node.chain[-1] if node.chain else node.chain_base
        return hash((prev, e.base_offset, e.last_offset, e.epoch, e.payload, e.kind))

    def _fail(self, what: str) -> SimulationFailure:
        recent = "\n  ".join(self.trace)
        return SimulationFailure(
            f"seed {self.seed} tick {self.now}: {what}\n  recent events:\n  {recent}\n"
            f"reproduce: python -m raftka.consensus.sim --seed {self.seed}  |  "
            "pytest tests/unit/consensus/test_raft_sim.py "
            f"--raft-seeds 1 --raft-seed-start {self.seed}"
        )

    def _core_of(self, node: SimNode) -> RaftCore:
        """The core of a node the caller knows to be running."""
        if node.core is None:
            raise self._fail(f"node {node.node_id} is down where a running node was expected")
        return node.core

    def _note(self, event: str) -> None:
        self.trace.append(f"t{self.now} {event}")

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        try:
            self._run()
        except RaftInvariantError as exc:
            raise self._fail(f"invariant: {exc}") from exc

    def _run(self) -> None:
        p = self.params
        for _ in range(p.safety_ticks):
            self._tick_world()
        self._end_faults()
        self._converge()
        self.proposing = True
        deadline = self.now + p.liveness_ticks_max
        target: Entry | None = None
        target_leader: tuple[NodeId, int] | None = None
        while self.now < deadline:
            leader = self._stable_leader()
            if leader is not None:
                core = self._core_of(self.nodes[leader])
                if target is None or target_leader != (leader, core.term):
                    try:
                        target = core.propose(1, f"live-{self.now}".encode())
                        target_leader = (leader, core.term)
                        self._drain(self.nodes[leader])
                    except NotLeaderError:
                        target = None
                if target is not None and self._committed_everywhere(target):
                    return
            self._tick_world()
        raise self._fail(
            f"liveness: no leader committed a new proposal within {p.liveness_ticks_max} ticks"
            f" after faults stopped (roles: {self._roles()})"
        )

    def _converge(self) -> None:
        """With no client writes, the voters' logs must become identical and committed."""
        self.proposing = False
        deadline = self.now + self.params.convergence_ticks_max
        while self.now < deadline:
            self._tick_world()
            leader = self._stable_leader()
            if leader is None:
                continue
            leader_core = self._core_of(self.nodes[leader])
            if leader_core.high_watermark != leader_core.log.log_end_offset():
                continue
            # Logs may start at different offsets (retention); they must agree from the
            # latest start on and end together.
            members = leader_core.voters | leader_core.learners
            start = max(self.nodes[v].log.log_start_offset() for v in members)
            expected = self._entries_from(self.nodes[leader], start)
            if all(
                (core := self.nodes[v].core) is not None
                and self._entries_from(self.nodes[v], start) == expected
                and self.nodes[v].log.log_end_offset() == leader_core.log.log_end_offset()
                and core.high_watermark == leader_core.high_watermark
                for v in members
            ):
                return
        ends = {
            n.node_id: (n.log.log_end_offset(), n.core.high_watermark if n.core else None)
            for n in self.nodes.values()
        }
        raise self._fail(
            f"convergence: voters' logs still differ {self.params.convergence_ticks_max} ticks"
            f" after faults stopped with no writes ((log end, hw) per node: {ends};"
            f" roles: {self._roles()})"
        )

    @staticmethod
    def _entries_from(node: SimNode, start: int) -> list[Entry]:
        return [e for e in node.log.all_entries() if e.base_offset >= start]

    def _roles(self) -> str:
        return ", ".join(
            f"{n.node_id}:{n.core.role.value}/t{n.core.term}/hw{n.core.high_watermark}"
            if n.core
            else f"{n.node_id}:down"
            for n in self.nodes.values()
        )

    def _end_faults(self) -> None:
        self.faults = False
        self.partition = None
        self._note("faults stop")
        for node in self.nodes.values():
            if node.core is None:
                self._start(node)
            node.paused_until = -1

    def _stable_leader(self) -> NodeId | None:
        """A leader no voter of its configuration has seen a newer term from.

        Nodes removed from the configuration are not counted: a removed node that never
        learnt of its removal may sit at a higher term forever without disturbing anyone.
        """
        best: tuple[int, NodeId] | None = None
        for node in self.nodes.values():
            core = node.core
            if core is None or core.role is not Role.LEADER:
                continue
            voters = (self.nodes[v].core for v in core.voters)
            newest = all(v is None or v.term <= core.term for v in voters)
            if newest and (best is None or core.term > best[0]):
                best = (core.term, node.node_id)
        return best[1] if best else None

    def _committed_everywhere(self, entry: Entry) -> bool:
        leader = self._stable_leader()
        if leader is None:
            return False
        leader_core = self._core_of(self.nodes[leader])
        for node_id in leader_core.voters:
            core = self.nodes[node_id].core
            if core is None or core.high_watermark <= entry.last_offset:
                return False
        recorded = self.committed.get(entry.base_offset)
        return recorded == (entry.last_offset, entry.epoch, entry.payload)

    def _tick_world(self) -> None:
        self.now += 1
        rng = self.rng
        p = self.params
        if self.faults:
            self._inject_faults()
        for node in self.nodes.values():
            if node.core is None or node.paused_until >= self.now:
                continue
            if self.faults and rng.random() < p.skip_tick_rate:
                continue  # clock skew
            node.core.tick()
            self._drain(node)
        self._complete_syncs()
        if self.proposing and rng.random() < p.proposal_rate:
            self._propose()
        if self.faults and rng.random() < p.config_change_rate:
            self._change_membership()
        if self.faults and rng.random() < p.transfer_rate:
            self._transfer()
        if p.truncate_rate and rng.random() < p.truncate_rate:
            self._truncate_prefix()
        self._deliver()

    def _inject_faults(self) -> None:
        rng = self.rng
        p = self.params
        for node in self.nodes.values():
            if node.core is None:
                if rng.random() < p.restart_rate:
                    self._note(f"restart {node.node_id}")
                    self._start(node)
            elif rng.random() < (
                p.leader_crash_rate if node.core.role is Role.LEADER else p.crash_rate
            ):
                self._crash(node)
            elif rng.random() < p.pause_rate:
                node.paused_until = self.now + rng.randrange(5, 40)
                self._note(f"pause {node.node_id} until t{node.paused_until}")
        if p.sync_every_append and rng.random() < p.crash_all_rate:
            self._note("power loss everywhere")
            for node in self.nodes.values():
                if node.core is not None:
                    self._crash(node)
        if self.partition is None:
            leaders = [
                n for n, node in self.nodes.items() if node.core and node.core.role is Role.LEADER
            ]
            if leaders and rng.random() < p.isolate_leader_rate:
                isolated = rng.choice(leaders)
                self.partition = {n: int(n == isolated) for n in self.nodes}
                self._note(f"isolate leader {isolated}")
            elif rng.random() < p.partition_rate:
                ids = list(self.nodes)
                self.partition = {n: rng.randrange(2) for n in ids}
                self._note(f"partition {self.partition}")
        elif rng.random() < p.heal_rate:
            self.partition = None
            self._note("heal")

    def _propose(self) -> None:
        leaders = [
            n for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER
        ]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        core = self._core_of(node)
        self.proposals += 1
        count = self.rng.randrange(1, 5)
        payload = f"p{self.proposals}".encode() * self.rng.randrange(1, 30)
        try:
            core.propose(count, payload)
        except NotLeaderError:
            return
        self._drain(node)

    def _change_membership(self) -> None:
        leaders = [
            n for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER
        ]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        core = self._core_of(node)
        members = core.voters | core.learners
        outside = [n for n in self.nodes if n not in members]
        learners = sorted(core.learners)
        try:
            roll = self.rng.random()
            if learners and roll < 0.4:
                # A learner is promoted (a reassignment's catch-up done) or dropped (cancel).
                target = self.rng.choice(learners)
                if self.rng.random() < 0.7:
                    core.propose_config_change(promote=target)
                    self._note(f"{node.node_id} proposes promote {target}")
                else:
                    core.propose_config_change(remove=target)
                    self._note(f"{node.node_id} proposes remove learner {target}")
            elif outside and (len(core.voters) <= 3 or roll < 0.7):
                target = self.rng.choice(outside)
                if self.rng.random() < 0.5:
                    core.propose_config_change(add_learner=target)
                    self._note(f"{node.node_id} proposes add learner {target}")
                else:
                    core.propose_config_change(add=target)
                    self._note(f"{node.node_id} proposes add {target}")
            elif len(core.voters) > 3:
                target = self.rng.choice(sorted(core.voters))
                core.propose_config_change(remove=target)
                self._note(f"{node.node_id} proposes remove {target}")
        except (ConfigChangeError, NotLeaderError):
            return
        self._drain(node)

    def _transfer(self) -> None:
        leaders = [
            n for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER
        ]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        core = self._core_of(node)
        others = sorted(v for v in core.voters if v != node.node_id)
        if not others:
            return
        target = self.rng.choice(others)
        self._note(f"{node.node_id} transfers leadership to {target}")
        try:
            core.transfer_leadership(target)
        except NotLeaderError:
            return
        self._drain(node)

    def _truncate_prefix(self) -> None:
        """A running node deletes a committed prefix of its log (retention)."""
        running = [n for n in self.nodes.values() if n.core is not None]
        if not running:
            return
        node = self.rng.choice(running)
        core = self._core_of(node)
        limit = min(core.high_watermark, node.log.log_end_offset())
        entries = node.log.all_entries()
        cuts = [e.end_offset for e in entries if e.end_offset <= limit]
        if not cuts:
            return
        cut = self.rng.choice(cuts)
        dropped = sum(1 for e in entries if e.end_offset <= cut)
        node.chain_base = node.chain[dropped - 1]
        del node.chain[:dropped]
        node.log.truncate_prefix(cut)
        self._note(f"{node.node_id} deletes its log below {cut}")

    def _deliver(self) -> None:
        """Deliver due messages in random order; zero-delay replies go in the same tick."""
        rng = self.rng
        p = self.params
        for _ in range(4):
            due = [f for f in self.network if f.deliver_at <= self.now]
            if not due:
                return
            self.network = [f for f in self.network if f.deliver_at > self.now]
            rng.shuffle(due)
            for flight in due:
                m = flight.message
                node = self.nodes[m.to]
                if node.core is None:
                    continue
                if node.paused_until >= self.now:
                    self.network.append(InFlight(node.paused_until + 1, flight.seq, m))
                    continue
                if self.partition is not None and self.partition.get(
                    m.from_id
                ) != self.partition.get(m.to):
                    continue
                if self.faults:
                    if rng.random() < p.drop_rate:
                        continue
                    if rng.random() < p.duplicate_rate:
                        self._send(m)
                self.steps += 1
                node.core.step(m)
                self._drain(node)

    def _send(self, m: Message) -> None:
        self.seq += 1
        delay = 0
        if self.rng.random() < self.params.delay_rate:
            delay = self.rng.randrange(1, self.params.max_delay_ticks + 1 if self.faults else 2)
        self.network.append(InFlight(self.now + delay, self.seq, m))

    # ------------------------------------------------------------------ Ready + invariants
    def _drain(self, node: SimNode) -> None:
        core = self._core_of(node)
        while core.has_ready():
            rd = core.ready()
            self._persist(node, rd)
            if self.faults and self.rng.random() < self.params.crash_rate / 10:
                # Crash after writing, before sending: the ordering rule makes this safe.
                self._crash(node)
                return
            must_sync = self.params.sync_every_append and (
                bool(rd.entries)
                or rd.hard_state is not None
                or rd.snapshot is not None
                or bool(node.syncs)
            )
            held: list[Message] = []
            for m in rd.messages:
                if m.type is MessageType.SNAPSHOT:
                    # The driver's part: the state-machine data at the log start.
                    if node.log.log_start_offset() != m.prev_offset + 1:
                        raise self._fail(f"node {node.node_id} snapshot {m} not at its log start")
                    m = replace(m, snapshot_data=str(node.chain_base).encode())
                if must_sync and (rd.hard_state is not None or not can_send_before_sync(m)):
                    held.append(m)
                else:
                    self._send(m)
            self._apply(node, rd)
            core.advance(rd, durable=not must_sync)
            if not must_sync:
                # As the broker's driver does: a commit that is all the advance changed (a
                # single voter's write) is applied without a Ready of its own.
                committed = core.take_commit()
                if committed is not None:
                    self._apply(node, Ready(None, None, (), (), committed, None))
            if must_sync:
                delay = self.rng.randrange(self.params.max_sync_delay_ticks + 1)
                node.syncs.append(
                    PendingSync(
                        done_at=self.now + delay,
                        log=node.log.copy(),
                        chain=list(node.chain),
                        chain_base=node.chain_base,
                        hard_state=node.hard_state,
                        end_offset=node.log.log_end_offset(),
                        generation=core.log_generation,
                        held=held,
                    )
                )

    def _complete_syncs(self) -> None:
        """fsyncs finish in order: the synced state becomes durable, held messages leave."""
        for node in self.nodes.values():
            while node.core is not None and node.syncs and node.syncs[0].done_at <= self.now:
                sync = node.syncs.popleft()
                node.durable_log = sync.log
                node.durable_chain = sync.chain
                node.durable_chain_base = sync.chain_base
                node.durable_hard_state = sync.hard_state
                for m in sync.held:
                    self._send(m)
                node.core.mark_durable(sync.end_offset, sync.generation)
                self._drain(node)

    def _persist(self, node: SimNode, rd: Ready) -> None:
        if rd.hard_state is not None:
            old = node.hard_state
            new = rd.hard_state
            if new.term < old.term:
                raise self._fail(f"node {node.node_id} term went back {old} -> {new}")
            if new.term == old.term and old.voted_for not in (None, new.voted_for):
                raise self._fail(f"node {node.node_id} changed its vote in a term {old} -> {new}")
            node.hard_state = new
        if rd.snapshot is not None:
            self._install(node, rd.snapshot)
        if rd.truncate_to is not None:
            for e in node.log.all_entries():
                if e.base_offset >= rd.truncate_to and self.committed.get(e.base_offset) == (
                    e.last_offset,
                    e.epoch,
                    e.payload,
                ):
                    raise self._fail(f"node {node.node_id} truncated committed batch {e}")
            node.log.truncate_to(rd.truncate_to)
            del node.chain[len(node.log.all_entries()) :]
            self._note(f"{node.node_id} truncate to {rd.truncate_to}")
        if rd.entries:
            node.log.append(rd.entries)
            for e in rd.entries:
                h = self._chain_hash(node, e)
                node.chain.append(h)
                key = (e.base_offset, e.epoch)
                seen = self.batch_chain.setdefault(key, (e.last_offset, h))
                if seen != (e.last_offset, h):
                    raise self._fail(
                        f"log matching: node {node.node_id} batch {e} differs from another"
                        " log's batch with the same offset and epoch, or its prefix does"
                    )

    def _install(self, node: SimNode, snapshot: Snapshot) -> None:
        end = snapshot.end_offset
        chain_value = int(snapshot.data)
        if end > 0:
            # The snapshot must describe exactly the committed batches below its end.
            last = next(
                (
                    (base, epoch)
                    for base, (last, epoch, _) in self.committed.items()
                    if last == end - 1
                ),
                None,
            )
            if last is None:
                raise self._fail(f"node {node.node_id} installed a snapshot at uncommitted {end}")
            if self.batch_chain[last][1] != chain_value:
                raise self._fail(
                    f"node {node.node_id} installed a snapshot at {end} whose history differs"
                    " from the committed batches"
                )
        # It must carry the configuration (voters and learners) the committed batches below
        # its end set.
        initial = self._core_of(node).config.voters
        below = [base for base in self.committed_configs if base < end]
        expected = self.committed_configs[max(below)] if below else (initial, frozenset())
        carried = (
            (snapshot.voters, snapshot.learners) if snapshot.voters else (initial, frozenset())
        )
        if carried != expected:
            raise self._fail(
                f"node {node.node_id} installed a snapshot at {end} carrying the configuration"
                f" {carried}, but the committed batches below it set {expected}"
            )
        node.log.install_snapshot(snapshot)
        node.chain = []
        node.chain_base = chain_value
        self.snapshots_installed += 1
        self._note(f"{node.node_id} installs a snapshot ending at {end}")

    def _apply(self, node: SimNode, rd: Ready) -> None:
        core = self._core_of(node)
        if rd.soft_state is not None:
            s = rd.soft_state
            self._note(f"{node.node_id} {s.role.value} term {s.term} leader {s.leader_id}")
            if s.role is not Role.FOLLOWER and node.node_id in core.learners:
                raise self._fail(f"learner {node.node_id} became {s.role.value} in {s.term}")
            if s.role is Role.LEADER:
                holder = self.leader_of_term.setdefault(s.term, node.node_id)
                if holder != node.node_id:
                    raise self._fail(f"election safety: {holder} and {node.node_id} lead {s.term}")
                self._check_leader_completeness(node)
        if rd.high_watermark is not None:
            new_hw = rd.high_watermark
            if new_hw < node.high_watermark:
                raise self._fail(
                    f"node {node.node_id} high watermark went back {node.high_watermark}"
                    f" -> {new_hw}"
                )
            if new_hw > node.log.log_end_offset():
                raise self._fail(f"node {node.node_id} high watermark {new_hw} past its log")
            if core.role is Role.LEADER and node.log.entry_at(new_hw - 1).epoch != core.term:
                raise self._fail(
                    f"commit rule: leader {node.node_id} advanced its high watermark to"
                    f" {new_hw}, not past a batch of its own epoch {core.term}"
                )
            offset = max(node.high_watermark, node.log.log_start_offset())
            while offset < new_hw:
                e = node.log.entry_at(offset)
                if e.base_offset != offset:
                    raise self._fail(f"node {node.node_id} hw {offset} inside a batch")
                record = (e.last_offset, e.epoch, e.payload)
                self.commit_term.setdefault(offset, core.term)
                if e.kind is EntryKind.CONFIG:
                    self.committed_configs[offset] = decode_config(e.payload)
                if self.committed.setdefault(offset, record) != record:
                    raise self._fail(
                        f"state machine safety: node {node.node_id} committed {e} but"
                        f" {self.committed[offset]} was committed at that offset"
                    )
                offset = e.end_offset
            if offset != new_hw:
                raise self._fail(f"node {node.node_id} hw {new_hw} inside a batch")
            node.high_watermark = new_hw

    def _check_leader_completeness(self, node: SimNode) -> None:
        core = self._core_of(node)
        end = core.log.log_end_offset()
        for base, (last, epoch, payload) in self.committed.items():
            if self.commit_term[base] >= core.term:
                continue  # Raft promises only entries committed in earlier terms
            if base < core.log.log_start_offset():
                continue  # deleted behind the log start (a snapshot holds it)
            if base >= end:
                raise self._fail(f"leader completeness: leader {node.node_id} lacks offset {base}")
            e = core.log.entry_at(base)
            if (e.base_offset, e.last_offset, e.epoch, e.payload) != (base, last, epoch, payload):
                raise self._fail(
                    f"leader completeness: leader {node.node_id} has {e} at committed {base}"
                )

    def summary(self) -> str:
        committed = max((v[0] + 1 for v in self.committed.values()), default=0)
        return (
            f"seed {self.seed}: {self.params.nodes} voters, {self.now} ticks, {self.steps}"
            f" messages, {len(self.leader_of_term)} leader terms, committed end {committed},"
            f" {self.snapshots_installed} snapshots installed"
        )


def run_seed(seed: int) -> Simulation:
    sim = Simulation(seed)
    sim.run()
    return sim


def _run_range(start: int, stop: int) -> list[tuple[int, str]]:
    failures = []
    for seed in range(start, stop):
        try:
            run_seed(seed)
        except SimulationFailure as failure:
            failures.append((seed, str(failure)))
    return failures


def run_seeds(start: int, count: int, workers: int = 1) -> list[tuple[int, str]]:
    """Run seeds [start, start + count); returns (seed, report) for each failing seed."""
    if workers <= 1 or count < 50:
        return _run_range(start, start + count)
    chunk = max(1, count // (workers * 8))
    bounds = [(s, min(s + chunk, start + count)) for s in range(start, start + count, chunk)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        results = pool.map(_run_range, *zip(*bounds, strict=True))
        return [failure for chunk_failures in results for failure in chunk_failures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deterministic Raft simulation")
    parser.add_argument("--seed", type=int, help="run one seed and print its summary")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trace", action="store_true", help="print recent events of --seed")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.seed is not None:
        try:
            sim = run_seed(args.seed)
        except SimulationFailure as failure:
            print(failure, file=sys.stderr)
            return 1
        print(sim.summary())
        if args.trace:
            print("\n".join(sim.trace))
        return 0
    failures = run_seeds(args.seed_start, args.seeds, args.workers)
    for _, report in failures:
        print(report, file=sys.stderr)
    print(
        f"{args.seeds} seeds from {args.seed_start}: {len(failures)} failed"
        f" {sorted(seed for seed, _ in failures)[:20]}, {time.monotonic() - started:.1f}s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
