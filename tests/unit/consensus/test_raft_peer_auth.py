"""Authentication of broker-to-broker (Raft) connections: the challenge-response handshake
on its own over memory streams, then the peer transport over real sockets on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from raftka.consensus.codec import encode_hello, encode_messages
from raftka.consensus.peer_auth import (
    AuthKind,
    PeerAuth,
    PeerAuthError,
    Refusal,
    Role,
    authenticate,
    load_secrets,
)
from raftka.consensus.transport import PeerTransport
from raftka.consensus.types import Message, MessageType

SECRET = b"correct horse battery staple"
OTHER_SECRET = b"incorrect donkey battery stapler"
CLUSTER = "test-cluster"
TIMEOUT_S = 5.0


def auth(*secrets: bytes, cluster_id: str = CLUSTER) -> PeerAuth:
    return PeerAuth(secrets or (SECRET,), cluster_id)


def accept_only(*ids: int) -> Callable[[int], str | None]:
    return lambda claimed: None if claimed in ids else f"is not node {ids}"


class RecordingStream(trio.abc.Stream):
    """A stream that keeps a copy of everything sent through it."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sent = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += data
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def handshake_pair(
    dialer_auth: PeerAuth,
    listener_auth: PeerAuth,
    dialer_id: int = 1,
    listener_id: int = 2,
    dialled_id: int = 2,
    dialer_stream: trio.abc.Stream | None = None,
    listener_stream: trio.abc.Stream | None = None,
) -> tuple[int | PeerAuthError, int | PeerAuthError]:
    """Both ends of one handshake: what each returned or raised."""
    left, right = trio.testing.memory_stream_pair()
    dialer_side = dialer_stream or left
    listener_side = listener_stream or right
    if isinstance(dialer_side, RecordingStream):
        dialer_side.inner = left
    if isinstance(listener_side, RecordingStream):
        listener_side.inner = right
    outcome: dict[Role, int | PeerAuthError] = {}

    async def side(
        role: Role,
        stream: trio.abc.Stream,
        a: PeerAuth,
        me: int,
        accept: Callable[[int], str | None],
    ) -> None:
        try:
            outcome[role] = await authenticate(stream, a, role, me, accept, "peer", TIMEOUT_S)
        except PeerAuthError as exc:
            outcome[role] = exc
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            side, Role.DIALER, dialer_side, dialer_auth, dialer_id, accept_only(dialled_id)
        )
        nursery.start_soon(
            side, Role.LISTENER, listener_side, listener_auth, listener_id, accept_only(1)
        )
    return outcome[Role.DIALER], outcome[Role.LISTENER]


def reason(outcome: int | PeerAuthError) -> Refusal | int:
    return outcome.reason if isinstance(outcome, PeerAuthError) else outcome


# ---------------------------------------------------------------------------- handshake
def test_the_same_secret_authenticates_both_ends() -> None:
    async def scenario() -> None:
        assert await handshake_pair(auth(), auth()) == (2, 1)

    trio.run(scenario)


def test_a_different_secret_fails_at_both_ends_naming_the_config() -> None:
    async def scenario() -> None:
        dialer, listener = await handshake_pair(auth(SECRET), auth(OTHER_SECRET))
        assert reason(dialer) == reason(listener) == Refusal.WRONG_SECRET
        assert "raft.auth.secret differs from this broker's" in str(listener)
        assert "claiming node 1" in str(listener)

    trio.run(scenario)


def test_another_cluster_with_the_same_secret_fails() -> None:
    async def scenario() -> None:
        dialer, listener = await handshake_pair(auth(), auth(cluster_id="another-cluster"))
        assert reason(dialer) == reason(listener) == Refusal.WRONG_SECRET

    trio.run(scenario)


