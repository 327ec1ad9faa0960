"""Codec round trips and the peer transport over real sockets on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.consensus.codec import (
    CodecError,
    ForwardRequest,
    ForwardResponse,
    Hello,
    decode_frame,
    decode_stream,
    encode_forward_request,
    encode_forward_response,
    encode_hello,
    encode_messages,
    frame_length,
    message_size_bytes,
)
from raftka.consensus.transport import (
    PING_RPC,
    UNKNOWN_SERVER_ERROR,
    ForwardError,
    ForwardRemoteError,
    ForwardTimeout,
    PeerTransport,
)
from raftka.consensus.types import Entry, EntryKind, Message, MessageType

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    base = draw(st.integers(0, 2**62))
    return Entry(
        base_offset=base,
        last_offset=base + draw(st.integers(0, 1000)),
        epoch=draw(I32),
        payload=draw(st.binary(max_size=300)),
        kind=draw(st.sampled_from(EntryKind)),
    )


messages = st.builds(
    Message,
    group=st.text(max_size=40),
    type=st.sampled_from(MessageType),
    from_id=I32,
    to=I32,
    term=I64,
    prev_offset=I64,
    prev_epoch=I32,
    entries=st.lists(entries(), max_size=4).map(tuple),
    high_watermark=I64,
    reject=st.booleans(),
    match_end=I64,
    hint_offset=I64,
    hint_epoch=I32,
    last_offset=I64,
    last_epoch=I32,
    force=st.booleans(),
)


@given(st.lists(messages, max_size=5))
def test_messages_round_trip(batch: list[Message]) -> None:
    assert decode_stream(b"".join(encode_messages(batch))) == [batch]


@given(I32, st.integers(0, 2**64 - 1), st.text(max_size=30), st.binary(max_size=200))
def test_hello_and_forward_frames_round_trip(
    node_id: int, request_id: int, rpc: str, payload: bytes
) -> None:
    error_code = node_id % 32768
    stream = (
        encode_hello(node_id)
        + b"".join(encode_forward_request(request_id, rpc, payload))
        + b"".join(encode_forward_response(request_id, error_code, payload))
    )
    assert decode_stream(stream) == [
        Hello(node_id),
        ForwardRequest(request_id, rpc, payload),
        ForwardResponse(request_id, error_code, payload),
    ]


def test_large_payload_is_its_own_part_not_copied() -> None:
    payload = bytes(1 << 20)
    entry = Entry(0, 9, 1, payload)
    parts = encode_messages([Message("t-0", MessageType.APPEND, 1, 2, 1, entries=(entry,))])
    assert any(part is payload for part in parts)
    [frame] = decode_stream(b"".join(parts))
    assert isinstance(frame, list)
    assert frame[0].entries == (entry,)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_raises_codec_error(garbage: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_frame(garbage)


@given(st.lists(messages, min_size=1, max_size=3), st.data())
def test_corrupted_frame_raises_codec_error_or_decodes(
    batch: list[Message], data: st.DataObject
) -> None:
    frame = bytearray(b"".join(encode_messages(batch))[4:])
    i = data.draw(st.integers(0, len(frame) - 1))
    frame[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(frame)))
    with contextlib.suppress(CodecError):
        decode_frame(bytes(frame[:cut]))


def test_specific_garbage_errors() -> None:
    with pytest.raises(CodecError, match="unknown frame kind"):
        decode_frame(b"\x63")
    with pytest.raises(CodecError, match="truncated"):
        decode_frame(b"")
    with pytest.raises(CodecError, match="bad hello"):
        decode_frame(b"\x01XXXX\x00\x01\x00\x00\x00\x01")
    with pytest.raises(CodecError, match="frame length"):
        decode_stream(b"\xff\xff\xff\xff\x02")
    with pytest.raises(CodecError, match="count"):
        decode_frame(b"\x02\xff\xff\xff\xff")


# ---------------------------------------------------------------------------- transport
def free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def make_transports(
    node_ids: list[int], ports: list[int]
) -> tuple[dict[int, PeerTransport], dict[int, list[Message]]]:
    addresses = {node: ("127.0.0.1", port) for node, port in zip(node_ids, ports, strict=True)}
    inboxes: dict[int, list[Message]] = {node: [] for node in node_ids}
    transports = {
        node: PeerTransport(node, addresses[node], addresses, on_message=inboxes[node].append)
        for node in node_ids
    }
    return transports, inboxes


def heartbeat(group: str, from_id: int, to: int, term: int = 1) -> Message:
    return Message(group, MessageType.HEARTBEAT, from_id, to, term, high_watermark=term)


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.01)


def run_trio(test: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with trio.fail_after(20):
            await test()

    trio.run(main)


def test_three_transports_exchange_messages_in_order() -> None:
    async def scenario() -> None:
        transports, inboxes = make_transports([1, 2, 3], free_ports(3))
        async with trio.open_nursery() as nursery:
            for t in transports.values():
                await nursery.start(t.run)
            sent = {
                (a, b): [heartbeat(f"t-{i}", a, b, term=i) for i in range(200)]
                for a in transports
                for b in transports
                if a != b
            }
            for (a, _), batch in sent.items():
                for m in batch:
                    transports[a].send(m)
            await eventually(lambda: all(len(inbox) == 400 for inbox in inboxes.values()))
            for (a, b), batch in sent.items():
                assert [m for m in inboxes[b] if m.from_id == a] == batch
            # Sends made in one synchronous burst coalesce into few frames.
            assert transports[1].stats.frames_sent <= 10
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_late_peer_and_restarted_peer_are_reached() -> None:
    async def scenario() -> None:
        ports = free_ports(2)
        transports, inboxes = make_transports([1, 2], ports)
        t1 = transports[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            # Node 2 is not up: messages are dropped, the dial fails and is retried.
            t1.send(heartbeat("t-0", 1, 2))
            await eventually(lambda: t1.stats.dial_failures >= 1)
            peer2_scope = trio.CancelScope()

            async def run_node2(transport: PeerTransport) -> None:
                with peer2_scope:
                    await transport.run()

            nursery.start_soon(run_node2, transports[2])

            async def delivered(inbox: list[Message]) -> None:
                with trio.fail_after(5):
                    while not inbox:
                        t1.send(heartbeat("t-0", 1, 2))
                        await trio.sleep(0.05)

            await delivered(inboxes[2])
            # Restart node 2 on the same port with a fresh transport.
            peer2_scope.cancel()
            await eventually(lambda: not transports[2].running)
            restarted_inbox: list[Message] = []
            restarted = PeerTransport(
                2, ("127.0.0.1", ports[1]), {1: ("127.0.0.1", ports[0])},
                on_message=restarted_inbox.append,
            )  # fmt: skip
            peer2_scope = trio.CancelScope()
            nursery.start_soon(run_node2, restarted)
            await delivered(restarted_inbox)
            # And the restarted node reaches node 1.
            restarted.send(heartbeat("t-0", 2, 1))
            await eventually(lambda: any(m.from_id == 2 for m in inboxes[1]))
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_forward_reply_remote_error_handler_crash_and_timeout() -> None:
    async def scenario() -> None:
        transports, _ = make_transports([1, 2], free_ports(2))
        t1, t2 = transports[1], transports[2]
        release = trio.Event()

        async def handler(group: str, payload: bytes) -> tuple[int, bytes]:
            if group == "echo":
                return 0, payload[::-1]
            if group == "not-leader":
                return 6, b"leader is 3"
            if group == "slow":
                await release.wait()
                return 0, b"late"
            raise RuntimeError("handler bug")

        t2.set_forward_handler(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            big = bytes(range(256)) * 4096
            assert await t1.forward(2, "echo", big, timeout_s=5) == big[::-1]
            with pytest.raises(ForwardRemoteError) as remote:
                await t1.forward(2, "not-leader", b"", timeout_s=5)
            assert (remote.value.error_code, remote.value.payload) == (6, b"leader is 3")
            with pytest.raises(ForwardRemoteError) as crashed:
                await t1.forward(2, "boom", b"", timeout_s=5)
            assert crashed.value.error_code == UNKNOWN_SERVER_ERROR
            with pytest.raises(ForwardTimeout):
                await t1.forward(2, "slow", b"", timeout_s=0.2)
            # Concurrent requests each get their own reply.
            results: dict[int, bytes] = {}

            async def one(i: int) -> None:
                results[i] = await t1.forward(2, "echo", str(i).encode(), timeout_s=5)

            async with trio.open_nursery() as requests:
                for i in range(20):
                    requests.start_soon(one, i)
            assert results == {i: str(i).encode()[::-1] for i in range(20)}
            with pytest.raises(ForwardError, match="not a peer"):
                await t1.forward(9, "echo", b"", timeout_s=1)
            release.set()
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_forward_fails_when_the_connection_is_lost() -> None:
    async def scenario() -> None:
        transports, _ = make_transports([1, 2], free_ports(2))
        t1, t2 = transports[1], transports[2]
        started = trio.Event()

        async def handler(group: str, payload: bytes) -> tuple[int, bytes]:
            started.set()
            await trio.sleep_forever()
            raise AssertionError

        t2.set_forward_handler(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            t2_scope = trio.CancelScope()

            async def run_t2() -> None:
                with t2_scope:
                    await t2.run()

            nursery.start_soon(run_t2)
            await eventually(lambda: t2.running)

            async def kill_t2_when_serving() -> None:
                await started.wait()
                t2_scope.cancel()

            nursery.start_soon(kill_t2_when_serving)
            with pytest.raises(ForwardError, match="lost"):
                await t1.forward(2, "g", b"x", timeout_s=10)
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_unknown_node_id_is_refused_and_garbage_closes_connection() -> None:
    async def scenario() -> None:
        transports, inboxes = make_transports([1, 2], free_ports(2))
        t1 = transports[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            host, port = t1.listen
            stranger = await trio.open_tcp_stream(host, port)
            await stranger.send_all(encode_hello(99))
            assert await stranger.receive_some(10) == b""
            assert t1.stats.connections_refused == 1
            rogue = await trio.open_tcp_stream(host, port)
            await rogue.send_all(encode_hello(2) + b"\x00\x00\x00\x05\x02garb")
            assert await rogue.receive_some(10) == b""
            # The transport still serves its real peer.
            nursery.start_soon(transports[2].run)
            transports[2].send(heartbeat("t-0", 2, 1))
            await eventually(lambda: len(inboxes[1]) == 1)
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_forwards_beyond_the_bound_wait_for_a_slot_and_all_complete() -> None:
    async def scenario() -> None:
        ports = free_ports(2)
        addresses = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
        inbox: list[Message] = []
        t1 = PeerTransport(1, addresses[1], addresses)
        t2 = PeerTransport(2, addresses[2], addresses, inbox.append, forwards_in_flight_max=4)
        running = started = most = 0
        gate = trio.Event()

        async def handler(rpc: str, payload: bytes) -> tuple[int, bytes]:
            nonlocal running, started, most
            running += 1
            started += 1
            most = max(most, running)
            await gate.wait()
            await trio.sleep(0.001)
            running -= 1
            return 0, payload[::-1]

        t2.set_forward_handler(handler)
        results: dict[int, bytes] = {}

        async def one(i: int) -> None:
            results[i] = await t1.forward(2, "echo", f"request {i}".encode(), timeout_s=15)

        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            async with trio.open_nursery() as requests:
                for i in range(20):
                    requests.start_soon(one, i)
                await eventually(lambda: started == 4)
                t1.send(heartbeat("t-0", 1, 2))
                await trio.sleep(0.3)
                # Back-pressure: the fifth request and the heartbeat behind it stay unread.
                assert (started, inbox) == (4, [])
                gate.set()
            assert results == {i: f"request {i}".encode()[::-1] for i in range(20)}
            assert most == 4
            await eventually(lambda: len(inbox) == 1)
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_queued_forward_requests_count_toward_the_byte_budget() -> None:
    async def scenario() -> None:
        # Never run: everything stays queued for node 2.
        t1 = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1)}, queue_bytes_max=1000)
        small = heartbeat("t-0", 1, 2)
        t1.send(small)
        assert t1.queued_bytes(2) == message_size_bytes(small)
        outcome: list[Exception] = []

        async def forward(payload_bytes: int, timeout_s: float) -> None:
            try:
                await t1.forward(2, "r", bytes(payload_bytes), timeout_s=timeout_s)
            except ForwardError as exc:
                outcome.append(exc)

        request_bytes = sum(len(part) for part in encode_forward_request(1, "r", bytes(500)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(forward, 500, 0.5)
            await trio.testing.wait_all_tasks_blocked()
            assert t1.queued_bytes(2) == message_size_bytes(small) + request_bytes
            # Another request does not fit next to the first: refused at once.
            await forward(500, 10)
            assert "does not fit the queue to node 2" in str(outcome[0])
            assert t1.stats.forwards_refused == 1
            # A message that would fit without the queued request is dropped.
            big = Message("t-0", MessageType.APPEND, 1, 2, 1, entries=(Entry(0, 0, 1, bytes(400)),))
            assert message_size_bytes(small) + message_size_bytes(big) < 1000
            t1.send(big)
            assert t1.stats.messages_dropped == 1
        assert isinstance(outcome[1], ForwardTimeout)
        assert t1.queued_bytes(2) == message_size_bytes(small)  # the timed-out request left

    run_trio(scenario)


def test_forward_responses_count_toward_the_byte_budget_until_written() -> None:
    async def scenario() -> None:
        t2 = PeerTransport(2, ("127.0.0.1", 0), {1: ("127.0.0.1", 1)})
        answer = bytes(range(256)) * 400

        async def handler(rpc: str, payload: bytes) -> tuple[int, bytes]:
            return 0, answer

        t2.set_forward_handler(handler)
        # Lockstep: the response's write blocks until this side reads it.
        peer_end, node_end = trio.testing.lockstep_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(t2.serve_inbound, node_end)
            await peer_end.send_all(encode_hello(1) + b"".join(encode_forward_request(7, "r", b"")))
            await eventually(lambda: t2.queued_bytes(1) > len(answer))
            received = bytearray()
            while len(received) < 4 or len(received) < 4 + frame_length(received[:4]):
                received += await peer_end.receive_some(1 << 20)
            assert decode_stream(received) == [ForwardResponse(7, 0, answer)]
            await eventually(lambda: t2.queued_bytes(1) == 0)
            await peer_end.aclose()

    run_trio(scenario)


def test_a_connection_the_peer_no_longer_reads_is_dialled_again() -> None:
    """A peer that keeps the connection open but takes no more frames from it (its TCP
    stream stalled, its reader stuck) raises no error on this side: without pings every
    message to it would stay stuck behind that connection for good (a follower of every
    group this node leads, cut off for the rest of a chaos run)."""

    async def scenario() -> None:
        ports = free_ports(2)
        addresses = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
        inbox: list[Message] = []
        t1 = PeerTransport(1, addresses[1], addresses, ping_interval_s=0.05, ping_timeout_s=0.5)
        t2 = PeerTransport(2, addresses[2], addresses, on_message=inbox.append)
        held: list[trio.SocketStream] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            # Node 2's address first answers with a connection nobody ever reads.
            listeners = await trio.open_tcp_listeners(ports[1], host="127.0.0.1")
            t1.send(heartbeat("t-0", 1, 2))
            held.append(await listeners[0].accept())
            for listener in listeners:
                await listener.aclose()
            # Then node 2 serves that address; node 1 still holds the unread connection.
            await nursery.start(t2.run)
            with trio.fail_after(10):
                while not inbox:
                    t1.send(heartbeat("t-0", 1, 2))
                    await trio.sleep(0.05)
            assert inbox[0].from_id == 1
            nursery.cancel_scope.cancel()
        for stream in held:
            await stream.aclose()

    run_trio(scenario)


def test_a_peer_that_dials_again_replaces_its_previous_connection() -> None:
    async def scenario() -> None:
        inbox: list[Message] = []
        t2 = PeerTransport(2, ("127.0.0.1", 0), {1: ("127.0.0.1", 1)}, on_message=inbox.append)
        first_peer, first_node = trio.testing.memory_stream_pair()
        second_peer, second_node = trio.testing.memory_stream_pair()
        first_done = trio.Event()

        async def serve_first() -> None:
            await t2.serve_inbound(first_node)
            first_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_first)
            await first_peer.send_all(encode_hello(1))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(t2.serve_inbound, second_node)
            await second_peer.send_all(
                encode_hello(1) + b"".join(encode_messages([heartbeat("t-0", 1, 2)]))
            )
            with trio.fail_after(5):
                await first_done.wait()
            assert await first_peer.receive_some(10) == b""
            await eventually(lambda: len(inbox) == 1)
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_a_ping_is_answered_by_the_transport_not_the_forward_handler() -> None:
    async def scenario() -> None:
        transports, _ = make_transports([1, 2], free_ports(2))
        t1, t2 = transports[1], transports[2]
        asked: list[str] = []

        async def handler(rpc: str, payload: bytes) -> tuple[int, bytes]:
            asked.append(rpc)
            return UNKNOWN_SERVER_ERROR, b""

        t2.set_forward_handler(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            assert await t1.forward(2, PING_RPC, b"", timeout_s=5) == b""
            assert asked == []
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_a_long_write_that_moves_is_not_taken_for_a_stalled_connection() -> None:
    """A frame larger than the peer takes in `ping_timeout_s` (a big append to a slow
    reader) leaves whole on its connection: the ping waits behind it, and the write's own
    progress shows the connection carries frames."""

    async def scenario() -> None:
        ports = free_ports(2)
        addresses = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
        t1 = PeerTransport(1, addresses[1], addresses, ping_interval_s=0.05, ping_timeout_s=0.5)
        payload = bytes(range(256)) * (8 << 10)  # 2 MiB
        append = Message("t-0", MessageType.APPEND, 1, 2, 1, entries=(Entry(0, 0, 1, payload),))
        frame_bytes = sum(len(part) for part in encode_messages([append]))
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            listeners = await trio.open_tcp_listeners(ports[1], host="127.0.0.1")
            t1.send(append)
            slow = await listeners[0].accept()
            received = bytearray()
            with trio.fail_after(15):
                hello_bytes = len(encode_hello(1))
                while len(received) < hello_bytes + frame_bytes:
                    # About 0.8 MB/s: the frame takes seconds, several ping timeouts.
                    chunk = await slow.receive_some(16 << 10)
                    assert chunk, "the connection was closed before the frame was written"
                    received += chunk
                    await trio.sleep(0.02)
            frames = decode_stream(bytes(received[hello_bytes : hello_bytes + frame_bytes]))
            assert frames[0] == [append]
            nursery.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            await slow.aclose()

    run_trio(scenario)
