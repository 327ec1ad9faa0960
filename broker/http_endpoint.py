"""The broker's HTTP endpoints (`metrics.listen`, `console.listen`): a small HTTP/1.1
responder on trio.

One request per connection, answered with `Connection: close`. The path picks a route (GET
only, the query string ignored); a path no route names goes to the endpoint's `app`, when it
has one, with the method and query string (the console's pages). A request head is at
most REQUEST_HEAD_BYTES_MAX bytes and must arrive within REQUEST_TIMEOUT_S; anything
malformed gets 400, an unknown path 404, another method 405. At most CONNECTIONS_MAX
connections are served at once (more get 503). A connection's failure is logged and ends
that connection only: never another one, never the broker. With a TLS context
(`http.security.protocol=SSL`) every connection is TLS: a client that does not complete the
handshake gets no answer.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

import trio

logger = logging.getLogger("raftka.http")

REQUEST_HEAD_BYTES_MAX = 8192
#: The largest request body read (a console form).
BODY_BYTES_MAX = 65536
REQUEST_TIMEOUT_S = 5.0
RESPONSE_TIMEOUT_S = 10.0
CONNECTIONS_MAX = 32
RECEIVE_CHUNK_BYTES = 4096
# After answering, what the client still sends is read and dropped (within these bounds)
# before closing: closing with unread input resets the connection, and the client could
# lose the answer (a 400 for an over-long request, say).
LINGER_S = 1.0
LINGER_BYTES_MAX = 1 << 20

TEXT = "text/plain; charset=utf-8"

# RFC 9110 token characters (methods, header names) and a request target in origin form.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[\x21-\x7e]*")
_VERSION = re.compile(rb"HTTP/1\.[01]")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


class EndpointBindError(OSError):
    """The endpoint's address cannot be listened on (in use, not this host's); its text
    names the endpoint's config, the address and why."""

    def __str__(self) -> str:
        return str(self.strerror or super().__str__())


