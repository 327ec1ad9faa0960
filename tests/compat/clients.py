"""Small helpers shared by the compat tests: confluent-kafka produce/consume with bounded
waits, and a raw Kafka-protocol socket for sending hand-built (or broken) frames."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

import crc32c
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigEntry, ConfigResource, NewTopic


def _host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0]
    host, _, port = first.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- librdkafka


@dataclass
class Delivered:
    """One delivery report."""

    index: int
    partition: int
    offset: int
    error: KafkaError | None


@dataclass
class ProduceResult:
    reports: list[Delivered] = field(default_factory=list)

    @property
    def errors(self) -> list[Delivered]:
        return [r for r in self.reports if r.error is not None]

    def offsets_by_partition(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for r in sorted(self.reports, key=lambda r: r.index):
            if r.error is None:
                out.setdefault(r.partition, []).append(r.offset)
        return out


def make_producer(bootstrap: str, **conf: Any) -> Producer:
    base: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "message.timeout.ms": 30000,
        "socket.timeout.ms": 10000,
    }
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[dict[str, Any]],
    timeout: float = 60.0,
    producer: Producer | None = None,
    **conf: Any,
) -> ProduceResult:
    """Produce `records` (dicts of Producer.produce keyword arguments) and wait for every
    delivery report (bounded by `timeout`)."""
    p = producer or make_producer(bootstrap, **conf)
    result = ProduceResult()
    sent = 0

    def cb_for(i: int) -> Callable[[KafkaError | None, Any], None]:
        def cb(err: KafkaError | None, msg: Any) -> None:
            result.reports.append(Delivered(i, msg.partition(), msg.offset(), err))

        return cb

    for rec in records:
        while True:
            try:
                p.produce(topic, on_delivery=cb_for(sent), **rec)
                break
            except BufferError:
                p.poll(0.05)
        sent += 1
        if sent % 1000 == 0:
            p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} of {sent} records not delivered within {timeout}s"
    assert len(result.reports) == sent
    return result


def make_consumer(bootstrap: str, **conf: Any) -> Consumer:
    base: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # librdkafka's Python binding insists on a group id; nothing is committed.
        "group.id": f"compat-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "socket.timeout.ms": 10000,
    }
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(base)


def consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int] | int = 1,
    start: int = 0,
    count: int | None = None,
    timeout: float = 60.0,
    consumer: Consumer | None = None,
    **conf: Any,
) -> dict[int, list[Any]]:
    """Assign `partitions` from offset `start` and read until every partition reached its
    end (partition EOF) or, when `count` is given, until `count` records were read in total.
    Returns records per partition in the order received. Fails on any consumer error or
    when the deadline passes."""
    if isinstance(partitions, int):
        partitions = range(partitions)
    parts = list(partitions)
    c = consumer or make_consumer(bootstrap, **conf)
    out: dict[int, list[Any]] = {p: [] for p in parts}
    try:
        c.assign([TopicPartition(topic, p, start) for p in parts])
        at_eof: set[int] = set()
        total = 0
        deadline = time.monotonic() + timeout
        while True:
            if count is not None and total >= count:
                break
            if count is None and at_eof >= set(parts):
                break
            left = deadline - time.monotonic()
            assert left > 0, (
                f"timed out after {timeout}s: read {total} records"
                f" (wanted {count if count is not None else 'all'}), eof at {sorted(at_eof)}"
            )
            for m in c.consume(num_messages=10000, timeout=min(left, 1.0)):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                out[m.partition()].append(m)
                at_eof.discard(m.partition())
                total += 1
    finally:
        if consumer is None:
            c.close()
    return out


def watermarks(bootstrap: str, topic: str, partition: int = 0, timeout: float = 10.0):
    c = make_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    finally:
        c.close()


def unique(prefix: str) -> str:
    """`prefix` and a random suffix: a name (topic, group, user, ...) no other test uses."""
    separator = "" if prefix.endswith(("-", "_", ".")) else "-"
    return f"{prefix}{separator}{uuid.uuid4().hex[:10]}"


def strictly_increasing(seq: list[int]) -> bool:
    return all(a < b for a, b in zip(seq, seq[1:], strict=False))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval=0.2) -> Any:
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last_exc = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}") from last_exc
        time.sleep(interval)


T = TypeVar("T")

# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: what Apache Kafka
# answers group and transaction requests while a coordinator loads or moves; clients retry.
COORDINATOR_RETRIABLE = frozenset({14, 15, 16})


def error_codes(answer: Any) -> list[int]:
    """Every `error_code` and `*_error_code` field of a kio response, at any depth."""
    if isinstance(answer, tuple | list):
        return [code for item in answer for code in error_codes(item)]
    if not is_dataclass(answer) or isinstance(answer, type):
        return []
    codes: list[int] = []
    for f in fields(answer):
        value = getattr(answer, f.name)
        if f.name == "error_code" or f.name.endswith("_error_code"):
            codes.append(int(value))
        else:
            codes += error_codes(value)
    return codes


def retry_retriable(
    send: Callable[[], T],
    timeout: float = 30.0,
    *,
    retriable: Iterable[int] = COORDINATOR_RETRIABLE,
    codes: Callable[[T], Iterable[int]] = error_codes,
    interval: float = 0.1,
) -> T:
    """Call `send` until its answer carries none of the `retriable` error codes, as a client
    retries a coordinator that is loading or has moved, and return that answer; fail after
    `timeout` seconds with the codes of the last answer."""
    retry_on = frozenset(retriable)
    deadline = time.monotonic() + timeout
    while True:
        answer = send()
        still = sorted(set(codes(answer)) & retry_on)
        if not still:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"still answered retriable errors {still} after {timeout}s")
        time.sleep(interval)


def roundtrip_works(bootstrap: str, topic: str) -> None:
    """A fresh client can still produce to and consume from `topic`: the broker is healthy."""
    marker = uuid.uuid4().hex.encode()
    res = produce(bootstrap, topic, [{"value": marker, "partition": 0}], timeout=30, acks="all")
    assert not res.errors, res.errors
    offset = res.reports[0].offset
    got = consume(bootstrap, topic, [0], start=offset, count=1, timeout=30)
    assert [m.value() for m in got[0]] == [marker]


# ------------------------------------------------------------------------ raw protocol


def zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record_batch(
    values: list[bytes], base_timestamp: int | None = None, corrupt_crc: bool = False
) -> bytes:
    """A magic-2 record batch (uncompressed, no producer id) holding `values` as records
    with null keys, as a client would send it in a Produce request."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    records = bytearray()
    for i, v in enumerate(values):
        body = (
            b"\x00"  # attributes
            + zigzag_varint(0)  # timestamp delta
            + zigzag_varint(i)  # offset delta
            + zigzag_varint(-1)  # null key
            + zigzag_varint(len(v))
            + v
            + zigzag_varint(0)  # no headers
        )
        records += zigzag_varint(len(body)) + body
    after_crc = struct.pack(
        ">hiqqqhii",
        0,  # attributes
        len(values) - 1,  # last offset delta
        ts,  # base timestamp
        ts,  # max timestamp
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        len(values),
    ) + bytes(records)
    crc = crc32c.crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    # batch length counts from partitionLeaderEpoch to the end
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