def test_rotation_accepts_any_listed_secret_and_proves_with_the_first() -> None:
    old, new = SECRET, OTHER_SECRET
    # The rolling replacement (docs/operating/security.md): neighbouring steps interoperate.
    steps = [(old,), (old, new), (new, old), (new,)]

    async def scenario() -> None:
        for a, b in zip(steps, steps[1:], strict=False):
            assert await handshake_pair(auth(*a), auth(*b)) == (2, 1), (a, b)
            assert await handshake_pair(auth(*b), auth(*a)) == (2, 1), (b, a)
        # Skipping a step fails: a broker proving only the new secret to one knowing only
        # the old.
        dialer, listener = await handshake_pair(auth(new), auth(old))
        assert reason(dialer) == reason(listener) == Refusal.WRONG_SECRET

    trio.run(scenario)


def test_a_recorded_proof_is_worthless_in_a_new_handshake() -> None:
    async def scenario() -> None:
        recorder = RecordingStream(trio.testing.memory_stream_pair()[0])
        assert await handshake_pair(auth(), auth(), dialer_stream=recorder) == (2, 1)
        recorded = bytes(recorder.sent)  # the dialer's AUTH_HELLO then its AUTH_PROOF
        attacker, listener_end = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            result: list[object] = []

            async def listener() -> None:
                try:
                    await authenticate(
                        listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
                    )
                except PeerAuthError as exc:
                    result.append(exc.reason)

            nursery.start_soon(listener)
            await attacker.send_all(recorded)
        assert result == [Refusal.WRONG_SECRET]

    trio.run(scenario)


async def _read_frame(stream: trio.abc.ReceiveStream) -> bytes:
    header = b""
    while len(header) < 5:
        header += await stream.receive_some(5 - len(header))
    length = int.from_bytes(header[:4], "big")
    body = b""
    while len(body) < length - 1:
        body += await stream.receive_some(length - 1 - len(body))
    return header + body


def test_a_reflected_proof_or_nonce_fails() -> None:
    async def listener_against(
        attack: Callable[[trio.abc.Stream], Awaitable[None]],
    ) -> Refusal | int:
        attacker, listener_end = trio.testing.memory_stream_pair()
        result: list[Refusal | int] = []

        async def listener() -> None:
            try:
                result.append(
                    await authenticate(
                        listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
                    )
                )
            except PeerAuthError as exc:
                result.append(exc.reason)
            await listener_end.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listener)
            await attack(attacker)
        return result[0]

    async def reflect_proof(attacker: trio.abc.Stream) -> None:
        listener_hello = await _read_frame(attacker)
        # Claim node 1 with a nonce of our own, then send the listener's proof back.
        hello = bytearray(listener_hello)
        hello[11:15] = (1).to_bytes(4, "big")
        hello[15:] = bytes(32)
        await attacker.send_all(bytes(hello))
        listener_proof = await _read_frame(attacker)
        await attacker.send_all(listener_proof)

    async def reflect_nonce(attacker: trio.abc.Stream) -> None:
        hello = bytearray(await _read_frame(attacker))
        hello[11:15] = (1).to_bytes(4, "big")
        await attacker.send_all(bytes(hello))

    async def scenario() -> None:
        assert await listener_against(reflect_proof) == Refusal.WRONG_SECRET
        assert await listener_against(reflect_nonce) == Refusal.MALFORMED

    trio.run(scenario)


def test_a_broker_without_a_secret_is_named_as_such() -> None:
    async def scenario() -> None:
        plain, listener_end = trio.testing.memory_stream_pair()
        await plain.send_all(encode_hello(1))
        with pytest.raises(PeerAuthError) as refused:
            await authenticate(
                listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
            )
        assert refused.value.reason == Refusal.NO_SECRET
        assert refused.value.claimed_node_id == 1
        assert "has no raft.auth.secret" in str(refused.value)

    trio.run(scenario)


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"\xff\xff\xff\xff\x10" + bytes(64),  # a huge length is not read
        b"\x00\x00\x00\x21\x11" + bytes(32),  # a proof where a hello belongs
        b"".join(encode_messages([Message("t-0", MessageType.HEARTBEAT, 1, 2, 1)])),
    ],
)
def test_garbage_ends_the_handshake_at_once(garbage: bytes) -> None:
    async def scenario() -> None:
        client, listener_end = trio.testing.memory_stream_pair()
        await client.send_all(garbage)
        with pytest.raises(PeerAuthError) as refused:
            await authenticate(
                listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
            )
        assert refused.value.reason == Refusal.MALFORMED

    trio.run(scenario)