class HttpError(Exception):
    """A request that cannot be served; `status` is the answer's."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    #: What follows `?` in the request target, still percent-encoded ("" when none).
    query: str = ""
    #: The client's address (set for an `app`; "" when unknown).
    client_host: str = ""
    #: Header fields (name in lower case, value), in order.
    headers: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    #: The body (read for an `app` only, by Content-Length, at most BODY_BYTES_MAX).
    body: bytes = field(default=b"", compare=False)

    def header(self, name: str) -> str | None:
        """The last value of header field `name` (lower case), None when absent."""
        found = [value for key, value in self.headers if key == name]
        return found[-1] if found else None


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: HTTPStatus
    body: bytes
    content_type: str = TEXT
    #: More header fields (name, value), e.g. Cache-Control.
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: HTTPStatus, line: str) -> HttpResponse:
        return cls(status, (line + "\n").encode())

    def encode(self) -> bytes:
        head = (
            f"HTTP/1.1 {self.status.value} {self.status.phrase}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in self.headers)
            + "Connection: close\r\n\r\n"
        )
        return head.encode("ascii") + self.body


def parse_request_line(line: bytes) -> HttpRequest:
    """`METHOD SP /target SP HTTP/1.x` (without its line end); HttpError 400 otherwise."""
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed method")
    if not _TARGET.fullmatch(target):
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed request target")
    if not _VERSION.fullmatch(version):
        raise HttpError(HTTPStatus.BAD_REQUEST, "not HTTP/1.0 or HTTP/1.1")
    path, _, query = target.split(b"#", 1)[0].partition(b"?")
    return HttpRequest(method.decode("ascii"), path.decode("ascii"), query.decode("ascii"))


def parse_request_head(head: bytes) -> HttpRequest:
    """A whole request head (request line and header fields, without the blank line that
    ends it; lines end in CRLF or LF); HttpError 400 if any line is malformed."""
    lines = head.split(b"\n")
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    request = parse_request_line(lines[0])
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
            raise HttpError(HTTPStatus.BAD_REQUEST, "malformed header field")
        headers.append((name.decode("ascii").lower(), value.strip().decode("latin-1")))
    return dataclasses.replace(request, headers=tuple(headers))


def head_end(buffer: bytes | bytearray) -> tuple[int, int] | None:
    """(end of the head, start of what follows it) once the blank line has arrived."""
    found = [(i, i + len(mark)) for mark in (b"\r\n\r\n", b"\n\n") if (i := buffer.find(mark)) >= 0]
    return min(found) if found else None


async def read_request(stream: trio.abc.ReceiveStream) -> HttpRequest | None:
    """Read and parse one request head; None if the peer closed without sending anything.
    The request line is checked as soon as it has arrived, so garbage is refused at once."""
    found = await _read_head(stream)
    return None if found is None else found[0]


async def read_body(stream: trio.abc.ReceiveStream, request: HttpRequest, early: bytes) -> bytes:
    """The request's body by its Content-Length (`early`: what arrived with the head); empty
    without one. HttpError 400 for a bad length, 413 past BODY_BYTES_MAX."""
    given = request.header("content-length")
    if given is None:
        return b""
    if not given.isdigit():
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
    length = int(given)
    if length > BODY_BYTES_MAX:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {BODY_BYTES_MAX} bytes")
    body = bytearray(early[:length])
    while len(body) < length:
        data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
        if not data:
            raise HttpError(HTTPStatus.BAD_REQUEST, "connection closed within the body")
        body += data[: length - len(body)]
    return bytes(body)


async def _read_head(stream: trio.abc.ReceiveStream) -> tuple[HttpRequest, bytes] | None:
    """One request head and the bytes that arrived after it; None as `read_request`."""
    buffer = bytearray()
    line_checked = False
    while True:
        end = head_end(buffer)
        if end is not None:
            return parse_request_head(bytes(buffer[: end[0]])), bytes(buffer[end[1] :])
        if not line_checked:
            newline = buffer.find(b"\n")
            if newline >= 0:
                parse_request_line(bytes(buffer[:newline]).removesuffix(b"\r"))
                line_checked = True
            elif not _could_start_request(buffer):
                raise HttpError(HTTPStatus.BAD_REQUEST, "malformed method")
        if len(buffer) >= REQUEST_HEAD_BYTES_MAX:
            raise HttpError(
                HTTPStatus.BAD_REQUEST, f"request head exceeds {REQUEST_HEAD_BYTES_MAX} bytes"
            )
        data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
        if not data:
            if not buffer:
                return None
            raise HttpError(HTTPStatus.BAD_REQUEST, "connection closed within the request")
        buffer += data


def _could_start_request(received: bytes | bytearray) -> bool:
    """Whether a request line's first bytes may still become a valid method."""
    method = bytes(received).split(b" ", 1)[0]
    return not method or _TOKEN.fullmatch(method) is not None


Route = Callable[[], HttpResponse]
#: What answers the requests no route takes (any method; the answer within RESPONSE_TIMEOUT_S).
App = Callable[[HttpRequest], Awaitable[HttpResponse]]
#: How a request's refusal is answered for its path, when not as text (None: as text).
ErrorAnswer = Callable[[str, HttpError], HttpResponse | None]


# What a connection is: a TCP stream, or TLS over one.
HttpStream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


def _peer_host(stream: HttpStream) -> str:
    tcp = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        return str(tcp.socket.getpeername()[0])
    except OSError:
        return ""


async def _drain(stream: HttpStream) -> None:
    dropped = 0
    with trio.move_on_after(LINGER_S):
        while dropped < LINGER_BYTES_MAX:
            data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
            if not data:
                return
            dropped += len(data)


