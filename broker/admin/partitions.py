"""Per-partition state (leader, replicas, ISR) from a Metadata answer, and which brokers
answer on their own address (a broker that died may still be listed in Metadata)."""

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


def partition_states(metadata: Any) -> dict[tuple[str, int], PartitionState]:
    """Every partition of the Metadata answer, by (topic, partition)."""
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
    return dict(sorted(states.items()))


def _probe(target: Target, host: str, port: int) -> Any | None:
    """Metadata answered by the broker at host:port alone, or None if it does not answer."""
    from confluent_kafka import KafkaException

    probe = Target(f"{host}:{port}", min(target.timeout_s, PROBE_TIMEOUT_MAX_S))
    try:
        return probe.admin().list_topics(timeout=probe.timeout_s)
    except KafkaException:
        return None


def answering(target: Target, metadata: Any) -> dict[int, bool]:
    """Broker id -> whether it answers Metadata on its own address."""
    brokers = list(metadata.brokers.values())
    if not brokers:
        return {}
    with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
        answers = list(pool.map(lambda b: _probe(target, b.host, b.port), brokers))
    return {b.id: answer is not None for b, answer in zip(brokers, answers, strict=True)}
