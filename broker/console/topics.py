"""The topics pages: `/topics` (every topic the principal may describe, with partitions,
replication factor and this broker's bytes of it) and `/topics/NAME` (partitions with
leader, epoch, replicas, ISR, offsets and size; configs with their defaults marked)."""

from __future__ import annotations

from http import HTTPStatus
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.console.actions import create_topic_form, topic_action_forms
from raftka.broker.console.html import (
    Row,
    definitions,
    join,
    link,
    quote,
    section,
    size_text,
    table,
    tag,
)
from raftka.broker.console.overview import NO_LEADER, partition_health
from raftka.broker.console.page_reads import ReplicaProgress, local_progress
from raftka.broker.console.view import PageError
from raftka.broker.handlers.metadata import partition_leader

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse
    from raftka.broker.topics import Partition

#: DescribeConfigs' config_source values (Kafka's ConfigSource) as the page names them.
CONFIG_SOURCES = MappingProxyType(
    {
        1: "set on the topic",
        2: "broker (this broker's dynamic config)",
        3: "broker (cluster-wide dynamic default)",
        4: "broker (static config)",
        5: "default",
        6: "broker logger",
    }
)
DEFAULT_CONFIG = 5


def hosted(view: View, topic: str, index: int) -> Partition | None:
    """The partition when this broker holds a replica of it (its log is readable here)."""
    partition = view.services.topics.partition(topic, index)
    if partition is None or partition.log is None or partition.raft is None:
        return None
    return partition


async def leader_progress(view: View, topic: str, index: int) -> ReplicaProgress | None:
    """The followers' progress as the partition's leader knows it: this broker's when it
    leads, else asked of the leader; None when no leader answers."""
    partition = view.services.topics.partition(topic, index)
    if partition is None:
        return None
    progress = local_progress(partition)
    if progress is not None:
        return progress
    leader, _ = partition_leader(view.services.controller, partition)
    if leader < 0 or leader == view.services.identity.node_id or view.page_reads is None:
        return None
    try:
        return await view.page_reads.replica_progress(leader, topic, index)
    except OSError:
        return None


def lag_text(progress: ReplicaProgress | None) -> str:
    if progress is None:
        return "unknown (no leader answered)"
    lags = progress.lags
    return ", ".join(f"{node}: {lag:,}" for node, lag in lags.items()) or "no followers"


def low_watermark_text(progress: ReplicaProgress | None) -> str | int:
    """The partition's low watermark, and how far it is behind the leader's log start while
    a record deletion is still reaching a replica."""
    if progress is None:
        return "unknown"
    if progress.low_watermark >= progress.log_start:
        return progress.low_watermark
    behind = progress.log_start - progress.low_watermark
    return f"{progress.low_watermark} (deleting: {behind:,} offsets to go)"


async def topics_page(view: View, rates: dict[str, float] | None = None) -> HttpResponse:
    """`rates`: records produced through this broker per second, per topic (last minute)."""
    rates = rates or {}
    metadata = await view.caller.metadata()
    under, offline = partition_health(metadata.topics)
    under_by_topic = {name for name, _ in under} | {name for name, _ in offline}
    rows: list[Row] = []
    for topic in sorted(metadata.topics, key=lambda t: t.name or ""):
        name = topic.name or ""
        size = 0
        local = 0
        for p in topic.partitions:
            partition = hosted(view, name, int(p.partition_index))
            if partition is not None and partition.log is not None:
                size += partition.log.size_bytes
                local += 1
        replication = max((len(p.replica_nodes) for p in topic.partitions), default=0)
        rows.append(
            [
                link(f"/topics/{quote(name)}", name, class_="topic"),
                len(topic.partitions),
                replication,
                f"{size_text(size)} in {local} partitions here" if local else "none here",
                f"{rates.get(name, 0.0):,.1f}",
                tag("span", "under-replicated", class_="bad") if name in under_by_topic else "ok",
                link(f"/topics/{quote(name)}/messages", "messages"),
            ]
        )
    listing = (
        table(
            (
                "topic",
                "partitions",
                "replication factor",
                "size on this broker",
                "records/s in here",
                "health",
                "",
            ),
            rows,
            id="topics",
            data_live="1",
        )
        if rows
        else tag("p", "No topics (or none this principal may describe).")
    )
    return view.page("Topics", join([listing, create_topic_form(view)]))


