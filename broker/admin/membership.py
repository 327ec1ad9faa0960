"""`raftka cluster quorum`, `add-voter`, `remove-voter` and `decommission`: the metadata
quorum (DescribeQuorum), its voter changes (AddRaftVoter, RemoveRaftVoter) and taking a
broker out of the cluster (its replicas moved off with AlterPartitionReassignments, then
RemoveRaftVoter if it votes, then UnregisterBroker)."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from kio.index import load_request_schema

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.reassign import reassign, reassignments_in
from raftka.broker.admin.wire import Fields, WireCluster, WireConnection, WireError
from raftka.broker.cluster.control.voters import voter_removal_problem, voter_removal_warning
from raftka.broker.cluster.decommission import plan_decommission
from raftka.broker.cluster.placement import PlacementError
from raftka.protocol.api import schema_module

if TYPE_CHECKING:
    from raftka.broker.admin.common import Subcommands

DESCRIBE_QUORUM_KEY = 55
UNREGISTER_BROKER_KEY = 64
ADD_RAFT_VOTER_KEY = 80
REMOVE_RAFT_VOTER_KEY = 81
METADATA_TOPIC = "__cluster_metadata"
#: How long `decommission` waits for the replicas to move unless --wait-timeout says.
DEFAULT_MOVE_TIMEOUT_S = 600.0
POLL_INTERVAL_S = 0.5


def _error_name(code: object) -> str:
    return str(getattr(code, "name", code)).upper()


def _controller_connection(cluster: WireCluster) -> WireConnection:
    """The connection to the broker Metadata names as the controller: the quorum's leader
    while the answering broker is in touch with it, else that broker (which asks the
    controller); any broker's if that one does not answer."""
    cluster.metadata(())
    if cluster.controller_id is not None:
        try:
            return cluster.to_node(cluster.controller_id)
        except WireError:
            pass
    return cluster.any_connection()


def describe_quorum(target: Target) -> Document:
    """DescribeQuorum of the metadata log, asked of the active controller."""
    with WireCluster(target) as cluster:
        connection = _controller_connection(cluster)
        version = connection.version_for(DESCRIBE_QUORUM_KEY)
        module = schema_module(load_request_schema(DESCRIBE_QUORUM_KEY, version))
        response = connection.request(
            DESCRIBE_QUORUM_KEY,
            {
                "topics": (
                    module.TopicData(
                        topic_name=METADATA_TOPIC,
                        partitions=(module.PartitionData(partition_index=0),),
                    ),
                )
            },
            version=version,
        )
    if getattr(response, "error_code", 0):
        raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")
    (partition,) = response.topics[0].partitions
    if partition.error_code:
        raise AdminError(f"{_error_name(partition.error_code)}: {partition.error_message}")
    replicas = (*partition.current_voters, *partition.observers)

    def per_replica(field: str) -> dict[str, int]:
        return {str(int(r.replica_id)): int(getattr(r, field, -1)) for r in replicas}

    return {
        "leader": int(partition.leader_id),
        "epoch": int(partition.leader_epoch),
        "high_watermark": int(partition.high_watermark),
        "voters": [int(r.replica_id) for r in partition.current_voters],
        "observers": [int(r.replica_id) for r in partition.observers],
        "log_end_offsets": per_replica("log_end_offset"),
        # The leader's wall-clock ms of each replica's last answer and of the last time it
        # held the leader's whole log (-1 unknown; DescribeQuorum v1+).
        "last_fetch_ms": per_replica("last_fetch_timestamp"),
        "last_caught_up_ms": per_replica("last_caught_up_timestamp"),
    }


def print_quorum(document: Document, out: TextIO) -> None:
    print(
        f"Metadata quorum: leader (controller) {document['leader']}, epoch {document['epoch']},"
        f" high watermark {document['high_watermark']}",
        file=out,
    )
    ends = document["log_end_offsets"]
    fetched = document.get("last_fetch_ms", {})
    caught_up = document.get("last_caught_up_ms", {})
    # The leader stamps its own entry with its clock's now: the ages need no local clock.
    now_ms = fetched.get(str(document["leader"]), -1)

    def ago(stamps: dict[str, int], node: int) -> str:
        stamp = stamps.get(str(node), -1)
        return "-" if stamp < 0 or now_ms < 0 else f"{max(now_ms - stamp, 0)} ms ago"

    rows = [
        [n, role, ends.get(str(n), -1), ago(fetched, n), ago(caught_up, n)]
        for role, nodes in (("voter", document["voters"]), ("observer", document["observers"]))
        for n in nodes
    ]
    print_table(["BROKER", "ROLE", "LOG END", "LAST ANSWER", "CAUGHT UP"], rows, out)


def _simple_call(target: Target, api_key: int, values: Fields) -> None:
    with WireCluster(target) as cluster:
        connection = cluster.any_connection()
        response = connection.request(api_key, values)
    if response.error_code:
        raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")


def add_voter(target: Target, node: int) -> Document:
    _simple_call(
        target,
        ADD_RAFT_VOTER_KEY,
        {
            "cluster_id": None,
            "timeout": timedelta(seconds=target.timeout_s),
            "voter_id": node,
            "voter_directory_id": None,
            "listeners": (),
        },
    )
    return {"broker": node, "voter": True, "quorum": describe_quorum(target)}


