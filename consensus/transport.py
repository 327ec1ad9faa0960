"""Broker-to-broker TCP transport: every Raft group's messages share one connection per peer.

Each node dials one outbound connection to every peer (lazily, on the first message; re-dialled
with capped exponential backoff when it breaks) and accepts inbound connections from its
peers. A connection starts with a HELLO naming the dialling node; unknown ids are refused
unless joiners are admitted (a broker joining a running cluster, see `admit_joiners`).
Raft messages and FORWARD_REQUESTs travel on the sender's outbound connection; the
FORWARD_RESPONSE comes back on the same connection.

`send()` never blocks: messages are queued per peer within a byte budget and dropped (and
counted) beyond it or while the peer is unreachable -- Raft retransmits.

A connection that stays open but no longer carries frames (its TCP stream stalled, or the peer
stopped reading it) raises no error, and every Raft group's messages to that peer would stay
stuck behind it for good. So the dialling side pings the peer over its connection every
`ping_interval_s` (a FORWARD_REQUEST the peer's reader answers itself); when for
`ping_timeout_s` no answer came and no write made progress (a large frame written to a slow
peer moves at least every WRITE_CHUNK_BYTES), it closes the connection and dials again, as a
Kafka follower drops a connection whose fetch got no response within
replica.socket.timeout.ms. A node that accepts a new connection from a peer closes the one it
held from that peer before. A sender task per peer
writes everything queued since its last write as one frame, so the heartbeats of many groups
coalesce into one write.

The byte budget (`queue_bytes_max` per peer) counts everything waiting to be written to that
peer: Raft messages, forwarded requests (refused with ForwardError when they do not fit) and
the responses to the peer's forwarded requests (always sent, since their work is done; while
they wait, messages and requests to that peer yield to them).

With a `PeerAuth` (the cluster's shared secret) every connection starts with the mutual
challenge-response of `peer_auth` in both directions, before the HELLO: a node accepts
nothing from a peer, and sends it nothing, until each has proved the secret, and the HELLO
and every message must then name the node id that was proved. Refusals are logged as one
WARNING per peer and reason at most every `REFUSAL_WARNING_INTERVAL_S`. Without one, a
connection carries no handshake but the HELLO, and a node that meets a peer asking for
authentication says so and closes.

With TLS contexts (`tls_server` for accepted connections, `tls_client` for dialled ones)
every connection is a TLS connection, its handshake finished (both certificates checked as the
contexts say) before the secret's challenge-response runs inside it.

Each inbound connection serves at most `forwards_in_flight_max` forwarded requests at once;
when that many are running it stops reading from the peer until one finishes, so a peer that
forwards faster than this node serves is slowed down by TCP instead of piling up tasks.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from raftka.consensus.codec import (
    FRAME_HEADER_BYTES,
    CodecError,
    ForwardRequest,
    ForwardResponse,
    Frame,
    Hello,
    decode_frame,
    encode_forward_request,
    encode_forward_response,
    encode_hello,
    encode_messages,
    frame_length,
    message_size_bytes,
)
from raftka.consensus.peer_auth import AuthKind, PeerAuth, PeerAuthError, Role, authenticate
from raftka.consensus.types import Message, NodeId

log = logging.getLogger(__name__)

Address = tuple[str, int]
MessageHandler = Callable[[Message], None]
# (rpc, payload) -> (error_code, payload); `rpc` is the name the requester chose.
ForwardHandler = Callable[[str, bytes], Awaitable[tuple[int, bytes]]]

_CONNECTION_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    EOFError,
    CodecError,
)

# A refused peer re-dials every few seconds; its refusal is logged as a WARNING this seldom.
REFUSAL_WARNING_INTERVAL_S = 60.0
_REFUSALS_REMEMBERED_MAX = 1024
_AUTH_KINDS = frozenset(int(kind) for kind in AuthKind)

# Kafka's UNKNOWN_SERVER_ERROR: the forward handler raised or none is installed.
UNKNOWN_SERVER_ERROR = -1

#: The forwarded request a dialling node pings its peer with; the peer's reader answers it.
PING_RPC = "__ping"
#: A connection's writer notes its progress at least once per this many bytes written.
WRITE_CHUNK_BYTES = 64 << 10


class ForwardError(Exception):
    """A forwarded request got no response: peer unreachable, connection lost or timeout."""


class ForwardTimeout(ForwardError):
    pass


class ForwardRemoteError(ForwardError):
    """The peer's forward handler answered with a non-zero error code."""

    def __init__(self, error_code: int, payload: bytes) -> None:
        super().__init__(f"peer answered error code {error_code}")
        self.error_code = error_code
        self.payload = payload


