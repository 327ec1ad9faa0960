"""The console's changes, as POST forms: create a topic, add partitions, change or reset a
topic config, delete records, delete a topic. Each calls the broker's own admin API handler
as the console's principal, so the same ACLs allow or refuse it; each form carries the
console's CSRF token, and every change to an existing topic is confirmed by typing the
topic's name. The answer is a page saying what happened (Kafka's error when refused)."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.broker.console.html import Html, join, link, quote, section, tag, void
from raftka.broker.console.view import PageError

if TYPE_CHECKING:
    from raftka.broker.console.view import View
    from raftka.broker.http_endpoint import HttpResponse

CSRF_FIELD = "csrf"
CONFIRM_FIELD = "confirm"
#: Kafka errors that mean "not allowed": the page answers 403.
REFUSALS = frozenset(
    {
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    }
)
HIGH_WATERMARK = -1


def form(view: View, action: str, label: str, *fields: Html, confirm: str | None) -> Html:
    """A POST form to `action` with the CSRF token; `confirm`: the name to type first."""
    confirmation = (
        tag(
            "label",
            f"type {confirm} to confirm ",
            void("input", name=CONFIRM_FIELD, required="", autocomplete="off"),
        )
        if confirm is not None
        else None
    )
    return tag(
        "form",
        void("input", type="hidden", name=CSRF_FIELD, value=view.csrf_token),
        *fields,
        confirmation,
        tag("button", label, type="submit"),
        method="post",
        action=action,
        class_="controls action",
    )


def text_field(label: str, name: str, **attributes: str | int | None) -> Html:
    return tag("label", label, " ", void("input", name=name, **attributes))


def create_topic_form(view: View) -> Html:
    return section(
        "Create a topic",
        form(
            view,
            "/topics",
            "Create",
            text_field("name", "name", required="", size=30),
            text_field("partitions", "partitions", value=1, size=4),
            text_field("replication factor", "replication_factor", value=1, size=4),
            confirm=None,
        ),
    )


def topic_action_forms(view: View, topic: str, partitions: int) -> Html:
    base = f"/topics/{quote(topic)}"
    return section(
        "Actions",
        tag("h3", "Add partitions"),
        form(
            view,
            f"{base}/partitions",
            "Add partitions",
            text_field("new partition count", "count", value=partitions + 1, size=5),
            confirm=topic,
        ),
        tag("h3", "Change a config"),
        form(
            view,
            f"{base}/configs",
            "Change",
            text_field("config", "name", required="", size=30),
            text_field("value (empty: back to the default)", "value", size=20),
            confirm=topic,
        ),
        tag("h3", "Delete records"),
        form(
            view,
            f"{base}/records",
            "Delete records",
            text_field("partition", "partition", value=0, size=4),
            text_field("before offset (empty: all up to the high watermark)", "offset", size=12),
            confirm=topic,
        ),
        tag("h3", "Delete the topic"),
        form(view, f"{base}/delete", "Delete topic", confirm=topic),
        id="actions",
    )


def _confirmed(view: View, topic: str) -> None:
    if view.form.get(CONFIRM_FIELD, "").strip() != topic:
        raise PageError(
            HTTPStatus.BAD_REQUEST, f"not confirmed: type the topic's name ({topic}) to confirm"
        )


def number(view: View, name: str, low: int, high: int, default: int | None = None) -> int:
    given = view.form.get(name, "").strip()
    if not given and default is not None:
        return default
    try:
        value = int(given)
    except ValueError:
        raise PageError(HTTPStatus.BAD_REQUEST, f"{name}: not a whole number: {given!r}") from None
    if not low <= value <= high:
        raise PageError(HTTPStatus.BAD_REQUEST, f"{name}: {value} is not in {low}..{high}")
    return value


def outcome(view: View, title: str, error: Any, message: str | None, back: Html) -> HttpResponse:
    """The page after a change: done, or Kafka's refusal (`error` a Kafka error code)."""
    code = ErrorCode(error)
    if code == ErrorCode.none:
        return view.page(title, join([tag("p", "Done.", id="outcome", class_="ok"), back]))
    status = HTTPStatus.FORBIDDEN if code in REFUSALS else HTTPStatus.BAD_REQUEST
    said = code.name.upper() + (f": {message}" if message else "")
    shown = view.page(title, join([tag("p", said, id="outcome", class_="error"), back]))
    return type(shown)(status, shown.body, shown.content_type, shown.headers)


