"""Where the replicas of a broker being decommissioned go.

Each partition with a replica on the leaving broker gets one new replica in its place (same
position in the replica list, so the replication factor and the other replicas stay): a
registered broker that holds no replica of that partition, on a rack the partition's other
replicas do not use when every broker has a rack (as placement does), and among those the
one with the fewest replicas, counting the moves planned so far; ties go to the lowest id.
Deterministic for equal inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raftka.broker.cluster.placement import PlacementError

#: (topic, partition) -> replica list
Replicas = Mapping[tuple[str, int], Sequence[int]]


def plan_decommission(
    leaving: int, partitions: Replicas, brokers: Mapping[int, str | None]
) -> dict[tuple[str, int], tuple[int, ...]]:
    """The target replica list of every partition with a replica on `leaving`, from the
    current `partitions` and the registered `brokers` (id -> rack). PlacementError names
    the first partition that has no broker to go to, and the fix."""
    if leaving not in brokers:
        raise PlacementError(
            f"broker {leaving} is not registered (registered: {sorted(brokers) or 'none'})"
        )
    candidates = sorted(set(brokers) - {leaving})
    rack_aware = all(brokers[node] is not None for node in brokers)
    load = {node: 0 for node in candidates}
    for replicas in partitions.values():
        for node in replicas:
            if node in load:
                load[node] += 1
    plan: dict[tuple[str, int], tuple[int, ...]] = {}
    for key in sorted(partitions):
        replicas = tuple(partitions[key])
        if leaving not in replicas:
            continue
        others = [node for node in replicas if node != leaving]
        free = [node for node in candidates if node not in replicas]
        if not free:
            topic, index = key
            raise PlacementError(
                f"{topic}-{index} has {len(replicas)} replicas and no registered broker other"
                f" than {leaving} is free to take one: add a broker (raftka serve --join) or"
                " lower the topic's replication factor first"
            )
        if rack_aware:
            used = {brokers[node] for node in others}
            fresh = [node for node in free if brokers[node] not in used]
            free = fresh or free
        chosen = min(free, key=lambda node: (load[node], node))
        load[chosen] += 1
        plan[key] = tuple(chosen if node == leaving else node for node in replicas)
    return plan
