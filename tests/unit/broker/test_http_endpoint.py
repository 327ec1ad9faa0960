"""The metrics endpoint's HTTP request parsing: what is accepted, what gets which status."""

from __future__ import annotations

from http import HTTPStatus

import pytest
import trio
import trio.testing

from raftka.broker.http_endpoint import (
    BODY_BYTES_MAX,
    REQUEST_HEAD_BYTES_MAX,
    HttpError,
    HttpRequest,
    HttpResponse,
    head_end,
    parse_request_head,
    parse_request_line,
    read_body,
    read_request,
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"GET /metrics HTTP/1.1", HttpRequest("GET", "/metrics")),
        (b"GET /readyz?verbose=1 HTTP/1.0", HttpRequest("GET", "/readyz", "verbose=1")),
        (b"POST /healthz HTTP/1.1", HttpRequest("POST", "/healthz")),
        (b"GET / HTTP/1.1", HttpRequest("GET", "/")),
    ],
)
def test_request_line_is_parsed(line: bytes, expected: HttpRequest) -> None:
    assert parse_request_line(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"GET",
        b"GET /metrics",
        b"GET /metrics HTTP/2.0",
        b"GET  /metrics HTTP/1.1",
        b"GET metrics HTTP/1.1",
        b"GET http://host/metrics HTTP/1.1",
        b"G(T /metrics HTTP/1.1",
        b"GET /met rics HTTP/1.1",
        b"\x00\xff\xfe\x16\x03\x01",
        b"GET /m\xe9trics HTTP/1.1",
    ],
)
def test_malformed_request_line_is_400(line: bytes) -> None:
    with pytest.raises(HttpError) as caught:
        parse_request_line(line)
    assert caught.value.status == HTTPStatus.BAD_REQUEST


def test_head_with_fields_in_crlf_or_lf() -> None:
    head = b"GET /metrics HTTP/1.1\r\nHost: localhost:9404\r\nAccept: */*"
    assert parse_request_head(head) == HttpRequest("GET", "/metrics")
    assert parse_request_head(head.replace(b"\r\n", b"\n")) == HttpRequest("GET", "/metrics")


@pytest.mark.parametrize(
    "field", [b"Host localhost", b"Bad Name: x", b": empty name", b"Host: a\x00b", b" folded"]
)
def test_malformed_header_field_is_400(field: bytes) -> None:
    with pytest.raises(HttpError) as caught:
        parse_request_head(b"GET /metrics HTTP/1.1\r\n" + field)
    assert caught.value.status == HTTPStatus.BAD_REQUEST


def test_head_end_finds_the_first_blank_line() -> None:
    assert head_end(b"GET / HTTP/1.1\r\n") is None
    assert head_end(b"GET / HTTP/1.1\r\n\r\nbody") == (14, 18)
    assert head_end(b"GET / HTTP/1.1\n\nbody") == (14, 16)


def _read(*chunks: bytes, close: bool = True) -> HttpRequest | None:
    """What read_request makes of these chunks (then end of input, if `close`)."""

    async def run() -> HttpRequest | None:
        send, receive = trio.testing.memory_stream_one_way_pair()
        for chunk in chunks:
            await send.send_all(chunk)
        if close:
            await send.aclose()
        # Without more input the read would wait for ever: a refusal must come first.
        with trio.fail_after(1):
            return await read_request(receive)

    return trio.run(run)


def test_request_split_over_chunks() -> None:
    request = _read(b"GE", b"T /hea", b"lthz HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n")
    assert request == HttpRequest("GET", "/healthz")


def test_peer_closing_without_a_byte_is_no_request() -> None:
    assert _read() is None


def test_incomplete_request_is_400() -> None:
    with pytest.raises(HttpError) as caught:
        _read(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    assert caught.value.status == HTTPStatus.BAD_REQUEST


def test_garbage_is_refused_before_a_line_end_arrives() -> None:
    # The stream stays open: the answer must not wait for more input.
    with pytest.raises(HttpError) as caught:
        _read(b"\x16\x03\x01\x02\x00\x01\x00", close=False)
    assert caught.value.status == HTTPStatus.BAD_REQUEST


def test_garbage_request_line_is_refused_before_the_head_ends() -> None:
    with pytest.raises(HttpError) as caught:
        _read(b"GET /metrics SPDY/3\r\nHost: x\r\n", close=False)
    assert caught.value.status == HTTPStatus.BAD_REQUEST


def test_over_long_request_line_is_400_without_reading_it_all() -> None:
    line = b"GET /" + b"a" * (4 * REQUEST_HEAD_BYTES_MAX)
    with pytest.raises(HttpError) as caught:
        _read(line, close=False)
    assert caught.value.status == HTTPStatus.BAD_REQUEST
    assert str(REQUEST_HEAD_BYTES_MAX) in caught.value.message


def test_response_has_length_and_closes() -> None:
    encoded = HttpResponse.text(HTTPStatus.SERVICE_UNAVAILABLE, "not ready: x").encode()
    head, _, body = encoded.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable"
    assert b"Content-Length: 13" in head
    assert b"Connection: close" in head
    assert body == b"not ready: x\n"


def test_header_fields_are_kept_by_lower_case_name() -> None:
    request = _read(b"POST /topics HTTP/1.1\r\nContent-Length: 3\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
    assert request is not None
    assert request.header("content-length") == "3"
    assert request.header("x-a") == "2"
    assert request.header("host") is None


def _body_and_rest(head: bytes, early: bytes, *later: bytes) -> tuple[bytes, bytes]:
    """What read_body makes of a request with this head, `early` bytes having arrived with
    it and `later` ones after, and what it leaves in the buffer (the next request's)."""

    async def run() -> tuple[bytes, bytes]:
        send, receive = trio.testing.memory_stream_one_way_pair()
        for chunk in later:
            await send.send_all(chunk)
        await send.aclose()
        buffer = bytearray(early)
        with trio.fail_after(1):
            body = await read_body(receive, parse_request_head(head), buffer)
        return body, bytes(buffer)

    return trio.run(run)


def _body(head: bytes, early: bytes, *later: bytes) -> bytes:
    return _body_and_rest(head, early, *later)[0]


def test_a_body_is_read_by_its_length_and_bounded() -> None:
    head = b"POST /topics HTTP/1.1\r\nContent-Length: 7"
    assert _body(head, b"a=1", b"&b=", b"2EXTRA") == b"a=1&b=2"
    # What follows the body is the next request's, kept for it.
    assert _body_and_rest(head, b"a=1", b"&b=2GET / HTTP/1.1") == (b"a=1&b=2", b"GET / HTTP/1.1")
    assert _body_and_rest(head, b"a=1&b=2GET") == (b"a=1&b=2", b"GET")
    assert _body(b"POST / HTTP/1.1", b"ignored") == b""
    with pytest.raises(HttpError) as caught:
        _body(f"POST / HTTP/1.1\r\nContent-Length: {BODY_BYTES_MAX + 1}".encode(), b"")
    assert caught.value.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    with pytest.raises(HttpError) as caught:
        _body(head, b"a=1")  # the peer closed early
    assert caught.value.status == HTTPStatus.BAD_REQUEST
    with pytest.raises(HttpError) as caught:
        _body(b"POST / HTTP/1.1\r\nContent-Length: -1", b"")
    assert caught.value.status == HTTPStatus.BAD_REQUEST