async def create_topic(view: View) -> HttpResponse:
    name = view.form.get("name", "").strip()
    if not name:
        raise PageError(HTTPStatus.BAD_REQUEST, "name: a topic needs a name")
    partitions = number(view, "partitions", 1, 100_000, 1)
    replication = number(view, "replication_factor", 1, 32, 1)
    response = await view.caller.create_topic(name, partitions, replication)
    result = response.topics[0]
    back = tag("p", link(f"/topics/{quote(name)}", f"topic {name}"))
    return outcome(view, f"Create topic {name}", result.error_code, result.error_message, back)


async def add_partitions(view: View, topic: str) -> HttpResponse:
    _confirmed(view, topic)
    count = number(view, "count", 1, 100_000)
    response = await view.caller.create_partitions(topic, count)
    result = response.results[0]
    back = tag("p", link(f"/topics/{quote(topic)}", f"← topic {topic}"))
    return outcome(view, f"Partitions of {topic}", result.error_code, result.error_message, back)


async def change_config(view: View, topic: str) -> HttpResponse:
    _confirmed(view, topic)
    name = view.form.get("name", "").strip()
    if not name:
        raise PageError(HTTPStatus.BAD_REQUEST, "name: which config?")
    value = view.form.get("value", "")
    response = await view.caller.alter_topic_config(topic, name, value if value else None)
    result = response.responses[0]
    back = tag("p", link(f"/topics/{quote(topic)}", f"← topic {topic}"))
    return outcome(view, f"Config of {topic}", result.error_code, result.error_message, back)


async def delete_records(view: View, topic: str) -> HttpResponse:
    _confirmed(view, topic)
    partition = number(view, "partition", 0, 2**31 - 1)
    offset = number(view, "offset", 0, 2**63 - 1, HIGH_WATERMARK)
    response = await view.caller.delete_records(topic, partition, offset)
    found = [p for t in response.topics for p in t.partitions]
    error = found[0].error_code if found else ErrorCode.unknown_topic_or_partition
    low = f"log start offset now {found[0].low_watermark}" if found and not error else None
    if error == ErrorCode.request_timed_out:
        # The leader has deleted them; a replica has not yet (DeleteRecords waits for all).
        low = "the deletion goes on: the topic page's low watermark shows it reach each replica"
    back = tag("p", link(f"/topics/{quote(topic)}", f"← topic {topic}"), " ", low)
    return outcome(view, f"Delete records of {topic}-{partition}", error, None, back)


async def delete_topic(view: View, topic: str) -> HttpResponse:
    _confirmed(view, topic)
    response = await view.caller.delete_topic(topic)
    result = response.responses[0]
    back = tag("p", link("/topics", "← topics"))
    return outcome(view, f"Delete topic {topic}", result.error_code, result.error_message, back)


def produce_form(view: View, topic: str, partitions: list[int]) -> Html:
    """The message browser's form to produce a test record."""
    options = [tag("option", str(p), value=str(p)) for p in partitions]
    return section(
        "Produce a test message",
        form(
            view,
            f"/topics/{quote(topic)}/produce",
            "Produce",
            tag("label", "partition ", tag("select", *options, name="partition")),
            text_field("key (empty: none)", "key", size=16),
            text_field("value", "value", size=40),
            confirm=None,
        ),
        id="produce",
    )


async def produce_record(view: View, topic: str) -> HttpResponse:
    partition = number(view, "partition", 0, 2**31 - 1)
    key = view.form.get("key", "")
    value = view.form.get("value", "")
    response = await view.caller.produce(
        topic,
        partition,
        key.encode() if key else None,
        value.encode(),
        view.services.clock.wall_ms(),
    )
    found = [p for t in response.responses for p in t.partition_responses]
    error = found[0].error_code if found else ErrorCode.unknown_topic_or_partition
    at = f"at offset {found[0].base_offset}" if found and not error else None
    path = f"/topics/{quote(topic)}/messages"
    back = tag(
        "p",
        at,
        " ",
        link(
            f"{path}?partition={partition}&mode=offset&offset={found[0].base_offset}"
            if at
            else path,
            "show it",
        ),
    )
    message = found[0].error_message if found else None
    return outcome(view, f"Produce to {topic}-{partition}", error, message, back)
