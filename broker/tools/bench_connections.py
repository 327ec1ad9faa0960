"""The many-connections load: N raw TCP connections, each sending one-record Produce requests
at its share of a total rate, from one epoll loop per generator process; and idle
connections that only ask ApiVersions once.

A librdkafka producer per connection would be too heavy for thousands, so the generator
speaks the protocol itself with frames from `bench_frames`: per request it stamps a
prebuilt frame and makes one send. The schedule is open-loop (request k of a process is due
at k / rate seconds), so a slow broker does not slow the load down; a connection that
already has spec["in_flight"] requests unanswered (`--connection-in-flight`, default 5 as the
Java producer's max.in.flight.requests.per.connection) skips its turn (counted, as a client would
batch those records instead). Latency is from a request's send to its response's arrival.
"""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import struct
import time
import traceback
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from raftka.broker.tools.bench_frames import (
    PRODUCE_KEY,
    FrameBuildError,
    ProduceTemplate,
    api_versions_ranges,
    produce_version,
    response_error_code,
)
from raftka.broker.tools.bench_workers import LATENCY_HEADER, Counters, WorkerMessage
from raftka.broker.tools.processes import api_versions_request_v3, recv_exactly

CONNECT_WAVE = 250  # connections opened (and answered) at a time: within any listen backlog
DRAIN_S = 10.0  # after the last send, how long answers are still waited for
FD_MARGIN = 64  # descriptors besides the connections: the process's own files and pipes
LENGTH = struct.Struct(">i")  # a frame's size prefix, and a response's correlation id


# -- descriptors ---------------------------------------------------------------------------


