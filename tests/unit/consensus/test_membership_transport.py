"""The peer transport with brokers that join at run time: a node that is not a peer yet is
served its forwarded requests only when joiners are admitted, its Raft messages are dropped
until `add_peer`, and a peer added while running is dialled like the configured ones."""

from __future__ import annotations

import socket

import pytest
import trio

from raftka.consensus.transport import ForwardError, PeerTransport
from raftka.consensus.types import Message, MessageType


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


async def echo(rpc: str, payload: bytes) -> tuple[int, bytes]:
    return 0, payload[::-1]


def heartbeat(from_id: int, to: int) -> Message:
    return Message(group="g", type=MessageType.HEARTBEAT, from_id=from_id, to=to, term=1)


@pytest.mark.parametrize("admit", [True, False])
def test_a_joiner_is_served_only_when_admitted(admit: bool) -> None:
    async def scenario() -> None:
        p1, p4 = free_ports(2)
        received: list[Message] = []
        t1 = PeerTransport(1, ("127.0.0.1", p1), {}, received.append, admit_joiners=admit)
        t1.set_forward_handler(echo)
        t4 = PeerTransport(4, ("127.0.0.1", p4), {1: ("127.0.0.1", p1)}, connect_timeout_s=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t4.run)
            if admit:
                assert await t4.forward(1, "register", b"abc", timeout_s=5) == b"cba"
                t4.send(heartbeat(4, 1))
                await trio.sleep(0.2)
                assert received == []  # not a peer yet
                t1.add_peer(4, ("127.0.0.1", p4))
                t4.send(heartbeat(4, 1))
                with trio.fail_after(5):
                    while not received:
                        await trio.sleep(0.01)
                assert received[0].from_id == 4
                assert t1.peer_ids == {4}
            else:
                with pytest.raises(ForwardError):
                    await t4.forward(1, "register", b"abc", timeout_s=2)
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def test_a_peer_added_while_running_is_dialled() -> None:
    async def scenario() -> None:
        p1, p2 = free_ports(2)
        got: list[Message] = []
        t1 = PeerTransport(1, ("127.0.0.1", p1), {})
        t2 = PeerTransport(2, ("127.0.0.1", p2), {1: ("127.0.0.1", p1)}, got.append)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            t1.add_peer(2, ("127.0.0.1", p2))
            t1.add_peer(1, ("127.0.0.1", p1))  # itself: nothing
            assert t1.peer_ids == {2}
            assert t1.peer_address(2) == ("127.0.0.1", p2)
            with trio.fail_after(5):
                while not got:
                    t1.send(heartbeat(1, 2))
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(scenario)
