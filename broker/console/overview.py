"""The overview page (`/`): is the cluster healthy? Its id, brokers, controller and metadata
quorum, and the partitions that are under-replicated or offline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftka.broker.console.html import Row, definitions, join, link, quote, section, table, tag
from raftka.broker.console.throughput import Throughput, chart

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

NO_LEADER = -1


def partition_health(topics: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(under-replicated, offline) partitions of a Metadata response's topics, as (topic
    name, partition entry): offline has no leader, under-replicated fewer in-sync replicas
    than replicas."""
    under: list[tuple[str, Any]] = []
    offline: list[tuple[str, Any]] = []
    for topic in topics:
        for p in topic.partitions:
            if p.leader_id == NO_LEADER:
                offline.append((topic.name, p))
            elif len(p.isr_nodes) < len(p.replica_nodes):
                under.append((topic.name, p))
    return under, offline


def _partition_rows(found: list[tuple[str, Any]]) -> list[Row]:
    return [
        [
            link(f"/topics/{quote(name)}", name),
            int(p.partition_index),
            "none" if p.leader_id == NO_LEADER else int(p.leader_id),
            ", ".join(str(r) for r in p.replica_nodes),
            ", ".join(str(r) for r in p.isr_nodes),
        ]
        for name, p in sorted(found, key=lambda item: (item[0], item[1].partition_index))
    ]


async def overview_page(
    view: View, throughput: Throughput, unreachable: frozenset[int] = frozenset()
) -> HttpResponse:
    """`unreachable`: the brokers this broker's peer connection cannot reach now."""
    services = view.services
    controller = services.controller
    metadata = await view.caller.metadata()
    registered = controller.image.brokers
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    not_answering: set[int] = set(unreachable)
    # Replicas a leader does not count in sync: a broker that stopped answering drops out
    # of the ISR of every partition it replicates within an election timeout.
    out_of_sync: dict[int, int] = {}
    for topic in metadata.topics:
        for p in topic.partitions:
            leaders[p.leader_id] = leaders.get(p.leader_id, 0) + 1
            for node in p.replica_nodes:
                replicas[node] = replicas.get(node, 0) + 1
            not_answering.update(int(node) for node in p.offline_replicas)
            for node in set(p.replica_nodes) - set(p.isr_nodes):
                out_of_sync[node] = out_of_sync.get(node, 0) + 1
    quorum = controller.quorum()
    broker_rows: list[Row] = []
    for node_id in sorted(registered):
        info = registered[node_id]
        lagging = out_of_sync.get(node_id, 0)
        if node_id in not_answering:
            status = "not answering"
        elif lagging:
            status = f"not in sync on {lagging} partitions"
        else:
            status = "up"
        roles = [
            role
            for role, holds in (
                ("controller", node_id == controller.controller_id),
                ("voter", node_id in quorum.voters),
                ("observer", node_id in quorum.observers),
                ("this broker", node_id == services.identity.node_id),
            )
            if holds
        ]
        broker_rows.append(
            [
                node_id,
                f"{info.host}:{info.port}",
                info.rack or "",
                tag("span", status, class_="ok" if status == "up" else "bad"),
                leaders.get(node_id, 0),
                replicas.get(node_id, 0),
                ", ".join(roles),
            ]
        )
    under, offline = partition_health(metadata.topics)
    partitions = sum(len(t.partitions) for t in metadata.topics)
    summary = definitions(
        [
            ("Cluster id", services.identity.cluster_id),
            ("Controller", "none" if controller.controller_id < 0 else controller.controller_id),
            (
                "Metadata quorum",
                f"leader {quorum.leader_id}, epoch {quorum.epoch}, high watermark "
                f"{quorum.high_watermark}, voters "
                + ", ".join(str(v) for v in sorted(quorum.voters)),
            ),
            ("Topics", link("/topics", str(len(metadata.topics)))),
            ("Partitions", partitions),
            (
                "Under-replicated partitions",
                tag("span", len(under), class_="bad" if under else "ok", id="under-replicated"),
            ),
            (
                "Offline partitions",
                tag("span", len(offline), class_="bad" if offline else "ok", id="offline"),
            ),
        ]
    )
    headings = ("topic", "partition", "leader", "replicas", "in-sync replicas")
    body = join(
        [
            summary,
            section(
                "Throughput of this broker, last 10 minutes",
                chart(throughput.rates(), services.clock.now_s()),
            ),
            section(
                "Brokers",
                table(
                    ("id", "address", "rack", "status", "leaders", "replicas", "role"),
                    broker_rows,
                    id="brokers",
                ),
            ),
            section(
                "Under-replicated partitions",
                table(headings, _partition_rows(under)) if under else tag("p", "None."),
            ),
            section(
                "Offline partitions",
                table(headings, _partition_rows(offline)) if offline else tag("p", "None."),
            ),
        ]
    )
    return view.page("Overview", body, live=True)