async def _partition_row(view: View, name: str, p: Any) -> Row:
    index = int(p.partition_index)
    partition = hosted(view, name, index)
    if partition is None or partition.log is None:
        offsets: Row = ["not hosted here", "", "", ""]
    else:
        log = partition.log
        offsets = [
            log.log_start_offset,
            partition.high_watermark,
            log.log_end_offset,
            size_text(log.size_bytes),
        ]
    progress = await leader_progress(view, name, index)
    return [
        index,
        "none" if p.leader_id == NO_LEADER else int(p.leader_id),
        int(p.leader_epoch),
        ", ".join(str(r) for r in p.replica_nodes),
        ", ".join(str(r) for r in p.isr_nodes),
        lag_text(progress),
        low_watermark_text(progress),
        *offsets,
        link(f"/topics/{quote(name)}/messages?partition={index}", "messages"),
    ]


def _config_rows(configs: Any) -> list[Row]:
    rows: list[Row] = []
    for entry in sorted(configs, key=lambda c: c.name):
        source = int(entry.config_source)
        value = "(sensitive)" if entry.is_sensitive else entry.value
        rows.append(
            [
                tag("span", entry.name, title=entry.documentation),
                tag("code", value if value is not None else "null"),
                tag(
                    "span",
                    CONFIG_SOURCES.get(source, str(source)),
                    class_="default" if source == DEFAULT_CONFIG else "override",
                ),
            ]
        )
    return rows


async def topic_page(view: View, name: str) -> HttpResponse:
    metadata = await view.caller.metadata([name])
    found = [t for t in metadata.topics if t.name == name]
    if not found or found[0].error_code != ErrorCode.none:
        code = ErrorCode(found[0].error_code) if found else ErrorCode.unknown_topic_or_partition
        # Kafka answers an undescribable topic as it would a missing one.
        raise PageError(HTTPStatus.NOT_FOUND, f"topic {name!r}: {code.name.upper()}")
    topic = found[0]
    partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
    described = await view.caller.topic_configs(name)
    result = described.results[0]
    configs = (
        table(("config", "value", "source"), _config_rows(result.configs), id="configs")
        if result.error_code == ErrorCode.none
        else tag("p", f"{ErrorCode(result.error_code).name.upper()}: {result.error_message or ''}")
    )
    summary = definitions(
        [
            ("Topic id", str(topic.topic_id)),
            ("Partitions", len(partitions)),
            (
                "Replication factor",
                max((len(p.replica_nodes) for p in partitions), default=0),
            ),
            ("Internal", "yes" if topic.is_internal else "no"),
            ("Messages", link(f"/topics/{quote(name)}/messages", "browse")),
        ]
    )
    body = join(
        [
            summary,
            section(
                "Partitions",
                tag(
                    "p",
                    "Offsets and size are this broker's replica's; the log end may run ahead "
                    "of the high watermark until the replicas have it. Replica lag: the "
                    "offsets each follower lacks, as the partition's leader knows it. Low "
                    "watermark: the lowest log start of the leader and its live followers, "
                    "as the leader knows it; after records are deleted it rises to the "
                    "leader's log start as each replica deletes them.",
                    class_="note",
                ),
                table(
                    (
                        "partition",
                        "leader",
                        "leader epoch",
                        "replicas",
                        "in-sync replicas",
                        "replica lag",
                        "low watermark",
                        "log start",
                        "high watermark",
                        "log end",
                        "size",
                        "",
                    ),
                    [await _partition_row(view, name, p) for p in partitions],
                    id="partitions",
                    data_live="1",
                ),
            ),
            section("Configs", configs),
            topic_action_forms(view, name, len(partitions)),
        ]
    )
    return view.page(f"Topic {name}", body)
