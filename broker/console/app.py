"""The console's request dispatch: a path picks a page (or a static file shipped in the
package), the page is rendered from this broker's services as the console's principal, and
a page's refusal (PageError) or a failure becomes an error page."""

from __future__ import annotations

import hmac
import logging
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING

import trio

from raftka.broker.console.actions import (
    CSRF_FIELD,
    add_partitions,
    change_config,
    create_topic,
    delete_records,
    delete_topic,
    produce_record,
)
from raftka.broker.console.groups import at_coordinator, group_page, groups_page
from raftka.broker.console.html import Html, join, tag, void
from raftka.broker.console.messages import messages_page
from raftka.broker.console.offsets_reset import reset_offsets
from raftka.broker.console.operations import operations_page, security_page
from raftka.broker.console.overview import overview_page
from raftka.broker.console.security_actions import (
    add_acl,
    remove_acl,
    remove_scram_credential,
    set_quota,
    set_scram_password,
)
from raftka.broker.console.sessions import Sessions, clear_cookie, set_cookie
from raftka.broker.console.throughput import Throughput
from raftka.broker.console.topics import topic_page, topics_page
from raftka.broker.console.view import PageError, View
from raftka.broker.http_endpoint import HttpRequest, HttpResponse
from raftka.broker.security.session import ClientSession, Principal

if TYPE_CHECKING:
    from raftka.broker.console.page_reads import PageReads
    from raftka.broker.console.remote_calls import RemoteCalls
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.security.listeners import ListenerSpec

logger = logging.getLogger("raftka.console")

#: Files served under /static/, shipped as package data: name -> content type.
STATIC_FILES = MappingProxyType(
    {
        "console.js": "text/javascript; charset=utf-8",
        "console.css": "text/css; charset=utf-8",
    }
)

Page = Callable[[View], Awaitable[HttpResponse]]
NamedPage = Callable[[View, str], Awaitable[HttpResponse]]


def same_origin(request: HttpRequest) -> bool:
    """Whether a posted form came from a page of this console: a browser sends the page's
    origin (`Origin`), which must name the host the request was sent to (`Host`); a client
    that sends no Origin (not a browser) is judged by the token alone."""
    origin = request.header("origin")
    if origin is None:
        return True
    return urllib.parse.urlsplit(origin).netloc == request.header("host")


def see_other(location: str, *headers: tuple[str, str]) -> HttpResponse:
    """A redirect after a POST (or to the login): the browser GETs `location`."""
    return HttpResponse(
        HTTPStatus.SEE_OTHER, b"", "text/plain; charset=utf-8", (("Location", location), *headers)
    )


def login_form(csrf_token: str) -> Html:
    return tag(
        "form",
        void("input", type="hidden", name=CSRF_FIELD, value=csrf_token),
        tag("label", "user ", void("input", name="username", required="", autocomplete="username")),
        tag(
            "label",
            "password ",
            void(
                "input",
                name="password",
                type="password",
                required="",
                autocomplete="current-password",
            ),
        ),
        tag("button", "Sign in", type="submit"),
        method="post",
        action="/login",
        class_="controls action",
        id="login",
    )


