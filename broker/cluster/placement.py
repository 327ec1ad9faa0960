"""Replica placement for new partitions, after Kafka's `AdminUtils.assignReplicasToBrokers`.

Kafka picks its start index and replica shift at random; here both are deterministic so every
controller computes the same answer from the same inputs, and the start is chosen to even out
preferred leaders across topics: the first partition's leader is the broker leading the fewest
partitions already (`leader_counts`), and the following partitions' leaders round-robin on from
it. Followers are placed with Kafka's shifting scheme, so replicas of one partition are distinct
brokers and, when every broker has a rack, on distinct racks as far as the racks allow (racks
alternate in the broker order, as in `assignReplicasToBrokersRackAware`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class PlacementError(ValueError):
    """The replicas cannot be placed (callers check the replication factor first)."""


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    """Broker ids ordered so that consecutive brokers are on different racks.

    Racks sorted by name, brokers within a rack by id; then one broker of each rack in turn
    (Kafka's `getRackAlternatedBrokerList`).
    """
    by_rack: dict[str, list[int]] = {}
    for node_id, rack in brokers:
        by_rack.setdefault(rack or "", []).append(node_id)
    queues = [sorted(ids) for _, ids in sorted(by_rack.items())]
    out: list[int] = []
    depth = 0
    while len(out) < len(brokers):
        for queue in queues:
            if depth < len(queue):
                out.append(queue[depth])
        depth += 1
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def place_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[tuple[int, str | None]],
    leader_counts: Mapping[int, int] | None = None,
    start: int | None = None,
    *,
    first_partition: int = 0,
) -> list[list[int]]:
    """Replica lists (preferred leader first) for `num_partitions` new partitions.

    `brokers`: (node id, rack or None) of the brokers to place on. Racks are honoured only when
    every broker has one (as Kafka refuses to mix). `leader_counts`: partitions each broker
    already leads (preferred leader), to pick where leadership round-robin begins. `start`:
    index into the broker order (by id, or rack-alternated) of the first leader, overriding
    the least-loaded choice. `first_partition`: id of the first new partition (CreatePartitions
    appends after the existing ones), which keeps Kafka's follower shift continuing.
    Deterministic for equal inputs.
    """
    if num_partitions < 0:
        raise PlacementError(f"cannot place {num_partitions} partitions")
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    ids = [node_id for node_id, _ in brokers]
    if len(set(ids)) != len(ids):
        raise PlacementError(f"duplicate broker ids in {sorted(ids)}")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached "
            f"because only {len(brokers)} broker(s) are registered."
        )
    if num_partitions == 0:
        return []
    racks = {node_id: rack for node_id, rack in brokers}
    rack_aware = all(rack is not None for rack in racks.values())
    order = rack_alternated(brokers) if rack_aware else sorted(ids)
    n = len(order)
    counts = leader_counts or {}
    if start is None:
        start = min(range(n), key=lambda i: (counts.get(order[i], 0), i))
    start %= n
    num_racks = len(set(racks.values())) if rack_aware else 1
    result: list[list[int]] = []
    for i in range(num_partitions):
        partition = first_partition + i
        shift = partition // n
        first = (start + i) % n
        leader = order[first]
        replicas = [leader]
        if replication_factor > 1:
            if rack_aware:
                used_racks = {racks[leader]}
                used = {leader}
                k = 0
                while len(replicas) < replication_factor:
                    if k > 2 * n:  # cannot happen: every other broker is visited
                        raise PlacementError(f"no replica found for partition {partition}")
                    broker = order[_replica_index(first, shift * num_racks, k, n)]
                    k += 1
                    rack = racks[broker]
                    if broker in used:
                        continue
                    if rack in used_racks and len(used_racks) < num_racks:
                        continue
                    replicas.append(broker)
                    used.add(broker)
                    used_racks.add(rack)
            else:
                replicas += [
                    order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
                ]
        result.append(replicas)
    return result
