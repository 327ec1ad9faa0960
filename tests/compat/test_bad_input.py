"""Bad input on raw sockets against the shared broker.

Kafka's behaviour, which these tests hold the broker to: a frame it cannot parse (garbage,
unknown API key, undecodable body) or one larger than `socket.request.max.bytes` closes that
connection without an answer; an ApiVersions request of a version it does not know gets a
v0 answer with UNSUPPORTED_VERSION and the ApiVersions range, so the client can retry lower;
a Produce whose batch fails its CRC gets CORRUPT_MESSAGE for that partition and stores
nothing. In every case other connections are unaffected."""

from __future__ import annotations

import contextlib
import datetime
import os
import struct

import pytest
from clients import (
    RawConnection,
    api_versions_v0,
    record_batch,
    roundtrip_works,
    watermarks,
)

SOCKET_REQUEST_MAX_BYTES = 104857600  # Kafka's default socket.request.max.bytes
UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2
API_VERSIONS = 18
PRODUCE = 0


@pytest.fixture
def health_topic(new_topic) -> str:
    return new_topic(partitions=1)


@pytest.fixture
def bystander(bootstrap):
    """A well-behaved connection, open (and used once) before the bad input is sent."""
    with RawConnection(bootstrap) as conn:
        _api_versions_ok(conn)
        yield conn


def _api_versions_ok(conn: RawConnection) -> None:
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.api_versions.v0.response import ApiVersionsResponse

    conn.send_request(ApiVersionsRequest())
    resp = conn.recv_response(ApiVersionsResponse)
    assert resp.error_code == 0
    assert any(int(a.api_key) == PRODUCE for a in resp.api_keys)


def _broker_still_healthy(bootstrap: str, topic: str, bystander: RawConnection) -> None:
    # The connection that was open all along still gets answers...
    _api_versions_ok(bystander)
    # ...and new clients can produce and consume.
    roundtrip_works(bootstrap, topic)


def _header_v1(api_key: int, api_version: int, correlation_id: int = 1) -> bytes:
    client_id = b"raftka-compat"
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def test_http_request_instead_of_kafka(bootstrap, health_topic, bystander):
    # "GET " read as a size is ~1.1 GB, over socket.request.max.bytes: the broker closes.
    with RawConnection(bootstrap) as conn:
        conn.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert conn.wait_closed(), "connection still open after an HTTP request"
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_garbage_frame(bootstrap, health_topic, bystander):
    with RawConnection(bootstrap) as conn:
        conn.send_frame(b"\xff\xfe" + os.urandom(62))  # api key -2: no such API
        assert conn.wait_closed(), "connection still open after a garbage frame"
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_random_bytes_then_close(bootstrap, health_topic, bystander):
    for _ in range(5):
        # The broker may close as soon as it has seen enough.
        with (
            RawConnection(bootstrap) as conn,
            contextlib.suppress(BrokenPipeError, ConnectionResetError),
        ):
            conn.send_raw(os.urandom(512))
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_frame_over_socket_request_max_bytes(bootstrap, health_topic, bystander):
    with RawConnection(bootstrap) as conn:
        # Only the size prefix: the broker must refuse without waiting for 100 MB of body.
        conn.send_raw(struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1))
        conn.send_raw(_header_v1(API_VERSIONS, 0))
        assert conn.wait_closed(), "oversized frame: connection not closed"
    with RawConnection(bootstrap) as conn:
        conn.send_raw(struct.pack(">i", 0x7FFFFFFF))
        assert conn.wait_closed(), "2 GiB frame size: connection not closed"
    with RawConnection(bootstrap) as conn:
        conn.send_raw(struct.pack(">i", -1) + b"\x00" * 16)
        assert conn.wait_closed(), "negative frame size: connection not closed"
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_truncated_frame_then_close(bootstrap, health_topic, bystander):
    for declared, sent in ((1000, 10), (64, 63), (4, 0)):
        with RawConnection(bootstrap) as conn:
            payload = _header_v1(API_VERSIONS, 0) + b"\x00" * 64
            conn.send_raw(struct.pack(">i", declared) + payload[:sent])
        # closed by us mid-frame
    # A size prefix cut short, too.
    with RawConnection(bootstrap) as conn:
        conn.send_raw(b"\x00\x00")
    _broker_still_healthy(bootstrap, health_topic, bystander)
    # The broker keeps serving requests on a connection that sends a frame in pieces.
    with RawConnection(bootstrap) as conn:
        from kio.schema.api_versions.v0.request import ApiVersionsRequest
        from kio.schema.api_versions.v0.response import ApiVersionsResponse

        frame = struct.pack(">i", len(_header_v1(API_VERSIONS, 0, 1))) + _header_v1(
            API_VERSIONS, 0, 1
        )
        conn.correlation_id = 1
        for i in range(len(frame)):
            conn.send_raw(frame[i : i + 1])
        resp = conn.recv_response(ApiVersionsResponse)
        assert resp.error_code == 0
        assert any(a.api_key == API_VERSIONS for a in resp.api_keys)
        conn.send_request(ApiVersionsRequest())
        assert conn.recv_response(ApiVersionsResponse).error_code == 0