@dataclass(slots=True)
class TransportStats:
    messages_sent: int = 0
    messages_received: int = 0
    frames_sent: int = 0
    # Dropped because the peer's queue was over budget, the peer was unreachable, or the
    # connection broke with the message still queued.
    messages_dropped: int = 0
    # Received messages whose from/to did not match the connection (dropped).
    messages_misaddressed: int = 0
    connections_refused: int = 0
    dial_failures: int = 0
    # Forwarded requests refused because they did not fit the peer's byte budget.
    forwards_refused: int = 0
    # Connections (either direction) whose peer did not prove the cluster's secret or failed
    # the TLS handshake, or that met a peer asking for authentication when this node has no
    # secret.
    auth_failures: int = 0


class _PendingForward:
    """A forwarded request awaiting its answer: a response, or the error that ended it."""

    __slots__ = ("peer", "done", "outcome")

    def __init__(self, peer: NodeId) -> None:
        self.peer = peer
        self.done = trio.Event()
        self.outcome: ForwardResponse | ForwardError | None = None

    def settle(self, outcome: ForwardResponse | ForwardError) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()


@dataclass(slots=True, init=False)
class _QueuedForward:
    request_id: int
    parts: list[bytes | bytearray]
    size_bytes: int

    def __init__(self, request_id: int, parts: list[bytes | bytearray], size_bytes: int) -> None:
        self.request_id = request_id
        self.parts = parts
        self.size_bytes = size_bytes


@dataclass(slots=True)
class _Peer:
    node_id: NodeId
    address: Address
    messages: list[Message] = field(default_factory=list)
    message_bytes: int = 0
    forwards: list[_QueuedForward] = field(default_factory=list)
    forward_bytes: int = 0
    # Responses to this peer's forwarded requests, encoded and not yet written.
    response_bytes: int = 0
    wanted: trio.Event = field(default_factory=trio.Event)  # work queued or a dial requested
    unreachable: bool = False  # the last dial failed; drop messages until one succeeds
    connected: bool = False
    # While its connection's writer is busy: when that write last made progress (trio clock).
    writing_since_progress_s: float | None = None

    @property
    def queued_bytes(self) -> int:
        """What the byte budget counts: everything waiting to be written to this peer."""
        return self.message_bytes + self.forward_bytes + self.response_bytes

    def wake(self) -> None:
        self.wanted.set()

    def withdraw_forward(self, request_id: int) -> None:
        for i, queued in enumerate(self.forwards):
            if queued.request_id == request_id:
                del self.forwards[i]
                self.forward_bytes -= queued.size_bytes
                return


