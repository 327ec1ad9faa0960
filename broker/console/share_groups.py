"""A share group's page (KIP-932): state and members as ShareGroupDescribe answers, each
share-partition's start offset and lag as DescribeShareGroupOffsets answers, and, for the
partitions this broker leads, the records in flight: how many are acquired (locked to a
member), available again, acknowledged or archived, and how many times they were delivered.
Only partitions DescribeShareGroupOffsets described for the console's principal are shown,
so its ACLs (DESCRIBE on the group and the topic) apply to the in-flight view too."""

from __future__ import annotations

import uuid
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.console.html import (
    Content,
    Html,
    Row,
    definitions,
    join,
    link,
    quote,
    section,
    table,
    tag,
)
from raftka.broker.console.offsets_reset import SHARE, reset_form
from raftka.broker.console.share_inflight import inflight_cells
from raftka.broker.console.view import PageError
from raftka.broker.handlers.metadata import partition_leader

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse
    from raftka.broker.share.partition import SharePartition

NOT_LED_HERE = "not led here"


def _members(group: Any) -> list[Row]:
    return [
        [
            m.member_id,
            m.client_id,
            m.client_host,
            int(m.member_epoch),
            ", ".join(m.subscribed_topic_names),
            "; ".join(
                f"{tp.topic_name}: {', '.join(str(p) for p in sorted(tp.partitions))}"
                for tp in sorted(m.assignment.topic_partitions, key=lambda tp: tp.topic_name)
            ),
        ]
        for m in sorted(group.members, key=lambda m: m.member_id)
    ]


async def _partitions(view: View, group_id: str) -> tuple[list[Row], int, list[str]]:
    """A row per described share-partition, the total lag known, and the topics."""
    answered = (await view.caller.share_offsets(group_id)).groups[0]
    code = ErrorCode(answered.error_code)
    if code != ErrorCode.none:
        status = (
            HTTPStatus.FORBIDDEN
            if code == ErrorCode.group_authorization_failed
            else HTTPStatus.SERVICE_UNAVAILABLE
        )
        raise PageError(status, f"share group {group_id!r}: {code.name.upper()}")
    led: dict[tuple[uuid.UUID, int], SharePartition] = {
        (key[1], key[2]): partition.state
        for key, partition in view.services.groups.share_partitions.describe(group_id)
    }
    rows: list[Row] = []
    total = 0
    for topic in sorted(answered.topics, key=lambda t: t.topic_name):
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            index = int(p.partition_index)
            if p.error_code != ErrorCode.none:
                error = ErrorCode(p.error_code).name.upper()
                cells: list[Content] = [error, "", "", "", "", "", ""]
            else:
                lag = int(p.lag)
                if lag >= 0:
                    total += lag
                state = led.get((topic.topic_id, index))
                if state is None:
                    cells = [int(p.start_offset), lag if lag >= 0 else "?"]
                    cells += await _inflight_elsewhere(view, group_id, topic, index)
                else:
                    cells = [state.start_offset, lag if lag >= 0 else "?", *inflight_cells(state)]
            rows.append(
                [link(f"/topics/{quote(topic.topic_name)}", topic.topic_name), index, *cells]
            )
    return rows, total, sorted({str(t.topic_name) for t in answered.topics})


async def _inflight_elsewhere(view: View, group_id: str, topic: Any, index: int) -> list[Content]:
    """The in-flight cells of a share-partition another broker leads, as that broker
    answers them (NOT_LED_HERE when it cannot be asked)."""
    partition = view.services.topics.partition(topic.topic_name, index)
    leader = -1
    if partition is not None:
        leader, _ = partition_leader(view.services.controller, partition)
    if leader < 0 or leader == view.services.identity.node_id or view.page_reads is None:
        return [NOT_LED_HERE, "", "", "", ""]
    try:
        cells = await view.page_reads.share_inflight(leader, group_id, topic.topic_id, index)
    except OSError:
        return [f"broker {leader} did not answer", "", "", "", ""]
    return list(cells)


async def share_group_page(view: View, group: Any) -> HttpResponse:
    """The page of a share group ShareGroupDescribe found (`group`, its DescribedGroup)."""
    group_id = str(group.group_id)
    members = _members(group)
    rows, total, topics = await _partitions(view, group_id)
    summary = tag(
        "div",
        definitions(
            [
                ("Type", "share (KIP-932)"),
                ("State", tag("span", group.group_state, id="group-state")),
                ("Group epoch", int(group.group_epoch)),
                ("Assignment epoch", int(group.assignment_epoch)),
                ("Members", len(members)),
                ("Total lag", tag("span", total, id="total-lag")),
            ]
        ),
        id="group-summary",
        data_live="1",
    )
    partitions: Html = (
        table(
            (
                "topic",
                "partition",
                "start offset",
                "lag",
                "acquired",
                "available",
                "acknowledged",
                "archived",
                "in flight by delivery count",
            ),
            rows,
            id="share-partitions",
            data_live="1",
        )
        if rows
        else tag("p", "No share-partitions yet.")
    )
    body = join(
        [
            summary,
            section(
                "Members",
                table(
                    ("member", "client", "host", "epoch", "subscribed", "assignment"),
                    members,
                    id="members",
                    data_live="1",
                )
                if members
                else tag("p", "No members."),
            ),
            section(
                "Share-partitions",
                tag(
                    "p",
                    "Lag: records past the start offset not yet acknowledged or archived. "
                    "Records in flight (between the start offset and the next offset to hand "
                    "out) are counted by state, and by how many times they were delivered "
                    "(COUNT: RECORDS), for the partitions this broker leads.",
                    class_="note",
                ),
                partitions,
            ),
            reset_form(view, group_id, topics, SHARE),
        ]
    )
    return view.page(f"Group {group_id}", body)
