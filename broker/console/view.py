"""What a page is rendered from: the broker's services, the console's principal calling
the broker's APIs, and the request's query."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING

from raftka.broker.console.calls import Caller
from raftka.broker.console.html import Content, Html, error_page, page, tag, void

if TYPE_CHECKING:
    from raftka.broker.console.page_reads import PageReads
    from raftka.broker.console.remote_calls import RemoteCalls
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.http_endpoint import HttpResponse
    from raftka.broker.security.session import ClientSession


class PageError(Exception):
    """A request a page cannot answer: `status` and a line for the user."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _fields(encoded: str) -> dict[str, str]:
    """A query string or form body (`a=1&b=2`) as {name: its last value}."""
    try:
        parsed = urllib.parse.parse_qs(
            encoded, keep_blank_values=True, max_num_fields=32, errors="strict"
        )
    except (ValueError, UnicodeDecodeError):
        raise PageError(HTTPStatus.BAD_REQUEST, "malformed query or form") from None
    return {name: values[-1] for name, values in parsed.items()}


@dataclass(frozen=True, slots=True)
class View:
    services: BrokerServices
    caller: Caller
    query: dict[str, str]
    #: The console's token: a form posted without it is refused (CSRF).
    csrf_token: str
    #: A posted form's fields (empty for a GET).
    form: dict[str, str]
    #: Reads pages of partitions hosted on other brokers (None: only this broker's).
    page_reads: PageReads | None = None

    @classmethod
    def of(
        cls,
        services: BrokerServices,
        client_host: str,
        query: str,
        csrf_token: str,
        body: bytes,
        session: ClientSession | None = None,
        page_reads: PageReads | None = None,
        remote: RemoteCalls | None = None,
    ) -> View:
        """PageError 400 when the query or a form body is malformed."""
        try:
            form_text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise PageError(HTTPStatus.BAD_REQUEST, "form is not UTF-8") from None
        return cls(
            services,
            Caller(services, client_host, session, remote),
            _fields(query),
            csrf_token,
            _fields(form_text),
            page_reads,
        )

    def page(self, title: str, body: Content, *, live: bool = False) -> HttpResponse:
        identity = self.services.identity
        return page(
            title,
            body,
            cluster_id=identity.cluster_id,
            node_id=identity.node_id,
            live=live,
            signed_in=self._signed_in(),
        )

    def _signed_in(self) -> Html | None:
        """The signed-in user and a sign-out button, when the console has logins."""
        session = self.caller.session
        if session is None:
            return None
        return tag(
            "form",
            tag("span", session.principal.name, id="user"),
            " ",
            void("input", type="hidden", name="csrf", value=self.csrf_token),
            tag("button", "Sign out", type="submit"),
            method="post",
            action="/logout",
            class_="signed-in",
        )

    def error(self, status: HTTPStatus, message: str) -> HttpResponse:
        identity = self.services.identity
        return error_page(status, message, cluster_id=identity.cluster_id, node_id=identity.node_id)

    def int_param(self, name: str, default: int | None, low: int, high: int) -> int | None:
        """The query's `name` as an int in [low, high]; `default` when absent or empty;
        PageError 400 when it is not such a number."""
        given = self.query.get(name, "").strip()
        if not given:
            return default
        try:
            value = int(given)
        except ValueError:
            raise PageError(
                HTTPStatus.BAD_REQUEST, f"{name}: not a whole number: {given!r}"
            ) from None
        if not low <= value <= high:
            raise PageError(HTTPStatus.BAD_REQUEST, f"{name}: {value} is not in {low}..{high}")
        return value
