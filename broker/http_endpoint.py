"""The broker's HTTP endpoints (`metrics.listen`, `console.listen`): a small HTTP/1.1
responder on trio.

An HTTP/1.1 connection stays open for the next request (persistent connections, RFC 9112
§9.3) until the client asks to close it, sends nothing for KEEP_ALIVE_IDLE_S, or sends
something malformed; an HTTP/1.0 request is answered with `Connection: close`. Requests are
read in order, each whole before it is answered. The path picks a route (GET
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
CONNECTIONS_MAX = 512
#: How long an open connection may wait for its next request before it is closed.
KEEP_ALIVE_IDLE_S = 5.0
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
    #: "HTTP/1.0" or "HTTP/1.1".
    version: str = field(default="HTTP/1.1", compare=False)

    def header(self, name: str) -> str | None:
        """The last value of header field `name` (lower case), None when absent."""
        found = [value for key, value in self.headers if key == name]
        return found[-1] if found else None

    @property
    def keeps_connection(self) -> bool:
        """Whether the client may send another request on this connection: HTTP/1.1
        unless it said `Connection: close` (HTTP/1.0 connections close)."""
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        return self.version == "HTTP/1.1" and "close" not in tokens


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

    def encode(self, keep_alive: bool = False) -> bytes:
        """The response as sent; without `keep_alive`, with `Connection: close`."""
        head = (
            f"HTTP/1.1 {self.status.value} {self.status.phrase}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in self.headers)
            + ("\r\n" if keep_alive else "Connection: close\r\n\r\n")
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
    return HttpRequest(
        method.decode("ascii"),
        path.decode("ascii"),
        query.decode("ascii"),
        version=version.decode("ascii"),
    )


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
    return await _read_head(stream, bytearray())


async def read_body(
    stream: trio.abc.ReceiveStream, request: HttpRequest, buffer: bytearray
) -> bytes:
    """The request's body by its Content-Length, taken from the front of `buffer` (what
    arrived after the head) and then the stream; what follows it stays in `buffer` (the next
    request's). Empty without a length. HttpError 400 for a bad length, 413 past
    BODY_BYTES_MAX."""
    given = request.header("content-length")
    if given is None:
        return b""
    if not given.isdigit():
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
    length = int(given)
    if length > BODY_BYTES_MAX:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {BODY_BYTES_MAX} bytes")
    while len(buffer) < length:
        data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
        if not data:
            raise HttpError(HTTPStatus.BAD_REQUEST, "connection closed within the body")
        buffer += data
    body = bytes(buffer[:length])
    del buffer[:length]
    return body


async def _read_head(stream: trio.abc.ReceiveStream, buffer: bytearray) -> HttpRequest | None:
    """One request head, taken from the front of `buffer` and then the stream (what follows
    the head stays in `buffer`); None as `read_request`."""
    line_checked = False
    while True:
        end = head_end(buffer)
        if end is not None:
            request = parse_request_head(bytes(buffer[: end[0]]))
            del buffer[: end[1]]
            return request
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
        buffer = bytearray()  # bytes received and not yet taken by a request
        try:
            if self._serving > CONNECTIONS_MAX:
                response, keep = (
                    HttpResponse.text(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections"),
                    False,
                )
            else:
                response, keep = await self._answer(stream, buffer)
            while response is not None and keep:
                with trio.move_on_after(RESPONSE_TIMEOUT_S) as sending:
                    await stream.send_all(response.encode(keep_alive=True))
                if sending.cancelled_caught:
                    return
                if not buffer:
                    with trio.move_on_after(KEEP_ALIVE_IDLE_S):
                        data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
                        buffer += data
                    if not buffer:
                        return  # closed by the client, or idle: no answer is owed
                response, keep = await self._answer(stream, buffer)
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

    async def _answer(
        self, stream: HttpStream, buffer: bytearray
    ) -> tuple[HttpResponse | None, bool]:
        """The answer to the connection's next request (None: the client closed before
        sending one), and whether the connection stays open after it. A request that cannot
        be read whole is answered and ends the connection."""
        path = ""
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S) as timer:
                request = await _read_head(stream, buffer)
                if request is not None:
                    path = request.path if request.path not in self.routes else ""
                    body = await read_body(stream, request, buffer)
                    request = dataclasses.replace(request, body=body)
            if timer.cancelled_caught:
                raise HttpError(HTTPStatus.REQUEST_TIMEOUT, "no complete request in time")
        except HttpError as exc:
            shaped = self.error_answer(path, exc) if path and self.error_answer else None
            return shaped or HttpResponse.text(exc.status, exc.message), False
        if request is None:
            return None, False
        return await self._answer_request(stream, request), request.keeps_connection

    async def _answer_request(self, stream: HttpStream, request: HttpRequest) -> HttpResponse:
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