def remove_voter(target: Target, node: int, warn: TextIO | None = None) -> Document:
    quorum = describe_quorum(target)
    voters = frozenset(quorum["voters"])
    if node not in voters:
        raise AdminError(f"broker {node} is not a voter of the metadata quorum ({sorted(voters)})")
    problem = voter_removal_problem(voters, node)
    if problem is not None:
        raise AdminError(problem)
    warning = voter_removal_warning(voters, node)
    if warning is not None and warn is not None:
        print(f"warning: {warning}", file=warn)
    _simple_call(
        target,
        REMOVE_RAFT_VOTER_KEY,
        {"cluster_id": None, "voter_id": node, "voter_directory_id": None},
    )
    return {"broker": node, "voter": False, "warning": warning, "quorum": describe_quorum(target)}


def _placement(
    cluster: WireCluster,
) -> tuple[dict[int, str | None], dict[tuple[str, int], list[int]]]:
    """(broker id -> rack, (topic, partition) -> replicas) from one Metadata answer."""
    metadata = cluster.metadata()
    brokers = {int(b.node_id): b.rack for b in metadata.brokers}
    partitions = {
        (str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
        for t in metadata.topics
        if not t.error_code
        for p in t.partitions
    }
    return brokers, partitions


def decommission(
    target: Target, node: int, wait_timeout_s: float, progress: TextIO | None = None
) -> Document:
    """Move every replica off `node`, take it out of the metadata voters, unregister it."""
    quorum = describe_quorum(target)
    voters = frozenset(quorum["voters"])
    if node in voters:
        problem = voter_removal_problem(voters, node)
        if problem is not None:
            raise AdminError(f"{problem}; add another voter first (raftka cluster add-voter)")
    # Moves already under way off the broker (an earlier run) are waited for, not planned.
    # The moves are read before the placement, from the same broker's metadata image (which
    # only moves forward): a move that ends between the two reads is then listed and already
    # done, never missing from the list while its added replica still shows in the placement.
    with WireCluster(target) as cluster:
        moving = reassignments_in(cluster)["reassignments"]
        brokers, partitions = _placement(cluster)
    for move in moving:
        going_to = [r for r in move["replicas"] if r not in move["removing"]]
        if node not in going_to:
            partitions.pop((move["topic"], move["partition"]), None)
    try:
        plan = plan_decommission(node, partitions, brokers)
    except PlacementError as exc:
        raise AdminError(f"cannot decommission broker {node}: {exc}") from None
    if plan:
        reassign(target, [(t, p, replicas) for (t, p), replicas in sorted(plan.items())], None)
    deadline = time.monotonic() + wait_timeout_s
    reported = -1
    while True:
        with WireCluster(target) as cluster:
            _brokers, partitions = _placement(cluster)
        left = sorted(f"{t}-{p}" for (t, p), replicas in partitions.items() if node in replicas)
        if len(left) != reported and progress is not None:
            print(f"broker {node}: {len(left)} partitions left to move", file=progress)
            reported = len(left)
        if not left:
            break
        if time.monotonic() >= deadline:
            raise AdminError(
                f"broker {node} still hosts {len(left)} partitions after {wait_timeout_s:g} s"
                f" ({', '.join(left[:5])}); the moves go on: run the command again to wait"
                " (raftka partitions reassignments lists them)"
            )
        time.sleep(POLL_INTERVAL_S)
    warning = None
    if node in voters:
        warning = remove_voter(target, node, progress)["warning"]
    _simple_call(target, UNREGISTER_BROKER_KEY, {"broker_id": node})
    return {
        "broker": node,
        "moved": [
            {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())
        ],
        "left_voters": node in voters,
        "warning": warning,
        "unregistered": True,
    }


def print_decommissioned(document: Document, out: TextIO) -> None:
    print(
        f"Broker {document['broker']} decommissioned: {len(document['moved'])} partitions moved"
        + (", removed from the metadata voters" if document["left_voters"] else "")
        + ", unregistered. Stop its process now.",
        file=out,
    )


def print_voter_change(document: Document, out: TextIO) -> None:
    what = "is a voter" if document["voter"] else "is no longer a voter (an observer)"
    print(f"Broker {document['broker']} {what} of the metadata quorum.", file=out)
    print_quorum(document["quorum"], out)


def _broker_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a broker id, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a broker id, got {text!r}")
    return value


def add_parsers(actions: Subcommands, common: argparse.ArgumentParser) -> None:
    quorum = actions.add_parser(
        "quorum", parents=[common], help="the metadata quorum: controller, voters, observers"
    )
    quorum.set_defaults(run=lambda a, t: (describe_quorum(t), print_quorum))
    adding = actions.add_parser(
        "add-voter",
        parents=[common],
        help="make a registered broker a voter of the metadata quorum (AddRaftVoter)",
    )
    adding.add_argument("broker", type=_broker_id, metavar="BROKER_ID")
    adding.set_defaults(run=lambda a, t: (add_voter(t, a.broker), print_voter_change))
    removing = actions.add_parser(
        "remove-voter",
        parents=[common],
        help="make a voter of the metadata quorum an observer (RemoveRaftVoter)",
    )
    removing.add_argument("broker", type=_broker_id, metavar="BROKER_ID")
    removing.set_defaults(
        run=lambda a, t: (remove_voter(t, a.broker, sys.stderr), print_voter_change)
    )
    leaving = actions.add_parser(
        "decommission",
        parents=[common],
        help="move every replica off a broker, remove it from the metadata voters, unregister it",
    )
    leaving.add_argument("broker", type=_broker_id, metavar="BROKER_ID")
    leaving.add_argument(
        "--wait-timeout",
        type=float,
        default=DEFAULT_MOVE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for the replicas to move (default {DEFAULT_MOVE_TIMEOUT_S:g})",
    )
    leaving.set_defaults(
        run=lambda a, t: (
            decommission(t, a.broker, a.wait_timeout, sys.stderr),
            print_decommissioned,
        )
    )
