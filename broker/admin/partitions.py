"""Per-partition state (leader, replicas, ISR) as each partition's leader reports it.

A Kafka broker answers Metadata with the controller's view, the same from every broker; a
raftka broker knows a partition's ISR only while it leads it (a follower reports every
replica as in sync). So the ISR of each partition is taken from its leader's own Metadata
answer: correct against either kind of broker, and it also tells which brokers answer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from raftka.broker.admin.common import Target

PROBE_TIMEOUT_MAX_S = 5.0


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return not self.offline and len(self.isr) < len(self.replicas)

    @property
    def status(self) -> str:
        if self.offline:
            return "offline"
        return "under-replicated" if self.under_replicated else "ok"

    def as_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "status": self.status,
        }


def _states_of(metadata: Any) -> dict[tuple[str, int], PartitionState]:
    states = {}
    for topic in metadata.topics.values():
        for p in topic.partitions.values():
            states[(topic.topic, p.id)] = PartitionState(
                topic=topic.topic,
                partition=p.id,
                leader=p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
                error=None if p.error is None else p.error.name(),
            )
    return states


def _probe(target: Target, host: str, port: int) -> Any | None:
    """Metadata answered by the broker at host:port alone, or None if it does not answer."""
    from confluent_kafka import KafkaException

    probe = Target(f"{host}:{port}", min(target.timeout_s, PROBE_TIMEOUT_MAX_S))
    try:
        return probe.admin().list_topics(timeout=probe.timeout_s)
    except KafkaException:
        return None


@dataclass(frozen=True)
class ClusterView:
    metadata: Any  # the bootstrap broker's Metadata answer
    partitions: dict[tuple[str, int], PartitionState]
    answered: dict[int, bool]  # broker id -> answered Metadata on its own address


def answering_broker(metadata: Any) -> int | None:
    """The id of the broker that answered `metadata`. librdkafka reports -1 for an answer
    over a bootstrap connection (named "host:port/bootstrap"), so the address decides."""
    if metadata.orig_broker_id >= 0:
        return int(metadata.orig_broker_id)
    address, _, _ = str(metadata.orig_broker_name or "").rpartition("/")
    for broker in metadata.brokers.values():
        if f"{broker.host}:{broker.port}" == address:
            return int(broker.id)
    return None


def leader_view(target: Target, metadata: Any) -> ClusterView:
    """Every partition of `metadata` with the ISR its leader reports; which brokers answer
    Metadata on their own address."""
    states = _states_of(metadata)
    brokers = list(metadata.brokers.values())
    answered = dict.fromkeys((b.id for b in brokers), False)
    if brokers:
        with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
            answers = list(pool.map(lambda b: _probe(target, b.host, b.port), brokers))
        for broker, answer in zip(brokers, answers, strict=True):
            # A client learns the other brokers only from the first answer on this address.
            answered[broker.id] = answer is not None
        for answer in [metadata, *answers]:
            source = None if answer is None else answering_broker(answer)
            if source is None:
                continue
            for key, state in _states_of(answer).items():
                if state.leader == source and key in states:
                    states[key] = state
    return ClusterView(metadata, dict(sorted(states.items())), answered)
