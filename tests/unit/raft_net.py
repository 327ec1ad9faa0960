"""A tiny synchronous network of Raft cores for scenario tests (no randomness, FIFO)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from raftka.consensus import (
    Entry,
    HardState,
    MemoryRaftLog,
    Message,
    NodeId,
    RaftConfig,
    RaftCore,
    Ready,
    Role,
)

GROUP = "topic-0"


class Net:
    def __init__(
        self,
        ids: Iterable[NodeId],
        *,
        voters: Iterable[NodeId] | None = None,
        pre_vote: bool = True,
        check_quorum: bool = True,
        election_timeout_ticks: int = 10,
        max_append_bytes: int = 1 << 20,
        max_inflight_appends: int = 16,
        skip_noop_when_committed: bool = False,
        commit_notice_at_once: bool = True,
        logs: dict[NodeId, list[Entry]] | None = None,
        terms: dict[NodeId, int] | None = None,
    ) -> None:
        self.ids = sorted(ids)
        self.voters = frozenset(voters if voters is not None else self.ids)
        self.options = dict(
            pre_vote=pre_vote,
            check_quorum=check_quorum,
            election_timeout_ticks=election_timeout_ticks,
            max_append_bytes=max_append_bytes,
            max_inflight_appends=max_inflight_appends,
            skip_noop_when_committed=skip_noop_when_committed,
            commit_notice_at_once=commit_notice_at_once,
        )
        self.logs: dict[NodeId, MemoryRaftLog] = {}
        self.hard_states: dict[NodeId, HardState] = {}
        self.cores: dict[NodeId, RaftCore] = {}
        self.queue: deque[Message] = deque()
        self.cut: set[frozenset[NodeId]] = set()
        self.down: set[NodeId] = set()
        self.drop: Callable[[Message], bool] = lambda m: False
        self.delivered: list[Message] = []
        self.readies: dict[NodeId, list[Ready]] = {i: [] for i in self.ids}
        for i in self.ids:
            log = MemoryRaftLog()
            log.append((logs or {}).get(i, []))
            self.logs[i] = log
            self.hard_states[i] = HardState(term=(terms or {}).get(i, 0))
            self.start(i)

    def config(self, i: NodeId) -> RaftConfig:
        return RaftConfig(node_id=i, group=GROUP, voters=self.voters, seed=7, **self.options)  # type: ignore[arg-type]

    def start(self, i: NodeId) -> None:
        self.cores[i] = RaftCore(self.config(i), self.logs[i], self.hard_states[i])
        self.down.discard(i)

    def crash(self, i: NodeId) -> None:
        self.down.add(i)
        self.queue = deque(m for m in self.queue if m.to != i and m.from_id != i)

    def add_node(self, i: NodeId) -> None:
        """A fresh broker outside the voter set (it learns the config from the log)."""
        self.ids.append(i)
        self.logs[i] = MemoryRaftLog()
        self.hard_states[i] = HardState()
        self.readies[i] = []
        self.start(i)

    def __getitem__(self, i: NodeId) -> RaftCore:
        return self.cores[i]

    # ------------------------------------------------------------------ driving
    def drain(self, i: NodeId) -> None:
        core = self.cores[i]
        while core.has_ready():
            rd = core.ready()
            self.readies[i].append(rd)
            if rd.hard_state is not None:
                self.hard_states[i] = rd.hard_state
            if rd.snapshot is not None:
                self.logs[i].install_snapshot(rd.snapshot)
            if rd.truncate_to is not None:
                self.logs[i].truncate_to(rd.truncate_to)
            self.logs[i].append(rd.entries)
            self.queue.extend(rd.messages)
            core.advance(rd)

    def isolate(self, i: NodeId) -> None:
        for j in self.ids:
            if j != i:
                self.cut.add(frozenset((i, j)))

    def partition(self, *sides: Iterable[NodeId]) -> None:
        groups = [set(s) for s in sides]
        for a in groups:
            for b in groups:
                if a is not b:
                    for i in a:
                        for j in b:
                            self.cut.add(frozenset((i, j)))

    def heal(self) -> None:
        self.cut.clear()

    def deliver(self, max_messages: int = 100_000) -> int:
        for i in self.ids:
            if i not in self.down:
                self.drain(i)
        n = 0
        while self.queue and n < max_messages:
            m = self.queue.popleft()
            if m.to in self.down or frozenset((m.from_id, m.to)) in self.cut or self.drop(m):
                continue
            n += 1
            self.delivered.append(m)
            self.cores[m.to].step(m)
            self.drain(m.to)
        return n

    def tick(self, times: int = 1, only: Iterable[NodeId] | None = None) -> None:
        targets = list(only) if only is not None else self.ids
        for _ in range(times):
            for i in targets:
                if i not in self.down:
                    self.cores[i].tick()
                    self.drain(i)
            self.deliver()

    def elect(self, i: NodeId) -> RaftCore:
        self.cores[i].campaign()
        self.deliver()
        assert self.cores[i].role is Role.LEADER, self.cores[i].status()
        return self.cores[i]

    def propose(self, i: NodeId, count: int = 1, payload: bytes = b"x") -> Entry:
        entry = self.cores[i].propose(count, payload)
        self.deliver()
        return entry

    def leaders(self) -> list[NodeId]:
        return [i for i in self.ids if i not in self.down and self.cores[i].role is Role.LEADER]

    def entries(self, i: NodeId) -> list[Entry]:
        return self.logs[i].all_entries()
