"""The metrics and health endpoint (`metrics.listen`) of real broker processes, driven by
real clients: /metrics changes as a produce/consume run says, /readyz follows the cluster,
and bad HTTP input gets a 4xx without disturbing the broker."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from clients import consume, make_consumer, produce, roundtrip_works, wait_until
from confluent_kafka import TopicPartition
from harness import free_port
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

READY_BOUND_S = 30.0
NOT_READY_BOUND_S = 20.0


def http_get(address: str, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """(status, body) of one GET."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(address: str) -> Samples:
    status, text = http_get(address, "/metrics")
    assert status == 200, text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def raw_http(address: str, data: bytes, close_input: bool = True, timeout_s: float = 10.0) -> bytes:
    """The status line the endpoint answers `data` with (b"" if it closed without one)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        if close_input:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def _requests(samples: Samples, api: str) -> float:
    return samples.get(("kafka_network_requestmetrics_requests_total", (("request", api),)), 0.0)


def _per_topic(samples: Samples, name: str, topic: str) -> float:
    return samples.get((name, (("topic", topic),)), 0.0)


def _group_lag(address: str, group: str, topic: str) -> float | None:
    key = ("raftka_group_lag", (("group", group), ("partition", "0"), ("topic", topic)))
    return scrape(address).get(key)


def test_metrics_follow_a_produce_and_consume_run(broker_factory, new_topic):
    metrics_address = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics_address})
    assert http_get(metrics_address, "/healthz") == (200, "ok\n")
    wait_until(lambda: http_get(metrics_address, "/readyz")[0] == 200, READY_BOUND_S, "/readyz 200")
    topic = new_topic(bootstrap=broker.bootstrap)
    before = scrape(metrics_address)

    n = 2000
    records = [{"key": f"k{i}".encode(), "value": b"v" * 100 + str(i).encode()} for i in range(n)]
    payload_bytes = sum(len(r["key"]) + len(r["value"]) for r in records)
    result = produce(broker.bootstrap, topic, records, timeout=60, linger_ms=5)
    assert not result.errors, result.errors[:5]

    group = f"metrics-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(broker.bootstrap, group_id=group)
    try:
        got = consume(broker.bootstrap, topic, [0], count=n, consumer=consumer, timeout=60)
        assert len(got[0]) == n
        consumer.commit(offsets=[TopicPartition(topic, 0, n // 4)], asynchronous=False)
        wait_until(
            lambda: _group_lag(metrics_address, group, topic) == n - n // 4,
            10,
            f"group lag {n - n // 4} after committing offset {n // 4}",
        )
        consumer.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        wait_until(
            lambda: _group_lag(metrics_address, group, topic) == 0,
            10,
            "group lag 0 after committing the end",
        )
    finally:
        consumer.close()

    after = scrape(metrics_address)
    assert _requests(after, "Produce") > _requests(before, "Produce")
    assert _requests(after, "Fetch") > _requests(before, "Fetch")
    assert _requests(after, "OffsetCommit") >= 2
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    assert _per_topic(after, bytes_in, topic) - _per_topic(before, bytes_in, topic) >= payload_bytes
    messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
    assert _per_topic(after, messages_in, topic) == n
    bytes_out = "kafka_server_brokertopicmetrics_bytesout_total"
    assert _per_topic(after, bytes_out, topic) >= payload_bytes
    partition = (("partition", "0"), ("topic", topic))
    assert after["kafka_log_log_logendoffset", partition] == n
    assert after["raftka_partition_high_watermark", partition] == n
    assert after["kafka_log_log_size", partition] >= payload_bytes
    time_count = ("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))
    assert after[time_count] == _requests(after, "Produce")
    assert after["kafka_server_replicamanager_leadercount", ()] >= 1
    assert after["kafka_server_replicamanager_underreplicatedpartitions", ()] == 0
    assert after["kafka_controller_kafkacontroller_activecontrollercount", ()] == 1
    assert 0 <= after["raftka_event_loop_lag_seconds", ()] < 5
    connections = (
        "kafka_server_socketservermetrics_connection_count",
        (("listener", "PLAINTEXT"),),
    )
    assert after[connections] >= 0
    raft_group = (("raft_group", f"{topic}-0"),)
    assert after["raftka_raft_leader", raft_group] == 1
    assert after["raftka_raft_leader_changes_total", raft_group] >= 1
    assert http_get(metrics_address, "/readyz") == (200, "ready\n")


@pytest.mark.timeout(300)
def test_readiness_flips_when_nodes_leave_and_return(cluster_factory):
    cluster = cluster_factory(start=False)
    addresses = {}
    for node in cluster.nodes:
        addresses[node.node_id] = f"127.0.0.1:{free_port()}"
        node.config["metrics.listen"] = addresses[node.node_id]
    survivor, *leaving = cluster.nodes
    survivor_metrics = addresses[survivor.node_id]

    def ready(address: str) -> bool:
        return http_get(address, "/readyz", timeout_s=2)[0] == 200

    cluster.start()
    for address in addresses.values():
        wait_until(lambda a=address: ready(a), READY_BOUND_S, f"{address}/readyz 200")
    metadata_group = (("raft_group", "__cluster_metadata-0"),)
    leaders = {scrape(a)["raftka_raft_leader", metadata_group] for a in addresses.values()}
    assert len(leaders) == 1 and leaders != {-1}, leaders

    for node in leaving:
        node.kill()
    started = time.monotonic()
    status, reason = wait_until(
        lambda: (got := http_get(survivor_metrics, "/readyz", timeout_s=2))[0] == 503 and got,
        NOT_READY_BOUND_S,
        "/readyz 503 on the survivor with two of three brokers down",
    )
    assert "no leader known for the metadata Raft group" in reason, reason
    assert http_get(survivor_metrics, "/healthz") == (200, "ok\n")
    assert scrape(survivor_metrics)["raftka_raft_leader", metadata_group] == -1
    flipped_s = time.monotonic() - started

    for node in leaving:
        node.spawn()
    for node in leaving:
        node.wait_ready()
    wait_until(lambda: ready(survivor_metrics), READY_BOUND_S, "/readyz 200 again")
    for node in leaving:
        wait_until(
            lambda a=addresses[node.node_id]: ready(a),
            READY_BOUND_S,
            f"/readyz 200 on restarted node {node.node_id}",
        )
    print(f"readiness turned 503 {flipped_s:.1f} s after two of three brokers died")


def test_bad_http_input_gets_4xx_and_the_broker_keeps_serving(broker_factory, new_topic):
    metrics_address = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics_address})
    topic = new_topic(bootstrap=broker.bootstrap)

    # A half-sent request held open must not delay anyone else.
    host, _, port = metrics_address.rpartition(":")
    stalled = socket.create_connection((host, int(port)), timeout=10)
    try:
        stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert raw_http(metrics_address, b"\x00\xff\xfe\x16\x03\x01 garbage\r\n\r\n") == (
            b"HTTP/1.1 400 Bad Request"
        )
        # Garbage that never ends its line is refused without waiting for more.
        started = time.monotonic()
        assert raw_http(metrics_address, b"\x16\x03\x01\x02\x00", close_input=False) == (
            b"HTTP/1.1 400 Bad Request"
        )
        assert time.monotonic() - started < 2
        long_line = b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"
        assert raw_http(metrics_address, long_line) == b"HTTP/1.1 400 Bad Request"
        assert raw_http(metrics_address, long_line, close_input=False) == (
            b"HTTP/1.1 400 Bad Request"
        )
        assert raw_http(metrics_address, b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n") == (
            b"HTTP/1.1 400 Bad Request"
        )
        assert raw_http(metrics_address, b"GET /metrics HTTP/9.9\r\n\r\n") == (
            b"HTTP/1.1 400 Bad Request"
        )
        assert raw_http(metrics_address, b"GET /nope HTTP/1.1\r\n\r\n") == (
            b"HTTP/1.1 404 Not Found"
        )
        assert http_get(metrics_address, "/metrics/../admin")[0] == 404
        assert raw_http(metrics_address, b"POST /metrics HTTP/1.1\r\n\r\n") == (
            b"HTTP/1.1 405 Method Not Allowed"
        )
        assert raw_http(metrics_address, b"") == b""  # connected and left: no answer
        # Many at once: each is answered on its own.
        answers: list[bytes] = []
        threads = [
            threading.Thread(
                target=lambda: answers.append(raw_http(metrics_address, b"\xff" * 10_000))
            )
            for _ in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert answers == [b"HTTP/1.1 400 Bad Request"] * 20
        assert http_get(metrics_address, "/healthz") == (200, "ok\n")
        assert http_get(metrics_address, "/readyz") == (200, "ready\n")
    finally:
        stalled.close()

    roundtrip_works(broker.bootstrap, topic)
    got = consume(broker.bootstrap, topic, [0], timeout=30)
    assert got[0], "the topic's records are still there"
    assert _requests(scrape(metrics_address), "Produce") >= 1
    assert broker.is_running()
