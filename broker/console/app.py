"""The console's request dispatch: a path picks a page (or a static file shipped in the
package), the page is rendered from this broker's services as the console's principal, and
a page's refusal (PageError) or a failure becomes an error page."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING

from raftka.broker.console.groups import group_page, groups_page
from raftka.broker.console.messages import messages_page
from raftka.broker.console.overview import overview_page
from raftka.broker.console.topics import topic_page, topics_page
from raftka.broker.console.view import PageError, View
from raftka.broker.http_endpoint import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from raftka.broker.handlers.context import BrokerServices

logger = logging.getLogger("raftka.console")

#: Files served under /static/, shipped as package data: name -> content type.
STATIC_FILES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

Page = Callable[[View], Awaitable[HttpResponse]]
NamedPage = Callable[[View, str], Awaitable[HttpResponse]]


class Console:
    """Answers the console's requests for one broker (the endpoint's `app`)."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        package = resources.files("raftka.broker.console") / "static"
        self.static = {
            name: HttpResponse(
                HTTPStatus.OK,
                (package / name).read_bytes(),
                content_type,
                (("Cache-Control", "max-age=300"),),
            )
            for name, content_type in STATIC_FILES.items()
        }

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        view = View.of(self.services, request.client_host, request.query)
        if request.method not in ("GET", "HEAD"):
            return view.error(HTTPStatus.METHOD_NOT_ALLOWED, "the console serves GET only")
        segments = [urllib.parse.unquote(s) for s in request.path.strip("/").split("/")]
        if segments == [""]:
            segments = []
        try:
            return await self._dispatch(view, segments)
        except PageError as exc:
            return view.error(exc.status, exc.message)

    async def _dispatch(self, view: View, segments: list[str]) -> HttpResponse:
        match segments:
            case []:
                return await overview_page(view)
            case ["topics"]:
                return await topics_page(view)
            case ["topics", name]:
                return await topic_page(view, name)
            case ["topics", name, "messages"]:
                return await messages_page(view, name)
            case ["groups"]:
                return await groups_page(view)
            case ["groups", name]:
                return await group_page(view, name)
            case ["static", name] if name in self.static:
                return self.static[name]
        raise PageError(HTTPStatus.NOT_FOUND, "no such page; start at the overview")
