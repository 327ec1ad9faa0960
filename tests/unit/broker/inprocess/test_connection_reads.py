"""A connection of an in-process broker, read by the broker's poller, over a real TCP socket
on loopback: bytes that arrive while the reader waits are read and served as they fall."""

from __future__ import annotations

import contextlib
import datetime
import io
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.serial import entity_writer

from raftka.broker.config import BrokerConfig
from raftka.broker.connection import RECEIVE_CHUNK_BYTES, Connection
from raftka.broker.server import Broker, Listener
from raftka.protocol.api import build

#: Socket buffers that hold a whole burst, so that it is all there before the broker reads.
BUFFER_BYTES = 4 * 1024 * 1024


def _fetch_v4(correlation_id: int, frame_bytes: int) -> bytes:
    """A Fetch v4 request that waits for nothing, of a topic the broker does not have (it is
    answered as the request is read), its client id padding it to `frame_bytes`."""
    fetch = build(
        FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=(
            build(
                FetchTopic,
                topic="absent",
                partitions=(
                    build(FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1024),
                ),
            ),
        ),
    )
    body = io.BytesIO()
    entity_writer(FetchRequest)(body, fetch)
    padding = frame_bytes - 4 - 10 - len(body.getvalue())
    header = struct.pack(">hhih", 1, 4, correlation_id, padding) + b"c" * padding
    frame = header + body.getvalue()
    return struct.pack(">i", len(frame)) + frame


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    instance = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path / "data")
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.socket() as listener:
        # Before listening: the window a connection offers is fixed at its handshake.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        yield client, server


def _answered(client: socket.socket) -> list[int]:
    """The correlation ids of the whole answers the client has received."""
    client.setblocking(False)
    data = b""
    while True:
        try:
            chunk = client.recv(1 << 20)
        except BlockingIOError:
            break
        assert chunk, "the broker closed the connection"
        data += chunk
    ids = []
    position = 0
    while len(data) - position >= 4:
        (size,) = struct.unpack_from(">i", data, position)
        if len(data) - position - 4 < size:
            break
        ids.append(struct.unpack_from(">i", data, position + 4)[0])
        position += 4 + size
    return ids


@contextlib.asynccontextmanager
async def _served(
    broker: Broker, server: socket.socket
) -> AsyncIterator[tuple[trio.Nursery, Connection]]:
    """A connection of `broker` on the `server` socket, served with the broker's poller and
    group commit, its reader parked waiting for bytes."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.poller.run)
        nursery.start_soon(broker.group_commit.run)
        connection = Connection(
            broker.services,
            trio.SocketStream(trio.socket.from_stdlib_socket(server)),
            idle=broker.idle,
            group_commit=broker.group_commit,
            poller=broker.poller,
        )
        nursery.start_soon(connection.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert connection.parked is not None, "the reader waits for bytes"
        yield nursery, connection


def test_a_read_that_takes_all_it_asked_for_at_a_frame_boundary_leaves_nothing_unread(
    broker: Broker, sockets: tuple[socket.socket, socket.socket]
) -> None:
    client, server = sockets
    # Sixteen requests of exactly one read's worth, all served by the poller in its step,
    # and one more: no edge will come for it (it was in the socket before the read).
    burst = b"".join(_fetch_v4(n, RECEIVE_CHUNK_BYTES // 16) for n in range(16))
    assert len(burst) == RECEIVE_CHUNK_BYTES
    burst += _fetch_v4(16, 128)

    async def main() -> list[int]:
        async with _served(broker, server) as (nursery, connection):
            client.sendall(burst)  # all of it in the socket before the broker runs again
            await trio.testing.wait_all_tasks_blocked()
            answered = _answered(client)
            nursery.cancel_scope.cancel()
        return answered

    assert trio.run(main) == list(range(17))


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps of one task once it is set."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


def test_requests_that_need_no_wait_are_answered_without_a_step_of_the_reader(
    broker: Broker, sockets: tuple[socket.socket, socket.socket]
) -> None:
    client, server = sockets
    reader_steps = _TaskSteps()

    async def main() -> tuple[list[int], int]:
        async with _served(broker, server) as (nursery, connection):
            reader_steps.task = connection.parked
            answered = []
            for n in range(3):
                client.sendall(_fetch_v4(n, 200))
                await trio.testing.wait_all_tasks_blocked()
                answered += _answered(client)
            steps = reader_steps.steps
            nursery.cancel_scope.cancel()
        return answered, steps

    assert trio.run(main, instruments=[reader_steps]) == ([0, 1, 2], 0)


def test_a_frame_that_arrives_in_pieces_while_the_reader_waits_is_put_together(
    broker: Broker, sockets: tuple[socket.socket, socket.socket]
) -> None:
    client, server = sockets
    # Each piece leaves at once (Nagle would hold one back until the last was acknowledged).
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # A frame whose rest, after its first 8 bytes, would itself read as a whole request
    # (size = the correlation id 10, then api key 18 = the client id's length): only
    # appended to the begun frame is it read right.
    correlation_id = 10
    sample = _fetch_v4(correlation_id, 100)
    body_bytes = 100 - 14 - struct.unpack_from(">h", sample, 12)[0]
    frame = _fetch_v4(correlation_id, 14 + body_bytes + 18)
    assert struct.unpack_from(">ih", frame, 8) == (correlation_id, 18)

    async def main() -> list[int]:
        async with _served(broker, server) as (nursery, connection):
            answered = []
            for _ in range(3):
                # In two pieces (the reader waits between, with the frame begun in its
                # buffer), then whole (to an empty buffer).
                for piece in (frame[:8], frame[8:], frame):
                    client.sendall(piece)
                    await trio.testing.wait_all_tasks_blocked()
                    assert connection.parked is not None, "the reader waits for bytes"
                answered += _answered(client)
            nursery.cancel_scope.cancel()
        return answered

    assert trio.run(main) == [correlation_id] * 6
