"""Persistent HTTP connections on a real broker's HTTP endpoint (`metrics.listen`, which also
serves the queue API), driven by Python's own HTTP client and raw sockets."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from typing import Any

import pytest
from brokers import Brokers
from clients import unique, wait_until
from harness import free_port


@pytest.fixture(scope="module")
def address(module_brokers: Brokers) -> tuple[str, int]:
    host, port = "127.0.0.1", free_port()
    module_brokers.broker({"metrics.listen": f"{host}:{port}"}, name="http-keep-alive")

    def answers() -> bool:
        try:
            connection = http.client.HTTPConnection(host, port, timeout=5)
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        except OSError:
            return False

    wait_until(answers, 30, "the HTTP endpoint answers")
    return host, port


def _json(connection: http.client.HTTPConnection, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body)
    connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    return answer.status, answer.getheader("Connection"), answer.read()


def test_one_connection_serves_many_requests_until_the_client_closes_it(
    address: tuple[str, int],
) -> None:
    host, port = address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    queue = unique("kept")
    status, closing, _ = _json(connection, "PUT", f"/queues/{queue}", {"order": "fifo"})
    assert status in (200, 201) and closing is None
    sock = connection.sock
    assert sock is not None
    for i in range(5):
        status, closing, _ = _json(
            connection, "POST", f"/queues/{queue}/messages", {"value": f"m{i}"}
        )
        assert (status, closing) == (201, None) or (status, closing) == (200, None), status
        assert connection.sock is sock, "the client had to open another connection"
    status, _, body = _json(connection, "GET", "/metrics")
    assert status == 200 and b"raftka" in body and connection.sock is sock
    # Bad input on a kept connection: answered, and the connection still serves.
    status, _, _ = _json(connection, "POST", "/queues/no-such-queue-here/dequeue", {})
    assert status == 404 and connection.sock is sock
    connection.request("GET", "/healthz", headers={"Connection": "close"})
    answer = connection.getresponse()
    assert answer.status == 200 and answer.getheader("Connection") == "close"
    answer.read()
    assert connection.sock is None  # the client closed it on the server's word
    connection.close()


def test_pipelined_requests_are_answered_in_order_and_http_1_0_closes(
    address: tuple[str, int],
) -> None:
    host, port = address
    with socket.create_connection((host, port), timeout=10) as sock:
        body = b"{}"
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /queues/no-such-queue/dequeue HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            % (len(body), body)
            + b"GET /nowhere-at-all HTTP/1.0\r\n\r\n"
        )
        received = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", received)
    assert statuses == [b"200", b"404", b"404"], received[:500]
    assert received.count(b"Connection: close") == 1


def test_more_connections_than_before_are_served_at_once(address: tuple[str, int]) -> None:
    """100 clients, each holding its connection open across requests (the queue benchmark's
    load): none is refused."""
    host, port = address
    statuses: list[int] = []
    opened = threading.Barrier(100, timeout=30)

    def client() -> None:
        connection = http.client.HTTPConnection(host, port, timeout=20)
        connection.connect()
        opened.wait()
        for _ in range(3):
            connection.request("GET", "/healthz")
            answer = connection.getresponse()
            answer.read()
            statuses.append(answer.status)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert statuses == [200] * 300