def test_a_truncated_handshake_times_out() -> None:
    async def scenario() -> None:
        client, listener_end = trio.testing.memory_stream_pair()
        await client.send_all(b"\x00\x00\x00\x2b\x10RFTA")
        with pytest.raises(PeerAuthError) as refused:
            await authenticate(
                listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
            )
        assert refused.value.reason == Refusal.TIMEOUT
        assert "within 5 s" in str(refused.value)
        assert trio.current_time() == pytest.approx(TIMEOUT_S)

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_peer_that_closes_midway_is_named() -> None:
    async def scenario() -> None:
        client, listener_end = trio.testing.memory_stream_pair()
        await client.send_all(b"\x00\x00\x00\x2b\x10RFTA")
        await client.aclose()
        with pytest.raises(PeerAuthError) as refused:
            await authenticate(
                listener_end, auth(), Role.LISTENER, 2, accept_only(1), "peer", TIMEOUT_S
            )
        assert refused.value.reason == Refusal.CLOSED

    trio.run(scenario)


def test_claimed_node_ids_are_checked_before_any_proof_is_sent() -> None:
    async def scenario() -> None:
        # A listener refuses a node id that is not its peer and proves nothing to it.
        recorder = RecordingStream(trio.testing.memory_stream_pair()[1])
        dialer, listener = await handshake_pair(
            auth(), auth(), dialer_id=9, listener_stream=recorder
        )
        assert reason(listener) == Refusal.UNKNOWN_NODE
        assert reason(dialer) == Refusal.CLOSED
        assert recorder.sent[4] == AuthKind.AUTH_HELLO
        assert len(recorder.sent) == int.from_bytes(recorder.sent[:4], "big") + 4
        # A dialer refuses a listener that answers as another node than the one dialled.
        dialer, listener = await handshake_pair(auth(), auth(), dialer_id=1, listener_id=3)
        assert reason(dialer) == Refusal.WRONG_NODE
        assert "claiming node 3" in str(dialer)

    trio.run(scenario)


# ---------------------------------------------------------------------------- secrets
def test_load_secrets_from_config_or_file(tmp_path: Path) -> None:
    assert load_secrets(None, None) is None
    assert load_secrets("", None) is None
    assert load_secrets(" a-secret-of-20-chars , another-one-of-20-ch", None) == (
        b"a-secret-of-20-chars",
        b"another-one-of-20-ch",
    )
    path = tmp_path / "secret"
    path.write_text("\n  the-secret-in-a-file-123  \n\n")
    assert load_secrets(None, str(path)) == (b"the-secret-in-a-file-123",)
    with pytest.raises(ValueError, match="both set"):
        load_secrets("a-secret-of-20-chars", str(path))
    with pytest.raises(ValueError, match="at least 16"):
        load_secrets("short", None)
    with pytest.raises(ValueError, match="cannot read"):
        load_secrets(None, str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="holds no secret"):
        load_secrets(None, str(tmp_path / "empty"))


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


def make_pair(
    auth1: PeerAuth | None, auth2: PeerAuth | None, **kwargs: float
) -> tuple[PeerTransport, PeerTransport, dict[int, list[Message]]]:
    ports = free_ports(2)
    addresses = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    inboxes: dict[int, list[Message]] = {1: [], 2: []}
    t1, t2 = (
        PeerTransport(
            node,
            addresses[node],
            addresses,
            on_message=inboxes[node].append,
            auth=a,
            backoff_max_s=0.2,
            **kwargs,  # type: ignore[arg-type]
        )
        for node, a in ((1, auth1), (2, auth2))
    )
    return t1, t2, inboxes