def test_unknown_api_key(bootstrap, health_topic, bystander):
    with RawConnection(bootstrap) as conn:
        conn.send_frame(_header_v1(9999, 0) + b"\x00" * 8)
        assert conn.wait_closed(), "unknown API key: connection not closed"
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_known_api_with_undecodable_body(bootstrap, health_topic, bystander):
    # Metadata v1 whose topic array claims 1000 entries and then ends.
    with RawConnection(bootstrap) as conn:
        conn.send_frame(_header_v1(3, 1) + struct.pack(">i", 1000) + b"\x00\x05ab")
        assert conn.wait_closed(), "undecodable Metadata body: connection not closed"
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_api_versions_too_new(bootstrap, health_topic, bystander):
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    with RawConnection(bootstrap) as conn:
        conn.send_request(
            ApiVersionsRequest(client_software_name="compat", client_software_version="1.0"),
            api_version=32767,
        )
        # The answer is in the v0 format (no throttle time), with a v0 response header.
        resp = conn.recv_response(ApiVersionsResponse, flexible_header=False)
        assert resp.error_code == UNSUPPORTED_VERSION
        ranges = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
        assert API_VERSIONS in ranges, ranges
        lo, hi = ranges[API_VERSIONS]
        assert lo == 0 and hi >= 3, (lo, hi)
        # The connection stays usable: the client retries with a version it was offered.
        conn.send_request(
            ApiVersionsRequest(client_software_name="compat", client_software_version="1.0"),
            api_version=3,
        )
        from kio.schema.api_versions.v3.response import ApiVersionsResponse as V3

        ok = conn.recv_response(V3)
        assert ok.error_code == 0
        assert any(int(a.api_key) == PRODUCE for a in ok.api_keys)
    _broker_still_healthy(bootstrap, health_topic, bystander)


def _produce_classes(bootstrap: str):
    """kio ProduceRequest/Response of a version the broker accepts (by name, so <= 12)."""
    import importlib

    lo, hi = api_versions_v0(bootstrap)[PRODUCE]
    candidates = [v for v in range(3, 13) if lo <= v <= hi]
    assert candidates, f"broker Produce versions {lo}..{hi}"
    v = min(max(candidates), 8) if any(c <= 8 for c in candidates) else min(candidates)
    req = importlib.import_module(f"kio.schema.produce.v{v}.request")
    resp = importlib.import_module(f"kio.schema.produce.v{v}.response")
    return req, resp


def _produce_request(req_mod, topic: str, batch: bytes):
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    return req_mod.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            req_mod.TopicProduceData(
                name=topic,
                partition_data=(
                    req_mod.PartitionProduceData(index=i32(0), records=Records(batch)),
                ),
            ),
        ),
    )


def test_produce_with_corrupt_crc(bootstrap, health_topic, bystander):
    topic = health_topic
    req_mod, resp_mod = _produce_classes(bootstrap)
    before = watermarks(bootstrap, topic)
    with RawConnection(bootstrap) as conn:
        bad = record_batch([b"corrupt-1", b"corrupt-2"], corrupt_crc=True)
        conn.send_request(_produce_request(req_mod, topic, bad))
        resp = conn.recv_response(resp_mod.ProduceResponse)
        [t] = resp.responses
        assert t.name == topic
        [p] = t.partition_responses
        assert p.index == 0
        assert p.error_code == CORRUPT_MESSAGE, p
        assert watermarks(bootstrap, topic) == before, "a corrupt batch changed the log"

        # Same connection, a good batch: accepted, at the old end of the log.
        good = record_batch([b"good-1", b"good-2"])
        conn.send_request(_produce_request(req_mod, topic, good))
        resp = conn.recv_response(resp_mod.ProduceResponse)
        [p] = resp.responses[0].partition_responses
        assert p.error_code == 0, p
        assert p.base_offset == before[1]
    low, high = watermarks(bootstrap, topic)
    assert high == before[1] + 2
    _broker_still_healthy(bootstrap, topic, bystander)