def raise_open_file_limit(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward `wanted` (at most the hard limit);
    the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # above the system's nr_open: the caller reports the limit in force
    return int(soft) if soft != resource.RLIM_INFINITY else wanted


def open_file_limit_of(pid: int) -> int | None:
    """The soft "Max open files" of another process, from /proc/PID/limits (None: unknown)."""
    try:
        with open(f"/proc/{pid}/limits") as limits:
            for line in limits:
                if line.startswith("Max open files"):
                    soft = line.split()[3]
                    return None if soft == "unlimited" else int(soft)
    except OSError:
        return None
    return None


def check_descriptors(
    connections: int, broker_pids: Sequence[int], own_share: int | None = None
) -> list[str]:
    """Problems that would keep `connections` sockets from opening: this process's limit
    (raised to the hard limit first) for `own_share` of them (default: all; a share means
    more generator processes would help) and each broker process's for all (the leaders
    of a broker of several processes may all be in one); empty when none."""
    problems = []
    mine = connections if own_share is None else own_share
    limit = raise_open_file_limit(mine + FD_MARGIN)
    if limit < mine + FD_MARGIN:
        problems.append(
            f"this process may open {limit} files (hard limit); {mine} connections "
            f"need {mine + FD_MARGIN}: raise it (ulimit -Hn)"
            + (" or use more --producers" if own_share is not None else "")
        )
    for broker_pid in broker_pids:
        broker_limit = open_file_limit_of(broker_pid)
        if broker_limit is not None and broker_limit < connections + FD_MARGIN:
            problems.append(
                f"broker process {broker_pid} may open {broker_limit} files; "
                f"{connections} connections need more"
            )
    return problems


# -- opening connections -------------------------------------------------------------------


def open_connections(
    addresses: Sequence[tuple[str, int]], timeout_s: float = 30.0
) -> tuple[list[socket.socket], dict[int, tuple[int, int]]]:
    """One connection to each address, each having asked ApiVersions v3 and read the answer,
    opened `CONNECT_WAVE` at a time; (sockets, the API version ranges of the first answer).
    OSError or FrameBuildError if a connection cannot be opened or answered."""
    sockets: list[socket.socket] = []
    ranges: dict[int, tuple[int, int]] = {}
    try:
        for first in range(0, len(addresses), CONNECT_WAVE):
            wave = []
            for host, port in addresses[first : first + CONNECT_WAVE]:
                sock = socket.create_connection((host, port), timeout=timeout_s)
                sockets.append(sock)
                wave.append(sock)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.sendall(api_versions_request_v3(len(sockets)))
            for sock in wave:
                (size,) = LENGTH.unpack(recv_exactly(sock, 4))
                answer = recv_exactly(sock, size)
                if not ranges:
                    ranges = api_versions_ranges(answer)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets, ranges


def connection_alive(sock: socket.socket) -> bool:
    """False once the broker has closed the connection (readable with nothing to read)."""
    try:
        sock.setblocking(False)
        data = sock.recv(1, socket.MSG_PEEK)
        return bool(data)
    except BlockingIOError:
        return True
    except OSError:
        return False


# -- the load ------------------------------------------------------------------------------


@dataclass(slots=True)
class Connection:
    """One producer connection: its socket, its frame, what it has sent and not heard of."""

    sock: socket.socket
    template: ProduceTemplate
    in_flight: deque[tuple[int, int]] = field(default_factory=deque)  # correlation id, send ns
    received: bytearray = field(default_factory=bytearray)
    unsent: bytearray = field(default_factory=bytearray)
    closed: bool = False


@dataclass(slots=True)
class LoadCounts:
    """What one generator process did; latencies of every answered request."""

    sent: int = 0
    answered: int = 0
    errors: dict[int, int] = field(default_factory=dict)  # error code -> responses
    skipped_in_flight: int = 0
    skipped_closed: int = 0
    closed: int = 0
    lost: int = 0  # sent on a connection that closed before answering
    lag_max_s: float = 0.0  # how far behind its schedule the generator sent, at worst
    sent_steady: int = 0  # sent after the warm-up
    send_ns: array[int] = field(default_factory=lambda: array("q"))
    latency_us: array[int] = field(default_factory=lambda: array("q"))
    answer_ns: array[int] = field(default_factory=lambda: array("q"))


class ProduceLoad:
    """Connections of one generator process and its epoll loop."""

    def __init__(self, spec: dict[str, Any], counters: Counters, index: int) -> None:
        self.spec = spec
        self.counters = counters
        self.index = index
        self.acks = int(spec["acks"])
        self.tag = int(spec["tag"])
        self.counts = LoadCounts()
        self.epoll = select.epoll()
        self.by_fd: dict[int, Connection] = {}
        self.connections: list[Connection] = []
        self.pending: set[int] = set()  # fds with unsent bytes
        self.correlation_id = 0

    def connect(self) -> None:
        """Open this process's connections, each to its partition's leader."""
        targets: list[tuple[int, str, int]] = self.spec["targets"]  # partition, host, port
        sockets, ranges = open_connections([(host, port) for _, host, port in targets])
        if PRODUCE_KEY not in ranges:
            raise FrameBuildError("the broker does not list Produce in ApiVersions")
        version = produce_version(*ranges[PRODUCE_KEY])
        templates: dict[int, ProduceTemplate] = {}
        for sock, (partition, _, _) in zip(sockets, targets, strict=True):
            if partition not in templates:
                templates[partition] = ProduceTemplate.build(
                    version,
                    self.spec["topic"],
                    partition,
                    self.acks,
                    self.spec["record_size"],
                )
            sock.setblocking(False)
            conn = Connection(sock, templates[partition])
            self.connections.append(conn)
            self.by_fd[sock.fileno()] = conn
            self.epoll.register(sock.fileno(), select.EPOLLIN)
        self.version = version

    def run(self) -> LoadCounts:
        """Send at spec["rate"] requests/s for spec["seconds"], then wait for the answers."""
        rate = self.spec["rate"]
        in_flight_max = self.spec["in_flight"]
        conns = self.connections
        n = len(conns)
        pack = LATENCY_HEADER.pack
        counts = self.counts
        started = time.perf_counter()
        deadline = started + self.spec["seconds"]
        steady_from = started + self.spec["warmup"]
        request = 0
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            due = int((now - started) * rate)
            if request < due:
                counts.lag_max_s = max(counts.lag_max_s, now - started - (request + 1) / rate)
            while request < due:
                conn = conns[request % n]
                request += 1
                if conn.closed:
                    counts.skipped_closed += 1
                    continue
                if self.acks and len(conn.in_flight) >= in_flight_max:
                    counts.skipped_in_flight += 1
                    continue
                sent_ns = time.time_ns()
                self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
                frame = conn.template.stamp(
                    self.correlation_id, sent_ns // 1_000_000, pack(sent_ns, self.tag)
                )
                self._send(conn, frame)
                if self.acks:
                    conn.in_flight.append((self.correlation_id, sent_ns))
                counts.sent += 1
                if now >= steady_from:
                    counts.sent_steady += 1
            self._flush_pending()
            wait = started + (request + 1) / rate - time.perf_counter()
            self._poll(min(max(wait, 0.0), 0.005))
            self.counters[self.index] = counts.answered if self.acks else counts.sent
        drain_until = time.perf_counter() + DRAIN_S
        while self.acks and time.perf_counter() < drain_until:
            if not any(c.in_flight for c in conns if not c.closed):
                break
            self._flush_pending()
            self._poll(0.05)
            self.counters[self.index] = counts.answered
        counts.lost += sum(len(c.in_flight) for c in conns)
        self.counters[self.index] = counts.answered if self.acks else counts.sent
        return counts

    def _send(self, conn: Connection, frame: bytearray) -> None:
        if conn.unsent:
            conn.unsent += frame
            return
        try:
            sent = conn.sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        if sent < len(frame):
            conn.unsent += frame[sent:]
            self.pending.add(conn.sock.fileno())

    def _flush_pending(self) -> None:
        for fd in list(self.pending):
            conn = self.by_fd[fd]
            try:
                sent = conn.sock.send(conn.unsent)
            except BlockingIOError:
                continue
            except OSError:
                self._close(conn)
                continue
            del conn.unsent[:sent]
            if not conn.unsent:
                self.pending.discard(fd)

    def _poll(self, timeout_s: float) -> None:
        events = self.epoll.poll(timeout_s)
        if not events:
            return
        now_ns = time.time_ns()
        counts = self.counts
        for fd, _ in events:
            conn = self.by_fd[fd]
            try:
                data = conn.sock.recv(262_144)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._close(conn)
                continue
            buf = conn.received
            buf += data
            at = 0
            while len(buf) - at >= 4:
                (size,) = LENGTH.unpack_from(buf, at)
                if len(buf) - at - 4 < size:
                    break
                frame = buf[at + 4 : at + 4 + size]
                at += 4 + size
                if not conn.in_flight:
                    continue  # an answer to nothing sent: not a Produce of ours
                correlation_id, sent_ns = conn.in_flight.popleft()
                if LENGTH.unpack_from(frame, 0)[0] != correlation_id:
                    counts.errors[-2] = counts.errors.get(-2, 0) + 1  # out of order
                    continue
                error = response_error_code(frame, conn.template)
                if error:
                    counts.errors[error] = counts.errors.get(error, 0) + 1
                else:
                    counts.answered += 1
                counts.send_ns.append(sent_ns)
                counts.latency_us.append((now_ns - sent_ns) // 1000)
                counts.answer_ns.append(now_ns)
            del buf[:at]

    def _close(self, conn: Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.counts.closed += 1
        self.counts.lost += len(conn.in_flight)
        conn.in_flight.clear()
        fd = conn.sock.fileno()
        self.pending.discard(fd)
        with contextlib.suppress(OSError):
            self.epoll.unregister(fd)
        conn.sock.close()

    def close(self) -> None:
        for conn in self.connections:
            if not conn.closed:
                conn.sock.close()
        self.epoll.close()


def connections_worker(
    spec: dict[str, Any], index: int, counters: Counters, start: Event, out: Queue[WorkerMessage]
) -> None:
    """A generator process: open spec["targets"] connections, report ready, run the load."""
    try:
        problems = check_descriptors(len(spec["targets"]), (), len(spec["targets"]))
        if problems:
            raise SystemExit("; ".join(problems))
        load = ProduceLoad(spec, counters, index)
        load.connect()
        out.put(("ready", index, None))
        start.wait()
        first_send_ns = time.time_ns()
        cpu_started, run_started = time.process_time(), time.perf_counter()
        counts = load.run()
        cpu_s, run_s = time.process_time() - cpu_started, time.perf_counter() - run_started
        load.close()
        out.put(
            (
                "result",
                index,
                {
                    "connections": len(spec["targets"]),
                    "produce_version": load.version,
                    "first_send_ns": first_send_ns,
                    "sent": counts.sent,
                    "answered": counts.answered,
                    "errors": counts.errors,
                    "skipped_in_flight": counts.skipped_in_flight,
                    "skipped_closed": counts.skipped_closed,
                    "closed": counts.closed,
                    "lost": counts.lost,
                    "lag_max_s": counts.lag_max_s,
                    "sent_steady": counts.sent_steady,
                    "cpu_s": cpu_s,
                    "run_s": run_s,
                    "send_ns": counts.send_ns,
                    "latency_us": counts.latency_us,
                    "answer_ns": counts.answer_ns,
                },
            )
        )
    except BaseException:
        out.put(("error", index, traceback.format_exc()))


def connection_error_name(code: int) -> str:
    """A Produce error code's Kafka name (-2: an answer out of order)."""
    if code == -2:
        return "OUT_OF_ORDER_ANSWER"
    try:
        from kio.schema.errors import ErrorCode

        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
