"""The message browser (`/topics/NAME/messages`): one partition or all, from an offset, a
timestamp or the newest N, each record's key, value (text, pretty JSON or hex), headers,
timestamp and offset; `filter` keeps the records whose key or value holds a string.

A page reads at most `limit` records a partition and about PAGE_BYTES_MAX of log in all
(shared by the partitions shown) from where the page starts, through the same read a Fetch
makes (up to the high watermark), so browsing a large topic costs the pages shown, never
the topic. The next page's link carries each partition's
next offset (`positions`). It needs READ on the topic, as a consumer would, and shows the
partitions this broker hosts.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.console.actions import produce_form
from raftka.broker.console.html import (
    Html,
    Row,
    join,
    link,
    quote,
    section,
    table,
    tag,
    url,
    void,
)
from raftka.broker.console.page_reads import PageQuery, read_local
from raftka.broker.console.records import (
    FORMATS,
    Record,
    render_value,
)
from raftka.broker.console.topics import hosted
from raftka.broker.console.view import PageError
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

LIMIT_DEFAULT = 50
LIMIT_MAX = 500
#: Bytes of log read at a time, and reads a partition's page may take (control batches and
#: records before the page's first offset are skipped).
READ_BYTES = 1 << 20
READS_MAX = 8
#: What one page may read in all (a page of all partitions shares it among them, at least
#: one read of READ_BYTES_MIN each; a read returns at least one whole batch).
PAGE_BYTES_MAX = 16 << 20
READ_BYTES_MIN = 64 << 10


def read_budget(partitions: int) -> tuple[int, int]:
    """(bytes per read, reads) of each partition of a page of `partitions` partitions."""
    share = PAGE_BYTES_MAX // max(partitions, 1)
    read_bytes = min(max(share, READ_BYTES_MIN), READ_BYTES)
    return read_bytes, min(max(share // read_bytes, 1), READS_MAX)


READ_UNCOMMITTED = 0
READ_COMMITTED = 1
ISOLATIONS = ("read_uncommitted", "read_committed")
MODES = ("newest", "offset", "timestamp")
OFFSET_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Browse:
    """What a page shows: its partitions, where each starts, and how many records."""

    partitions: tuple[int, ...]
    mode: str
    limit: int
    form: str


def parse_positions(text: str) -> dict[int, int]:
    """`PARTITION:OFFSET,...` as {partition: offset}; PageError 400 when malformed."""
    found: dict[int, int] = {}
    for item in filter(None, text.split(",")):
        partition, sep, offset = item.partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise PageError(HTTPStatus.BAD_REQUEST, f"positions: expected P:OFFSET, got {item!r}")
        found[int(partition)] = int(offset)
    return found


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, given as such or as an ISO date-time (UTC unless it
    says otherwise, as a datetime-local field sends it)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"timestamp: not milliseconds or an ISO date-time: {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def timestamp_text(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "none"
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bytes_cell(value: bytes | None, form: str) -> Html:
    used, shown = render_value(value, form)
    return join([tag("pre", shown, class_=f"value {used.split(',')[0]}"), tag("small", used)])


def _headers_cell(headers: tuple[tuple[str, bytes | None], ...], form: str) -> Html:
    return join(
        tag("div", tag("b", name), ": ", render_value(value, form)[1], class_="header")
        for name, value in headers
    )


def _controls(view: View, name: str, partitions: list[int], browse: Browse) -> Html:
    query = view.query
    chosen = query.get("partition", "all")
    partition_options = [
        tag("option", "all", value="all", selected="" if chosen == "all" else None)
    ]
    partition_options += [
        tag("option", str(p), value=str(p), selected="" if chosen == str(p) else None)
        for p in partitions
    ]
    mode_options = [
        tag("option", mode, value=mode, selected="" if browse.mode == mode else None)
        for mode in MODES
    ]
    form_options = [
        tag("option", form, value=form, selected="" if browse.form == form else None)
        for form in FORMATS
    ]

    def field(label: str, control: Html) -> Html:
        return tag("label", label, " ", control)

    return tag(
        "form",
        field("partition", tag("select", *partition_options, name="partition")),
        field("from", tag("select", *mode_options, name="mode")),
        field("offset", void("input", name="offset", size=10, value=query.get("offset", ""))),
        field(
            "timestamp",
            void(
                "input",
                name="timestamp",
                placeholder="2026-01-31T12:00 or ms",
                value=query.get("timestamp", ""),
            ),
        ),
        field("records", void("input", name="limit", size=4, value=browse.limit)),
        field(
            "key or value holds",
            void("input", name="filter", size=16, value=query.get("filter", "")),
        ),
        field("value as", tag("select", *form_options, name="format")),
        field(
            "isolation",
            tag(
                "select",
                *(
                    tag(
                        "option",
                        choice,
                        value=choice,
                        selected="" if query.get("isolation") == choice else None,
                    )
                    for choice in ISOLATIONS
                ),
                name="isolation",
            ),
        ),
        tag("button", "Show", type="submit"),
        method="get",
        action=f"/topics/{quote(name)}/messages",
        class_="controls",
    )


async def messages_page(view: View, name: str) -> HttpResponse:
    metadata = await view.caller.metadata([name])
    found = [t for t in metadata.topics if t.name == name]
    if not found or found[0].error_code != ErrorCode.none:
        code = ErrorCode(found[0].error_code) if found else ErrorCode.unknown_topic_or_partition
        raise PageError(HTTPStatus.NOT_FOUND, f"topic {name!r}: {code.name.upper()}")
    context = view.caller.context(ApiKey.FETCH, 12)
    if not context.authorize(AclOperation.READ, ResourceType.TOPIC, name):
        raise PageError(HTTPStatus.FORBIDDEN, f"not authorized to read topic {name!r}")
    leaders = {int(p.partition_index): int(p.leader_id) for p in found[0].partitions}
    all_partitions = sorted(leaders)
    chosen = view.query.get("partition", "all") or "all"
    if chosen == "all":
        selected = all_partitions
    else:
        index = view.int_param("partition", None, 0, 2**31 - 1)
        if index is None or index not in leaders:
            raise PageError(HTTPStatus.NOT_FOUND, f"topic {name!r} has no partition {chosen}")
        selected = [index]
    mode = view.query.get("mode", "newest") or "newest"
    if mode not in MODES:
        raise PageError(HTTPStatus.BAD_REQUEST, f"mode: one of {', '.join(MODES)}")
    form = view.query.get("format", "auto") or "auto"
    if form not in FORMATS:
        raise PageError(HTTPStatus.BAD_REQUEST, f"format: one of {', '.join(FORMATS)}")
    limit = view.int_param("limit", LIMIT_DEFAULT, 1, LIMIT_MAX) or LIMIT_DEFAULT
    browse = Browse(tuple(selected), mode, limit, form)
    positions = parse_positions(view.query.get("positions", ""))
    notes: list[Html] = []
    shown: list[Record] = []
    starts: dict[int, int] = {}
    scanned: dict[int, int] = {}
    log_read = 0
    wanted = view.query.get("filter", "").encode()
    isolation = view.query.get("isolation", ISOLATIONS[0]) or ISOLATIONS[0]
    if isolation not in ISOLATIONS:
        raise PageError(HTTPStatus.BAD_REQUEST, f"isolation: one of {', '.join(ISOLATIONS)}")
    committed = isolation == "read_committed"
    offset = (view.int_param("offset", 0, 0, OFFSET_MAX) or 0) if mode == "offset" else 0
    timestamp_ms = (
        parse_timestamp(view.query.get("timestamp", "") or "0") if mode == "timestamp" else 0
    )
    read_bytes, reads = read_budget(len(selected))
    for index in selected:
        query = PageQuery(
            name,
            index,
            mode,
            positions.get(index),
            offset,
            timestamp_ms,
            limit,
            wanted,
            committed,
            read_bytes,
            reads,
        )
        partition = hosted(view, name, index)
        if partition is not None:
            read = read_local(view.services.replica_manager, partition, query)
        elif leaders[index] < 0:
            notes.append(tag("li", f"partition {index} has no leader now: try again shortly"))
            continue
        elif view.page_reads is None:
            notes.append(tag("li", f"partition {index} is not hosted on this broker"))
            continue
        else:
            try:
                read = await view.page_reads.read_remote(leaders[index], query)
            except OSError as exc:
                notes.append(tag("li", f"partition {index}: {exc}"))
                continue
        starts[index] = read.start
        scanned[index] = read.reached
        shown += read.records
        log_read += read.log_read
    if len(selected) == 1:
        shown.sort(key=lambda r: r.offset)
    else:
        shown.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    # A partition goes on from where its scan reached, or from its first record the merge
    # left out of this page (the newest N leave out older ones: the next page is newer).
    nexts = dict(scanned)
    if len(shown) > limit:
        if mode == "newest" and not positions:
            shown = shown[-limit:]
        else:
            for record in shown[limit:]:
                nexts[record.partition] = min(nexts[record.partition], record.offset)
            shown = shown[:limit]
    rows: list[Row] = [
        [
            record.partition,
            record.offset,
            timestamp_text(record.timestamp_ms),
            _bytes_cell(record.key, form),
            _bytes_cell(record.value, form),
            _headers_cell(record.headers, form),
        ]
        for record in shown
    ]
    path = f"/topics/{quote(name)}/messages"
    base: dict[str, str | int | None] = {
        "partition": chosen,
        "limit": limit,
        "format": form,
        "filter": wanted.decode() or None,
        "isolation": isolation if committed else None,
    }
    following = ",".join(f"{p}:{o}" for p, o in sorted(nexts.items()))
    paging = [link(url(path, {**base, "positions": following}), "next page →", class_="next")]
    if len(selected) == 1 and starts.get(selected[0], 0) > 0:
        older = f"{selected[0]}:{max(0, starts[selected[0]] - limit)}"
        paging.insert(0, link(url(path, {**base, "positions": older}), "← older", class_="older"))
    body = join(
        [
            tag("p", link(f"/topics/{quote(name)}", f"← topic {name}")),
            _controls(view, name, all_partitions, browse),
            tag("ul", *notes, class_="notes") if notes else None,
            section(
                f"{len(shown)} records",
                table(
                    ("partition", "offset", "timestamp", "key", "value", "headers"),
                    rows,
                    id="messages",
                )
                if rows
                else tag("p", "No records here."),
                tag("p", *paging, class_="paging"),
                tag(
                    "p",
                    f"This page read {log_read:,} bytes of log.",
                    id="log-read",
                    class_="note",
                ),
            ),
            produce_form(view, name, all_partitions),
        ]
    )
    return view.page(f"Messages of {name}", body)