def test_the_metadata_logs_name_is_never_a_topic(bootstrap, health_topic, bystander):
    """Kafka refuses to create `__cluster_metadata`; raftka's metadata Raft group has that
    name, so a topic of it would collide with the group on every broker."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    name = "__cluster_metadata"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, 1, 1)])[name]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=30)
    assert refused.value.args[0].name() == "INVALID_REQUEST", refused.value
    # Nor can a producer's Metadata request auto-create it.
    with RawConnection(bootstrap) as conn:
        conn.send_request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=name),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
        answer = conn.recv_response(MetadataResponse)
    assert [int(t.error_code) != 0 for t in answer.topics] == [True]
    assert name not in admin.list_topics(timeout=10).topics
    _broker_still_healthy(bootstrap, health_topic, bystander)


def test_records_of_an_internal_topic_cannot_be_deleted(bootstrap, health_topic, bystander):
    """DeleteRecords on `__consumer_offsets` would drop committed offsets: Kafka answers
    INVALID_TOPIC_EXCEPTION ("Cannot delete records of internal topic")."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kio.schema.delete_records.v2.request import (
        DeleteRecordsPartition,
        DeleteRecordsRequest,
        DeleteRecordsTopic,
    )
    from kio.schema.delete_records.v2.response import DeleteRecordsResponse
    from kio.static.primitive import i32Timedelta

    # A committed offset makes sure the offsets topic exists.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{health_topic}"})
    try:
        consumer.commit(offsets=[TopicPartition(health_topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    offsets_topic = (
        AdminClient({"bootstrap.servers": bootstrap})
        .list_topics(timeout=10)
        .topics["__consumer_offsets"]
    )
    request = DeleteRecordsRequest(
        topics=(
            DeleteRecordsTopic(
                name="__consumer_offsets",
                partitions=tuple(
                    DeleteRecordsPartition(partition_index=p, offset=-1)
                    for p in offsets_topic.partitions
                ),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        answer = conn.recv_response(DeleteRecordsResponse)
    codes = {int(p.error_code) for t in answer.topics for p in t.partitions}
    assert codes <= {17, 6}, codes  # INVALID_TOPIC_EXCEPTION (or NOT_LEADER elsewhere)
    assert 17 in codes
    _broker_still_healthy(bootstrap, health_topic, bystander)


@pytest.mark.parametrize("records", [b"", b"\x00" * 10], ids=["empty", "ten-bytes"])
def test_short_records_on_a_compacted_topic(bootstrap, new_topic, health_topic, records):
    """Records too short to hold a batch header get the same error on a compacted topic as
    on any other (not a closed connection), and the connection keeps serving."""
    compacted = new_topic(partitions=1, config={"cleanup.policy": "compact"})
    req_mod, resp_mod = _produce_classes(bootstrap)
    before = watermarks(bootstrap, compacted)
    with RawConnection(bootstrap) as conn:
        conn.send_request(_produce_request(req_mod, health_topic, records))
        resp = conn.recv_response(resp_mod.ProduceResponse)
        [plain] = resp.responses[0].partition_responses
        assert plain.error_code != 0, plain

        conn.send_request(_produce_request(req_mod, compacted, records))
        resp = conn.recv_response(resp_mod.ProduceResponse)
        [p] = resp.responses[0].partition_responses
        assert p.error_code == plain.error_code, (p, plain)
        assert watermarks(bootstrap, compacted) == before, "short records changed the log"

        # Same connection: a good batch to the plain topic is still answered.
        conn.send_request(_produce_request(req_mod, health_topic, record_batch([b"after"])))
        resp = conn.recv_response(resp_mod.ProduceResponse)
        [p] = resp.responses[0].partition_responses
        assert p.error_code == 0, p
