"""The groups pages: `/groups` (the groups this broker coordinates that the principal may
describe) and `/groups/NAME` (state, members and their assignment, committed offsets and
lag per partition)."""

from __future__ import annotations

import dataclasses
import struct
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.console.calls import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP
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
from raftka.broker.console.offsets_reset import reset_form
from raftka.broker.console.share_groups import share_group_page
from raftka.broker.console.view import PageError

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
NO_OFFSET = -1


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """A consumer-protocol member assignment (Kafka's ConsumerProtocolAssignment, any
    version) as {topic: partitions}; None when it is not one."""
    try:
        pos = _I16.size  # the version
        (topics,) = _I32.unpack_from(data, pos)
        pos += _I32.size
        found: dict[str, list[int]] = {}
        for _ in range(max(topics, 0)):
            (length,) = _I16.unpack_from(data, pos)
            pos += _I16.size
            if length < 0 or pos + length > len(data):
                return None
            topic = data[pos : pos + length].decode("utf-8")
            pos += length
            (count,) = _I32.unpack_from(data, pos)
            pos += _I32.size
            if count < 0 or pos + count * _I32.size > len(data):
                return None
            found[topic] = [_I32.unpack_from(data, pos + i * _I32.size)[0] for i in range(count)]
            pos += count * _I32.size
        return found
    except (struct.error, UnicodeDecodeError):
        return None


def assignment_text(assignment: dict[str, list[int]] | None) -> str:
    if assignment is None:
        return "(not a consumer assignment)"
    return "; ".join(
        f"{topic}: {', '.join(str(p) for p in sorted(parts))}"
        for topic, parts in sorted(assignment.items())
    )


async def at_coordinator(view: View, group_id: str) -> View:
    """`view` with its calls answered by the broker coordinating `group_id` (this one's
    when it does, or when no coordinator is known)."""
    node = await view.caller.group_coordinator(group_id)
    if node < 0:
        return view
    return dataclasses.replace(view, caller=view.caller.at(node))


async def groups_page(view: View) -> HttpResponse:
    """The groups of every broker answering (each coordinates its own share of them)."""
    groups: dict[str, Any] = {}
    notes: list[Html] = []
    own = view.services.identity.node_id
    brokers = sorted({own, *view.services.controller.live_brokers()})
    for node in brokers:
        try:
            listed = await view.caller.at(node).list_groups()
        except OSError as exc:
            notes.append(tag("li", f"groups of broker {node} not shown: {exc}"))
            continue
        if listed.error_code != ErrorCode.none:
            code = ErrorCode(listed.error_code).name.upper()
            notes.append(tag("li", f"broker {node}: some groups are still loading ({code})"))
        for g in listed.groups:
            groups[g.group_id] = g
    rows: list[Row] = [
        [
            link(f"/groups/{quote(g.group_id)}", g.group_id, class_="group"),
            g.group_type or "classic",
            g.protocol_type,
            g.group_state,
        ]
        for g in sorted(groups.values(), key=lambda g: g.group_id)
    ]
    note = tag("ul", *notes, class_="notes") if notes else None
    body = join(
        [
            note,
            table(("group", "type", "protocol type", "state"), rows, id="groups")
            if rows
            else tag("p", "No groups here."),
        ]
    )
    return view.page("Groups", body, live=True)


async def _lag_rows(view: View, group_id: str) -> tuple[list[Row], int, list[str]]:
    """Committed offset, end offset and lag per partition, the total lag known, and the
    topics the group has committed offsets of."""
    fetched = await view.caller.committed_offsets(group_id)
    if fetched.error_code != ErrorCode.none:
        raise PageError(
            HTTPStatus.FORBIDDEN
            if fetched.error_code == ErrorCode.group_authorization_failed
            else HTTPStatus.SERVICE_UNAVAILABLE,
            f"group {group_id!r}: {ErrorCode(fetched.error_code).name.upper()}",
        )
    rows: list[Row] = []
    total = 0
    for topic in sorted(fetched.topics, key=lambda t: t.name):
        indexes = [int(p.partition_index) for p in topic.partitions]
        ends = await view.caller.list_offsets(
            topic.name, indexes, LATEST_TIMESTAMP, CONSUMER_REPLICA_ID
        )
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            index = int(p.partition_index)
            committed = int(p.committed_offset)
            error, end = ends.get(index, (ErrorCode.unknown_topic_or_partition, NO_OFFSET))
            if error != ErrorCode.none or committed < 0:
                end_text: str | int = end if error == ErrorCode.none else "not led here"
                lag: Html | str | int = "?"
            else:
                end_text = end
                lag = max(end - committed, 0)
                total += lag
            rows.append(
                [
                    link(f"/topics/{quote(topic.name)}", topic.name),
                    index,
                    committed if committed >= 0 else "none",
                    end_text,
                    tag("span", lag, class_="lag"),
                ]
            )
    return rows, total, sorted({t.name for t in fetched.topics})


