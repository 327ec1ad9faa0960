"""Leadership gossip: every broker learns the leader, leader epoch and in-sync replicas of
the partitions it does not lead by asking every registered broker, so any broker answers
Metadata as the partition's leader would (a Raft group's leader is known to its replicas
only).

What a broker gossips only moves forward, as a Kafka broker's metadata image does: a peer's
last answer stands until it answers again or has been silent for `SILENT_PEER_S` (a slow
answer under load is no news that its partitions lost their leader), and a partition whose
leader stopped leading it keeps that leader's epoch, with leader -1. Clients keep the
answer with the newest leader epoch (KIP-320), so an answer that forgot a leader would
otherwise replace the one that named it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import trio

from raftka.broker.topics import TopicManager
from raftka.consensus.transport import ForwardError, PeerTransport

#: The peer RPC answering which partitions a broker leads.
LEADERS_RPC = "__leaders"

#: A peer silent this long is taken as gone, with the leadership it last reported, as
#: Kafka's controller fences a broker after broker.session.timeout.ms (9 s by default).
SILENT_PEER_S = 9.0

#: How long a Metadata request for a partition with no leader known here waits for its
#: replicas' answers.
LEARN_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class LeadReport:
    """A partition as the broker leading it reported it."""

    leader: int
    epoch: int
    #: None from a peer of an older version, which sends no in-sync replicas.
    in_sync_replicas: tuple[int, ...] | None


@dataclass(frozen=True)
class PeerAnswer:
    """A peer's last LEADERS_RPC answer and when it came (trio clock, seconds)."""

    leads: Mapping[str, LeadReport]
    answered_s: float


def parse_answer(raw: bytes) -> dict[str, LeadReport]:
    """A LEADERS_RPC answer: name -> [leader, epoch, in-sync replicas] (the last left out
    by older versions)."""
    leads = {}
    for name, (leader, epoch, *rest) in json.loads(raw).items():
        leads[name] = LeadReport(int(leader), int(epoch), tuple(rest[0]) if rest else None)
    return leads


def leadership_view(
    answers: Iterable[Mapping[str, LeadReport]],
    previous: Mapping[str, tuple[int, int]],
    exists: Callable[[str], bool],
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, ...]]]:
    """(leader hints, in-sync replica hints) from the peers' standing answers: per partition
    the report with the highest epoch; a partition of `previous` that no answer names any
    more (and that still `exists`) keeps its epoch with leader -1, so the epoch a broker
    gives never goes back."""
    hints: dict[str, tuple[int, int]] = {}
    isr: dict[str, tuple[int, ...]] = {}
    for leads in answers:
        for name, report in leads.items():
            known = hints.get(name)
            if known is not None and known[1] >= report.epoch:
                continue
            hints[name] = (report.leader, report.epoch)
            if report.in_sync_replicas is not None:
                isr[name] = report.in_sync_replicas
            else:
                isr.pop(name, None)
    for name, (_, epoch) in previous.items():
        if name not in hints and exists(name):
            hints[name] = (-1, epoch)
    return hints, isr


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
        #: Partition name -> (leader id, leader epoch), as its leader (elsewhere) reported it;
        #: leader -1 when that leader no longer leads it and no newer one is known.
        self.leader_hints: dict[str, tuple[int, int]] = {}
        #: Partition name -> in-sync replicas, as its leader (elsewhere) last reported them.
        self.isr_hints: dict[str, tuple[int, ...]] = {}
        #: Peer -> its last answer, while it is not silent for SILENT_PEER_S.
        self._answers: dict[int, PeerAnswer] = {}

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

    def _exists(self, name: str) -> bool:
        topic, _, index = name.rpartition("-")
        return index.isdigit() and self.topics.partition(topic, int(index)) is not None

    async def _ask(self, peer: int, timeout_s: float) -> None:
        try:
            raw = await self.transport.forward(peer, LEADERS_RPC, b"", timeout_s)
        except ForwardError:
            return
        self._answers[peer] = PeerAnswer(parse_answer(raw), trio.current_time())

    async def _ask_all(self, peers: Iterable[int], timeout_s: float) -> None:
        async with trio.open_nursery() as nursery:
            for peer in sorted(peers):
                nursery.start_soon(self._ask, peer, timeout_s)
        registered = set(self._brokers())
        now_s = trio.current_time()
        self._answers = {
            peer: answer
            for peer, answer in self._answers.items()
            if peer in registered and now_s - answer.answered_s < SILENT_PEER_S
        }
        self.leader_hints, self.isr_hints = leadership_view(
            (answer.leads for answer in self._answers.values()),
            self.leader_hints,
            self._exists,
        )

    async def learn(self, replicas: Iterable[int]) -> None:
        """Ask `replicas` now which partitions they lead: for a partition this broker has
        heard no leader of (a new one), so that Metadata names its leader as soon as the
        leader knows, not a gossip round later. A partition once heard of keeps an entry
        (leader -1 when none leads it), so this is not asked again for it."""
        peers = set(replicas) - {self.node_id}
        if peers:
            await self._ask_all(peers, LEARN_TIMEOUT_S)

    async def run(self, interval_s: float = 0.5) -> None:
        """Ask every registered broker (one that joined later too, one that left not) every
        `interval_s`, all at once; the standing answer with the highest epoch per partition
        wins."""
        while True:
            await self._ask_all(set(self._brokers()) - {self.node_id}, interval_s * 4)
            await trio.sleep(interval_s)
