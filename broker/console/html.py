"""HTML building for the console's pages: every piece of text from the cluster goes through
`text` (escaped), markup is built only here and in the pages from constant strings, and a
whole page is `page(title, body)`.

`Html` is markup that is already safe; a `str` is always escaped when it meets markup.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable, Mapping
from http import HTTPStatus

from raftka.broker.http_endpoint import HttpResponse

HTML = "text/html; charset=utf-8"
SCRIPT_PATH = "/static/console.js"
STYLE_PATH = "/static/console.css"


class Html(str):
    """Markup that is safe to send as is (built from escaped text and constant tags)."""

    __slots__ = ()


Content = Html | str | int | None
#: One table row's cells.
Row = list[Content]


def text(value: Content) -> Html:
    """`value` as safe markup: an Html as it is, anything else escaped (None: empty)."""
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("")
    return Html(html.escape(str(value), quote=True))


def join(parts: Iterable[Content]) -> Html:
    return Html("".join(text(part) for part in parts))


def tag(name: str, /, *children: Content, **attributes: str | int | None) -> Html:
    """`<name attributes>children</name>`; an attribute named `class_` is `class`, one
    whose value is None is left out, and every value is escaped."""
    return Html(f"<{name}{_attributes(attributes)}>{join(children)}</{name}>")


def _attributes(attributes: Mapping[str, str | int | None]) -> str:
    return "".join(
        f' {key.rstrip("_").replace("_", "-")}="{text(value)}"'
        for key, value in attributes.items()
        if value is not None
    )


def void(name: str, /, **attributes: str | int | None) -> Html:
    """An element without content or end tag (`<input ...>`), attributes as `tag`'s."""
    return Html(f"<{name}{_attributes(attributes)}>")


def link(href: str, /, *children: Content, **attributes: str | int | None) -> Html:
    return tag("a", *children, href=href, **attributes)


def quote(name: str) -> str:
    """A name (topic, group) as one path segment of a URL."""
    return urllib.parse.quote(name, safe="")


def url(path: str, query: Mapping[str, str | int | None] | None = None) -> str:
    """`path` with the query's set values encoded."""
    if not query:
        return path
    items = [(key, str(value)) for key, value in query.items() if value is not None]
    return f"{path}?{urllib.parse.urlencode(items)}" if items else path


def table(
    headings: Iterable[str], rows: Iterable[Iterable[Content]], **attributes: str | None
) -> Html:
    head = tag("tr", *(tag("th", heading) for heading in headings))
    body = join(tag("tr", *(tag("td", cell) for cell in row)) for row in rows)
    return tag("table", tag("thead", head), tag("tbody", body), **attributes)


def definitions(items: Iterable[tuple[str, Content]]) -> Html:
    return tag("dl", *(join((tag("dt", term), tag("dd", value))) for term, value in items))


def section(heading: str, *children: Content, **attributes: str | None) -> Html:
    return tag("section", tag("h2", heading), *children, **attributes)


def size_text(size_bytes: int) -> str:
    """Bytes for a person: `1.5 MiB`."""
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size_bytes} B"


NAVIGATION = (
    ("/", "Overview"),
    ("/topics", "Topics"),
    ("/groups", "Groups"),
    ("/security", "Security"),
    ("/operations", "Operations"),
)


def page(
    title: str,
    body: Content,
    *,
    cluster_id: str,
    node_id: int,
    live: bool = False,
    signed_in: Content = None,
) -> HttpResponse:
    """A whole page: the navigation, `title` as its heading, then `body`. `live`: the page
    replaces its content with a fresh copy every few seconds (console.js). `signed_in`:
    who is signed in (and how to sign out), at the navigation's end."""
    navigation = tag(
        "nav",
        tag("strong", "raftka"),
        *(link(href, label) for href, label in NAVIGATION),
        tag("span", f"cluster {cluster_id} · broker {node_id}", class_="where"),
        signed_in,
    )
    document = Html(
        "<!DOCTYPE html>"
        + tag(
            "html",
            tag(
                "head",
                Html('<meta charset="utf-8">'),
                tag("title", f"{title} · raftka"),
                Html(f'<link rel="stylesheet" href="{STYLE_PATH}">'),
                Html(f'<script src="{SCRIPT_PATH}" defer></script>'),
            ),
            tag(
                "body",
                navigation,
                tag("main", tag("h1", title), body, id="content", data_live="1" if live else None),
            ),
            lang="en",
        )
    )
    return HttpResponse(HTTPStatus.OK, document.encode(), HTML, (("Cache-Control", "no-store"),))


def error_page(status: HTTPStatus, message: str, *, cluster_id: str, node_id: int) -> HttpResponse:
    shown = page(
        f"{status.value} {status.phrase}",
        tag("p", message, class_="error"),
        cluster_id=cluster_id,
        node_id=node_id,
    )
    return HttpResponse(status, shown.body, shown.content_type, shown.headers)
