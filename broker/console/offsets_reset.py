"""Resetting a group's committed offsets of a topic, as `raftka groups reset-offsets` does:
a dry run first (each partition's current and new offset), then the same form executed once
the group's name is typed. To the earliest or latest offset, an offset (held within the
log), or the first offset at or after a timestamp. The commit is an admin OffsetCommit, so
the group must have no members, and the ACLs of OffsetCommit apply. A share group's start
offsets are reset the same way, through AlterShareGroupOffsets (KIP-932; its group must have
no members either)."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.console.actions import CONFIRM_FIELD, CSRF_FIELD, outcome
from raftka.broker.console.calls import CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raftka.broker.console.html import Html, join, link, quote, section, table, tag, void
from raftka.broker.console.messages import parse_timestamp
from raftka.broker.console.view import PageError

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

TARGETS = ("earliest", "latest", "offset", "timestamp")


SHARE = "share"


def reset_form(view: View, group_id: str, topics: list[str], kind: str = "") -> Html:
    """The dry-run form of the group page (`kind` SHARE: of a share group's start offsets)."""
    options = [tag("option", target, value=target) for target in TARGETS]
    return section(
        "Reset start offsets" if kind == SHARE else "Reset offsets",
        tag(
            "form",
            void("input", type="hidden", name=CSRF_FIELD, value=view.csrf_token),
            void("input", type="hidden", name="kind", value=kind),
            tag(
                "label",
                "topic ",
                void("input", name="topic", required="", value=topics[0] if topics else ""),
            ),
            tag("label", "to ", tag("select", *options, name="to")),
            tag("label", "offset or timestamp ", void("input", name="value", size=24)),
            tag("button", "Preview (dry run)", type="submit"),
            method="post",
            action=f"/groups/{quote(group_id)}/reset",
            class_="controls action",
        ),
        id="reset",
    )


async def _current(view: View, group_id: str, topic: str, share: bool) -> dict[int, int]:
    """Partition -> the group's committed offset (a share group's start offset)."""
    if share:
        described = (await view.caller.share_offsets(group_id)).groups[0]
        return {
            int(p.partition_index): int(p.start_offset)
            for t in described.topics
            if t.topic_name == topic
            for p in t.partitions
            if p.error_code == ErrorCode.none
        }
    fetched = await view.caller.committed_offsets(group_id)
    return {
        int(p.partition_index): int(p.committed_offset)
        for t in fetched.topics
        if t.name == topic
        for p in t.partitions
    }


async def _plan(
    view: View, group_id: str, topic: str, to: str, value: str, share: bool
) -> list[list[int]]:
    """[partition, current offset (-1: none), new offset] of each partition of the topic."""
    metadata = await view.caller.metadata([topic])
    found = [t for t in metadata.topics if t.name == topic and t.error_code == ErrorCode.none]
    if not found:
        raise PageError(HTTPStatus.NOT_FOUND, f"no topic {topic!r} this principal may describe")
    partitions = sorted(int(p.partition_index) for p in found[0].partitions)
    current = await _current(view, group_id, topic, share)

    async def offsets(timestamp: int) -> dict[int, int]:
        answered = await view.caller.list_offsets(topic, partitions, timestamp, CONSUMER_REPLICA_ID)
        for partition, (error, _) in answered.items():
            if error != ErrorCode.none:
                name = ErrorCode(error).name.upper()
                raise PageError(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"partition {partition}: {name} (reset from the console of its leader)",
                )
        return {partition: offset for partition, (_, offset) in answered.items()}

    earliest = await offsets(EARLIEST_TIMESTAMP)
    latest = await offsets(LATEST_TIMESTAMP)
    if to == "earliest":
        wanted = earliest
    elif to == "latest":
        wanted = latest
    elif to == "offset":
        if not value.strip().isdigit():
            raise PageError(HTTPStatus.BAD_REQUEST, f"offset: not a whole number: {value!r}")
        # Held within the log, as Kafka's tool does.
        wanted = {p: min(max(int(value), earliest[p]), latest[p]) for p in partitions}
    elif to == "timestamp":
        found_at = await offsets(parse_timestamp(value))
        wanted = {p: latest[p] if found_at[p] < 0 else found_at[p] for p in partitions}
    else:
        raise PageError(HTTPStatus.BAD_REQUEST, f"to: one of {', '.join(TARGETS)}")
    return [[p, current.get(p, -1), wanted[p]] for p in partitions]


async def reset_offsets(view: View, group_id: str) -> HttpResponse:
    form = view.form
    topic = form.get("topic", "").strip()
    to = form.get("to", "")
    value = form.get("value", "")
    kind = SHARE if form.get("kind") == SHARE else ""
    plan = await _plan(view, group_id, topic, to, value, kind == SHARE)
    back = tag("p", link(f"/groups/{quote(group_id)}", f"← group {group_id}"))
    if form.get("execute") != "1":
        rows = [[topic, p, "none" if current < 0 else current, new] for p, current, new in plan]
        execute = tag(
            "form",
            *(
                void("input", type="hidden", name=name, value=given)
                for name, given in (
                    (CSRF_FIELD, view.csrf_token),
                    ("topic", topic),
                    ("to", to),
                    ("value", value),
                    ("kind", kind),
                    ("execute", "1"),
                )
            ),
            tag(
                "label",
                f"type {group_id} to confirm ",
                void("input", name=CONFIRM_FIELD, required="", autocomplete="off"),
            ),
            tag("button", "Reset offsets", type="submit"),
            method="post",
            action=f"/groups/{quote(group_id)}/reset",
            class_="controls action",
        )
        body = join(
            [
                tag("p", "Dry run: nothing is changed until you confirm below."),
                table(
                    ("topic", "partition", "current offset", "new offset"), rows, id="reset-plan"
                ),
                execute,
                back,
            ]
        )
        return view.page(f"Reset offsets of {group_id}", body)
    if form.get(CONFIRM_FIELD, "").strip() != group_id:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"not confirmed: type the group's name ({group_id}) to confirm"
        )
    offsets = {partition: new for partition, _, new in plan}
    if kind == SHARE:
        altered = await view.caller.alter_share_offsets(group_id, topic, offsets)
        if altered.error_code != ErrorCode.none:
            error, message = altered.error_code, altered.error_message
        else:
            failed = [p for t in altered.responses for p in t.partitions if p.error_code]
            error = failed[0].error_code if failed else ErrorCode.none
            message = failed[0].error_message if failed else None
        return outcome(view, f"Reset start offsets of {group_id}", error, message, back)
    response = await view.caller.commit_offsets(group_id, topic, offsets)
    errors = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
    return outcome(
        view, f"Reset offsets of {group_id}", errors[0] if errors else ErrorCode.none, None, back
    )
