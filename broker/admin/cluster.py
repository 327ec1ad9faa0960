"""`raftka cluster status`: brokers, the controller, and every partition's leader, leader
epoch, ISR and replica lag, with under-replicated (ISR smaller than the replica set) and
offline (no leader) partitions listed and counted, and each broker's log directories that an
I/O error took offline (from DescribeLogDirs); the brokers are also added up by host (their
rack, else their advertised host), for `raftka serve --shards`; internal topics' partitions
are counted but listed only when asked for."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TextIO

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.membership import describe_quorum
from raftka.broker.admin.partitions import (
    PROBE_TIMEOUT_MAX_S,
    ReplicaLag,
    answering,
    format_lag,
    leader_epochs,
    partition_states,
    with_leader_epochs,
    with_replica_lag,
)
from raftka.broker.admin.wire import WireCluster, WireConnection, WireError
from raftka.broker.topics import INTERNAL_TOPICS

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient


def _racks(target: Target, admin: AdminClient) -> tuple[dict[int, str | None], str | None]:
    """Broker id -> rack, and the cluster id, from DescribeCluster (Metadata in the Python
    client carries neither); empty when the broker does not serve DescribeCluster."""
    from confluent_kafka import KafkaException

    try:
        described = admin.describe_cluster(request_timeout=target.timeout_s).result(
            timeout=target.timeout_s + 5
        )
    except (KafkaException, TimeoutError):
        return {}, None
    return {n.id: n.rack for n in described.nodes}, described.cluster_id


DESCRIBE_LOG_DIRS_KEY = 35
KAFKA_STORAGE_ERROR = 56


def _offline_log_dirs(target: Target, address: str) -> list[str] | None:
    """The broker's log directories answered with KAFKA_STORAGE_ERROR (offline after an I/O
    error), from DescribeLogDirs asking for no partitions; None if it did not answer."""
    try:
        with WireConnection(
            address, min(target.timeout_s, PROBE_TIMEOUT_MAX_S), target.security
        ) as conn:
            response = conn.request(DESCRIBE_LOG_DIRS_KEY, {"topics": ()})
    except WireError:
        return None
    return [r.log_dir for r in response.results if r.error_code == KAFKA_STORAGE_ERROR]


def cluster_status(target: Target, include_internal: bool = False) -> Document:
    """The status document; internal topics' partitions are left out of its partition
    list unless `include_internal` (they count, and show among the problems, either way)."""
    admin = target.admin()  # kept referenced: a collected client cancels its requests
    metadata = target.metadata(admin)
    racks, cluster_id = _racks(target, admin)
    with WireCluster(target) as wire:
        # Epochs come from a Metadata answer of our own: the Python client does not expose them.
        by_partition = with_leader_epochs(
            partition_states(metadata), leader_epochs(wire.metadata())
        )
        by_partition = with_replica_lag(target, wire, by_partition)
        addresses = {node: b.address for node, b in wire.brokers.items()}
    offline_dirs: dict[int, list[str] | None] = {}
    if addresses:
        nodes = sorted(addresses)
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            found = pool.map(lambda n: _offline_log_dirs(target, addresses[n]), nodes)
            offline_dirs = dict(zip(nodes, found, strict=True))
    states = list(by_partition.values())
    answered = answering(target, metadata)
    quorum = _quorum(target)
    roles = _metadata_roles(quorum)
    brokers = []
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        brokers.append(
            {
                "id": broker.id,
                "host": broker.host,
                "port": broker.port,
                "rack": racks.get(broker.id),
                "in_metadata": True,
                "answers": answered.get(broker.id, False),
                "metadata_role": roles.get(broker.id),
                "leads": sum(1 for s in states if s.leader == broker.id),
                "replicas": sum(1 for s in states if broker.id in s.replicas),
                "offline_log_dirs": offline_dirs.get(broker.id) or [],
            }
        )
    # A broker gone from Metadata still shows through the replica sets naming it.
    listed = {b["id"] for b in brokers}
    for broker_id in sorted({r for s in states for r in s.replicas} - listed):
        brokers.append(
            {
                "id": broker_id,
                "host": None,
                "port": None,
                "rack": None,
                "in_metadata": False,
                "answers": False,
                "metadata_role": roles.get(broker_id),
                "leads": sum(1 for s in states if s.leader == broker_id),
                "replicas": sum(1 for s in states if broker_id in s.replicas),
                "offline_log_dirs": [],
            }
        )
    offline_log_dirs = [
        {"broker": node, "log_dir": d} for node, dirs in offline_dirs.items() for d in dirs or ()
    ]
    under_replicated = [s.as_json() for s in states if s.under_replicated]
    offline = [s.as_json() for s in states if s.offline]
    hosts = hosts_of(brokers)
    return {
        "cluster_id": cluster_id,
        # The quorum's leader as DescribeQuorum says (-1 during an election); Metadata's
        # controller id names a broker that forwards to it, which is not always the leader.
        "controller_id": metadata.controller_id if quorum is None else quorum["leader"],
        "brokers": brokers,
        "hosts": hosts,
        "partitions": [
            s.as_json() for s in states if include_internal or s.topic not in INTERNAL_TOPICS
        ],
        "internal_partitions_hidden": 0
        if include_internal
        else sum(1 for s in states if s.topic in INTERNAL_TOPICS),
        "under_replicated_partitions": under_replicated,
        "offline_partitions": offline,
        "offline_log_dirs": offline_log_dirs,
        "counts": {
            "brokers": len(brokers),
            "brokers_answering": sum(1 for b in brokers if b["answers"]),
            "hosts": len(hosts),
            "partitions": len(states),
            "under_replicated": len(under_replicated),
            "offline": len(offline),
            "offline_log_dirs": len(offline_log_dirs),
        },
    }


def hosts_of(brokers: list[Document]) -> list[Document]:
    """The brokers added up by host: a broker's host is its rack when it has one (`raftka
    serve --shards` sets `broker.rack` to the host name), else its advertised host; a broker
    missing from Metadata has neither and falls under host null. A rack and an address of the
    same name stay apart (`"by"` says which). Hosts in order of their lowest broker id."""
    grouped: dict[tuple[str | None, str | None], list[Document]] = {}
    for broker in brokers:
        if broker.get("rack"):
            key: tuple[str | None, str | None] = ("rack", broker["rack"])
        elif broker.get("host"):
            key = ("address", broker["host"])
        else:
            key = (None, None)
        grouped.setdefault(key, []).append(broker)
    hosts = []
    for (by, name), members in grouped.items():
        members = sorted(members, key=lambda b: b["id"])
        hosts.append(
            {
                "host": name,
                "by": by,
                "brokers": [b["id"] for b in members],
                "brokers_answering": sum(1 for b in members if b["answers"]),
                "leads": sum(b["leads"] for b in members),
                "replicas": sum(b["replicas"] for b in members),
                "offline_log_dirs": [
                    {"broker": b["id"], "log_dir": d}
                    for b in members
                    for d in b.get("offline_log_dirs") or ()
                ],
            }
        )
    return sorted(hosts, key=lambda h: h["brokers"][0])


def _quorum(target: Target) -> Document | None:
    """The metadata quorum (DescribeQuorum); None when no broker answers it."""
    try:
        return describe_quorum(target)
    except (AdminError, WireError, OSError):
        return None


def _metadata_roles(quorum: Document | None) -> dict[int, str]:
    """Broker id -> "voter" or "observer" of the metadata quorum; empty when no broker
    answered DescribeQuorum (the roles are then left blank)."""
    if quorum is None:
        return {}
    roles = dict.fromkeys(quorum["observers"], "observer")
    roles.update(dict.fromkeys(quorum["voters"], "voter"))
    return roles


def _broker_status(broker: Document) -> str:
    if not broker["in_metadata"]:
        return "not in metadata"
    if not broker["answers"]:
        return "not answering"
    return "up, log dir offline" if broker.get("offline_log_dirs") else "up"


def print_status(document: Document, out: TextIO) -> None:
    counts = document["counts"]
    print(
        f"Cluster {document['cluster_id'] or '-'}: {counts['brokers']} brokers "
        f"({counts['brokers_answering']} answering), controller {document['controller_id']}, "
        f"{counts['partitions']} partitions, {counts['under_replicated']} under-replicated, "
        f"{counts['offline']} offline",
        file=out,
    )
    print(file=out)
    print_table(
        ["BROKER", "HOST:PORT", "RACK", "STATUS", "METADATA", "CONTROLLER", "LEADERS", "REPLICAS"],
        [
            [
                b["id"],
                f"{b['host']}:{b['port']}" if b["in_metadata"] else "-",
                b["rack"],
                _broker_status(b),
                b.get("metadata_role") or "",
                "yes" if b["id"] == document["controller_id"] else "",
                b["leads"],
                b["replicas"],
            ]
            for b in document["brokers"]
        ],
        out,
    )
    hosts = document.get("hosts", [])
    # Only where a host runs several brokers (shards) does a per-host table say anything new.
    if any(len(h["brokers"]) > 1 for h in hosts):
        print(file=out)
        print_table(
            ["HOST", "BROKERS", "ANSWERING", "LEADERS", "REPLICAS", "OFFLINE LOG DIRS"],
            [
                [
                    h["host"] or "-",
                    ",".join(map(str, h["brokers"])),
                    f"{h['brokers_answering']}/{len(h['brokers'])}",
                    h["leads"],
                    h["replicas"],
                    len(h["offline_log_dirs"]),
                ]
                for h in hosts
            ],
            out,
        )
    print(file=out)
    print_table(
        ["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LAG", "STATUS"],
        [
            [
                p["topic"],
                p["partition"],
                p["leader"] if p["leader"] >= 0 else "none",
                p["leader_epoch"],
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                format_lag(ReplicaLag(**r) for r in p["replica_lag"]),
                p["status"],
            ]
            for p in document["partitions"]
        ],
        out,
    )
    hidden = document.get("internal_partitions_hidden", 0)
    if hidden:
        print(f"({hidden} partitions of internal topics not listed: --include-internal)", file=out)
    for title, key in (
        ("Under-replicated partitions", "under_replicated_partitions"),
        ("Offline partitions", "offline_partitions"),
    ):
        listed = document[key]
        names = ", ".join(f"{p['topic']}[{p['partition']}]" for p in listed) or "none"
        print(f"\n{title} ({len(listed)}): {names}", file=out)
    dirs = document.get("offline_log_dirs", [])
    names = ", ".join(f"{d['log_dir']} (broker {d['broker']})" for d in dirs) or "none"
    print(f"\nOffline log directories ({len(dirs)}): {names}", file=out)
