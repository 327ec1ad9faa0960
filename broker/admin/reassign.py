"""`raftka partitions reassign` and `raftka partitions reassignments`: move partitions to
other brokers (AlterPartitionReassignments), cancel a move, list the moves in progress
(ListPartitionReassignments), over the raw protocol.

`--throttle BYTES_PER_S` sets the cluster-wide dynamic `leader.replication.throttled.rate`
and marks the current replicas of the moved partitions in their topic's
`leader.replication.throttled.replicas` (Kafka's PARTITION:BROKER format), so their leaders
send to the added replicas at most that many bytes per second, as Kafka's
kafka-reassign-partitions.sh --throttle does (per broker there).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from kio.index import load_request_schema

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.wire import Entity, WireCluster
from raftka.protocol.api import schema_module

if TYPE_CHECKING:
    from raftka.broker.admin.common import Subcommands

ALTER_REASSIGNMENTS_KEY = 45
LIST_REASSIGNMENTS_KEY = 46
INCREMENTAL_ALTER_CONFIGS_KEY = 44
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SET = 0
THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
THROTTLE_RATE = "leader.replication.throttled.rate"

#: (topic, partition, target replicas or None to cancel)
Move = tuple[str, int, tuple[int, ...] | None]


def _error_name(code: object) -> str:
    return str(getattr(code, "name", code)).upper()


def parse_move(text: str) -> Move:
    """TOPIC:PARTITION=BROKER,BROKER,... (a target) or TOPIC:PARTITION (a cancel)."""
    where, sep, brokers = text.partition("=")
    topic, colon, index = where.rpartition(":")
    try:
        partition = int(index)
        target = tuple(int(b) for b in brokers.split(",")) if sep else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected TOPIC:PARTITION=BROKER[,BROKER...], got {text!r}"
        ) from None
    if not colon or not topic or partition < 0:
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION[=BROKERS], got {text!r}")
    return topic, partition, target


def reassign(target: Target, moves: Sequence[Move], throttle: int | None) -> Document:
    """AlterPartitionReassignments for `moves`; AdminError names every refused partition."""
    with WireCluster(target) as cluster:
        connection = cluster.any_connection()
        if throttle is not None and any(m[2] is not None for m in moves):
            _throttle(cluster, [m for m in moves if m[2] is not None], throttle)
        version = connection.version_for(ALTER_REASSIGNMENTS_KEY)
        module = schema_module(load_request_schema(ALTER_REASSIGNMENTS_KEY, version))
        by_topic: dict[str, list[Entity]] = {}
        for topic, partition, replicas in moves:
            by_topic.setdefault(topic, []).append(
                module.ReassignablePartition(partition_index=partition, replicas=replicas)
            )
        response = connection.request(
            ALTER_REASSIGNMENTS_KEY,
            {
                "timeout": timedelta(seconds=target.timeout_s),
                "topics": tuple(
                    module.ReassignableTopic(name=name, partitions=tuple(items))
                    for name, items in by_topic.items()
                ),
            },
            version=version,
        )
    if response.error_code:
        raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")
    results = [
        {
            "topic": str(t.name),
            "partition": int(p.partition_index),
            "error": _error_name(p.error_code) if p.error_code else None,
            "message": p.error_message,
        }
        for t in response.responses
        for p in t.partitions
    ]
    refused = [r for r in results if r["error"]]
    if refused:
        raise AdminError(
            "; ".join(
                f"{r['topic']}-{r['partition']}: {r['error']}: {r['message']}" for r in refused
            )
        )
    wanted = {(t, p): r for t, p, r in moves}
    return {
        "reassignments": [
            {
                "topic": r["topic"],
                "partition": r["partition"],
                "replicas": None
                if wanted[r["topic"], r["partition"]] is None
                else list(wanted[r["topic"], r["partition"]] or ()),
            }
            for r in sorted(results, key=lambda r: (r["topic"], r["partition"]))
        ],
        "throttle_bytes_per_s": throttle,
    }


def _throttle(cluster: WireCluster, moves: Sequence[Move], rate_bytes_per_s: int) -> None:
    """Set the cluster-wide leader.replication.throttled.rate and each moved topic's
    leader.replication.throttled.replicas to the current replicas of its moved partitions
    (the leaders that send to the added replicas), with IncrementalAlterConfigs."""
    topics = sorted({m[0] for m in moves})
    metadata = cluster.metadata(topics)
    current = {
        (str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
        for t in metadata.topics
        if not t.error_code
        for p in t.partitions
    }
    pairs: dict[str, list[str]] = {}
    for topic, partition, _ in moves:
        for broker in current.get((topic, partition), []):
            pairs.setdefault(topic, []).append(f"{partition}:{broker}")
    connection = cluster.any_connection()
    version = connection.version_for(INCREMENTAL_ALTER_CONFIGS_KEY)
    module = schema_module(load_request_schema(INCREMENTAL_ALTER_CONFIGS_KEY, version))

    def resource(kind: int, name: str, config: str, value: str) -> Entity:
        entry = module.AlterableConfig(name=config, config_operation=SET, value=value)
        return module.AlterConfigsResource(resource_type=kind, resource_name=name, configs=(entry,))

    resources = [resource(RESOURCE_BROKER, "", THROTTLE_RATE, str(rate_bytes_per_s))] + [
        resource(RESOURCE_TOPIC, topic, THROTTLED_REPLICAS, ",".join(listed))
        for topic, listed in sorted(pairs.items())
    ]
    response = connection.request(
        INCREMENTAL_ALTER_CONFIGS_KEY,
        {"resources": tuple(resources), "validate_only": False},
        version=version,
    )
    refused = [r for r in response.responses if r.error_code]
    if refused:
        raise AdminError(
            "; ".join(
                f"setting the throttle of {r.resource_name or 'the cluster'}: "
                f"{_error_name(r.error_code)}: {r.error_message}"
                for r in refused
            )
        )


def list_reassignments(target: Target) -> Document:
    with WireCluster(target) as cluster:
        return reassignments_in(cluster)


def reassignments_in(cluster: WireCluster) -> Document:
    """The moves in progress, as the first broker of `cluster` that answers knows them."""
    connection = cluster.any_connection()
    response = connection.request(
        LIST_REASSIGNMENTS_KEY,
        {"timeout": timedelta(seconds=cluster.target.timeout_s), "topics": None},
    )
    if response.error_code:
        raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")
    return {
        "reassignments": sorted(
            (
                {
                    "topic": str(t.name),
                    "partition": int(p.partition_index),
                    "replicas": [int(r) for r in p.replicas],
                    "adding": [int(r) for r in p.adding_replicas],
                    "removing": [int(r) for r in p.removing_replicas],
                }
                for t in response.topics
                for p in t.partitions
            ),
            key=lambda r: (r["topic"], r["partition"]),
        )
    }


def print_reassigned(document: Document, out: TextIO) -> None:
    print_table(
        ["TOPIC", "PARTITION", "TARGET"],
        [
            [
                r["topic"],
                r["partition"],
                "cancelled" if r["replicas"] is None else ",".join(map(str, r["replicas"])),
            ]
            for r in document["reassignments"]
        ],
        out,
    )


def print_reassignments(document: Document, out: TextIO) -> None:
    moves = document["reassignments"]
    if not moves:
        print("No reassignment is in progress.", file=out)
        return
    print_table(
        ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
        [
            [
                r["topic"],
                r["partition"],
                ",".join(map(str, r["replicas"])),
                ",".join(map(str, r["adding"])) or None,
                ",".join(map(str, r["removing"])) or None,
            ]
            for r in moves
        ],
        out,
    )


def _rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes/s, got {text!r}")
    return value


def _check_reassign(args: argparse.Namespace) -> str | None:
    if args.cancel:
        if any(m[2] is not None for m in args.cancel):
            return "--cancel takes TOPIC:PARTITION without =BROKERS"
        if args.move:
            return "give moves or --cancel, not both"
        return None
    if not args.move:
        return "give at least one TOPIC:PARTITION=BROKERS, or --cancel TOPIC:PARTITION"
    if any(m[2] is None for m in args.move):
        return "a move needs =BROKERS (to cancel one, use --cancel TOPIC:PARTITION)"
    return None


def add_parser(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("partitions", help="move partitions to other brokers")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    moving = actions.add_parser(
        "reassign",
        parents=[common],
        help="move partitions to other brokers, or cancel a move (AlterPartitionReassignments)",
    )
    moving.add_argument(
        "move", nargs="*", type=parse_move, metavar="TOPIC:PARTITION=BROKERS", default=[]
    )
    moving.add_argument(
        "--cancel",
        action="append",
        type=parse_move,
        metavar="TOPIC:PARTITION",
        help="cancel this partition's move (repeatable)",
    )
    moving.add_argument(
        "--throttle",
        type=_rate,
        metavar="BYTES_PER_S",
        help=f"set {THROTTLE_RATE} (cluster-wide) and mark the moved partitions' current "
        f"replicas in their topic's {THROTTLED_REPLICAS}: their leaders send to the added "
        "replicas at most that many bytes per second",
    )
    moving.set_defaults(
        check=_check_reassign,
        parser=moving,
        run=lambda a, t: (reassign(t, a.cancel or a.move, a.throttle), print_reassigned),
    )
    listing = actions.add_parser(
        "reassignments",
        parents=[common],
        help="the moves in progress (ListPartitionReassignments)",
    )
    listing.set_defaults(run=lambda a, t: (list_reassignments(t), print_reassignments))