class _FrameReader:
    """Reads length-prefixed frames from a stream into one growing buffer."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def peek_kind(self) -> int:
        """The kind byte of the next frame, which stays unread."""
        await self._fill(FRAME_HEADER_BYTES + 1)  # the kind byte follows the length
        return self._buffer[FRAME_HEADER_BYTES]

    async def _fill(self, want: int) -> None:
        while len(self._buffer) < want:
            chunk = await self._stream.receive_some(max(65536, want - len(self._buffer)))
            if not chunk:
                raise EOFError("connection closed by peer")
            self._buffer += chunk

    async def read(self) -> Frame:
        await self._fill(FRAME_HEADER_BYTES)
        length = frame_length(self._buffer)
        end = FRAME_HEADER_BYTES + length
        await self._fill(end)
        with memoryview(self._buffer) as view:
            frame = decode_frame(view[FRAME_HEADER_BYTES:end])
        del self._buffer[:end]
        return frame


async def _write_parts(stream: trio.abc.SendStream, parts: list[bytes | bytearray]) -> None:
    for part in parts:
        await stream.send_all(part)


async def _write_parts_to(
    stream: trio.abc.SendStream, peer: _Peer, parts: list[bytes | bytearray]
) -> None:
    """Write `parts` in chunks of at most WRITE_CHUNK_BYTES, noting each chunk's progress in
    `peer.writing_since_progress_s` (so a large frame written slowly is not a stall)."""
    for part in parts:
        if len(part) <= WRITE_CHUNK_BYTES:
            await stream.send_all(part)
        else:
            with memoryview(part) as view:
                for start in range(0, len(view), WRITE_CHUNK_BYTES):
                    await stream.send_all(view[start : start + WRITE_CHUNK_BYTES])
                    peer.writing_since_progress_s = trio.current_time()
        peer.writing_since_progress_s = trio.current_time()


class PeerTransport:
    def __init__(
        self,
        node_id: NodeId,
        listen: Address,
        peers: Mapping[NodeId, Address],
        on_message: MessageHandler | None = None,
        queue_bytes_max: int = 64 << 20,
        frame_bytes_max: int = 8 << 20,
        forwards_in_flight_max: int = 64,
        backoff_min_s: float = 0.1,
        backoff_max_s: float = 2.0,
        connect_timeout_s: float = 2.0,
        handshake_timeout_s: float = 5.0,
        ping_interval_s: float = 1.0,
        ping_timeout_s: float = 10.0,
        auth: PeerAuth | None = None,
        handshakes_in_flight_max: int = 64,
        handshakes_per_host_max: int = 8,
        tls_server: ssl.SSLContext | None = None,
        tls_client: ssl.SSLContext | None = None,
        admit_joiners: bool = False,
    ) -> None:
        """`peers` maps every other node's id to its address (an entry for `node_id` itself
        is ignored; `add_peer` adds more while running). Received messages go to
        `on_message` in arrival order.

        With `admit_joiners`, a connection from a node id that is not a peer (yet) is
        accepted too (once it passed TLS and the secret's handshake, if configured): its
        forwarded requests are served (a joining broker registers that way), its Raft
        messages are dropped until `add_peer` makes it a peer.

        With `auth`, every connection is authenticated (see the module docstring) within
        `handshake_timeout_s`. At most `handshakes_per_host_max` inbound connections from one
        IP address may be in their handshake at once, and at most `handshakes_in_flight_max`
        from addresses that are not a peer's (the `peers` hosts, resolved when `run` starts);
        further ones are closed at once, so strangers cannot take the handshake slots of the
        peers' addresses. `tls_server` and
        `tls_client` (both or neither) make every connection TLS; the client context
        checks the peer's certificate against the host name in its address.

        `queue_bytes_max` is the byte budget per peer, `forwards_in_flight_max` the number of
        forwarded requests served at once per inbound connection, `ping_interval_s` and
        `ping_timeout_s` how often a dialled connection is pinged and how long an answer may
        take before it is closed and dialled again (see the module docstring).
        """
        if (tls_server is None) != (tls_client is None):
            raise ValueError("tls_server and tls_client go together: give both or neither")
        if forwards_in_flight_max < 1:
            raise ValueError(f"forwards_in_flight_max must be >= 1, not {forwards_in_flight_max}")
        if ping_interval_s <= 0 or ping_timeout_s <= 0:
            raise ValueError(
                f"ping_interval_s and ping_timeout_s must be > 0, not {ping_interval_s} and"
                f" {ping_timeout_s}"
            )
        self.node_id = node_id
        self.listen = listen
        self.admit_joiners = admit_joiners
        self._nursery: trio.Nursery | None = None
        self._peers = {
            peer: _Peer(peer, address) for peer, address in peers.items() if peer != node_id
        }
        self._on_message = on_message
        self._forward_handler: ForwardHandler | None = None
        self.queue_bytes_max = queue_bytes_max
        self.frame_bytes_max = frame_bytes_max
        self.forwards_in_flight_max = forwards_in_flight_max
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.connect_timeout_s = connect_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self.auth = auth
        self.tls_server = tls_server
        self.tls_client = tls_client
        if handshakes_per_host_max < 1 or handshakes_in_flight_max < 1:
            raise ValueError(
                "handshakes_per_host_max and handshakes_in_flight_max must be >= 1, not"
                f" {handshakes_per_host_max} and {handshakes_in_flight_max}"
            )
        self.handshakes_in_flight_max = handshakes_in_flight_max
        self.handshakes_per_host_max = handshakes_per_host_max
        # Handshakes in progress from addresses that are not a peer's, and per address.
        self._handshakes_in_flight = 0
        self._handshakes_by_host: dict[str, int] = {}
        # The IP addresses of the peers' hosts (resolved by `run`): never held to the cap
        # on strangers' handshakes.
        self._peer_hosts: frozenset[str] = frozenset()
        # (peer, reason) -> when its refusal was last logged as a WARNING.
        self._refusals_warned: dict[tuple[object, ...], float] = {}
        self.stats = TransportStats()
        self._request_ids = itertools.count(1)
        self._pending: dict[int, _PendingForward] = {}
        # Per peer, the cancel scope of the inbound connection this node serves from it.
        self._inbound: dict[NodeId, trio.CancelScope] = {}
        self.running = False
        self.port: int | None = None  # the bound port once running (useful with port 0)

    # ------------------------------------------------------------------ configuration
    def set_message_handler(self, on_message: MessageHandler | None) -> None:
        self._on_message = on_message

    def set_forward_handler(self, handler: ForwardHandler | None) -> None:
        """Serve incoming FORWARD_REQUESTs, each in its own task (at most
        `forwards_in_flight_max` at once per connection). The handler gets (rpc, payload)
        and returns (error_code, payload); if it raises, the caller gets UNKNOWN_SERVER_ERROR."""
        self._forward_handler = handler

    @property
    def peer_ids(self) -> frozenset[NodeId]:
        return frozenset(self._peers)

    def unreachable_peers(self) -> frozenset[NodeId]:
        """The peers whose last dial failed (until a dial succeeds again)."""
        return frozenset(node for node, peer in self._peers.items() if peer.unreachable)

    def connected_to(self, peer: NodeId) -> bool:
        """Whether this node's connection to `peer` is open (it drops at once when the peer's
        process dies: the peer's kernel closes it)."""
        found = self._peers.get(peer)
        return found is not None and found.connected

    def peer_address(self, peer: NodeId) -> Address | None:
        found = self._peers.get(peer)
        return None if found is None else found.address

    def add_peer(self, peer: NodeId, address: Address) -> None:
        """Make `peer` (at `address`) reachable from now on, or move it to a new `address`
        (the next dial uses it). Nothing for this node itself."""
        if peer == self.node_id:
            return
        known = self._peers.get(peer)
        if known is not None:
            known.address = address
            return
        added = _Peer(peer, address)
        self._peers[peer] = added
        if self._nursery is not None:
            self._nursery.start_soon(self._run_peer, added)

    def queued_bytes(self, peer: NodeId) -> int:
        """Bytes waiting to be written to `peer` (messages, forwarded requests and
        responses): what its byte budget `queue_bytes_max` bounds."""
        return self._peers[peer].queued_bytes

    # ------------------------------------------------------------------ sending
    def send(self, message: Message) -> None:
        """Queue `message` for `message.to`; never blocks. Dropped (counted) when the peer is
        unknown or unreachable or its queue is over budget."""
        peer = self._peers.get(message.to)
        if peer is None:
            self.stats.messages_dropped += 1
            return
        peer.wake()
        if peer.unreachable:
            self.stats.messages_dropped += 1
            return
        size = message_size_bytes(message)
        if peer.queued_bytes + size > self.queue_bytes_max:
            self.stats.messages_dropped += 1
            return
        peer.messages.append(message)
        peer.message_bytes += size

    async def forward(self, to: NodeId, rpc: str, payload: bytes, timeout_s: float) -> bytes:
        """Send a FORWARD_REQUEST named `rpc` to `to` and return the payload of its response.

        Raises ForwardRemoteError for a non-zero error code, ForwardTimeout after
        `timeout_s`, ForwardError when the peer is unknown or unreachable, the request does
        not fit its byte budget, or the connection breaks before the response arrives.
        """
        peer = self._peers.get(to)
        if peer is None:
            raise ForwardError(f"node {to} is not a peer of node {self.node_id}")
        peer.wake()
        if peer.unreachable:
            raise ForwardError(f"node {to} is unreachable")
        request_id = next(self._request_ids)
        parts = encode_forward_request(request_id, rpc, payload)
        size = sum(len(part) for part in parts)
        if peer.queued_bytes + size > self.queue_bytes_max:
            self.stats.forwards_refused += 1
            raise ForwardError(
                f"a forward of {size} bytes does not fit the queue to node {to}"
                f" ({peer.queued_bytes} of {self.queue_bytes_max} bytes used)"
            )
        pending = _PendingForward(to)
        self._pending[request_id] = pending
        peer.forwards.append(_QueuedForward(request_id, parts, size))
        peer.forward_bytes += size
        try:
            with trio.move_on_after(timeout_s):
                await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
            peer.withdraw_forward(request_id)
        outcome = pending.outcome
        if outcome is None:
            raise ForwardTimeout(f"no response from node {to} within {timeout_s} s")
        if isinstance(outcome, ForwardError):
            raise outcome
        if outcome.error_code != 0:
            raise ForwardRemoteError(outcome.error_code, outcome.payload)
        return outcome.payload

    # ------------------------------------------------------------------ serving
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on `listen` and keep one sender per peer until cancelled."""
        host, port = self.listen
        self._peer_hosts = await self._resolve_peer_hosts()
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.running = True
        try:
            async with trio.open_nursery() as nursery:
                self.port = listeners[0].socket.getsockname()[1]
                self._nursery = nursery
                try:
                    for listener in listeners:
                        nursery.start_soon(trio.serve_listeners, self.serve_inbound, [listener])
                    for peer in self._peers.values():
                        nursery.start_soon(self._run_peer, peer)
                    task_status.started()
                    await trio.sleep_forever()
                finally:
                    # Forgotten before the nursery waits for its tasks, which trio may close
                    # before `run` returns: a peer added meanwhile starts no sender.
                    self._nursery = None
        finally:
            self.running = False
            for listener in listeners:
                await trio.aclose_forcefully(listener)
            for pending in list(self._pending.values()):
                pending.settle(ForwardError("transport stopped"))

    async def _resolve_peer_hosts(self) -> frozenset[str]:
        """The IP addresses the peers' hosts resolve to; a host that does not resolve within
        `connect_timeout_s` is logged and left out (its connections then count as a
        stranger's)."""
        hosts: set[str] = set()
        for peer in self._peers.values():
            host, port = peer.address
            try:
                with trio.fail_after(self.connect_timeout_s):
                    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
            except (OSError, trio.TooSlowError) as exc:
                log.warning(
                    "node %s: cannot resolve node %s's host %s (%s): its inbound raft"
                    " connections get no reserved handshake slots; check --peers and DNS",
                    self.node_id,
                    peer.node_id,
                    host,
                    exc or f"no answer within {self.connect_timeout_s:g} s",
                )
                continue
            hosts.update(_canonical_host(str(info[4][0])) for info in infos)
        return frozenset(hosts)

    async def _run_peer(self, peer: _Peer) -> None:
        backoff_s = self.backoff_min_s
        while True:
            await peer.wanted.wait()
            try:
                with trio.fail_after(self.connect_timeout_s):
                    tcp = await trio.open_tcp_stream(*peer.address)
            except (OSError, trio.TooSlowError) as exc:
                self.stats.dial_failures += 1
                if not peer.unreachable:
                    log.info(
                        "node %s: cannot reach node %s: %s",
                        self.node_id,
                        peer.node_id,
                        exc,
                        extra={"peer": peer.node_id},
                    )
                peer.unreachable = True
                peer.wanted = trio.Event()  # re-dial only when there is traffic again
                self._discard_queue(peer, ForwardError(f"cannot connect to node {peer.node_id}"))
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, self.backoff_max_s)
                continue
            stream = await self._secure_outbound(tcp, peer)
            if stream is None:
                self.stats.dial_failures += 1
                peer.unreachable = True
                peer.wanted = trio.Event()
                self._discard_queue(peer, ForwardError(f"node {peer.node_id} did not authenticate"))
                await trio.aclose_forcefully(tcp)
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, self.backoff_max_s)
                continue
            peer.unreachable = False
            backoff_s = self.backoff_min_s
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_responses, stream, peer, nursery.cancel_scope)
                    nursery.start_soon(self._ping, peer, nursery.cancel_scope)
                    await self._write_loop(stream, peer, nursery.cancel_scope)
            finally:
                peer.connected = False
                peer.writing_since_progress_s = None
                self._discard_queue(peer, ForwardError(f"connection to node {peer.node_id} lost"))
                await trio.aclose_forcefully(stream)
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self.backoff_max_s)

    async def _secure_outbound(self, tcp: trio.SocketStream, peer: _Peer) -> trio.abc.Stream | None:
        """The dialled connection once TLS (if configured) and the secret's handshake (if
        configured) succeeded; None (logged) when either failed."""
        stream: trio.abc.Stream = tcp
        if self.tls_client is not None:
            host, port = peer.address
            tls = trio.SSLStream(tcp, self.tls_client, server_hostname=host)
            failure = await self._tls_handshake(tls)
            if failure is not None:
                self._refused(
                    ("out", peer.node_id, "tls"),
                    f"refused outbound connection: TLS handshake with node {peer.node_id} at"
                    f" {host}:{port} failed: {failure}; check that it has raft.security.protocol"
                    " SSL and a certificate the truststore accepts, issued for that host",
                )
                return None
            stream = tls
        if self.auth is not None and not await self._authenticate_outbound(stream, peer):
            return None
        return stream

    async def _tls_handshake(self, tls: trio.SSLStream[Any]) -> str | None:
        """Run a TLS handshake within the handshake timeout: None, or why it failed."""
        try:
            with trio.fail_after(self.handshake_timeout_s):
                await tls.do_handshake()
        except trio.TooSlowError:
            return f"not finished within {self.handshake_timeout_s:g} s"
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLError):
                return cause.reason or str(cause)
            return str(cause or exc) or type(exc).__name__
        return None

    async def _authenticate_outbound(self, stream: trio.abc.Stream, peer: _Peer) -> bool:
        """Whether the peer proved the secret (and this node did); logs why not."""
        assert self.auth is not None
        host, port = peer.address

        def accept(claimed: NodeId) -> str | None:
            if claimed == peer.node_id:
                return None
            return f"answers as node {claimed}: check --peers on both brokers"

        try:
            await authenticate(
                stream,
                self.auth,
                Role.DIALER,
                self.node_id,
                accept,
                f"node {peer.node_id} at {host}:{port}",
                self.handshake_timeout_s,
            )
        except PeerAuthError as refused:
            self._refused(
                ("out", peer.node_id, refused.reason), f"refused outbound connection: {refused}"
            )
            return False
        except _CONNECTION_ERRORS as exc:
            self._refused(
                ("out", peer.node_id, "io"),
                f"connection to node {peer.node_id} at {host}:{port} broke during the raft"
                f" authentication handshake: {exc}",
            )
            return False
        return True

    def _refused(self, key: tuple[object, ...], message: str) -> None:
        """Log a refused connection: a WARNING unless `key` had one recently."""
        self.stats.auth_failures += 1
        now = time.monotonic()
        last = self._refusals_warned.get(key)
        if last is not None and now - last < REFUSAL_WARNING_INTERVAL_S:
            log.debug("node %s: %s", self.node_id, message)
            return
        if len(self._refusals_warned) >= _REFUSALS_REMEMBERED_MAX:
            self._refusals_warned.clear()
        self._refusals_warned[key] = now
        log.warning("node %s: %s", self.node_id, message)

    async def _ping(self, peer: _Peer, connection: trio.CancelScope) -> None:
        """Ping `peer` over this connection every `ping_interval_s`; close the connection
        once `ping_timeout_s` passed with no answer and no write progress (see the module
        docstring)."""
        answered_s = trio.current_time()
        while True:
            await trio.sleep(self.ping_interval_s)
            try:
                await self.forward(peer.node_id, PING_RPC, b"", self.ping_timeout_s)
            except ForwardRemoteError:
                answered_s = trio.current_time()  # a peer that does not know the ping
            except ForwardError:
                pass  # no answer in time, or not even queued (the byte budget is full)
            else:
                answered_s = trio.current_time()
            now_s = trio.current_time()
            silent_s = now_s - answered_s
            progress_s = peer.writing_since_progress_s
            if progress_s is not None:
                # The ping waits behind a long write that still moves: not a stall.
                silent_s = min(silent_s, now_s - progress_s)
            if silent_s >= self.ping_timeout_s:
                log.warning(
                    "node %s: connection to node %s carries nothing: no answer to a ping and"
                    " no write progress for %g s; closing it and dialling again",
                    self.node_id,
                    peer.node_id,
                    self.ping_timeout_s,
                    extra={"peer": peer.node_id},
                )
                connection.cancel()
                return

    async def _write_loop(
        self, stream: trio.abc.Stream, peer: _Peer, connection: trio.CancelScope
    ) -> None:
        try:
            await stream.send_all(encode_hello(self.node_id))
            peer.connected = True
            while True:
                peer.writing_since_progress_s = None
                await peer.wanted.wait()
                peer.wanted = trio.Event()
                peer.writing_since_progress_s = trio.current_time()
                forwards, peer.forwards = peer.forwards, []
                messages, peer.messages = peer.messages, []
                peer.forward_bytes = peer.message_bytes = 0
                for queued in forwards:
                    await _write_parts_to(stream, peer, queued.parts)
                # Cut frames at frame_bytes_max so one frame never holds the whole queue.
                start, used = 0, 0
                for i, m in enumerate(messages):
                    used += message_size_bytes(m)
                    if used >= self.frame_bytes_max:
                        await self._write_messages(stream, peer, messages[start : i + 1])
                        start, used = i + 1, 0
                if start < len(messages):
                    await self._write_messages(stream, peer, messages[start:])
        except _CONNECTION_ERRORS as exc:
            peer.connected = False
            log.info(
                "node %s: connection to node %s lost: %s",
                self.node_id,
                peer.node_id,
                exc,
                extra={"peer": peer.node_id},
            )
            connection.cancel()

    async def _write_messages(
        self, stream: trio.abc.Stream, peer: _Peer, messages: list[Message]
    ) -> None:
        await _write_parts_to(stream, peer, encode_messages(messages))
        self.stats.frames_sent += 1
        self.stats.messages_sent += len(messages)

    async def _read_responses(
        self, stream: trio.abc.Stream, peer: _Peer, connection: trio.CancelScope
    ) -> None:
        reader = _FrameReader(stream)
        try:
            if self.auth is None and await reader.peek_kind() in _AUTH_KINDS:
                host, port = peer.address
                self._refused(
                    ("out", peer.node_id, "wants-auth"),
                    f"node {peer.node_id} at {host}:{port} asks for authenticated raft traffic"
                    " (raft.auth.secret is set there) but this broker has no raft.auth.secret:"
                    " set the same raft.auth.secret on every broker",
                )
                connection.cancel()
                return
            while True:
                frame = await reader.read()
                if not isinstance(frame, ForwardResponse):
                    raise CodecError(f"unexpected {type(frame).__name__} on outbound connection")
                pending = self._pending.get(frame.request_id)
                if pending is not None and pending.peer == peer.node_id:
                    pending.settle(frame)
        except _CONNECTION_ERRORS as exc:
            peer.connected = False  # at once: `connected_to` answers before the teardown
            log.info(
                "node %s: connection to node %s closed: %s",
                self.node_id,
                peer.node_id,
                exc,
                extra={"peer": peer.node_id},
            )
            connection.cancel()

    def _discard_queue(self, peer: _Peer, error: ForwardError) -> None:
        self.stats.messages_dropped += len(peer.messages)
        peer.messages = []
        peer.forwards = []
        peer.forward_bytes = peer.message_bytes = 0
        for pending in list(self._pending.values()):
            if pending.peer == peer.node_id:
                pending.settle(error)

    async def serve_inbound(self, stream: trio.abc.Stream) -> None:
        """Serve one connection a peer dialled (the listener calls this for each one) until
        it closes or breaks; then close it. Messages go to the message handler, forwarded
        requests to the forward handler."""
        connection: trio.CancelScope | None = None
        try:
            async with trio.open_nursery() as nursery:
                connection = nursery.cancel_scope
                await self._read_inbound(stream, nursery)
                nursery.cancel_scope.cancel()
        finally:
            for peer_id, scope in list(self._inbound.items()):
                if scope is connection:
                    del self._inbound[peer_id]
            await trio.aclose_forcefully(stream)

    async def _read_inbound(self, stream: trio.abc.Stream, nursery: trio.Nursery) -> None:
        peer_id: NodeId | None = None
        try:
            if self.tls_server is not None or self.auth is not None:
                secured = await self._secure_inbound(stream)
                if secured is None:
                    return
                stream, peer_id = secured
            reader = _FrameReader(stream)
            with trio.fail_after(self.handshake_timeout_s):
                if self.auth is None and await reader.peek_kind() in _AUTH_KINDS:
                    self.stats.connections_refused += 1
                    self._refused(
                        ("in", _peer_host(stream), "wants-auth"),
                        f"refused inbound connection from {_peer_address(stream)}: it asks for"
                        " authenticated raft traffic (raft.auth.secret is set there) but this"
                        " broker has no raft.auth.secret: set the same raft.auth.secret on"
                        " every broker",
                    )
                    return
                hello = await reader.read()
            if (
                not isinstance(hello, Hello)
                or (hello.node_id not in self._peers and not self.admit_joiners)
                or hello.node_id == self.node_id
                or (peer_id is not None and hello.node_id != peer_id)
            ):
                self.stats.connections_refused += 1
                log.warning(
                    "node %s: refused inbound connection from %s (%r%s)",
                    self.node_id,
                    _peer_address(stream),
                    hello,
                    "" if peer_id is None else f"; it authenticated as node {peer_id}",
                )
                return
            peer_id = hello.node_id
            # The peer dialled again: the connection it held before is of no more use to it
            # (it gave that one up), and whatever it still holds here goes with it.
            previous = self._inbound.get(peer_id)
            if previous is not None:
                log.info(
                    "node %s: node %s dialled again: closing its previous connection",
                    self.node_id,
                    peer_id,
                    extra={"peer": peer_id},
                )
                previous.cancel()
            self._inbound[peer_id] = nursery.cancel_scope
            # A joiner not yet a peer: its requests are answered on this connection.
            peer = self._peers.get(peer_id) or _Peer(peer_id, ("", 0))
            send_lock = trio.Lock()
            slots = trio.CapacityLimiter(self.forwards_in_flight_max)
            while True:
                frame = await reader.read()
                if isinstance(frame, list):
                    self._deliver(peer_id, frame)
                elif isinstance(frame, ForwardRequest):
                    slot = object()
                    # All slots busy: read nothing more from this peer until one frees.
                    await slots.acquire_on_behalf_of(slot)
                    nursery.start_soon(
                        self._serve_forward, stream, send_lock, peer, frame, slots, slot
                    )
                else:
                    raise CodecError(f"unexpected {type(frame).__name__} on inbound connection")
        except (*_CONNECTION_ERRORS, trio.TooSlowError) as exc:
            if not isinstance(exc, EOFError):
                log.info(
                    "node %s: inbound from %s closed: %s",
                    self.node_id,
                    peer_id,
                    exc,
                    extra={"peer": peer_id},
                )

    async def _secure_inbound(
        self, stream: trio.abc.Stream
    ) -> tuple[trio.abc.Stream, NodeId | None] | None:
        """The accepted connection once TLS (if configured) and the secret's handshake (if
        configured) succeeded, and the node id the peer proved; None (logged) when either
        failed or too many handshakes are in progress."""
        address = _peer_address(stream)
        host = _canonical_host(_peer_host(stream))
        from_peer = host in self._peer_hosts
        busy = None
        if self._handshakes_by_host.get(host, 0) >= self.handshakes_per_host_max:
            busy = f"already {self.handshakes_per_host_max} from that address"
        elif not from_peer and self._handshakes_in_flight >= self.handshakes_in_flight_max:
            busy = (
                f"already {self._handshakes_in_flight} from addresses that are not a configured"
                " peer's"
            )
        if busy is not None:
            self.stats.connections_refused += 1
            self._refused(
                ("in", host, "busy"),
                f"refused inbound connection from {address}: {busy} are in their raft"
                " authentication handshake; a connection that does not finish it within"
                f" {self.handshake_timeout_s:g} s is closed",
            )
            return None

        def accept(claimed: NodeId) -> str | None:
            if claimed in self._peers or self.admit_joiners:
                return None
            return "is not one of this broker's peers: check --peers on both brokers"

        self._handshakes_by_host[host] = self._handshakes_by_host.get(host, 0) + 1
        if not from_peer:
            self._handshakes_in_flight += 1
        try:
            if self.tls_server is not None:
                tls = trio.SSLStream(stream, self.tls_server, server_side=True)
                failure = await self._tls_handshake(tls)
                if failure is not None:
                    self.stats.connections_refused += 1
                    self._refused(
                        ("in", _peer_host(stream), "tls"),
                        f"refused inbound connection: TLS handshake with {address} failed:"
                        f" {failure}; check that it has raft.security.protocol SSL and a"
                        " certificate this broker's truststore accepts",
                    )
                    return None
                stream = tls
            if self.auth is None:
                return stream, None
            peer_id = await authenticate(
                stream,
                self.auth,
                Role.LISTENER,
                self.node_id,
                accept,
                f"peer at {address}",
                self.handshake_timeout_s,
            )
            return stream, peer_id
        except PeerAuthError as exc:
            self.stats.connections_refused += 1
            self._refused(
                ("in", _peer_host(stream), exc.claimed_node_id, exc.reason),
                f"refused inbound connection: {exc}",
            )
            return None
        finally:
            if not from_peer:
                self._handshakes_in_flight -= 1
            left = self._handshakes_by_host.pop(host) - 1
            if left:
                self._handshakes_by_host[host] = left

    def _deliver(self, peer_id: NodeId, messages: list[Message]) -> None:
        self.stats.messages_received += len(messages)
        for m in messages:
            if m.from_id != peer_id or m.to != self.node_id:
                self.stats.messages_misaddressed += 1
                continue
            if peer_id not in self._peers:
                continue  # a joiner's, before it is a peer
            if self._on_message is not None:
                self._on_message(m)

    async def _serve_forward(
        self,
        stream: trio.abc.SendStream,
        send_lock: trio.Lock,
        peer: _Peer,
        request: ForwardRequest,
        slots: trio.CapacityLimiter,
        slot: object,
    ) -> None:
        try:
            parts = await self._answer_forward(request, peer.node_id)
            size = sum(len(part) for part in parts)
            peer.response_bytes += size
            try:
                async with send_lock:
                    await _write_parts(stream, parts)
            except _CONNECTION_ERRORS:
                pass  # the requester sees the connection loss
            finally:
                peer.response_bytes -= size
        finally:
            slots.release_on_behalf_of(slot)

    async def _answer_forward(
        self, request: ForwardRequest, peer_id: NodeId
    ) -> list[bytes | bytearray]:
        handler = self._forward_handler
        error_code, payload = UNKNOWN_SERVER_ERROR, b""
        if request.rpc == PING_RPC:
            error_code = 0  # the peer's ping: this connection carries its frames
        elif handler is not None:
            try:
                error_code, payload = await handler(request.rpc, request.payload)
            except Exception:
                log.exception(
                    "node %s: forward handler failed for %r",
                    self.node_id,
                    request.rpc,
                    extra={"peer": peer_id},
                )
                error_code, payload = UNKNOWN_SERVER_ERROR, b""
        try:
            return encode_forward_response(request.request_id, error_code, payload)
        except CodecError:
            log.exception(
                "node %s: cannot encode forward response", self.node_id, extra={"peer": peer_id}
            )
            return encode_forward_response(request.request_id, UNKNOWN_SERVER_ERROR, b"")


def _peer_address(stream: trio.abc.Stream) -> str:
    """HOST:PORT of the other end of a socket stream (for log lines)."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if isinstance(stream, trio.SocketStream):
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:
            return "an unknown address"
        return f"{host}:{port}"
    return "an unknown address"


def _peer_host(stream: trio.abc.Stream) -> str:
    return _peer_address(stream).rpartition(":")[0]


def _canonical_host(host: str) -> str:
    """`host` as one spelling per IP address (an IPv4-mapped IPv6 address as IPv4)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


__all__ = [
    "PING_RPC",
    "ForwardError",
    "ForwardRemoteError",
    "ForwardTimeout",
    "PeerTransport",
    "TransportStats",
    "UNKNOWN_SERVER_ERROR",
]
