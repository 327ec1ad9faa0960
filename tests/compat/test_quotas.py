"""Client quotas and connection limits against a real broker, with real clients: a producer
and a consumer over their byte-rate quotas are throttled (librdkafka reports the throttle
times) while clients without a quota keep their normal latency and rate; a quota set on one
broker of a cluster applies on another; `max.connections.per.ip`; AlterClientQuotas
validation; `raftka quotas`.

Rates are measured and printed (run with -s to see them); assertions on them are generous
(under twice the quota), never on speed."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from typing import Any

from clients import create_topic, make_producer, run_raftka, unique, wait_until
from confluent_kafka import Consumer, Producer
from harness import _api_versions_request_v3, split_host_port

from raftka.broker.admin.wire import WireConnection, alter_client_quotas, describe_client_quotas

QUOTA_BYTES_PER_S = 256 * 1024
RUN_S = 8.0
VALUE = b"q" * 1000


def watched_producer(bootstrap: str, client_id: str, throttles: list[float], **conf: Any) -> Any:
    """A producer whose throttle times (librdkafka's throttle_cb) go to `throttles`."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "message.timeout.ms": 30000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            **conf,
        }
    )


def watched_consumer(bootstrap: str, client_id: str, throttles: list[float]) -> Any:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": unique("quota-group"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )


def raftka_ok(*args: object) -> str:
    result = run_raftka(*args)
    assert result.returncode == 0, f"raftka {args} exited {result.returncode}: {result.stderr}"
    return result.stdout


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def described(bootstrap: str) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    with WireConnection(bootstrap, 10.0) as connection:
        response = describe_client_quotas(connection, [])
    assert response.error_code == 0, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: float(v.value) for v in entry.values
        }
        for entry in response.entries
    }


# -- byte-rate quotas ---------------------------------------------------------------------------