def heartbeat(from_id: int, to: int, term: int = 1) -> Message:
    return Message("t-0", MessageType.HEARTBEAT, from_id, to, term, high_watermark=term)


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.01)


def run_trio(test: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with trio.fail_after(20):
            await test()

    trio.run(main)


def test_transports_sharing_the_secret_exchange_messages_and_forwards() -> None:
    async def scenario() -> None:
        t1, t2, inboxes = make_pair(auth(), auth())

        async def echo(rpc: str, payload: bytes) -> tuple[int, bytes]:
            return 0, rpc.encode() + payload

        t2.set_forward_handler(echo)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            t1.send(heartbeat(1, 2))
            t2.send(heartbeat(2, 1))
            await eventually(lambda: len(inboxes[1]) == len(inboxes[2]) == 1)
            assert await t1.forward(2, "ping", b"!", timeout_s=5) == b"ping!"
            assert t1.stats.auth_failures == t2.stats.auth_failures == 0
            nursery.cancel_scope.cancel()

    run_trio(scenario)


@pytest.mark.parametrize(
    ("auth1", "auth2", "log1", "log2"),
    [
        (auth(SECRET), auth(OTHER_SECRET), "differs from this broker's", "differs"),
        (auth(), None, "has no raft.auth.secret", "this broker has no raft.auth.secret"),
    ],
    ids=["wrong-secret", "no-secret"],
)
def test_a_peer_without_the_secret_is_refused_both_ways(
    auth1: PeerAuth | None,
    auth2: PeerAuth | None,
    log1: str,
    log2: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        t1, t2, inboxes = make_pair(auth1, auth2)
        forwarded: list[str] = []

        async def handler(rpc: str, payload: bytes) -> tuple[int, bytes]:
            forwarded.append(rpc)
            return 0, b""

        t1.set_forward_handler(handler)
        t2.set_forward_handler(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            await nursery.start(t2.run)
            deadline = trio.current_time() + 1.5
            while trio.current_time() < deadline:
                t1.send(heartbeat(1, 2))
                t2.send(heartbeat(2, 1))
                await trio.sleep(0.05)
            for t in (t1, t2):
                with pytest.raises(Exception, match="node"):
                    await t.forward(3 - t.node_id, "append", b"", timeout_s=0.5)
            await eventually(lambda: t1.stats.auth_failures > 0 and t2.stats.auth_failures > 0)
            nursery.cancel_scope.cancel()
        assert inboxes == {1: [], 2: []}
        assert forwarded == []

    with caplog.at_level(logging.WARNING, logger="raftka.consensus.transport"):
        run_trio(scenario)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(w.startswith("node 1:") and log1 in w for w in warnings), warnings
    assert any(w.startswith("node 2:") and log2 in w for w in warnings), warnings
    # A peer that re-dials every few hundred ms is not logged every time.
    assert len(warnings) <= 8, warnings


def test_garbage_and_unauthenticated_raft_messages_harm_no_other_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        t1, t2, inboxes = make_pair(auth(), auth())
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            host, port = t1.listen
            raw_hello_and_vote = encode_hello(2) + b"".join(
                encode_messages([Message("t-0", MessageType.VOTE, 2, 1, 99)])
            )
            for attack in (b"\x00" * 10_000, b"\xff" * 5, raw_hello_and_vote):
                stranger = await trio.open_tcp_stream(host, port)
                with trio.fail_after(5):
                    try:
                        await stranger.send_all(attack)
                        while await stranger.receive_some(65536):
                            pass  # the listener's AUTH_HELLO, then the close
                    except trio.BrokenResourceError:
                        pass  # closed with our bytes unread: a reset
                await stranger.aclose()
            assert inboxes[1] == []
            await nursery.start(t2.run)
            t2.send(heartbeat(2, 1))
            await eventually(lambda: len(inboxes[1]) == 1)
            assert t1.stats.connections_refused == 3
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.WARNING, logger="raftka.consensus.transport"):
        run_trio(scenario)
    assert any("refused inbound connection" in r.getMessage() for r in caplog.records)


def test_an_authenticated_peer_speaks_only_as_the_node_it_proved() -> None:
    async def scenario() -> None:
        ports = free_ports(3)
        addresses = {n: ("127.0.0.1", p) for n, p in zip((1, 2, 3), ports, strict=True)}
        inbox: list[Message] = []
        t1 = PeerTransport(1, addresses[1], addresses, on_message=inbox.append, auth=auth())
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            # Node 2 holds the secret but says HELLO as node 3: refused.
            stream = await trio.open_tcp_stream(*addresses[1])
            assert await authenticate(stream, auth(), Role.DIALER, 2, accept_only(1), "n1", 5) == 1
            await stream.send_all(encode_hello(3))
            with trio.fail_after(5):
                assert await stream.receive_some(10) == b""
            assert t1.stats.connections_refused == 1
            # Proved as node 2, then a vote from node 3 on its connection: dropped.
            stream = await trio.open_tcp_stream(*addresses[1])
            await authenticate(stream, auth(), Role.DIALER, 2, accept_only(1), "n1", 5)
            await stream.send_all(encode_hello(2))
            forged = Message("t-0", MessageType.VOTE, 3, 1, 7)
            honest = heartbeat(2, 1)
            await stream.send_all(b"".join(encode_messages([forged, honest])))
            await eventually(lambda: len(inbox) == 1)
            assert inbox == [honest]
            assert t1.stats.messages_misaddressed == 1
            await stream.aclose()
            nursery.cancel_scope.cancel()

    run_trio(scenario)


async def stalled_from(host: str, listen: tuple[str, int]) -> trio.SocketStream:
    """A connection from `host` (127.0.0.x: Linux routes all of 127/8 on lo) that stays
    silent after the listener's AUTH_HELLO, which it waits for: its handshake is in progress."""
    stream = await trio.open_tcp_stream(*listen, local_address=host)
    frame = await _read_frame(stream)
    assert frame[4] == AuthKind.AUTH_HELLO
    return stream


async def closed_at_once(host: str, listen: tuple[str, int]) -> bool:
    """Whether a connection from `host` is closed well before the 5 s handshake timeout,
    without the listener's AUTH_HELLO."""
    stream = await trio.open_tcp_stream(*listen, local_address=host)
    try:
        with trio.move_on_after(2):
            try:
                return await stream.receive_some(10) == b""
            except trio.BrokenResourceError:
                return True
        return False
    finally:
        await stream.aclose()


def test_handshakes_in_progress_are_bounded_per_address() -> None:
    defaults = PeerTransport(1, ("127.0.0.1", 0), {})
    assert (defaults.handshakes_per_host_max, defaults.handshakes_in_flight_max) == (8, 64)

    async def scenario() -> None:
        t1, _t2, _ = make_pair(auth(), auth(), handshakes_per_host_max=2)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            stalled = [await stalled_from("127.0.0.2", t1.listen) for _ in range(2)]
            assert await closed_at_once("127.0.0.2", t1.listen)
            # Another address still gets its handshake.
            stalled.append(await stalled_from("127.0.0.3", t1.listen))
            assert t1.stats.connections_refused == 1
            for stream in stalled:
                await stream.aclose()
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_silent_strangers_cannot_lock_a_configured_peer_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Strangers on many addresses fill every handshake slot they may have; a peer (from
    127.0.0.1, its address in the peers map) still authenticates and delivers at once."""

    async def scenario() -> None:
        t1, t2, inboxes = make_pair(
            auth(), auth(), handshakes_in_flight_max=4, handshakes_per_host_max=3
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            stalled = []
            for host in ("127.0.0.2", "127.0.0.3"):
                stalled += [await stalled_from(host, t1.listen) for _ in range(2)]
            # The strangers' share is full: any other address is refused at once.
            for host in ("127.0.0.2", "127.0.0.4", "127.0.0.5"):
                assert await closed_at_once(host, t1.listen)
            await nursery.start(t2.run)
            t2.send(heartbeat(2, 1))
            await eventually(lambda: len(inboxes[1]) == 1, timeout_s=3)
            assert t1.stats.auth_failures == 3
            for stream in stalled:
                await stream.aclose()
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.WARNING, logger="raftka.consensus.transport"):
        run_trio(scenario)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "refused inbound connection from 127.0.0.4:" in w and "not a configured peer's" in w
        for w in warnings
    ), warnings


def test_peer_addresses_are_resolved_from_their_host_names() -> None:
    async def scenario() -> None:
        ports = free_ports(2)
        peers = {1: ("127.0.0.1", ports[0]), 2: ("localhost", ports[1])}
        t1 = PeerTransport(1, peers[1], peers, auth=auth(), handshakes_in_flight_max=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            # localhost is node 2's host: 127.0.0.1 is not held to the strangers' one slot.
            stalled = [await stalled_from("127.0.0.1", t1.listen) for _ in range(2)]
            stalled.append(await stalled_from("127.0.0.2", t1.listen))
            assert await closed_at_once("127.0.0.3", t1.listen)
            for stream in stalled:
                await stream.aclose()
            nursery.cancel_scope.cancel()

    run_trio(scenario)


def test_a_peer_host_that_does_not_resolve_is_named_and_the_rest_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        ports = free_ports(3)
        peers = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1]), 3: ("nowhere.invalid", 1)}
        t1 = PeerTransport(1, peers[1], peers, auth=auth(), connect_timeout_s=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(t1.run)
            stalled = await stalled_from("127.0.0.1", t1.listen)
            await stalled.aclose()
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.WARNING, logger="raftka.consensus.transport"):
        run_trio(scenario)
    assert any(
        "cannot resolve node 3's host nowhere.invalid" in r.getMessage() for r in caplog.records
    )


def test_broker_configs_build_the_transport_auth(tmp_path: Path) -> None:
    from raftka.broker.config import BROKER_CONFIGS, BrokerConfig, ConfigError, ConfigType
    from raftka.broker.server import peer_auth_from

    # PASSWORD: DescribeConfigs reports it as sensitive, without its value.
    assert BROKER_CONFIGS["raft.auth.secret"].type == ConfigType.PASSWORD
    assert peer_auth_from(BrokerConfig({}, environ={}), "c") is None
    made = peer_auth_from(BrokerConfig({"raft.auth.secret": SECRET.decode()}, environ={}), "c")
    assert made == PeerAuth((SECRET,), "c")
    (tmp_path / "s").write_text("a-secret-of-20-chars\n")
    both = BrokerConfig(
        {"raft.auth.secret": SECRET.decode(), "raft.auth.secret.file": str(tmp_path / "s")},
        environ={},
    )
    with pytest.raises(ConfigError, match="set only one"):
        peer_auth_from(both, "c")


def test_raft_tls_needs_the_secret_and_a_keystore() -> None:
    from raftka.broker.config import BrokerConfig, ConfigError
    from raftka.broker.server import raft_tls_contexts

    assert raft_tls_contexts(BrokerConfig({}, environ={})) is None
    with pytest.raises(ConfigError, match="needs raft.auth.secret"):
        raft_tls_contexts(BrokerConfig({"raft.security.protocol": "SSL"}, environ={}))
    secured = {"raft.security.protocol": "SSL", "raft.auth.secret": SECRET.decode()}
    with pytest.raises(ConfigError, match="no keystore"):
        raft_tls_contexts(BrokerConfig(secured, environ={}))
    with pytest.raises(ConfigError, match="must be one of"):
        BrokerConfig({"raft.security.protocol": "SASL_SSL"}, environ={})
