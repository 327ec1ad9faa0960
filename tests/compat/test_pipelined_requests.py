"""Requests a client sends together, in one burst larger than one read of the broker
(`RECEIVE_CHUNK_BYTES`), are all answered in order: sixteen requests of exactly one read's
worth, and a seventeenth after them (more than a reader serves before it lets others run,
with frames that span the broker's reads wherever they fall)."""

from __future__ import annotations

import socket
import struct

from raftka.broker.connection import RECEIVE_CHUNK_BYTES

API_VERSIONS = 18
#: Frames of this many bytes, size prefix included, sixteen to one read of the broker.
FRAME_BYTES = RECEIVE_CHUNK_BYTES // 16


def _api_versions_v0(correlation_id: int, frame_bytes: int) -> bytes:
    """An ApiVersions v0 request (an empty body) whose client id pads it to `frame_bytes`."""
    client_id = b"c" * (frame_bytes - 14)
    header = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(header)) + header


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the broker closed the connection after {len(data)} of {size} bytes"
        data += chunk
    return data


def test_a_burst_that_fills_a_read_exactly_is_answered_in_full(bootstrap: str) -> None:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    burst = b"".join(_api_versions_v0(n, FRAME_BYTES) for n in range(16))
    assert len(burst) == RECEIVE_CHUNK_BYTES
    burst += _api_versions_v0(16, 64)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        for _ in range(3):
            sock.sendall(burst)
            answered = []
            for _ in range(17):
                (size,) = struct.unpack(">i", _read_exactly(sock, 4))
                response = _read_exactly(sock, size)
                correlation_id, error_code = struct.unpack_from(">ih", response)
                assert error_code == 0
                answered.append(correlation_id)
            assert answered == list(range(17))
