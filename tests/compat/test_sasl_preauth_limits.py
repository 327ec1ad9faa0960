"""What an unauthenticated or stalling client can make the broker hold, over a real
SASL_PLAINTEXT listener: a frame larger than `sasl.server.max.receive.size` before
authentication closes the connection as soon as its size is read; a frame that stalls or
trickles (on either listener) is dropped once `connections.max.idle.ms` has passed since its
size arrived; and
authenticated clients (and the PLAINTEXT listener) keep `socket.request.max.bytes`.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import threading
import time
import uuid
from typing import Any

import pytest
from brokers import Brokers
from confluent_kafka import Consumer, Producer
from secured import SaslBroker, start_sasl_broker

IDLE_MS = 3000
PREAUTH_LIMIT = 524288
#: A value larger than the pre-authentication limit but within Kafka's default
#: message.max.bytes (1048588).
LARGE_VALUE = b"x" * 1_000_000


class PreauthBroker(SaslBroker):
    def sasl_client(self) -> dict[str, Any]:
        return self.client("alice")

    def plaintext_client(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.broker.bootstrap}

    def raw(self, port: int | None = None) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port or self.sasl_port), timeout=10)

    def log_lines_about(self, sock: socket.socket) -> list[str]:
        host, port = sock.getsockname()[:2]
        peer = f"{host}:{port}"
        about_peer = re.compile(rf"connection from {re.escape(peer)}(?!\d)")
        return [line for line in self.broker.log_tail(400).splitlines() if about_peer.search(line)]


@pytest.fixture(scope="module")
def sasl_broker(module_brokers: Brokers) -> PreauthBroker:
    started = start_sasl_broker(
        module_brokers,
        ("alice",),
        authorizer=False,
        config={"connections.max.idle.ms": str(IDLE_MS)},
        name="preauth-broker",
    )
    return PreauthBroker(started.broker, started.sasl_port)


def _closed(sock: socket.socket, within_s: float = 30.0) -> bool:
    """Whether the broker closes `sock` (reading and dropping anything it sends first)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def roundtrip(settings: dict[str, Any], value: bytes = b"v") -> bytes:
    """Produce one record with `value` to a new topic and consume it back."""
    topic = f"preauth-{uuid.uuid4().hex[:10]}"
    producer = Producer({**settings, "message.max.bytes": 1048588, "log_level": 0})
    producer.produce(topic, value)
    assert producer.flush(30) == 0, "the record was not delivered"
    consumer = Consumer(
        {
            **settings,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                return bytes(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"nothing consumed from {topic}")


def test_large_frame_before_authentication_is_refused_without_its_body(
    sasl_broker: PreauthBroker,
) -> None:
    size = 10 * 1024 * 1024
    with sasl_broker.raw() as raw:
        raw.sendall(struct.pack(">i", size))  # and nothing more
        assert _closed(raw), "the broker kept a connection announcing a 10 MB frame"
        lines = sasl_broker.log_lines_about(raw)
    # Closed by the size check, not by the idle timeout.
    assert any(
        "WARNING" in line
        and f"request of {size} bytes exceeds sasl.server.max.receive.size={PREAUTH_LIMIT}" in line
        for line in lines
    ), lines
    assert not any("idle" in line or "incomplete" in line for line in lines), lines
    assert roundtrip(sasl_broker.sasl_client()) == b"v"


def test_authenticated_and_plaintext_clients_keep_socket_request_max_bytes(
    sasl_broker: PreauthBroker,
) -> None:
    assert roundtrip(sasl_broker.sasl_client(), LARGE_VALUE) == LARGE_VALUE
    assert roundtrip(sasl_broker.plaintext_client(), LARGE_VALUE) == LARGE_VALUE


def _trickle(sock: socket.socket, outcome: list[int]) -> None:
    """Send the body one byte at a time until the broker closes `sock`; the bytes sent."""
    sent = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            sock.sendall(b"\0")
            sent += 1
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable and not sock.recv(1):
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    outcome.append(sent)


def test_stalled_or_trickling_frame_is_dropped_after_the_idle_timeout(
    sasl_broker: PreauthBroker,
) -> None:
    body_bytes = 1000
    with (
        sasl_broker.raw() as stalled,
        sasl_broker.raw() as trickling,
        sasl_broker.raw(sasl_broker.broker.port) as plaintext_stalled,
        sasl_broker.raw(sasl_broker.broker.port) as plaintext_trickling,
    ):
        stalled.sendall(struct.pack(">i", body_bytes) + b"\0" * 10)  # then nothing
        plaintext_stalled.sendall(struct.pack(">i", body_bytes) + b"\0" * 10)
        trickling.sendall(struct.pack(">i", body_bytes))
        plaintext_trickling.sendall(struct.pack(">i", body_bytes))
        sent: list[int] = []
        plaintext_sent: list[int] = []
        tricklers = [
            threading.Thread(target=_trickle, args=(trickling, sent)),
            threading.Thread(target=_trickle, args=(plaintext_trickling, plaintext_sent)),
        ]
        for trickler in tricklers:
            trickler.start()
        try:
            # An authenticated client is served meanwhile.
            assert roundtrip(sasl_broker.sasl_client()) == b"v"
        finally:
            for trickler in tricklers:
                trickler.join(90)
        assert _closed(stalled), "a connection stalled in the middle of a frame was kept"
        assert _closed(plaintext_stalled), "the PLAINTEXT listener kept a stalled frame"
        assert sent and sent[0] < body_bytes, "the trickling connection was never closed"
        assert plaintext_sent and plaintext_sent[0] < body_bytes, (
            "the PLAINTEXT listener kept a trickling frame"
        )
        stalled_lines = sasl_broker.log_lines_about(stalled)
        stalled_lines += sasl_broker.log_lines_about(plaintext_stalled)
        trickling_lines = sasl_broker.log_lines_about(trickling)
        plaintext_trickling_lines = sasl_broker.log_lines_about(plaintext_trickling)
    stalled_reason = (
        f"request incomplete after connections.max.idle.ms={IDLE_MS} "
        f"(10 of {body_bytes} bytes received)"
    )
    assert len([line for line in stalled_lines if stalled_reason in line]) == 2, stalled_lines
    assert all("INFO" in line for line in stalled_lines), stalled_lines
    pattern = re.compile(
        rf"request incomplete after connections.max.idle.ms={IDLE_MS} "
        rf"\(\d+ of {body_bytes} bytes received\)"
    )
    assert any(pattern.search(line) for line in trickling_lines), trickling_lines
    assert any(pattern.search(line) for line in plaintext_trickling_lines), (
        plaintext_trickling_lines
    )
    assert sasl_broker.broker.is_running()
    assert "Traceback" not in sasl_broker.broker.log_tail(400)
