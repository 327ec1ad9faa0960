"""A Fetch that waits for records (`max_wait_ms`, `min_bytes`) on a real broker: answered from
the log as it is when the wait ends, counted in Kafka's fetch purgatory gauge while it waits,
and dropped from it when its client goes."""

from __future__ import annotations

from clients import RawConnection, fetch_v12, wait_until
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from harness import free_port
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse
from test_metrics import scrape

WAITING = (
    "kafka_server_delayedoperationpurgatory_numdelayedoperations",
    (("delayedOperation", "Fetch"),),
)
EXPIRED = ("raftka_fetch_long_polls_expired_total", ())


def _waiting(metrics: str) -> float:
    return scrape(metrics).get(WAITING, 0.0)


def test_a_fetch_whose_records_were_deleted_while_it_waited_answers_from_the_log_as_it_is(
    broker_factory, new_topic
):
    """The fetch finds records short of its `min_bytes` and waits; DeleteRecords then deletes
    the segments holding them. At its `max_wait_ms` it is answered from a new read (offset
    out of range: the log now starts past it), as Kafka's delayed fetch reads again when it
    completes, and its connection serves on. (Built from the first read, the answer took its
    records from a deleted segment's closed file: the broker closed the connection.)"""
    metrics = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics})
    topic = new_topic(partitions=1, config={"segment.bytes": "1024"}, bootstrap=broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(20):  # a batch each, a few per 1 KiB segment
        producer.produce(topic, b"v" * 200)
        assert producer.flush(10) == 0
    before = scrape(metrics).get(EXPIRED, 0.0)
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        # The deletion must come before the wait's end, which it cannot be told to: 10 s
        # leaves a loaded machine room for the metrics scrapes and the DeleteRecords (3 s
        # did not, beside a test-suite run and a CPU burner).
        conn.send_request(fetch_v12(topic, 0, max_wait_s=10, min_bytes=10 << 20))
        wait_until(lambda: _waiting(metrics) == 1, 20, "the fetch to wait")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        target = TopicPartition(topic, 0, 20)
        assert admin.delete_records([target])[target].result(timeout=10).low_watermark == 20
        response = conn.recv_response(FetchResponse)
        (partition,) = response.responses[0].partitions
        assert partition.error_code == ErrorCode.offset_out_of_range
        assert (partition.records or b"") == b""
        assert partition.log_start_offset == 20
        conn.send_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert conn.recv_response(ApiVersionsResponse).error_code == ErrorCode.none
    assert scrape(metrics)[EXPIRED] == before + 1
    assert _waiting(metrics) == 0


def test_a_waiting_fetch_leaves_the_purgatory_when_its_client_disconnects(
    broker_factory, new_topic
):
    """A consumer that closes its connection while its fetch waits (here for up to a minute)
    leaves nothing waiting behind it; a fetch that records arrive for is answered at once."""
    metrics = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics})
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        conn.send_request(fetch_v12(topic, 0, max_wait_s=60))
        wait_until(lambda: _waiting(metrics) == 1, 20, "the fetch to wait")
    wait_until(lambda: _waiting(metrics) == 0, 20, "the closed connection's fetch to go")

    with RawConnection(broker.bootstrap, timeout=30) as conn:
        conn.send_request(fetch_v12(topic, 0, max_wait_s=60))
        wait_until(lambda: _waiting(metrics) == 1, 20, "the fetch to wait")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce(topic, b"the record")
        assert producer.flush(10) == 0
        response = conn.recv_response(FetchResponse)  # long before the minute is up
        (partition,) = response.responses[0].partitions
        assert partition.error_code == ErrorCode.none
        assert partition.high_watermark == 1
        assert b"the record" in (partition.records or b"")
    assert _waiting(metrics) == 0