class Console:
    """Answers the console's requests for one broker (the endpoint's `app`)."""

    def __init__(
        self,
        services: BrokerServices,
        sasl_listener: ListenerSpec | None = None,
        tls: bool = False,
        page_reads: PageReads | None = None,
        remote: RemoteCalls | None = None,
        unreachable: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        self.services = services
        #: The brokers this broker's peer connection cannot reach now.
        self.unreachable = unreachable
        #: Pages of partitions this broker does not host, read from the broker leading them.
        self.page_reads = page_reads
        #: Group pages' calls at the brokers coordinating the groups.
        self.remote = remote
        #: Served over TLS: the session cookie is marked Secure.
        self.tls = tls
        #: When the cluster has a SASL listener, every page needs a login, checked as SASL
        #: PLAIN on this listener checks it, and pages act as the signed-in user.
        self.sasl_listener = sasl_listener
        self.sessions = Sessions(services.clock)
        #: Put in every form and required of every POST; new with each broker start.
        self.csrf_token = secrets.token_urlsafe(32)
        self.throughput = Throughput(services.metrics, services.clock)
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

    async def run(self) -> None:
        """The console's background duty (sampling throughput for the overview's chart)."""
        await self.throughput.run()

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        segments = [urllib.parse.unquote(s) for s in request.path.strip("/").split("/")]
        if segments == [""]:
            segments = []
        csrf_token, session = self.csrf_token, None
        if self.sasl_listener is not None and segments[:1] != ["static"]:
            if segments == ["login"]:
                return await self._login(request)
            found = self.sessions.find(request.header("cookie"))
            if found is None:
                return see_other("/login")
            token, signed_in = found
            if segments == ["logout"] and request.method == "POST":
                given = View.of(self.services, request.client_host, "", "", request.body)
                if hmac.compare_digest(
                    given.form.get(CSRF_FIELD, "").encode(), signed_in.csrf_token.encode()
                ):
                    self.sessions.close(token)
                return see_other("/login", clear_cookie(self.tls))
            csrf_token = signed_in.csrf_token
            session = ClientSession(
                self.sasl_listener, principal=Principal("User", signed_in.user), authenticated=True
            )
        try:
            view = View.of(
                self.services,
                request.client_host,
                request.query,
                csrf_token,
                request.body,
                session,
                self.page_reads,
                self.remote,
            )
        except PageError as exc:
            return HttpResponse.text(exc.status, exc.message)
        try:
            if request.method == "POST":
                return await self._change(view, request, segments)
            if request.method not in ("GET", "HEAD"):
                raise PageError(HTTPStatus.METHOD_NOT_ALLOWED, "the console serves GET and POST")
            return await self._dispatch(view, segments)
        except PageError as exc:
            return view.error(exc.status, exc.message)

    async def _login(self, request: HttpRequest) -> HttpResponse:
        """The login form, and its POST: the user name and password checked as SASL/PLAIN
        checks them on the SASL listener; a wrong one is answered 401 after the failure delay
        of `connection.failed.authentication.delay.ms`, a right one opens a session."""
        assert self.sasl_listener is not None, "a login only where the cluster has SASL"
        view = View.of(self.services, request.client_host, "", self.csrf_token, request.body)
        if request.method != "POST":
            return view.page("Sign in", login_form(self.csrf_token))
        if not hmac.compare_digest(
            view.form.get(CSRF_FIELD, "").encode(), self.csrf_token.encode()
        ) or not same_origin(request):
            return view.error(HTTPStatus.FORBIDDEN, "the form is not this console's")
        user = view.form.get("username", "")
        password = view.form.get("password", "")
        authenticator = self.services.authenticator
        if user and await authenticator.check_plain(self.sasl_listener.name, user, password):
            authenticator.failure_delays.record_success(request.client_host)
            return see_other("/", set_cookie(self.sessions.open(user), self.tls))
        await trio.sleep(authenticator.failure_delays.record_failure(request.client_host))
        refused = view.page(
            "Sign in",
            join(
                [
                    tag("p", "Wrong user name or password.", class_="error"),
                    login_form(self.csrf_token),
                ]
            ),
        )
        return HttpResponse(
            HTTPStatus.UNAUTHORIZED, refused.body, refused.content_type, refused.headers
        )

    async def _change(self, view: View, request: HttpRequest, segments: list[str]) -> HttpResponse:
        """A posted form: refused without this console's token (a forged form from another
        site cannot know it), else the change it names."""
        if not hmac.compare_digest(
            view.form.get(CSRF_FIELD, "").encode(), view.csrf_token.encode()
        ):
            raise PageError(HTTPStatus.FORBIDDEN, "the form is not this console's (no valid token)")
        if not same_origin(request):
            raise PageError(HTTPStatus.FORBIDDEN, "the form was posted from another site")
        match segments:
            case ["topics"]:
                return await create_topic(view)
            case ["topics", name, "partitions"]:
                return await add_partitions(view, name)
            case ["topics", name, "configs"]:
                return await change_config(view, name)
            case ["topics", name, "records"]:
                return await delete_records(view, name)
            case ["topics", name, "delete"]:
                return await delete_topic(view, name)
            case ["topics", name, "produce"]:
                return await produce_record(view, name)
            case ["groups", name, "reset"]:
                return await reset_offsets(await at_coordinator(view, name), name)
            case ["security", "acls"]:
                return await add_acl(view)
            case ["security", "acls", "delete"]:
                return await remove_acl(view)
            case ["security", "users"]:
                return await set_scram_password(view)
            case ["security", "users", "delete"]:
                return await remove_scram_credential(view)
            case ["security", "quotas"]:
                return await set_quota(view)
        raise PageError(HTTPStatus.NOT_FOUND, "no such action")

    async def _dispatch(self, view: View, segments: list[str]) -> HttpResponse:
        match segments:
            case []:
                return await overview_page(view, self.throughput, self.unreachable())
            case ["topics"]:
                return await topics_page(view, self.throughput.topic_rates())
            case ["topics", name]:
                return await topic_page(view, name)
            case ["topics", name, "messages"]:
                return await messages_page(view, name)
            case ["groups"]:
                return await groups_page(view)
            case ["security"]:
                return await security_page(view)
            case ["operations"]:
                return await operations_page(view)
            case ["groups", name]:
                return await group_page(view, name)
            case ["static", name] if name in self.static:
                return self.static[name]
        raise PageError(HTTPStatus.NOT_FOUND, "no such page; start at the overview")
