"""One broker, 1,000 partitions and 1,000 client connections at once.

Every connection is a raw socket that asks ApiVersions and Metadata and stays open while a
confluent-kafka producer writes to every partition and a consumer reads everything back; then
every held connection must still answer. The broker's RSS and CPU are printed (run with -s to
see them), not asserted, except for a bound no healthy run comes near.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from clients import consume, create_topic, make_producer, produce
from harness import _api_versions_request_v3, _recv_exactly

pytestmark = pytest.mark.slow

PARTITIONS = 1000
CONNECTIONS = 1000
RECORDS_PER_PARTITION = 10
RSS_BYTES_MAX = 2 << 30
METADATA_KEY = 3


def _metadata_request_v1(correlation_id: int) -> bytes:
    """Metadata v1 for no topics (an empty array): brokers and controller only."""
    client_id = b"raftka-scale"
    header = struct.pack(">hhi", METADATA_KEY, 1, correlation_id)
    header += struct.pack(">h", len(client_id)) + client_id
    payload = header + struct.pack(">i", 0)
    return struct.pack(">i", len(payload)) + payload


def _read_response(sock: socket.socket, correlation_id: int) -> bytes:
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    body = _recv_exactly(sock, size)
    (got,) = struct.unpack(">i", body[:4])
    assert got == correlation_id, f"correlation id {got}, sent {correlation_id}"
    return body[4:]


def _ask_all(conns: list[socket.socket], make_request, correlation_id: int) -> list[bytes]:
    """Send one request on every connection first, then read every answer: the broker
    has all of them in flight at once."""
    for sock in conns:
        sock.sendall(make_request(correlation_id))
    return [_read_response(sock, correlation_id) for sock in conns]


def _broker_usage(pid: int) -> tuple[int, float]:
    """(RSS bytes, CPU seconds user+system) of a process, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss_kb * 1024, (int(fields[11]) + int(fields[12])) / ticks


def test_a_thousand_partitions_and_a_thousand_connections(broker_factory):
    broker = broker_factory(startup_timeout_s=60)
    topic = "scale-1000"
    started_s = time.monotonic()
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS, timeout_s=60)
    created_s = time.monotonic() - started_s

    conns = [
        socket.create_connection(("127.0.0.1", broker.port), timeout=30) for _ in range(CONNECTIONS)
    ]
    try:
        for answer in _ask_all(conns, _api_versions_request_v3, 1):
            (error_code,) = struct.unpack(">h", answer[:2])
            assert error_code == 0
        for answer in _ask_all(conns, _metadata_request_v1, 2):
            (broker_count,) = struct.unpack(">i", answer[:4])
            assert broker_count == 1

        records = [
            {"value": f"{p}-{i}".encode(), "partition": p}
            for i in range(RECORDS_PER_PARTITION)
            for p in range(PARTITIONS)
        ]
        producer = make_producer(broker.bootstrap, acks="all", **{"linger.ms": 5})
        result = produce(broker.bootstrap, topic, records, timeout=60, producer=producer)
        assert all(r.error is None for r in result.reports)

        read = consume(broker.bootstrap, topic, partitions=PARTITIONS, timeout=60)
        for p in range(PARTITIONS):
            values = [m.value() for m in read[p]]
            assert values == [f"{p}-{i}".encode() for i in range(RECORDS_PER_PARTITION)], p

        # Every held connection is still served.
        for answer in _ask_all(conns, _api_versions_request_v3, 3):
            assert struct.unpack(">h", answer[:2]) == (0,)

        rss_bytes, cpu_s = _broker_usage(broker.pid)
        time.sleep(5)
        _, cpu_after_s = _broker_usage(broker.pid)
        idle_share = (cpu_after_s - cpu_s) / 5
        print(
            f"\nscale: {PARTITIONS} partitions created in {created_s:.1f} s;"
            f" {CONNECTIONS} connections held; RSS {rss_bytes / 2**20:.0f} MiB;"
            f" CPU {cpu_s:.1f} s so far; idle CPU {idle_share:.1%} of a core over 5 s"
        )
        assert rss_bytes < RSS_BYTES_MAX, f"RSS {rss_bytes / 2**20:.0f} MiB"
    finally:
        for sock in conns:
            sock.close()
