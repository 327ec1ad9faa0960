"""Per-partition state (leader, leader epoch, replicas, ISR) from a Metadata answer, each
replica's lag behind its leader, and which brokers answer on their own address (a broker
that died may still be listed in Metadata)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftka.broker.admin.common import Target
from raftka.broker.admin.wire import (
    Entity,
    WireCluster,
    WireConnection,
    WireError,
    replica_log_end_offsets,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata

PROBE_TIMEOUT_MAX_S = 5.0


@dataclass(frozen=True)
class ReplicaLag:
    """One replica's own log end offset and how many offsets it is behind its leader's log
    end (0 for the leader); None where that is unknown (its broker did not answer, or the
    partition has no leader whose log end is known)."""

    node: int
    log_end_offset: int | None
    lag: int | None
    in_sync: bool

    def as_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "log_end_offset": self.log_end_offset,
            "lag": self.lag,
            "in_sync": self.in_sync,
        }


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None
    leader_epoch: int | None = None  # None: the broker's Metadata does not carry it (< v7)
    replica_lag: tuple[ReplicaLag, ...] | None = None  # None: not measured

    @property
    def creating(self) -> bool:
        """No leader yet, by a replica's word: leader epoch 0 is a new partition's."""
        return self.leader < 0 and self.leader_epoch == 0

    @property
    def offline(self) -> bool:
        return self.leader < 0 and not self.creating

    @property
    def under_replicated(self) -> bool:
        return self.leader >= 0 and len(self.isr) < len(self.replicas)

    @property
    def status(self) -> str:
        if self.creating:
            return "creating"
        if self.offline:
            return "offline"
        return "under-replicated" if self.under_replicated else "ok"

    def as_json(self) -> dict[str, object]:
        document: dict[str, object] = {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "status": self.status,
        }
        if self.replica_lag is not None:
            document["replica_lag"] = [r.as_json() for r in self.replica_lag]
        return document


def partition_states(metadata: ClusterMetadata) -> dict[tuple[str, int], PartitionState]:
    """Every partition of the Metadata answer, by (topic, partition)."""
    states = {}
    for name, topic in metadata.topics.items():
        for p in topic.partitions.values():
            states[(name, p.id)] = PartitionState(
                topic=name,
                partition=p.id,
                leader=p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
                error=None if p.error is None else p.error.name(),
            )
    return dict(sorted(states.items()))


def leader_epochs(metadata: Entity) -> dict[tuple[str, int], int | None]:
    """(topic, partition) -> leader epoch, from a kio Metadata response (WireCluster.metadata);
    None where the version answered has no epoch or the broker reports none (-1)."""
    epochs: dict[tuple[str, int], int | None] = {}
    for topic in metadata.topics:
        for p in topic.partitions:
            epoch = int(getattr(p, "leader_epoch", -1))
            epochs[(topic.name, p.partition_index)] = epoch if epoch >= 0 else None
    return epochs


def with_leader_epochs(
    states: Mapping[tuple[str, int], PartitionState], epochs: Mapping[tuple[str, int], int | None]
) -> dict[tuple[str, int], PartitionState]:
    return {
        key: dataclasses.replace(state, leader_epoch=epochs.get(key))
        for key, state in states.items()
    }


def replica_lags(
    state: PartitionState, log_ends: Mapping[int, int | None]
) -> tuple[ReplicaLag, ...]:
    """Each replica's lag behind the leader from the log end offsets its broker reported
    (node -> offset, None or absent: unknown). The brokers are asked one after another
    while writes go on, so a follower may report more than the leader did: lag 0 then."""
    leader_end = None if state.offline else log_ends.get(state.leader)
    lags = []
    for node in state.replicas:
        end = log_ends.get(node)
        lag = None if end is None or leader_end is None else max(0, leader_end - end)
        lags.append(ReplicaLag(node, end, lag, node in state.isr))
    return tuple(lags)


def format_lag(lags: Iterable[ReplicaLag]) -> str:
    """`node:lag` pairs in replica order, `-` for an unknown lag: `1:0,2:0,3:-`."""
    return ",".join(f"{r.node}:{'-' if r.lag is None else r.lag}" for r in lags)


def _log_ends_of(
    target: Target, wire: WireCluster, node: int, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int | None]:
    """The log end offsets of `node`'s replicas from one ListOffsets request; all None when
    the node is not in Metadata or does not answer."""
    broker = wire.brokers.get(node)
    if broker is None:
        return dict.fromkeys(partitions)
    try:
        with WireConnection(
            broker.address, min(target.timeout_s, PROBE_TIMEOUT_MAX_S), target.security
        ) as conn:
            return replica_log_end_offsets(conn, partitions)
    except WireError:
        return dict.fromkeys(partitions)


def with_replica_lag(
    target: Target, wire: WireCluster, states: Mapping[tuple[str, int], PartitionState]
) -> dict[tuple[str, int], PartitionState]:
    """`states` with every replica's lag, from one ListOffsets request per broker (Kafka's
    debugging replica id: each replica answers from its own log), brokers asked in parallel.
    `wire` must have read Metadata (it knows the brokers' addresses)."""
    hosted: dict[int, list[tuple[str, int]]] = {}
    for key, state in states.items():
        for node in state.replicas:
            hosted.setdefault(node, []).append(key)
    if not hosted:
        return dict(states)
    nodes = sorted(hosted)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        answers = list(pool.map(lambda n: _log_ends_of(target, wire, n, hosted[n]), nodes))
    by_node = dict(zip(nodes, answers, strict=True))
    measured = {}
    for key, state in states.items():
        log_ends = {node: by_node[node].get(key) for node in state.replicas}
        measured[key] = dataclasses.replace(state, replica_lag=replica_lags(state, log_ends))
    return measured


def _probe(target: Target, host: str, port: int) -> ClusterMetadata | None:
    """Metadata answered by the broker at host:port alone, or None if it does not answer."""
    from confluent_kafka import KafkaException

    probe = Target(f"{host}:{port}", min(target.timeout_s, PROBE_TIMEOUT_MAX_S), target.security)
    try:
        return probe.admin().list_topics(timeout=probe.timeout_s)
    except KafkaException:
        return None


def answering(target: Target, metadata: ClusterMetadata) -> dict[int, bool]:
    """Broker id -> whether it answers Metadata on its own address."""
    brokers = list(metadata.brokers.values())
    if not brokers:
        return {}
    with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
        answers = list(pool.map(lambda b: _probe(target, b.host, b.port), brokers))
    return {b.id: answer is not None for b, answer in zip(brokers, answers, strict=True)}
