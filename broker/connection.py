"""One client connection: framing, dispatch, in-order responses, back-pressure.

Requests on a connection take effect in the order they arrived, and responses leave in that
order, as Kafka (which reads one request per connection at a time) guarantees and clients
rely on: an OffsetCommit sent after another is never overwritten by it. Most APIs run alone:
such a request starts once every earlier request of the connection has been handled, and the
next request is read only after it has been, so it sees the effects of all earlier requests
and none of the later ones. Only these run concurrently with the requests around them
(`CONCURRENT_APIS`), so that a Produce waiting for its acknowledgement or a Fetch waiting for
data does not hold up the next request:

- Produce: each batch is checked and appended, or queued behind the writes already queued on
  its partition (the replica manager's `WriteQueues.last_queued`; a batch that starts a
  transaction there moves to its producer's queue, `WriteQueues.verifying`, while its
  coordinator verifies it, and that producer's later batches queue behind it), by the
  handler's `serve_now` in the reader itself, before the next request is read. So handlers
  start in arrival order and an idempotent producer's pipelined batches reach each
  partition in request order. What overlaps later requests (worker-thread recompression,
  verification, the wait for the acknowledgement) runs in a task of its own, after the
  order of each partition's writes is fixed.
- Fetch: reads, and a consumer's fetch session (KIP-227), whose epoch is checked and
  advanced and whose partitions are updated by the reader itself (`serve_now`), which reads
  the partitions and answers at once, or leaves a fetch that must wait for records to the
  broker's long polls (broker/long_polls.py: no task per waiting fetch). So a session's
  fetches are checked in the order they arrived; a fetch whose session a later request
  moved on while it long-polled answers INVALID_FETCH_SESSION_EPOCH (Kafka's rule), so
  overlapping fetches of one session cannot hide a change. Kafka clients send one Fetch per
  broker at a time anyway.
- Metadata, ApiVersions: read only; the topics Metadata may auto-create are created
  asynchronously in Kafka too, so no client can rely on their order against a Produce.

Since every other request waits for those before it and holds back those after it, these
run concurrently only with each other.

A request costs no task when its handler can answer at once (`ApiEndpoint.serve_now`: a
Produce whose partitions commit as they are written, on a leader that is their only voter,
or with acks=0/1; a Fetch that finds records or need not wait) or is answered by a
callback (`Subscribed`: a Produce waiting for its acks, a Fetch waiting for records): the
reader serves every complete request it has buffered, then sends the responses that are
ready with one write before it waits for more bytes. Answers that wait for their batches
to be written are handed to the broker's group commit (broker/group_commit.py), which
writes the batches of every connection served in the same turn of the event loop together,
then sends each connection's answers. Responses decided in handlers' tasks or callbacks (a
commit that releases several Produce requests of a connection at once) are handed to it too,
so that those decided in one turn leave in one send. A writer task sends the rest: what the
kernel did not take at once, spliced Fetch responses (sendfile), throttled and last
responses, and everything on a TLS connection. Plaintext sockets are read and written with
os.read/os.write on the non-blocking descriptor. The broker's poller (broker/readiness.py)
watches them: a reader with nothing to do but wait for bytes parks, and the poller reads
the bytes that come and serves the requests that need no wait itself (`serve_readable`), as
the reader would have, waking the reader only for the rest; so a connection that sends a
request at a time costs no step of its own task per request.

A connection holds at most `queued.max.requests` requests and a bounded number of request
bytes in flight; past that the broker stops reading from it. Each request a handler serves
is counted once in the broker's metrics, when its response is written.

Client quotas (broker/quotas.py) are charged around the handler: Produce's request bytes,
Fetch's response bytes and the handler's running time. A client under a quota has every
request run alone; a request over its quota is answered with its `throttle_time`, and the
connection reads no further request until that time after the response was written
(KIP-219).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar, cast

import trio

from raftka.broker.group_commit import GroupCommit
from raftka.broker.handlers.api_versions import unsupported_version_response
from raftka.broker.idle import IdleConnections
from raftka.broker.metrics import HANDLER_FAILED, error_name
from raftka.broker.quotas import (
    ClientQuota,
    ClientQuotaManager,
    cap_fetch_bytes,
    throttled_fetch_response,
    with_throttle_time,
)
from raftka.broker.security.listeners import ListenerSpec, SecurityProtocol
from raftka.broker.security.session import ClientSession
from raftka.broker.security.tls import certificate_principal
from raftka.broker.services import Deferred, Later, RequestContext, Subscribed
from raftka.protocol import fetch_codec
from raftka.protocol.api import (
    EncodedResponse,
    FrameError,
    RequestPrefix,
    decode_request,
    encode_response,
    read_prefix,
)
from raftka.protocol.api_keys import ApiKey
from raftka.protocol.fetch_codec import decode_fetch_request
from raftka.protocol.produce_codec import decode_produce_request
from raftka.protocol.splice import FileRange, Pieces, SplicedResponse

if TYPE_CHECKING:
    from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
    from kio.static.protocol import ResponsePayload

    from raftka.broker.handlers.context import ApiEndpoint, BrokerServices
    from raftka.broker.handlers.context import RequestContext as HandlerContext
    from raftka.broker.readiness import ReadinessPoller
    from raftka.broker.services import RequestPayload
    from raftka.protocol.frame_reading import DecodedHeader
    from raftka.protocol.messages.requests import FetchRequest

logger = logging.getLogger("raftka.connection")
_T = TypeVar("_T")

_SIZE: Final = struct.Struct(">i")
# Bound once: compiled, a module's function (and a builtin) is looked up by name on every
# call, where a Final is read as a static.
_read: Final = os.read
_write: Final = os.write
_perf_counter: Final = time.perf_counter
_memoryview: Final = memoryview
IN_FLIGHT_BYTES_MAX: Final = 128 * 1024 * 1024
RECEIVE_CHUNK_BYTES: Final = 256 * 1024
_SENDFILE_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: What a SASL listener serves before authentication (Kafka's rule).
_BEFORE_AUTHENTICATION: Final = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
_PLAINTEXT_LISTENER = ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, "", 0)
#: The APIs whose requests run concurrently with the requests around them on a connection
#: (the module docstring says why each is safe); every other request runs alone.
CONCURRENT_APIS: Final = frozenset(
    {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS}
)
#: The API keys `_dispatch` tells apart, as native ints (comparing with an `ApiKey` member
#: from compiled code looks the member up on its class, then compares two objects).
_PRODUCE: Final[int] = ApiKey.PRODUCE.value
_FETCH: Final[int] = ApiKey.FETCH.value
_API_VERSIONS: Final[int] = ApiKey.API_VERSIONS.value
#: Requests a connection's reader serves from its buffer before it lets other tasks run.
_SERVED_IN_A_ROW_MAX: Final = 16
#: What the poller wakes a reader with when it served bytes it read itself (`serve_readable`).
_SERVED: Final = bytearray()


@dataclass(eq=False, slots=True, init=False)
class _Slot:
    """A response position in the connection's order; filled when its handler finishes."""

    done: bool = False
    frame: bytes | Pieces | None = None
    close_after: bool = False
    request_bytes: int = 0
    # For the request metrics: set when a handler serves the request.
    api_key: int | None = None
    received_s: float = 0.0
    error: str | None = None
    #: Quota throttle: read nothing more for this long after the response is written.
    throttle_ms: int = 0
    #: Run alone: started after every earlier request was handled, and the next request
    #: is read only after this one is (an order-sensitive API, or a client under a quota).
    serial: bool = False

    def __init__(
        self,
        done: bool = False,
        frame: bytes | Pieces | None = None,
        close_after: bool = False,
        request_bytes: int = 0,
        api_key: int | None = None,
        received_s: float = 0.0,
        error: str | None = None,
        throttle_ms: int = 0,
        serial: bool = False,
    ) -> None:
        self.done = done
        self.frame = frame
        self.close_after = close_after
        self.request_bytes = request_bytes
        self.api_key = api_key
        self.received_s = received_s
        self.error = error
        self.throttle_ms = throttle_ms
        self.serial = serial