class RawConnection:
    """A plain TCP connection speaking Kafka framing (4-byte big-endian size prefix)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0):
        self.sock = socket.create_connection(_host_port(bootstrap), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_request(self, request: Any, api_version: int | None = None) -> int:
        """Encode a kio request entity with its header (the header version kio associates
        with the entity) and send it. `api_version` overrides the version in the header."""
        from kio.serial import entity_writer
        from kio.static.primitive import i16, i32

        self.correlation_id += 1
        header_cls = request.__header_schema__
        header = header_cls(
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__ if api_version is None else api_version),
            correlation_id=i32(self.correlation_id),
            client_id="raftka-compat",
        )
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        self.send_frame(buf.getvalue())
        return self.correlation_id

    def _recv_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def recv_response(self, response_cls: type, flexible_header: bool | None = None) -> Any:
        """Read one response frame; check its correlation id; decode the body with kio.
        The response header is v1 (tagged fields) for flexible responses, except for
        ApiVersions whose response header is always v0."""
        from kio.serial import entity_reader

        frame = self.recv_frame()
        (corr,) = struct.unpack(">i", frame[:4])
        assert corr == self.correlation_id, (corr, self.correlation_id)
        pos = 4
        if flexible_header is None:
            flexible_header = response_cls.__flexible__ and response_cls.__api_key__ != 18
        if flexible_header:
            assert frame[pos] == 0, "unexpected tagged fields in response header"
            pos += 1
        value, _size = entity_reader(response_cls)(frame, pos)
        return value

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True if the peer closes the connection (EOF or reset) within `timeout` without
        sending anything; fails if it sends data instead."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"
        return True


def api_versions_v0(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions table {api_key: (min, max)} via a v0 request."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.api_versions.v0.response import ApiVersionsResponse

    with RawConnection(bootstrap) as conn:
        conn.send_request(ApiVersionsRequest())
        resp = conn.recv_response(ApiVersionsResponse)
    assert resp.error_code == 0, resp.error_code
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
) -> None:
    """Create a topic with AdminClient and wait until Metadata shows a leader per partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                config=dict(config or {}),
            )
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[name].result(timeout=timeout_s)

    deadline = time.monotonic() + timeout_s
    last_state = "no metadata yet"
    while True:
        try:
            metadata = admin.list_topics(topic=name, timeout=5)
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                last_state = f"topic error {topic.error if topic else 'missing'}"
            else:
                ready = sorted(
                    p.id for p in topic.partitions.values() if p.error is None and p.leader >= 0
                )
                if ready == list(range(partitions)):
                    return
                last_state = f"partitions with leaders: {ready} of {partitions}"
        except KafkaException as exc:
            last_state = f"metadata request failed: {exc}"
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"topic {name!r} not ready on {bootstrap} after {timeout_s} s ({last_state})"
            )
        time.sleep(0.1)


