"""Topic `compression.type` set to a codec: batches produced in another codec are stored
recompressed in the topic's (read back with a raw Fetch), and confluent-kafka, kcat and the
Java client read every record intact; idempotent sequence checks hold across recompression."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clients import RawConnection, consume, fetch_v12, produce, strictly_increasing, watermarks
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.fetch.v12.response import FetchResponse

from raftka.protocol.records import COMPRESSION_MASK, iter_batch_headers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from batches import encode_batch  # noqa: E402
from test_idempotence import init_producer_id, produce_raw  # noqa: E402

#: attributes codec bits of each topic compression.type
CODEC_BITS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: a producer codec other than the topic's, for each topic codec
PRODUCER_CODEC = {"uncompressed": "zstd", "gzip": "lz4", "snappy": "gzip", "lz4": "snappy"}
PRODUCER_CODEC["zstd"] = "gzip"
INVALID_RECORD = 87
UNKNOWN_SERVER = -1
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _records(n: int, tag: str) -> list[dict[str, object]]:
    return [
        {
            "key": f"{tag}-k{i}".encode(),
            "value": f"{tag}-value-{i}-".encode() * (1 + i % 7),
            "headers": [("h", f"{i}".encode())],
            "partition": 0,
        }
        for i in range(n)
    ]


def _stored_codecs(bootstrap: str, topic: str) -> list[int]:
    """The codec bits of every batch partition 0 of `topic` holds, read with raw Fetches."""
    codecs: list[int] = []
    offset = 0
    with RawConnection(bootstrap, timeout=30) as conn:
        while True:
            conn.send_request(fetch_v12(topic, offset, max_bytes=8 << 20))
            response = conn.recv_response(FetchResponse)
            part = response.responses[0].partitions[0]
            assert int(part.error_code) == 0, part
            headers = list(iter_batch_headers(part.records or b""))
            if not headers:
                return codecs
            codecs += [h.attributes & COMPRESSION_MASK for h in headers]
            offset = headers[-1].next_offset


def _check_read_back(bootstrap: str, topic: str, sent: list[dict[str, object]]) -> None:
    got = consume(bootstrap, topic, [0], count=len(sent))[0]
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (r["key"], r["value"], r["headers"]) for r in sent
    ]


def _kcat_lines(kcat_bin: str, bootstrap: str, topic: str) -> list[str]:
    proc = subprocess.run(
        [kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e"]
        + ["-f", "%k=%s\\n"],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode().splitlines()


@pytest.mark.parametrize("codec", sorted(CODEC_BITS))
def test_topic_created_with_a_codec_stores_batches_in_it(
    codec: str, bootstrap, new_topic, kcat_bin
) -> None:
    topic = new_topic(config={"compression.type": codec})  # CreateTopics with configs
    sent = _records(300, codec)
    result = produce(bootstrap, topic, sent, compression_type=PRODUCER_CODEC[codec], linger_ms=50)
    assert not result.errors
    assert strictly_increasing(result.offsets_by_partition()[0])
    stored = _stored_codecs(bootstrap, topic)
    assert stored and set(stored) == {CODEC_BITS[codec]}, stored
    _check_read_back(bootstrap, topic, sent)
    assert _kcat_lines(kcat_bin, bootstrap, topic) == [
        f"{r['key'].decode()}={r['value'].decode()}" for r in sent
    ]  # type: ignore[union-attr]


def test_incremental_alter_configs_recompresses_later_batches(bootstrap, new_topic) -> None:
    topic = new_topic()
    first = _records(50, "before")
    assert not produce(bootstrap, topic, first, compression_type="gzip", linger_ms=50).errors
    before = _stored_codecs(bootstrap, topic)
    # compression.type=producer keeps what librdkafka sent (it sends a batch that gzip
    # would not shrink uncompressed).
    assert CODEC_BITS["gzip"] in before and set(before) <= {0, CODEC_BITS["gzip"]}, before
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries = next(iter(described.values())).result(timeout=30)
    assert entries["compression.type"].value == "zstd"
    second = _records(50, "after")
    assert not produce(bootstrap, topic, second, compression_type="snappy").errors
    stored = _stored_codecs(bootstrap, topic)
    # Batches written before keep their codec; later ones are stored in the topic's.
    assert stored[: len(before)] == before and len(stored) > len(before), stored
    assert set(stored[len(before) :]) == {CODEC_BITS["zstd"]}, stored
    _check_read_back(bootstrap, topic, first + second)


def test_an_unknown_codec_is_refused_and_changes_nothing(bootstrap, new_topic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"compression-brotli-{time.monotonic_ns()}"
    future = admin.create_topics(
        [NewTopic(name, 1, 1, config={"compression.type": "brotli"})], request_timeout=30
    )[name]
    with pytest.raises(Exception, match="compression.type") as info:
        future.result(timeout=30)
    assert "INVALID_CONFIG" in str(info.value) or "InvalidConfig" in str(info.value)
    assert name not in admin.list_topics(timeout=10).topics
    topic = new_topic(config={"compression.type": "lz4"})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="compression.type"):
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    assert next(iter(described.values())).result(timeout=30)["compression.type"].value == "lz4"


def test_idempotent_producer_across_recompression(bootstrap, new_topic) -> None:
    topic = new_topic(config={"compression.type": "zstd"})
    # librdkafka, pipelining up to 5 requests, batches large enough for the worker thread.
    sent = [
        {"key": f"k{i}".encode(), "value": (f"{i:06d}" * 200).encode(), "partition": 0}
        for i in range(3000)
    ]
    result = produce(
        bootstrap,
        topic,
        sent,
        enable_idempotence=True,
        acks="all",
        compression_type="gzip",
        linger_ms=20,
        batch_size=512 * 1024,
        max_in_flight_requests_per_connection=5,
    )
    assert not result.errors
    assert result.offsets_by_partition()[0] == list(range(3000))
    assert set(_stored_codecs(bootstrap, topic)) == {CODEC_BITS["zstd"]}
    got = consume(bootstrap, topic, [0], count=len(sent))[0]
    assert [m.value() for m in got] == [r["value"] for r in sent]

    # A retried batch is a duplicate (its original offset, nothing appended); a gap in the
    # sequence is refused: the header's producer fields survived the recompression.
    other = new_topic(config={"compression.type": "lz4"})
    error, producer_id, epoch = init_producer_id(bootstrap)
    assert error == 0
    batch = encode_batch(
        [(None, b"x" * 100)] * 10,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        gzip=True,
    )
    assert produce_raw(bootstrap, other, batch) == (0, 0)
    assert produce_raw(bootstrap, other, batch) == (0, 0)
    assert watermarks(bootstrap, other)[1] == 10
    gap = encode_batch(
        [(None, b"y")], producer_id=producer_id, producer_epoch=epoch, base_sequence=11, gzip=True
    )
    assert produce_raw(bootstrap, other, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    following = encode_batch(
        [(None, b"z")], producer_id=producer_id, producer_epoch=epoch, base_sequence=10, gzip=True
    )
    assert produce_raw(bootstrap, other, following) == (0, 10)
    assert set(_stored_codecs(bootstrap, other)) == {CODEC_BITS["lz4"]}


def test_corrupt_compressed_batch_is_refused_and_nothing_stored(
    bootstrap, new_topic, on_raftka
) -> None:
    import struct

    import crc32c

    topic = new_topic(config={"compression.type": "snappy"})
    batch = bytearray(encode_batch([(None, b"v" * 200)] * 5, gzip=True))
    batch[70:] = bytes(b ^ 0x33 for b in batch[70:])  # inside the gzip stream
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))  # CRC still valid
    # raftka says INVALID_RECORD, deliberately: Kafka answers UNKNOWN_SERVER_ERROR here.
    refused = produce_raw(bootstrap, topic, bytes(batch))[0]
    accepted = (INVALID_RECORD,) if on_raftka else (INVALID_RECORD, UNKNOWN_SERVER)
    assert refused in accepted, refused
    assert watermarks(bootstrap, topic) == (0, 0)


def test_java_client_reads_recompressed_batches(java_tool, bootstrap, new_topic) -> None:
    for codec in ("snappy", "lz4", "zstd", "gzip"):
        topic = new_topic(config={"compression.type": codec})
        sent = [
            {"key": f"key{i}".encode(), "value": f"val{i}".encode(), "partition": 0}
            for i in range(100)
        ]
        result = produce(bootstrap, topic, sent, compression_type=PRODUCER_CODEC[codec])
        assert not result.errors
        assert set(_stored_codecs(bootstrap, topic)) == {CODEC_BITS[codec]}
        rows = java_tool.json("consume-assign", bootstrap, topic, 0, "earliest", 100, 30000)
        assert [(r["key"], r["value"]) for r in rows] == [
            (f"key{i}", f"val{i}") for i in range(100)
        ]
    # And what the Java producer compressed (gzip) is stored in a zstd topic and read back.
    topic = new_topic(config={"compression.type": "zstd"})
    acked = java_tool.json("produce", bootstrap, topic, 200, "compression.type=gzip")
    assert len(acked) == 200
    assert set(_stored_codecs(bootstrap, topic)) == {CODEC_BITS["zstd"]}
    got = consume(bootstrap, topic, [0], count=200)[0]
    assert [(m.key(), m.value()) for m in got] == [
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(200)
    ]


def test_broker_default_compression_type(broker_factory, new_topic) -> None:
    broker = broker_factory({"compression.type": "gzip"})
    topic = new_topic(bootstrap=broker.bootstrap)
    sent = _records(100, "default")
    assert not produce(broker.bootstrap, topic, sent, compression_type="lz4").errors
    assert set(_stored_codecs(broker.bootstrap, topic)) == {CODEC_BITS["gzip"]}
    _check_read_back(broker.bootstrap, topic, sent)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entry = next(iter(described.values())).result(timeout=30)["compression.type"]
    assert (entry.value, entry.source) == ("gzip", 4)  # STATIC_BROKER_CONFIG


def test_compression_levels(bootstrap, new_topic) -> None:
    topic = new_topic(config={"compression.type": "zstd", "compression.zstd.level": "19"})
    sent = _records(100, "level")
    assert not produce(bootstrap, topic, sent, compression_type="gzip").errors
    assert set(_stored_codecs(bootstrap, topic)) == {CODEC_BITS["zstd"]}
    _check_read_back(bootstrap, topic, sent)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries = next(iter(described.values())).result(timeout=30)
    assert entries["compression.zstd.level"].value == "19"
    assert entries["compression.gzip.level"].value == "-1"
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.gzip.level", "0", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="compression.gzip.level"):
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def test_transactions_across_recompression(broker_factory) -> None:
    from clients import create_topic
    from confluent_kafka import Producer
    from test_transactions import CONFIG
    from test_transactions_e2e import wait_complete

    broker = broker_factory(CONFIG)
    topic = f"compression-txn-{time.monotonic_ns()}"
    create_topic(broker.bootstrap, topic, config={"compression.type": "zstd"})
    transactional_id = f"compression-{time.monotonic_ns()}"
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": transactional_id,
            "compression.type": "gzip",
        }
    )
    producer.init_transactions(60)
    for outcome in ("abort", "commit"):
        producer.begin_transaction()
        for i in range(100):
            producer.produce(topic, value=f"{outcome}-{i}".encode() * 10, partition=0)
        assert producer.flush(30) == 0
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        wait_complete(broker.bootstrap, transactional_id)
    # Data batches recompressed; the COMMIT/ABORT markers (uncompressed) left as written.
    assert set(_stored_codecs(broker.bootstrap, topic)) == {0, CODEC_BITS["zstd"]}
    got = consume(broker.bootstrap, topic, [0], isolation_level="read_committed")[0]
    assert [m.value() for m in got] == [f"commit-{i}".encode() * 10 for i in range(100)]


def test_replicas_store_the_recompressed_bytes(cluster_factory) -> None:
    from clients import create_topic
    from test_cluster import wait_replicas_identical

    cluster = cluster_factory()
    topic = f"compression-rf3-{time.monotonic_ns()}"
    create_topic(cluster.bootstrap, topic, config={"compression.type": "lz4"}, replication_factor=3)
    sent = [
        {
            "key": f"k{i}".encode(),
            "value": (f"{i:06d}" * 100).encode(),
            "headers": [("h", b"x")],
            "partition": 0,
        }
        for i in range(2000)
    ]
    assert not produce(
        cluster.bootstrap, topic, sent, acks="all", compression_type="zstd", linger_ms=20
    ).errors
    blob = wait_replicas_identical(cluster, topic, 0)
    assert {h.attributes & COMPRESSION_MASK for h in iter_batch_headers(blob)} == {
        CODEC_BITS["lz4"]
    }
    _check_read_back(cluster.bootstrap, topic, sent)


def test_clients_too_old_for_zstd_are_told_so_for_a_zstd_topic(bootstrap, new_topic) -> None:
    """Kafka answers Fetch below v10 (clients before zstd, KIP-110) with
    UNSUPPORTED_COMPRESSION_TYPE for a topic whose compression.type is zstd."""
    import datetime

    from kio.schema.fetch.v9.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v9.response import FetchResponse as FetchResponseV9
    from kio.static.primitive import i8, i32, i64

    zstd_topic = new_topic(config={"compression.type": "zstd"})
    plain_topic = new_topic()
    for topic in (zstd_topic, plain_topic):
        assert not produce(bootstrap, topic, _records(5, "old-client")).errors

    def fetch_v9(topic: str) -> Any:
        request = FetchRequest(
            replica_id=i32(-1),
            max_wait=datetime.timedelta(0),
            min_bytes=i32(1),
            max_bytes=i32(1 << 20),
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
                            fetch_offset=i64(0),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(1 << 20),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        with RawConnection(bootstrap) as conn:
            conn.send_request(request)
            return conn.recv_response(FetchResponseV9).responses[0].partitions[0]

    refused = fetch_v9(zstd_topic)
    assert int(refused.error_code) == 76 and not refused.records  # UNSUPPORTED_COMPRESSION_TYPE
    served = fetch_v9(plain_topic)
    assert int(served.error_code) == 0 and served.records
    # Clients that know zstd (v10 and later) read the zstd topic as before.
    with RawConnection(bootstrap) as conn:
        conn.send_request(fetch_v12(zstd_topic, 0))
        answer = conn.recv_response(FetchResponse).responses[0].partitions[0]
    assert int(answer.error_code) == 0 and answer.records