class Connection:
    """One client connection on `listener`. `stream` is the TCP stream, or a TLS stream
    over it (not yet handshaken) on SSL and SASL_SSL listeners."""

    def __init__(
        self,
        services: BrokerServices,
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream],
        listener: ListenerSpec = _PLAINTEXT_LISTENER,
        quotas: ClientQuotaManager | None = None,
        *,
        idle: IdleConnections,
        group_commit: GroupCommit,
        poller: ReadinessPoller | None = None,
    ) -> None:
        self.services = services
        self.quotas = quotas
        # The broker's reaper of idle connections.
        self._idle = idle
        self._reading_scope = trio.CancelScope()
        self._expired = False
        # A throttled client: no request is read while a throttled response waits to be
        # written, nor until the clock's now_s() reaches `_muted_until` after it was.
        self._throttles_pending = 0
        self._muted_until = 0.0
        self._unmuted = trio.Event()
        self.config = services.config
        self.clock = services.clock
        self.handlers = services.handlers
        self._handler_table = _handler_table(services.handlers)
        self.metrics = services.metrics
        self.stream = stream
        self.listener = listener
        self.tls = isinstance(stream, trio.SSLStream)
        self.socket_stream: trio.SocketStream = (
            stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
        )
        self.session = ClientSession.for_listener(listener, None)
        try:
            host, port = self.socket_stream.socket.getpeername()[:2]
        except OSError:
            host, port = "?", 0
        self.client_host: str = host
        self.client_port: int = port
        self.peer = f"{host}:{port}"
        self._buffer = bytearray()
        self._in_flight_bytes = 0
        # A handler task was started whose request has not taken effect yet.
        self._handler_to_start = False
        # Answers to settle once the batches proposed so far are written (group commit),
        # before this connection lets another task run; `_nursery` runs what then waits.
        # None while there are none: a list kept between requests would be one more object
        # of the connection's to bring back into the CPU's cache for each request.
        self._deferred: (
            list[
                tuple[
                    Deferred[ResponsePayload | SplicedResponse | EncodedResponse | None],
                    HandlerContext,
                    RequestPrefix,
                    _Slot,
                ]
            ]
            | None
        ) = None
        self._nursery: trio.Nursery | None = None
        # How to cancel the waits of answers decided by a callback (`Subscribed`), by slot,
        # while they wait: when the connection ends, nobody is left to answer.
        self._cancels: dict[_Slot, Callable[[], None]] = {}
        self._write_proposed = services.replica_manager.write_proposed
        # Writes the batches of every connection served in a turn together (plaintext).
        self._group_commit = group_commit
        # The responses not yet written, in request order (at most `queued.max.requests`).
        self._slots: deque[_Slot] = deque()
        self._reading_stopped = False
        # Handlers started and not finished.
        self._handlers_running = 0
        # The reader waits on `_changed` for room or for handlers to finish; the writer on
        # `_writer_wakeup` for responses it must send. Each is made only while waited on.
        self._changed: trio.Event | None = None
        self._writer_wakeup: trio.Event | None = None
        # Plaintext connections are read and written with os.read/os.write on the socket's
        # descriptor (non-blocking; trio only waits for readiness): no layers per request.
        self.fd = -1 if self.tls else self.socket_stream.socket.fileno()
        # The broker's poller, which watches a plaintext socket for bytes and serves what
        # arrives while the reader is parked (`parked`, its task) without waking it;
        # whether bytes may have arrived since the reader last read (its edge came while
        # the reader was busy, a read took all it asked for, or the last read held several
        # requests); and whether the poller hears of them (disarmed while the reader is
        # busy, re-armed when it parks).
        self._poller = poller if self.fd >= 0 else None
        self.parked: trio.lowlevel.Task | None = None
        self.readable = True
        self.armed = True
        # Seconds the connection may wait for bytes (`connections.max.idle.ms`).
        idle_ms: int = self.config.get_int("connections.max.idle.ms")
        self._idle_s = float("inf") if idle_ms < 0 else idle_ms / 1000
        # When the reader gives up waiting for bytes (`IdleConnections`).
        self.idle_deadline = float("inf")
        # The poller served a request that ends the connection; it served a request while
        # the reader was parked (so a frame the reader waited for is no longer the first).
        self._stop_reading = False
        self._served_while_parked = False
        # Whether the buffer was empty as the reader parked (`serve_readable`).
        self._parked_empty = True
        # Bytes of responses the kernel did not take yet: they go before anything else.
        self._unsent: memoryview | None = None
        # The writer is in the middle of a frame (sendfile, TLS): nobody else may send.
        self._writer_busy = False
        self.max_frame_bytes: int = self.config.get_int("socket.request.max.bytes")
        self.max_preauth_frame_bytes: int = self.config.get_int("sasl.server.max.receive.size")
        self.max_in_flight: int = self.config.get_int("queued.max.requests")

    async def serve(self) -> None:
        self.metrics.connection_opened()
        try:
            if isinstance(self.stream, trio.SSLStream) and not await self._tls_handshake(
                self.stream
            ):
                return
            poller = self._poller
            if poller is not None and not poller.register(self):
                self._poller = None
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_responses, nursery.cancel_scope)
                try:
                    with self._reading_scope:
                        await self._read_requests(nursery)
                    if self._expired:
                        self._log_idle_close()
                finally:
                    self._group_commit.forget(self)
                    self._settle()
                    self._drop_waits()
                    # The writer sends what is still due, then ends the connection.
                    self._reading_stopped = True
                    self._wake_writer()
            self._nursery = None
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except BaseExceptionGroup as group:
            # The nursery wraps a peer's reset; only other errors may escape.
            _, rest = group.split(
                (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError)
            )
            if rest is not None:
                raise rest from None
        finally:
            if self._poller is not None:
                self._poller.unregister(self)
            self.metrics.connection_closed()
            for listener in self.services.connection_closed:
                listener(self.session)
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await self.stream.aclose()

    async def _tls_handshake(self, stream: trio.SSLStream[trio.SocketStream]) -> bool:
        """Complete the TLS handshake; False (after one log line) if it failed."""
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_S) as timeout:
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError as exc:
                cause = exc.__cause__ or exc
                logger.info(
                    "closing connection from %s on TLS listener %s: TLS handshake failed: %s",
                    self.peer,
                    self.listener.name,
                    getattr(cause, "reason", None) or cause or "connection closed",
                )
                return False
        if timeout.cancelled_caught:
            logger.info(
                "closing connection from %s on TLS listener %s: no TLS handshake within %g s",
                self.peer,
                self.listener.name,
                TLS_HANDSHAKE_TIMEOUT_S,
            )
            return False
        subject = certificate_principal(stream.getpeercert())
        self.session = ClientSession.for_listener(self.listener, subject)
        return True

    # -- reading -----------------------------------------------------------------------

    async def _read_requests(self, nursery: trio.Nursery) -> None:
        """Serve every complete request in the buffer, in order, then read more bytes."""
        idle_s = self._idle_s
        buffer = self._buffer
        # When the request begun in the buffer must be complete: the whole request must
        # arrive within the idle timeout, so a client that stalls or trickles in the
        # middle of a frame does not hold its connection.
        frame_deadline = 0.0
        # Requests served since the reader last let other tasks run.
        served_in_a_row = 0
        while True:
            size = -1
            if len(buffer) >= 4:
                (size,) = _SIZE.unpack_from(buffer, 0)
                if not self._size_allowed(size):
                    return
                if len(buffer) >= 4 + size:
                    frame_deadline = 0.0
                    if served_in_a_row >= _SERVED_IN_A_ROW_MAX:
                        # A buffer of many small requests: send what is answered so far
                        # (the client waits for it), and let the other tasks run.
                        served_in_a_row = 0
                        self._send_ready()
                        await trio.lowlevel.checkpoint()
                    served_in_a_row += 1
                    if not await self._serve_request(size, nursery):
                        return
                    continue
            if served_in_a_row > 1:
                # A client sending faster than it is answered: a read before parking will
                # likely find more.
                self.readable = True
            served_in_a_row = 0
            if buffer:
                if not frame_deadline:
                    frame_deadline = trio.current_time() + idle_s
                deadline = frame_deadline
            else:
                deadline = trio.current_time() + idle_s
            data = await self._receive(deadline, max(RECEIVE_CHUNK_BYTES, size + 4 - len(buffer)))
            if data is _SERVED:
                # The poller served requests while the reader waited, and left it the rest.
                if self._stop_reading:
                    return
                if self._served_while_parked:
                    self._served_while_parked = False
                    frame_deadline = 0.0  # the frame the reader waited for was served
                continue
            if not data:
                if buffer:
                    logger.info(
                        "connection from %s closed in the middle of a frame (%d of %s bytes)",
                        self.peer,
                        len(buffer),
                        size + 4 if size >= 0 else "?",
                    )
                return
            buffer += data

    def _log_idle_close(self) -> None:
        """Say why a connection whose idle time ran out is closed."""
        buffer = self._buffer
        if not buffer:
            logger.info("closing idle connection from %s", self.peer)
            return
        size = _SIZE.unpack_from(buffer, 0)[0] if len(buffer) >= 4 else None
        logger.info(
            "closing connection from %s: request incomplete after "
            "connections.max.idle.ms=%d (%d of %s bytes received)",
            self.peer,
            self.config.get_int("connections.max.idle.ms"),
            max(len(buffer) - 4, 0),
            "?" if size is None else size,
        )

    def expire(self) -> None:
        """The idle time ran out while the reader waited for bytes (`IdleConnections`)."""
        self._expired = True
        self._reading_scope.cancel()

    async def _wait_for(self, deadline: float, ready: Awaitable[_T]) -> _T:
        """Await `ready` (the socket readable, or bytes from the TLS stream) with the wait
        registered at the broker's `IdleConnections` until `deadline`: if it passes first,
        the reaper expires the connection, which cancels the reading altogether."""
        idle = self._idle
        idle.waiting(self, deadline)
        try:
            return await ready
        finally:
            idle.done(self)

    async def _receive(self, deadline: float, max_bytes: int) -> bytes | bytearray:
        """The next bytes from the client (b"" once it closed); the connection expires if
        none came by `deadline`. The responses ready so far are sent first: the client
        waits for them."""
        if self.fd < 0:
            self._settle()
            if self._slots and self._slots[0].done:
                self._wake_writer()  # over TLS the writer sends every response
            return await self._wait_for(deadline, self.stream.receive_some(max_bytes))
        self._send_before_waiting()
        poller = self._poller
        idle = self._idle
        while True:
            if self.readable:
                self.readable = False
                try:
                    data = _read(self.fd, max_bytes)
                except BlockingIOError:
                    pass
                else:
                    if len(data) == max_bytes:
                        self.readable = True  # more may wait, and no edge will say so
                    # Data at once (a client sending fast): still let other tasks run.
                    await trio.lowlevel.checkpoint()
                    return data
            if self._unsent is not None or (self._slots and self._slots[0].done):
                self._wake_writer()  # what `_send_ready` left needs a wait or the writer's care
            # `_wait_for`, inline: this wait is on every request's path.
            idle.waiting(self, deadline)
            try:
                if poller is not None:
                    self._served_while_parked = False
                    # Read here, where the buffer was just used, so that the poller need not
                    # bring it back into the CPU's cache to learn it: it is empty at most
                    # parks, and changes while parked only as the poller hands it over.
                    self._parked_empty = not self._buffer
                    return await poller.wait(self)
                # The broker is closing (its poller stopped): trio watches the socket.
                await trio.lowlevel.wait_readable(self.fd)
            finally:
                idle.done(self)
            self.readable = True

    def _send_before_waiting(self) -> None:
        """Send the answers that are ready, as the reader does before it waits for bytes."""
        if not self._deferred or self._group_commit.write_now(self):
            self._send_ready()
        # else: answers waiting for their batches to be written: the broker's group commit
        # writes them with those of every connection served in this turn, then sends.

    def serve_readable(self, now: float) -> bytes | bytearray | None:
        """The poller saw bytes arrive while the reader is parked (waiting for bytes, every
        complete request in its buffer served) at `now` (trio's clock): read them and serve
        the requests they complete as the reader would, without waking it. None: all
        served, the reader waits on; else what to wake it with: bytes it has not seen (b""
        if the client closed), or `_SERVED` when the buffer holds what needs the reader (a
        request that must wait, a frame not yet complete) or the connection must stop
        (`_stop_reading`)."""
        try:
            data = _read(self.fd, RECEIVE_CHUNK_BYTES)
        except BlockingIOError:
            return None
        if len(data) == RECEIVE_CHUNK_BYTES:
            self.readable = True
        if not data:
            return data
        if not self._parked_empty:
            self._buffer += data
            return _SERVED  # the rest of the frame the reader waits for
        # The requests are taken straight out of the bytes read (one copy each); what is
        # left goes to the buffer, for the reader.
        position = 0
        end = len(data)
        served = 0
        while end - position >= 4:
            (size,) = cast("tuple[int]", _SIZE.unpack_from(data, position))
            if (
                end - position - 4 < size
                or served >= _SERVED_IN_A_ROW_MAX
                or size < 2
                or not self._serves_at_once((data[position + 4] << 8) | data[position + 5], size)
            ):
                break
            start = position + 4
            position = start + size
            served += 1
            self._served_while_parked = True
            if not self._serve_at_once(data[start:position]) or self._stop_reading:
                self._stop_reading = True
                return _SERVED
            if self._handler_to_start:
                # Its handler runs up to its first wait before the next request is read.
                self._handler_to_start = False
                self._settle()
                break
        if position < end:
            self._buffer += _memoryview(data)[position:]
            return _SERVED
        if self.readable:
            # The read took all it asked for: more bytes wait, and no edge will say so.
            return _SERVED
        self._send_before_waiting()
        if self._unsent is not None or (self._slots and self._slots[0].done):
            self._wake_writer()
        # Still registered at `_idle` (the reader waits): only the time moves on.
        self.idle_deadline = now + self._idle_s
        return None

    def _serves_at_once(self, api_key: int, size: int) -> bool:
        """Whether a request of `api_key` and `size` bytes needs no wait before it starts:
        it may run with the requests around it, the connection has room for it, and no
        throttle or authentication holds it back (`_serve_request`'s waits)."""
        quotas = self.quotas
        return (
            api_key in CONCURRENT_APIS
            and self.session.authenticated
            and not self._throttles_pending
            and not self._muted_until
            and (quotas is None or not quotas.quotas_now())
            and size <= self.max_frame_bytes
            and len(self._slots) < self.max_in_flight
            and not (self._in_flight_bytes and self._in_flight_bytes + size > IN_FLIGHT_BYTES_MAX)
        )

    def _serve_at_once(self, frame: bytes) -> bool:
        """Start (or serve) a request that needs no wait to start; False if the connection
        must stop."""
        assert self._nursery is not None, "requests are read inside the nursery"
        received_s = _perf_counter()
        size = len(frame)
        try:
            prefix = read_prefix(frame)
        except FrameError as exc:
            logger.warning("closing connection from %s: %s", self.peer, exc)
            return False
        slot = _Slot(request_bytes=size, received_s=received_s)
        self._in_flight_bytes += size
        self._slots.append(slot)
        # `_serves_at_once` found no quota set, in this step.
        return not self._dispatch(frame, prefix, slot, self._nursery, quotas_off=True)

    def _size_allowed(self, size: int) -> bool:
        """Whether a request of `size` bytes may be read; logs why not. Before SASL
        authentication a client may not make the broker buffer much: the limit is checked
        before any of the body is read."""
        if self.session.authenticated:
            limit_name, limit = "socket.request.max.bytes", self.max_frame_bytes
        else:
            limit_name, limit = "sasl.server.max.receive.size", self.max_preauth_frame_bytes
        if 0 <= size <= limit:
            return True
        logger.warning(
            "closing connection from %s: request of %d bytes exceeds %s=%d",
            self.peer,
            size,
            limit_name,
            limit,
        )
        return False

    async def _serve_request(self, size: int, nursery: trio.Nursery) -> bool:
        """Take the buffered request of `size` bytes and start (or serve) it; False if the
        connection must stop."""
        received_s = _perf_counter()
        buffer = self._buffer
        # One copy out of the buffer (slicing the bytearray first would make two).
        with _memoryview(buffer) as view:
            frame = bytes(view[4 : 4 + size])
        del buffer[: 4 + size]
        try:
            prefix = read_prefix(frame)
        except FrameError as exc:
            logger.warning("closing connection from %s: %s", self.peer, exc)
            return False
        if self._throttles_pending or self._muted_until:
            self._settle()
            await self._wait_unmuted()
        serial = prefix.api_key not in CONCURRENT_APIS
        if serial:
            await self._wait_for_handlers()
        if len(self._slots) >= self.max_in_flight or self._in_flight_bytes:
            await self._wait_for_room(size)
        slot = _Slot(request_bytes=size, received_s=received_s, serial=serial)
        self._in_flight_bytes += size
        self._slots.append(slot)
        authenticating = not self.session.authenticated
        stop = self._dispatch(frame, prefix, slot, nursery)
        if self._handler_to_start:
            # Its handler runs up to its first wait before the next request is read, so
            # handlers start in arrival order (a fetch session's epochs are checked so).
            self._handler_to_start = False
            self._settle()
            await trio.lowlevel.checkpoint()
        if stop:
            return False
        if slot.serial or authenticating:
            # Until authenticated, one request at a time: the next one is checked against
            # the state this one leaves.
            while not slot.done:
                await self._wait_for_change()
            if authenticating and slot.close_after:
                return False
        return True

    async def _wait_unmuted(self) -> None:
        while self._throttles_pending or self.clock.now_s() < self._muted_until:
            if self._throttles_pending:
                await self._unmuted.wait()
            else:
                await self._sleep_watching_for_close(self._muted_until)
        self._muted_until = 0.0

    async def _sleep_watching_for_close(self, deadline: float) -> None:
        """Sleep until `deadline` (the clock's now_s, which is trio's time) without reading a
        request, but return at once (ConnectionError) if the client closes the connection
        meanwhile, so a throttled client that gave up does not hold its connection slot."""
        with trio.move_on_at(deadline):
            peeked = await self.socket_stream.socket.recv(1, socket.MSG_PEEK)
            if not peeked:
                raise ConnectionError(f"{self.peer} closed the connection while throttled")
            await trio.sleep_until(deadline)

    async def _wait_for_handlers(self) -> None:
        """Wait until every request started so far has been handled."""
        while self._handlers_running:
            await self._wait_for_change()

    async def _wait_for_room(self, size: int) -> None:
        """Wait until another request of `size` bytes fits the connection's bounds."""
        while len(self._slots) >= self.max_in_flight or (
            self._in_flight_bytes and self._in_flight_bytes + size > IN_FLIGHT_BYTES_MAX
        ):
            await self._wait_for_change()

    async def _wait_for_change(self) -> None:
        """Wait until a response is written or a handler finishes. The reader's own
        decided responses go first (nobody else sends them): if that frees room, at once."""
        settled = self._settle()
        if self._send_ready() or settled:
            return
        if self._unsent is not None or (self._slots and self._slots[0].done):
            self._wake_writer()
        changed = self._changed
        if changed is None:
            changed = self._changed = trio.Event()
        await changed.wait()

    def _notify(self) -> None:
        """Wake the reader if it waits for a change (`_wait_for_change`)."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    def _wake_writer(self) -> None:
        wakeup = self._writer_wakeup
        if wakeup is not None:
            self._writer_wakeup = None
            wakeup.set()

    def _dispatch(
        self,
        frame: bytes,
        prefix: RequestPrefix,
        slot: _Slot,
        nursery: trio.Nursery,
        quotas_off: bool = False,
    ) -> bool:
        """Start the request's handler; True if the connection must stop after it.
        `quotas_off`: the caller saw that no quota is set."""
        if not self.session.authenticated and prefix.api_key not in _BEFORE_AUTHENTICATION:
            logger.warning(
                "closing connection from %s: api key %d before SASL authentication on listener %s",
                self.peer,
                prefix.api_key,
                self.listener.name,
            )
            slot.close_after = True
            self._finish(slot)
            return True
        handler = _handler_of(self._handler_table, prefix.api_key)
        if handler is None or not handler.min_version <= prefix.api_version <= handler.max_version:
            if prefix.api_key == _API_VERSIONS:
                # KIP-511: answer a too-new ApiVersions in the v0 format so the client can
                # learn our range and retry.
                slot.frame = encode_response(
                    prefix.correlation_id, unsupported_version_response(self.handlers)
                )
                self._finish(slot)
                return False
            what = "unknown api key" if handler is None else "unsupported version"
            logger.warning(
                "closing connection from %s: %s (api key %d, version %d)",
                self.peer,
                what,
                prefix.api_key,
                prefix.api_version,
            )
            slot.close_after = True
            self._finish(slot)
            return True
        # Declared as the union of every decoder's header: the first assignment would
        # otherwise fix it as the hand-written decoders' (checked at run time when compiled).
        header: RequestHeaderV1 | RequestHeaderV2 | DecodedHeader
        request: RequestPayload
        try:
            if prefix.api_key == _PRODUCE:
                header, request = decode_produce_request(frame, prefix.api_version)
            elif (
                prefix.api_key == _FETCH
                and fetch_codec.FIRST_VERSION <= prefix.api_version <= fetch_codec.LAST_VERSION
            ):
                header, request = decode_fetch_request(frame, prefix.api_version)
            else:
                header, request = decode_request(frame, prefix)
        except FrameError as exc:
            logger.warning("closing connection from %s: %s", self.peer, exc)
            slot.close_after = True
            self._finish(slot)
            return True
        slot.api_key = prefix.api_key
        # By position: from compiled code, keyword arguments to a Python class cost a dict.
        context = RequestContext(
            self.services,
            header,
            prefix.api_key,
            prefix.api_version,
            self.client_host,
            self.client_port,
            self.session,
        )
        quotas = self.quotas
        if quotas is not None and not quotas_off and quotas.quotas_now():
            client = quotas.for_client(self.session.principal.name, header.client_id or "")
            if client is not None:
                # One request at a time, as Kafka reads them, so that a throttle stops the
                # very next request.
                slot.serial = True
                self._handlers_running += 1
                nursery.start_soon(
                    self._run_handler, handler, context, request, prefix, slot, client
                )
                return False
        try:
            answer = handler.serve_now(context, request)
            if isinstance(answer, Deferred):
                self._handlers_running += 1
                entry = (answer, context, prefix, slot)
                deferred = self._deferred
                if deferred is None:
                    self._deferred = [entry]
                else:
                    deferred.append(entry)
                return False
            if isinstance(answer, Later):
                self._handlers_running += 1
                nursery.start_soon(self._run_later, answer.answer, context, prefix, slot)
                self._handler_to_start = not answer.begun
                return False
            if isinstance(answer, Subscribed):
                self._handlers_running += 1
                self._subscribe(answer, context, prefix, slot)
                return False
            self._answered(answer, prefix, slot)
        except Exception:
            self._handler_failed(prefix, slot)
        self._finish(slot, context)
        return False

    def written(self) -> None:
        """The group commit wrote the proposed batches: settle and send the answers, as
        the reader would have before it waited for bytes."""
        self._send_decided()

    def _send_decided(self) -> None:
        """Send the responses that are ready, from outside the reader (the group commit, a
        handler's task, a callback), as the reader would before it waits for bytes; the
        writer is woken only for what cannot go at once."""
        if self._nursery is None:
            return  # the connection ended; it settled everything on its way out
        try:
            self._send_ready()
        except OSError as exc:
            # The reader sees the same error on its next read; end the connection now.
            logger.debug("connection from %s: %s", self.peer, exc)
            self._nursery.cancel_scope.cancel()
            return
        if self._unsent is not None or (self._slots and self._slots[0].done):
            self._wake_writer()

    def abort(self) -> None:
        """Answering after the group commit raised (a bug): close this connection."""
        logger.exception("closing connection from %s: answering its requests failed", self.peer)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _settle(self) -> bool:
        """Write the batches proposed so far (by any connection) and settle this
        connection's deferred answers: done now, or in a task when they must wait. Called
        before the connection lets another task run or sends responses. True if any
        answer was settled."""
        self._write_proposed()
        deferred = self._deferred
        if deferred is None:
            return False
        self._deferred = None
        for answer, context, prefix, slot in deferred:
            try:
                settled = answer.settle()
                if isinstance(settled, Later):
                    assert self._nursery is not None, "requests are read inside the nursery"
                    self._nursery.start_soon(self._run_later, settled.answer, context, prefix, slot)
                    continue
                if isinstance(settled, Subscribed):
                    self._subscribe(settled, context, prefix, slot)
                    continue
                self._answered(settled, prefix, slot)
            except Exception:
                self._handler_failed(prefix, slot)
            self._handlers_running -= 1
            self._finish(slot, context)
        self._notify()  # a reader waiting for handlers to finish
        return True

    def _drop_waits(self) -> None:
        """Reading ended (the client closed, its idle time ran out, a bad frame): the waits
        that can be cancelled (fetches long-polling) are, and the connection ends at the
        first of them, as Kafka drops the responses of a connection it closes, instead of
        staying open for the rest of their `max_wait_ms`."""
        cancels, self._cancels = self._cancels, {}
        for slot, cancel in cancels.items():
            cancel()
            slot.close_after = True
            self._handlers_running -= 1
            self._finish(slot)

    def _subscribe(
        self,
        answer: Subscribed[ResponsePayload | SplicedResponse | EncodedResponse | None],
        context: HandlerContext,
        prefix: RequestPrefix,
        slot: _Slot,
    ) -> None:
        """`_run_later` without a task: the answer is taken when its callback comes (a
        handler counted in `_handlers_running` until then)."""

        def done() -> None:
            if slot.done:
                return  # dropped when the connection stopped reading (`_drop_waits`)
            self._cancels.pop(slot, None)
            try:
                self._answered(answer.answer(), prefix, slot)
            except Exception:
                self._handler_failed(prefix, slot)
            self._handlers_running -= 1
            self._finish(slot, context, in_task=True)

        try:
            cancel = answer.subscribe(done)
        except Exception:
            self._handler_failed(prefix, slot)
            self._handlers_running -= 1
            self._finish(slot, context, in_task=True)
            return
        if cancel is not None and not slot.done:
            self._cancels[slot] = cancel

    async def _run_later(
        self,
        answer: Awaitable[ResponsePayload | SplicedResponse | EncodedResponse | None],
        context: HandlerContext,
        prefix: RequestPrefix,
        slot: _Slot,
    ) -> None:
        try:
            self._answered(await answer, prefix, slot)
        except Exception:
            self._handler_failed(prefix, slot)
        finally:
            self._handlers_running -= 1
            self._finish(slot, context, in_task=True)

    async def _run_handler(
        self,
        handler: ApiEndpoint,
        context: HandlerContext,
        request: RequestPayload,
        prefix: RequestPrefix,
        slot: _Slot,
        client: ClientQuota,
    ) -> None:
        try:
            await self._run_with_quota(client, handler, context, request, prefix, slot)
        except Exception:
            self._handler_failed(prefix, slot)
        finally:
            self._handlers_running -= 1
            self._finish(slot, context, in_task=True)

    def _answered(
        self,
        response: ResponsePayload | SplicedResponse | EncodedResponse | None,
        prefix: RequestPrefix,
        slot: _Slot,
    ) -> None:
        """Encode a handler's response into its slot."""
        if isinstance(response, EncodedResponse):
            slot.frame = response.encode(prefix.correlation_id)
        elif isinstance(response, SplicedResponse):
            slot.frame = response.encode(prefix.correlation_id)
            response = response.response
        elif response is not None:
            slot.frame = encode_response(prefix.correlation_id, response)
        if response is not None:
            code = getattr(response, "error_code", 0)
            if code:
                slot.error = error_name(code)

    def _handler_failed(self, prefix: RequestPrefix, slot: _Slot) -> None:
        slot.error = HANDLER_FAILED
        logger.exception(
            "closing connection from %s: handler for api key %d v%d failed",
            self.peer,
            prefix.api_key,
            prefix.api_version,
        )
        slot.close_after = True

    def _finish(
        self, slot: _Slot, context: HandlerContext | None = None, *, in_task: bool = False
    ) -> None:
        """The slot's response is decided and may be sent: by the reader before it next
        waits for bytes, or (`in_task`: decided in a handler's task or a callback) at the
        end of this turn of the event loop, by the group commit's task, with every other
        response of this connection decided in the turn (one send), and with the writer's
        help only for what cannot go without a wait."""
        session = None if context is None else context.session
        if session is not None and session.close_after_response:
            slot.close_after = True
        slot.done = True
        if in_task:
            self._notify()
            self._group_commit.wait_for_write(self)

    async def _run_with_quota(
        self,
        client: ClientQuota,
        handler: ApiEndpoint,
        context: HandlerContext,
        request: RequestPayload,
        prefix: RequestPrefix,
        slot: _Slot,
    ) -> None:
        """`_run_handler`'s work for a client under a quota (errors are the caller's)."""
        quotas = self.quotas
        timer = quotas.timer if quotas is not None and client.request is not None else None
        task = timer.track() if timer is not None else None
        if prefix.api_key == ApiKey.FETCH:
            # decoded by the Fetch key: one of the Fetch versions served
            request = cap_fetch_bytes(cast("FetchRequest", request), client)
        try:
            response = await handler.serve(context, request)
        except BaseException:
            if timer is not None and task is not None:
                timer.stop(task)
            raise
        frame: bytes | Pieces | None = None
        inner = response.response if isinstance(response, SplicedResponse) else response
        if isinstance(response, SplicedResponse):
            frame = response.encode(prefix.correlation_id)
        elif response is not None:
            frame = encode_response(prefix.correlation_id, response)
        now_s = self.clock.now_s()
        throttle_ms = 0
        fetched_bytes = 0
        if prefix.api_key == ApiKey.PRODUCE and client.produce is not None:
            throttle_ms = client.produce.record(slot.request_bytes, now_s)
        elif prefix.api_key == ApiKey.FETCH and client.fetch is not None and frame is not None:
            fetched_bytes = _frame_bytes(frame)
            throttle_ms = client.fetch.record(fetched_bytes, now_s)
        if timer is not None and task is not None and client.request is not None:
            # Kafka's unit: percent of one request thread's time.
            spent = timer.stop(task) * 100
            throttle_ms = max(throttle_ms, client.request.record(spent, now_s))
        if throttle_ms and inner is not None:
            if fetched_bytes and client.fetch is not None:
                # The client gets no data now, so the bytes are not charged (Kafka's rule).
                client.fetch.unrecord(fetched_bytes, now_s)
                if isinstance(response, SplicedResponse):
                    response.splices.close()
                inner = throttled_fetch_response(inner, throttle_ms)
            else:
                inner = with_throttle_time(inner, throttle_ms)
            frame = encode_response(prefix.correlation_id, inner)
        if throttle_ms:
            # Read nothing more from now on, as Kafka (which reads one request at a time)
            # reads nothing before the throttled response and its throttle time are over.
            slot.throttle_ms = throttle_ms
            self._throttles_pending += 1
        slot.frame = frame
        if inner is not None:
            code = getattr(inner, "error_code", 0)
            if code:
                slot.error = error_name(code)

    # -- writing -----------------------------------------------------------------------

    async def _write_responses(self, scope: trio.CancelScope) -> None:
        """Write the responses in request order, each once it and every response before it
        are decided; those decided together leave in one send. The reader sends what it
        can without waiting (`_send_ready`); this task sends the rest: what the kernel did
        not take at once, spliced frames, throttled or last responses, and over TLS all."""
        slots = self._slots
        while True:
            if self._unsent is not None:
                await self._send_unsent()
                continue
            self._send_ready()
            if self._unsent is not None:
                continue
            if slots and slots[0].done:
                if await self._send_head():
                    break
                continue
            if not slots and self._reading_stopped:
                break
            wakeup = self._writer_wakeup
            if wakeup is None:
                wakeup = self._writer_wakeup = trio.Event()
            await wakeup.wait()
        scope.cancel()

    def _send_ready(self) -> bool:
        """Send the decided responses at the head of the order that are plain bytes, with
        one write and no wait; what the kernel does not take becomes `_unsent`. True if
        any response was sent (or handed to the writer as `_unsent`)."""
        self._settle()
        slots = self._slots
        if self.fd < 0 or self._writer_busy or self._unsent is not None:
            return False
        frames: list[bytes] = []
        written: list[_Slot] = []
        while slots:
            slot = slots[0]
            if (
                not slot.done
                or isinstance(slot.frame, list)
                or slot.throttle_ms
                or slot.close_after
            ):
                break
            slots.popleft()
            written.append(slot)
            self._in_flight_bytes -= slot.request_bytes
            if slot.frame is not None:
                frames.append(slot.frame)
        if not written:
            return False
        if frames:
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            self.metrics.response_sends += 1
            try:
                sent = _write(self.fd, data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                self._unsent = _memoryview(data)[sent:]
                self._wake_writer()
        self._count(written)
        self._notify()  # room for more requests
        return True

    async def _send_unsent(self) -> None:
        unsent = self._unsent
        assert unsent is not None, "called only with bytes to send"
        while unsent:
            await trio.lowlevel.wait_writable(self.fd)
            try:
                # Not `unsent[os.write(...):]`: mypyc evaluates a slice's bounds twice when
                # the sequence is not a list, tuple, str or bytes, which wrote every piece
                # twice (tests/unit/broker/test_compiled.py).
                sent = _write(self.fd, unsent)
            except BlockingIOError:
                continue
            unsent = unsent[sent:]
        self._unsent = None

    async def _send_head(self) -> bool:
        """Send the decided responses at the head that `_send_ready` leaves (all of them
        over TLS); True if the connection ends after them."""
        slots = self._slots
        frames: list[bytes] = []
        written: list[_Slot] = []
        closing = False
        self._writer_busy = True
        try:
            while slots and slots[0].done:
                slot = slots.popleft()
                written.append(slot)
                self._in_flight_bytes -= slot.request_bytes
                frame = slot.frame
                if isinstance(frame, list):
                    await self._send_frames(frames)
                    await self._send_pieces(frame)
                elif frame is not None:
                    frames.append(frame)
                if slot.throttle_ms:
                    await self._send_frames(frames)
                    self._unmute_after(slot.throttle_ms)
                if slot.close_after:
                    closing = True
                    break
                if self.fd >= 0:
                    break  # plain bytes after it: `_send_ready`'s
            await self._send_frames(frames)
        finally:
            self._writer_busy = False
        self._count(written)
        self._notify()
        return closing

    def _count(self, written: list[_Slot]) -> None:
        """Each request served once in the metrics, when its response was written."""
        now = _perf_counter()
        metrics = self.metrics  # its method called through it: compiled, a direct call
        for slot in written:
            if slot.api_key is not None:
                metrics.request_done(slot.api_key, now - slot.received_s, slot.error)

    async def _send_frames(self, frames: list[bytes]) -> None:
        """Send the frames (and empty the list) with one send."""
        if not frames:
            return
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        frames.clear()
        self.metrics.response_sends += 1
        if self.fd < 0:
            await self.stream.send_all(data)
        else:
            await _send_bytes(self.socket_stream.socket, data)

    def _unmute_after(self, throttle_ms: int) -> None:
        """A throttled response was written: reading resumes `throttle_ms` from now (or
        later, while another throttled response is due or an earlier mute lasts longer)."""
        self._throttles_pending -= 1
        self._muted_until = max(self._muted_until, self.clock.now_s() + throttle_ms / 1000)
        self._unmuted.set()
        self._unmuted = trio.Event()

    async def _send_pieces(self, pieces: Pieces) -> None:
        """Write a spliced frame: bytes pieces with send, file ranges with sendfile (over
        TLS, where sendfile cannot encrypt, the ranges are read and sent as bytes)."""
        self.metrics.response_sends += 1
        if self.tls:
            try:
                for piece in pieces:
                    try:
                        # Read off the event loop: a range may be many megabytes.
                        data = (
                            await trio.to_thread.run_sync(piece.read)
                            if isinstance(piece, FileRange)
                            else piece
                        )
                    except OSError as exc:
                        raise ConnectionError(
                            f"{exc}; closing the connection instead of sending a short frame"
                        ) from None
                    await self.stream.send_all(data)
            finally:
                for piece in pieces:
                    if isinstance(piece, FileRange):
                        piece.close()
            return
        sock = self.socket_stream.socket
        try:
            # No MSG_MORE on the bytes pieces: a corked piece ahead of sendfile held whole
            # responses back for the kernel's 200 ms cork timeout.
            for piece in pieces:
                if isinstance(piece, FileRange):
                    await _send_file_range(sock, piece)
                else:
                    await _send_bytes(sock, piece)
        finally:
            for piece in pieces:
                if isinstance(piece, FileRange):
                    piece.close()


def _handler_of(table: list[ApiEndpoint | None], api_key: int) -> ApiEndpoint | None:
    """The handler of an API key, or None for a key this broker does not serve."""
    return table[api_key] if 0 <= api_key < len(table) else None


#: id of a broker's handlers -> (the handlers, `_handler_table` of them), for its connections.
_HANDLER_TABLES: dict[int, tuple[Mapping[ApiKey, ApiEndpoint], list[ApiEndpoint | None]]] = {}


def _handler_table(handlers: Mapping[ApiKey, ApiEndpoint]) -> list[ApiEndpoint | None]:
    """The handlers by API key as a list (None for a key not served): what every request
    looks up, made once per broker."""
    known = _HANDLER_TABLES.get(id(handlers))
    if known is not None and known[0] is handlers:
        return known[1]
    table: list[ApiEndpoint | None] = [None] * (max(handlers, default=-1) + 1)
    for api_key, handler in handlers.items():
        table[api_key] = handler
    if len(_HANDLER_TABLES) >= 64:  # brokers come and go in one process only in tests
        _HANDLER_TABLES.clear()
    _HANDLER_TABLES[id(handlers)] = (handlers, table)
    return table


def _frame_bytes(frame: bytes | Pieces) -> int:
    """The size of a response frame as sent, file ranges included."""
    if isinstance(frame, bytes):
        return len(frame)
    return sum(len(p) if isinstance(p, bytes) else p.length for p in frame)


async def _send_bytes(sock: trio.socket.SocketType, data: bytes) -> None:
    view = _memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


async def _send_file_range(sock: trio.socket.SocketType, piece: FileRange) -> None:
    """Send exactly the range's bytes; if the file turns out shorter (it was cut after the
    range was decided) the connection is closed rather than sending anything else."""
    position, remaining = piece.position, piece.length
    out = sock.fileno()
    await trio.lowlevel.checkpoint_if_cancelled()
    while remaining:
        try:
            sent = os.sendfile(out, piece.fd, position, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno not in _SENDFILE_UNSUPPORTED:
                raise
            # A file system without sendfile: the same bytes, read through Python.
            rest = FileRange(piece.fd, position, remaining)
            try:
                data = rest.read()
            finally:
                rest.fd = -1  # the descriptor stays `piece`'s to close
            await _send_bytes(sock, data)
            return
        if sent == 0:
            raise ConnectionError(
                f"segment range at {position} ends {remaining} bytes early; closing the"
                " connection instead of sending a short frame"
            )
        position += sent
        remaining -= sent