CLI_TIMEOUT_S = 90


def topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    """DescribeConfigs of one topic: config name -> entry (value, is_default, ...)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=20)


def refused_topic_config(admin: AdminClient, name: str, value: str) -> KafkaError:
    """The error CreateTopics answers for a new topic with config `name`=`value`, which the
    caller expects refused (it fails when the topic is created)."""
    topic = unique("refused")
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={name: value})])
    try:
        futures[topic].result(timeout=20)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    raise AssertionError(f"a topic with {name}={value!r} was created")


def run_raftka(*args: object, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`raftka ARGS` as a user runs it (`python -m raftka.broker`), output captured."""
    from harness import REPO_ROOT

    return subprocess.run(
        [sys.executable, "-m", "raftka.broker", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def fetch_v12(
    topic: str,
    offset: int,
    *,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    max_wait_s: float = 0,
    min_bytes: int = 1,
) -> Any:
    """A sessionless Fetch v12 request for partition 0 of `topic` from `offset`, answered
    at once unless `max_wait_s` lets it wait for `min_bytes`."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i8, i32, i64

    return FetchRequest(
        replica_id=i32(-1),
        max_wait=datetime.timedelta(seconds=max_wait_s),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def find_transaction_coordinator(
    bootstrap: str, transactional_id: str, timeout: float = 30.0
) -> int:
    """FindCoordinator(TRANSACTION) for `transactional_id`, retried as clients retry it while
    `__transaction_state` is created and loaded; the coordinator's node id."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
    from kio.static.primitive import i8

    request = FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(transactional_id,))
    deadline = time.monotonic() + timeout
    while True:
        with RawConnection(bootstrap) as conn:
            conn.send_request(request)
            [found] = conn.recv_response(FindCoordinatorResponse).coordinators
        if int(found.error_code) == 0:
            return int(found.node_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"no transaction coordinator for {transactional_id!r}: {found}")
        time.sleep(0.1)


def partition_for(key: str, partitions: int) -> int:
    """The partition of an internal topic Kafka keeps `key` in (a transactional id in
    `__transaction_state`, a group id in `__consumer_offsets`): Utils.abs(String.hashCode) %
    partitions."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(2**31) else abs(signed)) % partitions