def _classic_members(group: Any) -> list[Row]:
    return [
        [
            m.member_id,
            m.group_instance_id or "",
            m.client_id,
            m.client_host,
            assignment_text(decode_assignment(bytes(m.member_assignment)))
            if group.protocol_type == "consumer"
            else f"{len(m.member_assignment)} bytes",
        ]
        for m in group.members
    ]


def _consumer_members(group: Any) -> list[Row]:
    """Members of a consumer-protocol group with the partitions assigned to each."""
    return [
        [
            m.member_id,
            m.instance_id or "",
            m.client_id,
            m.client_host,
            assignment_text(
                {tp.topic_name: list(tp.partitions) for tp in m.assignment.topic_partitions}
            ),
        ]
        for m in group.members
    ]


def _refused(group_id: str, code: ErrorCode) -> PageError:
    if code == ErrorCode.group_authorization_failed:
        return PageError(HTTPStatus.FORBIDDEN, f"not authorized to describe group {group_id!r}")
    return PageError(HTTPStatus.SERVICE_UNAVAILABLE, f"group {group_id!r}: {code.name.upper()}")


async def group_page(view: View, group_id: str) -> HttpResponse:
    """A classic group (DescribeGroups) or, when there is none of that name, a group of the
    consumer protocol (ConsumerGroupDescribe), else a share group (ShareGroupDescribe), as
    the broker coordinating it answers."""
    view = await at_coordinator(view, group_id)
    described = await view.caller.describe_groups([group_id])
    group = described.groups[0]
    code = ErrorCode(group.error_code)
    facts: list[tuple[str, Content]]
    if code == ErrorCode.none and group.group_state not in ("", "Dead"):
        members = _classic_members(group)
        facts = [
            ("Type", "classic"),
            ("State", tag("span", group.group_state, id="group-state")),
            ("Protocol type", group.protocol_type or "none"),
            ("Assignor", group.protocol_data or "none"),
        ]
    elif code in (ErrorCode.none, ErrorCode.group_id_not_found):
        found = (await view.caller.describe_consumer_groups([group_id])).groups[0]
        found_code = ErrorCode(found.error_code)
        if found_code == ErrorCode.none:
            members = _consumer_members(found)
            facts = [
                ("Type", "consumer (KIP-848)"),
                ("State", tag("span", found.group_state, id="group-state")),
                ("Group epoch", int(found.group_epoch)),
                ("Assignor", found.assignor_name or "none"),
            ]
        elif found_code in (ErrorCode.group_id_not_found, ErrorCode.unsupported_version):
            shared = (await view.caller.describe_share_groups([group_id])).groups[0]
            if shared.error_code == ErrorCode.none:
                return await share_group_page(view, shared)
            members = []
            facts = [("State", tag("span", "Dead", id="group-state"))]
        else:
            raise _refused(group_id, found_code)
    else:
        raise _refused(group_id, code)
    lag_rows, total, lag_topics = await _lag_rows(view, group_id)
    summary = tag(
        "div",
        definitions(
            [
                *facts,
                ("Members", len(members)),
                ("Total lag", tag("span", total, id="total-lag")),
            ]
        ),
        id="group-summary",
        data_live="1",
    )
    body = join(
        [
            summary,
            section(
                "Members",
                table(
                    ("member", "instance", "client", "host", "assignment"),
                    members,
                    id="members",
                    data_live="1",
                )
                if members
                else tag("p", "No members."),
            ),
            section(
                "Offsets and lag",
                table(
                    ("topic", "partition", "committed offset", "end offset", "lag"),
                    lag_rows,
                    id="lag",
                    data_live="1",
                )
                if lag_rows
                else tag("p", "No committed offsets."),
            ),
            reset_form(view, group_id, lag_topics),
        ]
    )
    return view.page(f"Group {group_id}", body)
