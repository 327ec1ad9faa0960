"""Leadership gossip: every broker learns the leader, leader epoch and in-sync replicas of
the partitions it does not lead by asking every registered broker, so any broker answers
Metadata as the partition's leader would (a Raft group's leader is known to its replicas
only)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import trio

from raftka.broker.topics import TopicManager
from raftka.consensus.transport import ForwardError, PeerTransport

#: The peer RPC answering which partitions a broker leads.
LEADERS_RPC = "__leaders"


class LeaderGossip:
    """This broker's view of partitions led elsewhere (`leader_hints`, `isr_hints`), and
    its answer to other brokers' questions (`local_leaders`)."""

    def __init__(
        self,
        node_id: int,
        transport: PeerTransport,
        topics: TopicManager,
        brokers: Callable[[], Iterable[int]],
    ) -> None:
        self.node_id = node_id
        self.transport = transport
        self.topics = topics
        self._brokers = brokers
        #: Partition name -> (leader id, leader epoch), as its leader (elsewhere) reported it.
        self.leader_hints: dict[str, tuple[int, int]] = {}
        #: Partition name -> in-sync replicas, as its leader (elsewhere) last reported them.
        self.isr_hints: dict[str, tuple[int, ...]] = {}

    def local_leaders(self) -> dict[str, tuple[int, int, tuple[int, ...]]]:
        """Partitions this broker leads: name → (leader id, leader epoch, in-sync replicas)."""
        return {
            p.name: (self.node_id, p.leader_epoch, p.in_sync_replicas())
            for p in self.topics.local_partitions()
            if p.is_leader
        }

    def serve(self) -> bytes:
        """The LEADERS_RPC answer: `local_leaders` as JSON."""
        return json.dumps(self.local_leaders()).encode()

    async def run(self, interval_s: float = 0.5) -> None:
        """Ask every registered broker (one that joined later too, one that left not) every
        `interval_s`; the answer with the highest epoch per partition wins."""
        while True:
            peers = sorted(set(self._brokers()) - {self.node_id})
            hints: dict[str, tuple[int, int]] = {}
            isr: dict[str, tuple[int, ...]] = {}
            for peer in peers:
                try:
                    raw = await self.transport.forward(peer, LEADERS_RPC, b"", interval_s * 4)
                except ForwardError:
                    continue
                for name, (leader, epoch, *rest) in json.loads(raw).items():
                    if name not in hints or hints[name][1] < epoch:
                        hints[name] = (leader, epoch)
                        if rest:  # a peer of an older version sends no in-sync replicas
                            isr[name] = tuple(rest[0])
                        else:
                            isr.pop(name, None)
            self.leader_hints = hints
            self.isr_hints = isr
            await trio.sleep(interval_s)
