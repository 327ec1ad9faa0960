"""Raft replicas whose storage is the real segment log, driven tick by tick in memory
(no transport: messages go straight to their target)."""

from __future__ import annotations

import time
from pathlib import Path

from raftka.broker.replication import HardStateStore, PartitionRaftStorage
from raftka.consensus.core import RaftConfig, RaftCore
from raftka.consensus.types import Message, Role
from raftka.log import LogConfig, PartitionLog

GROUP = "orders-0"


class Replica:
    def __init__(
        self, node_id: int, root: Path, voters: frozenset[int], skip_noop: bool = False
    ) -> None:
        self.node_id = node_id
        self.skip_noop = skip_noop
        self.root = root
        self.voters = voters
        self.hard_states = HardStateStore(root / "raft.lmdb")
        self.open()

    def open(self) -> None:
        self.log = PartitionLog.open(self.root / GROUP, LogConfig(), time.time_ns() // 1_000_000)
        self.storage = PartitionRaftStorage(GROUP, self.log, self.hard_states)
        self.core = RaftCore(
            RaftConfig(
                node_id=self.node_id,
                group=GROUP,
                voters=self.voters,
                seed=self.node_id,
                skip_noop_when_committed=self.skip_noop,
            ),
            self.storage,
            self.storage.load_hard_state(),
        )
        self.high_watermark = 0

    def close(self) -> None:
        """Release the log's descriptors (without the clean-shutdown work) and the store."""
        self.log.abandon()
        self.hard_states.close()

    def drain(self, outbox: list[Message]) -> None:
        while self.core.has_ready():
            rd = self.core.ready()
            if rd.hard_state is not None:
                self.storage.save_hard_state(rd.hard_state)
            if rd.truncate_to is not None:
                self.storage.truncate_to(rd.truncate_to)
            self.storage.append(rd.entries)
            outbox.extend(rd.messages)
            if rd.high_watermark is not None:
                self.high_watermark = rd.high_watermark
            self.core.advance(rd)


def run(replicas: dict[int, Replica], ticks: int, down: frozenset[int] = frozenset()) -> None:
    outbox: list[Message] = []
    for _ in range(ticks):
        for node_id, replica in replicas.items():
            if node_id not in down:
                replica.core.tick()
                replica.drain(outbox)
        while outbox:
            message = outbox.pop(0)
            if message.to in down or message.from_id in down:
                continue
            target = replicas[message.to]
            target.core.step(message)
            target.drain(outbox)


def leader_of(replicas: dict[int, Replica], down: frozenset[int] = frozenset()) -> Replica:
    leaders = [r for i, r in replicas.items() if i not in down and r.core.role is Role.LEADER]
    assert len(leaders) == 1, [r.core.role for r in replicas.values()]
    return leaders[0]
