"""Fetches that wait for records that do not come (`--long-polls N`): what a broker spends
on consumers idling at the end of their partitions.

N raw connections to the leader of partition 0 of a new, empty topic each keep one Fetch
waiting (v12, no session, `max_wait_ms` = `--fetch-wait-ms`, `min_bytes` 1) and send the next
as soon as one is answered, as an idle consumer does every `fetch.wait.max.ms`. Over the
steady part: fetches answered per second, the broker's CPU per fetch, its share of a core
and its RSS.
"""

from __future__ import annotations

import argparse
import datetime
import selectors
import socket
import time
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i16, i32

from raftka.broker.tools.bench_conn_runs import partition_leaders
from raftka.broker.tools.bench_connections import LENGTH, check_descriptors, open_connections
from raftka.broker.tools.bench_frames import encode_frame
from raftka.broker.tools.bench_report import Result
from raftka.broker.tools.bench_requests import (
    SteadyWindow,
    request_figures,
    request_lines,
    steady_broker_lines,
)
from raftka.broker.tools.bench_runs import ensure_topic
from raftka.protocol.api import build, request_type, schema_module

FETCH_KEY = 1
FETCH_VERSION = 12
CLIENT_ID = "raftka-bench-long-polls"


def fetch_frame(topic: str, wait_ms: int) -> bytes:
    """A Fetch v12 request frame for partition 0 of `topic` from offset 0, without a session,
    waiting up to `wait_ms` for one byte."""
    entity = request_type(FETCH_KEY, FETCH_VERSION)
    assert entity is not None, "kio knows Fetch v12"
    schema = schema_module(entity)
    header = RequestHeader(
        request_api_key=i16(FETCH_KEY),
        request_api_version=i16(FETCH_VERSION),
        correlation_id=i32(1),
        client_id=CLIENT_ID,
    )
    partition = build(
        schema.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    body = build(
        entity,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(build(schema.FetchTopic, topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return encode_frame(header, body)


class _Answers:
    """Whole response frames read from one connection."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> int:
        """Take `data`; how many whole frames it completed."""
        buffer = self.buffer
        buffer += data
        frames = 0
        while len(buffer) >= 4:
            (size,) = LENGTH.unpack_from(buffer, 0)
            if len(buffer) < 4 + size:
                break
            del buffer[: 4 + size]
            frames += 1
        return frames


def run_long_polls(
    args: argparse.Namespace,
    bootstrap: str,
    pids: tuple[int, ...],
    topic: str,
    label: str,
    metrics: tuple[str, ...] = (),
) -> Result:
    """--long-polls N: see the module's docstring."""
    ensure_topic(bootstrap, topic, 1, args.replication_factor)
    leader = partition_leaders(bootstrap, topic)[0]
    for problem in check_descriptors(args.long_polls, pids):
        print(f"bench: LIMIT: {problem}")
    try:
        sockets, _ = open_connections([leader] * args.long_polls)
    except OSError as exc:
        raise SystemExit(f"bench: cannot open {args.long_polls} connections: {exc}") from None
    frame = fetch_frame(topic, args.fetch_wait_ms)
    selector = selectors.DefaultSelector()
    answered = answered_steady = closed = 0
    window = SteadyWindow(pids, metrics, args.warmup, args.duration)
    try:
        for sock in sockets:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, _Answers())
            sock.sendall(frame)
        started = time.monotonic()
        window.start()
        steady_from = started + args.warmup
        end = steady_from + args.duration
        while (now := time.monotonic()) < end:
            for key, _ in selector.select(min(0.1, end - now)):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                try:
                    data = conn.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    closed += 1
                    selector.unregister(conn)
                    continue
                frames = key.data.feed(data)
                answered += frames
                if time.monotonic() >= steady_from:
                    answered_steady += frames
                for _ in range(frames):
                    conn.sendall(frame)
        window.finish()
    finally:
        selector.close()
        for sock in sockets:
            sock.close()
    broker = window.figures()
    answered_per_s = answered_steady / args.duration
    requests = (
        request_figures(
            {"Fetch": answered_per_s},
            broker["seconds"],
            broker["cpu_s"],
            "generator",
            system_s=broker.get("system_s"),
        )
        if broker.get("complete")
        else None
    )
    print(f"-- {label}, {args.long_polls} connections each with a Fetch waiting, steady part:")
    print(
        f"{answered:,} empty fetches answered ({args.fetch_wait_ms} ms max wait): "
        f"{answered_per_s:,.0f}/s, {args.long_polls * 1000 / args.fetch_wait_ms:,.0f}/s "
        f"if each waited exactly its time; connections closed by the broker: {closed}"
    )
    if requests is not None:
        for line in request_lines(requests):
            print(line)
    for line in steady_broker_lines(broker):
        print(line)
    figures: dict[str, Any] = {
        "connections": args.long_polls,
        "fetch_wait_ms": args.fetch_wait_ms,
        "answered": answered,
        "answered_per_s": answered_per_s,
        "closed_by_broker": closed,
        "requests": requests,
        "steady_broker": broker,
    }
    return {"target": label, "topic": topic, "ok": closed == 0, "long_polls": figures}