def test_producer_over_its_quota_is_throttled_and_another_is_not(broker_factory: Any) -> None:
    broker = broker_factory()
    topic = unique("quota-produce")
    create_topic(broker.bootstrap, topic)
    greedy_id, polite_id = unique("greedy"), unique("polite")
    raftka_ok("quotas", "set", "--client-id", greedy_id, "--producer-byte-rate",
              QUOTA_BYTES_PER_S, "--bootstrap-servers", broker.bootstrap)  # fmt: skip

    throttles: list[float] = []  # seconds, as confluent-kafka reports them
    delivered: list[int] = []  # greedy bytes acknowledged within the run
    latencies_s: list[float] = []
    stop = threading.Event()

    def greedy() -> None:
        producer = watched_producer(
            broker.bootstrap, greedy_id, throttles, **{"linger.ms": 5, "batch.size": 65536}
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None and not stop.is_set():
                delivered.append(len(msg.value()))

        while not stop.is_set():
            try:
                producer.produce(topic, VALUE, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.purge()
        producer.flush(5)

    def polite() -> None:
        producer = make_producer(broker.bootstrap, client_id=polite_id, linger_ms=0)

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                latencies_s.append(msg.latency())

        while not stop.is_set():
            producer.produce(topic, VALUE, on_delivery=on_delivery)
            producer.poll(0.02)
        producer.flush(10)

    threads = [threading.Thread(target=greedy), threading.Thread(target=polite)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(RUN_S)
    stop.set()
    elapsed_s = time.monotonic() - started
    for thread in threads:
        thread.join(30)
    greedy_rate = sum(delivered) / elapsed_s
    polite_p50_ms = percentile(latencies_s, 0.5) * 1000
    print(
        f"\nproduce quota {QUOTA_BYTES_PER_S} B/s: throttled producer {greedy_rate:.0f} B/s "
        f"({greedy_rate / QUOTA_BYTES_PER_S:.2f}x quota), throttle times {len(throttles)} "
        f"(max {max(throttles, default=0) * 1000:.0f} ms); unthrottled producer "
        f"{len(latencies_s) * len(VALUE) / elapsed_s:.0f} B/s, p50 {polite_p50_ms:.1f} ms, "
        f"p99 {percentile(latencies_s, 0.99) * 1000:.1f} ms"
    )
    assert throttles and max(throttles) > 0, "librdkafka saw no throttle time"
    assert 0 < greedy_rate < 2 * QUOTA_BYTES_PER_S
    assert len(latencies_s) > RUN_S * 10, "the unthrottled producer was held up"
    assert polite_p50_ms < 200


def test_consumer_over_its_quota_is_throttled_and_another_is_not(broker_factory: Any) -> None:
    broker = broker_factory()
    topic = unique("quota-fetch")
    create_topic(broker.bootstrap, topic)
    total_bytes = 6000 * len(VALUE)
    producer = make_producer(broker.bootstrap, linger_ms=5, batch_size=65536)
    for _ in range(total_bytes // len(VALUE)):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    slow_id, fast_id = unique("slow-reader"), unique("fast-reader")
    raftka_ok("quotas", "set", "--client-id", slow_id, "--consumer-byte-rate",
              QUOTA_BYTES_PER_S, "--bootstrap-servers", broker.bootstrap)  # fmt: skip

    def read(client_id: str, seconds: float, throttles: list[float]) -> tuple[int, float]:
        consumer = watched_consumer(broker.bootstrap, client_id, throttles)
        consumer.subscribe([topic])
        got = 0
        first: float | None = None
        deadline = time.monotonic() + seconds + 20  # joining the group is not measured
        try:
            while time.monotonic() < deadline and got < total_bytes:
                for message in consumer.consume(1000, 0.2):
                    if message.error() is None:
                        first = first or time.monotonic()
                        got += len(message.value())
                if first is not None and time.monotonic() - first >= seconds:
                    break
            return got, time.monotonic() - (first or time.monotonic())
        finally:
            consumer.close()

    slow_throttles: list[float] = []
    fast_throttles: list[float] = []
    slow_bytes, slow_s = read(slow_id, RUN_S, slow_throttles)
    fast_bytes, fast_s = read(fast_id, RUN_S, fast_throttles)
    slow_rate = slow_bytes / max(slow_s, RUN_S)
    print(
        f"\nfetch quota {QUOTA_BYTES_PER_S} B/s: throttled consumer {slow_rate:.0f} B/s "
        f"({slow_rate / QUOTA_BYTES_PER_S:.2f}x quota), throttle times {len(slow_throttles)} "
        f"(max {max(slow_throttles, default=0) * 1000:.0f} ms); unthrottled consumer read all "
        f"{fast_bytes} B, {fast_s:.2f} s after its first message, with no throttle time"
    )
    assert slow_throttles and max(slow_throttles) > 0, "librdkafka saw no throttle time"
    assert 0 < slow_rate < 2 * QUOTA_BYTES_PER_S
    assert fast_bytes >= total_bytes and not any(fast_throttles)


def test_a_quota_set_on_one_broker_applies_on_another(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    first, other = cluster.nodes[0].bootstrap, cluster.nodes[2].bootstrap
    client_id = unique("replicated")
    raftka_ok("quotas", "set", "--client-id", client_id, "--producer-byte-rate", 1024,
              "--bootstrap-servers", first)  # fmt: skip
    wanted = {(("client-id", client_id),): {"producer_byte_rate": 1024.0}}
    wait_until(lambda: described(other) == wanted, 20, "the quota on another broker")

    # A producer talking only to that other broker is throttled by it.
    topic = unique("quota-cluster")
    create_topic(cluster.bootstrap, topic, replication_factor=3)
    throttles: list[float] = []
    producer = watched_producer(other, client_id, throttles)
    deadline = time.monotonic() + 20
    while not throttles and time.monotonic() < deadline:
        producer.produce(topic, VALUE * 8)
        producer.poll(0.05)
    producer.purge()
    producer.flush(5)
    assert throttles, "no throttle time from the broker that did not take the quota"


def test_request_percentage_throttles_a_busy_client(broker_factory: Any) -> None:
    broker = broker_factory()
    with WireConnection(broker.bootstrap, 10.0) as connection:
        # The admin client's own client id gets 1% of a request thread.
        alter_client_quotas(
            connection, [([("client-id", "raftka-admin")], {"request_percentage": 1.0})]
        )
        throttled_ms, sent = 0.0, 0
        while not throttled_ms and sent < 20_000:
            response = describe_client_quotas(connection, [])
            throttled_ms = response.throttle_time.total_seconds() * 1000
            sent += 1
        print(f"\nrequest_percentage 1: throttled {throttled_ms:.0f} ms after {sent} requests")
        assert 0 < throttled_ms <= 1000  # at most one quota window
        assert describe_client_quotas(connection, []).error_code == 0  # still served


# -- connection limits ---------------------------------------------------------------------------


def _connect(bootstrap: str) -> socket.socket:
    return socket.create_connection(split_host_port(bootstrap), timeout=5)


def _answers(sock: socket.socket) -> bool:
    """Whether ApiVersions is answered on `sock` (False: the broker closed it)."""
    try:
        sock.sendall(_api_versions_request_v3(7))
        header = sock.recv(4, socket.MSG_WAITALL)
        if len(header) < 4:
            return False
        (size,) = struct.unpack(">i", header)
        return len(sock.recv(size, socket.MSG_WAITALL)) == size
    except OSError:
        return False


def test_connections_past_max_connections_per_ip_are_closed(broker_factory: Any) -> None:
    broker = broker_factory({"max.connections.per.ip": "3"})
    time.sleep(1)  # the harness's start-up probe has closed; let the broker notice
    held = [_connect(broker.bootstrap) for _ in range(3)]
    try:
        assert all(_answers(s) for s in held)
        fourth = _connect(broker.bootstrap)
        assert not _answers(fourth), "a 4th connection from one address was served"
        fourth.close()
        assert all(_answers(s) for s in held), "existing connections must keep working"
        held.pop().close()

        def fresh_connection() -> socket.socket | None:
            sock = _connect(broker.bootstrap)
            if _answers(sock):
                return sock
            sock.close()
            return None

        held.append(wait_until(fresh_connection, 10, "a connection once one closed"))
        log = broker.log_tail(400)
        assert "closing connection from 127.0.0.1" in log and "max.connections.per.ip" in log
    finally:
        for sock in held:
            sock.close()


# -- AlterClientQuotas validation and the CLI ------------------------------------------------------


BAD_ALTERATIONS = [
    ([("client-id", "c")], {"producer_byte_rate": -5.0}, "must be greater than 0"),
    ([("client-id", "c")], {"producer_byte_rate": 10.5}, "cannot be a fractional value"),
    ([("client-id", "c")], {"bytes_per_second": 10.0}, "Invalid configuration key"),
    ([], {"producer_byte_rate": 10.0}, "Invalid empty client quota entity"),
    ([("group", "g")], {"producer_byte_rate": 10.0}, "Unhandled client quota entity type"),
    ([("user", "")], {"producer_byte_rate": 10.0}, "Empty user not supported"),
    ([("user", "a"), ("user", "b")], {"producer_byte_rate": 10.0}, "duplicate entity entry"),
]
INVALID_REQUEST = 42


def test_bad_alterations_are_invalid_requests_and_change_nothing(broker_factory: Any) -> None:
    broker = broker_factory()
    with WireConnection(broker.bootstrap, 10.0) as connection:
        alter_client_quotas(connection, [([("user", "kept")], {"producer_byte_rate": 100.0})])
        before = described(broker.bootstrap)
        for entity, ops, message in BAD_ALTERATIONS:
            response = alter_client_quotas(connection, [(entity, ops)])
            (entry,) = response.entries
            assert entry.error_code == INVALID_REQUEST, (entity, ops)
            assert message in entry.error_message
        # validate_only: a good entry is accepted and nothing changes.
        response = alter_client_quotas(
            connection,
            [([("user", "kept")], {"producer_byte_rate": None, "consumer_byte_rate": 5.0})],
            validate_only=True,
        )
        assert response.entries[0].error_code == 0
    assert described(broker.bootstrap) == before


def test_raftka_quotas_set_list_remove(broker_factory: Any) -> None:
    broker = broker_factory()
    b = ("--bootstrap-servers", broker.bootstrap)
    out = raftka_ok("quotas", "set", "--user", "alice", "--producer-byte-rate", 1048576, *b)
    assert "Set producer_byte_rate=1048576 for user=alice." in out
    raftka_ok("quotas", "set", "--user-defaults", "--client-id", "app",
              "--consumer-byte-rate", 2048, "--request-percentage", 50, *b)  # fmt: skip
    raftka_ok("quotas", "set", "--client-defaults", "--controller-mutation-rate", 10, *b)
    listed = json.loads(raftka_ok("quotas", "list", "--output", "json", *b))["quotas"]
    assert {json.dumps(e["entity"], sort_keys=True): e["quotas"] for e in listed} == {
        json.dumps([{"name": "app", "type": "client-id"}, {"name": None, "type": "user"}],
                   sort_keys=True): {"consumer_byte_rate": 2048, "request_percentage": 50},
        json.dumps([{"name": None, "type": "client-id"}], sort_keys=True): {
            "controller_mutation_rate": 10
        },
        json.dumps([{"name": "alice", "type": "user"}], sort_keys=True): {
            "producer_byte_rate": 1048576
        },
    }  # fmt: skip
    table = raftka_ok("quotas", "list", "--user", "alice", *b)
    assert "user=alice" in table and "1048576" in table and "client-id=app" not in table

    refused = run_raftka("quotas", "set", "--user", "bob", "--producer-byte-rate", "1.5", *b)
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr
    assert "cannot be a fractional value" in refused.stderr
    usage = run_raftka("quotas", "set", "--producer-byte-rate", "5", *b)
    assert usage.returncode == 2 and "name an entity" in usage.stderr

    removed = raftka_ok("quotas", "remove", "--user-defaults", "--client-id", "app",
                        "--key", "request_percentage", *b)  # fmt: skip
    assert "Removed request_percentage" in removed
    raftka_ok("quotas", "remove", "--user", "alice", *b)
    raftka_ok("quotas", "remove", "--client-defaults", *b)
    assert described(broker.bootstrap) == {
        (("client-id", "app"), ("user", None)): {"consumer_byte_rate": 2048.0}
    }
    missing = run_raftka("quotas", "remove", "--user", "alice", *b)
    assert missing.returncode == 1 and "no quotas are set for user=alice" in missing.stderr
