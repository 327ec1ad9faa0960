"""`raftka cluster elect-leaders`: move partition leadership back to preferred replicas (the
first of each replica list) with Kafka's ElectLeaders, over the raw protocol; the answer per
partition is printed (ELECTION_NOT_NEEDED: it already had its preferred leader).

`--all` asks for every partition, and then the broker leaves out of its answer those that
already have their preferred leader, as Kafka's kafka-leader-election.sh shows.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from kio.index import load_request_schema

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.wire import Entity, Fields, WireCluster
from raftka.protocol.api import schema_module

if TYPE_CHECKING:
    from raftka.broker.admin.common import Subcommands

ELECT_LEADERS_KEY = 43
ELECTION_TYPES = {"preferred": 0, "unclean": 1}
#: Share of the command's timeout the broker may spend waiting for the elections: the rest
#: is left for the answer to arrive.
BROKER_WAIT_SHARE = 0.8


def _error_name(code: object) -> str:
    return str(getattr(code, "name", code)).upper()


def elect_leaders(
    target: Target,
    topic: str | None,
    partitions: list[int] | None,
    election_type: str = "preferred",
) -> Document:
    """ElectLeaders for `partitions` of `topic` (every partition of it when None), or for
    every partition of the cluster when `topic` is None."""
    with WireCluster(target) as cluster:
        connection = cluster.any_connection()
        version = connection.version_for(ELECT_LEADERS_KEY)
        module = schema_module(load_request_schema(ELECT_LEADERS_KEY, version))
        topic_partitions: tuple[Entity, ...] | None = None
        if topic is not None:
            if partitions is None:
                metadata = cluster.metadata([topic])
                found = [t for t in metadata.topics if t.name == topic and not t.error_code]
                if not found:
                    raise AdminError(f"topic {topic!r} does not exist")
                partitions = sorted(p.partition_index for p in found[0].partitions)
            topic_partitions = (module.TopicPartitions(topic=topic, partitions=tuple(partitions)),)
        values: Fields = {
            "topic_partitions": topic_partitions,
            "timeout": timedelta(seconds=target.timeout_s * BROKER_WAIT_SHARE),
        }
        if version >= 1:
            values["election_type"] = ELECTION_TYPES[election_type]
        elif election_type != "preferred":
            raise AdminError(f"{connection.address} knows only preferred elections")
        response = connection.request(ELECT_LEADERS_KEY, values, version=version)
    top_error = getattr(response, "error_code", 0)
    results = [
        {
            "topic": result.topic,
            "partition": int(p.partition_id),
            "error": _error_name(p.error_code) if p.error_code else None,
            "message": p.error_message,
        }
        for result in response.replica_election_results
        for p in result.partition_result
    ]
    if top_error:
        first = next((r["message"] for r in results if r["message"]), None)
        raise AdminError(f"{_error_name(top_error)}" + (f": {first}" if first else ""))
    results.sort(key=lambda r: (r["topic"], r["partition"]))
    return {"election_type": election_type, "partitions": results}


def print_results(document: Document, out: TextIO) -> None:
    results = document["partitions"]
    if not results:
        print("Every partition already has its preferred leader.", file=out)
        return
    print_table(
        ["TOPIC", "PARTITION", "RESULT", "MESSAGE"],
        [[r["topic"], r["partition"], r["error"] or "ELECTED", r["message"]] for r in results],
        out,
    )


def add_parser(actions: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = actions.add_parser(
        "elect-leaders",
        parents=[common],
        help="move leadership back to preferred replicas (ElectLeaders)",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="TOPIC", help="this topic's partitions")
    which.add_argument("--all", action="store_true", help="every partition of the cluster")
    parser.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="only partition P of --topic (repeatable)",
    )
    parser.add_argument(
        "--election-type",
        choices=sorted(ELECTION_TYPES),
        default="preferred",
        help="preferred (default); unclean is refused: Raft never elects an out-of-date replica",
    )
    parser.set_defaults(
        check=lambda a: "--partition needs --topic" if a.partition and not a.topic else None,
        parser=parser,
        run=lambda a, t: (
            elect_leaders(t, a.topic, a.partition, a.election_type),
            print_results,
        ),
    )