class HttpEndpoint:
    """Serves `routes` (path -> what answers a GET of it) and `app` (every other request)
    on `host:port` until cancelled, over TLS with `tls` (a server context). `config_name`
    names the endpoint's config in errors."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: Mapping[str, Route],
        app: App | None = None,
        config_name: str = "metrics.listen",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.routes = dict(routes)
        self.app = app
        self.config_name = config_name
        self.tls = tls
        self.bound_port = port
        #: Set by an app whose refusals have their own form (the queue API's are JSON).
        self.error_answer: ErrorAnswer | None = None
        self._serving = 0

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        except OSError as exc:
            raise EndpointBindError(
                exc.errno,
                f"{self.config_name}: cannot listen on {self.host}:{self.port}: "
                f"{exc.strerror or exc}",
            ) from exc
        self.bound_port = listeners[0].socket.getsockname()[1]
        paths = ", ".join(sorted(self.routes) + (["the console"] if self.app else []))
        scheme = "https" if self.tls else "http"
        logger.info("http: serving %s on %s://%s:%d", paths, scheme, self.host, self.bound_port)
        task_status.started(self.bound_port)
        if self.tls is None:
            await trio.serve_listeners(self._serve_connection, listeners)
        else:
            secured = [trio.SSLListener(tcp, self.tls, https_compatible=True) for tcp in listeners]
            await trio.serve_listeners(self._serve_connection, secured)

    async def _serve_connection(self, stream: HttpStream) -> None:
        self._serving += 1
        response: HttpResponse | None
        try:
            if self._serving > CONNECTIONS_MAX:
                response = HttpResponse.text(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections")
            else:
                response = await self._answer(stream)
            if response is not None:
                with trio.move_on_after(RESPONSE_TIMEOUT_S):
                    await stream.send_all(response.encode())
                    if isinstance(stream, trio.SocketStream):
                        await stream.send_eof()
                await _drain(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # also a failed TLS handshake: a client speaking plain HTTP, or distrusting us
        except Exception:
            # One connection's failure must not end the endpoint or the broker.
            logger.exception("http: connection failed")
        finally:
            self._serving -= 1
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await stream.aclose()

    async def _answer(self, stream: HttpStream) -> HttpResponse | None:
        path = ""
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S) as timer:
                found = await _read_head(stream)
                if found is not None and found[0].path not in self.routes and self.app:
                    path = found[0].path
                    body = await read_body(stream, found[0], found[1])
                    found = dataclasses.replace(found[0], body=body), b""
            if timer.cancelled_caught:
                raise HttpError(HTTPStatus.REQUEST_TIMEOUT, "no complete request in time")
        except HttpError as exc:
            shaped = self.error_answer(path, exc) if path and self.error_answer else None
            return shaped or HttpResponse.text(exc.status, exc.message)
        if found is None:
            return None
        request = found[0]
        route = self.routes.get(request.path)
        if route is None and self.app is not None:
            peer = _peer_host(stream)
            return await self._answer_app(self.app, dataclasses.replace(request, client_host=peer))
        if request.method != "GET":
            return HttpResponse.text(HTTPStatus.METHOD_NOT_ALLOWED, "only GET is served")
        if route is None:
            known = ", ".join(sorted(self.routes))
            return HttpResponse.text(HTTPStatus.NOT_FOUND, f"no such path; try {known}")
        try:
            return route()
        except Exception:
            logger.exception("http: GET %s failed", request.path)
            return HttpResponse.text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    async def _answer_app(self, app: App, request: HttpRequest) -> HttpResponse:
        try:
            with trio.move_on_after(RESPONSE_TIMEOUT_S):
                answer = await app(request)
                # HEAD: the status and fields a GET gets, without the body.
                return dataclasses.replace(answer, body=b"") if request.method == "HEAD" else answer
            return HttpResponse.text(HTTPStatus.GATEWAY_TIMEOUT, "no answer in time")
        except Exception:
            logger.exception("http: %s %s failed", request.method, request.path)
            return HttpResponse.text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
