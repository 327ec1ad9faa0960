"""Incremental fetch sessions (KIP-227) against a real broker process: the Java consumer and
kafka-python read many partitions through sessions (the broker's /metrics counts the
incremental fetches it served), and raw requests get Kafka's session errors."""

from __future__ import annotations

import datetime
import threading
import uuid

from clients import RawConnection, produce, wait_until
from harness import free_port
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.static.primitive import i8, i32, i64
from test_metrics import scrape

PARTITIONS = 200
INCREMENTAL = ("raftka_incremental_fetch_requests_total", ())
SESSIONS = ("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())
CACHED = ("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", ())


def _produce_to_every_partition(bootstrap: str, topic: str, per_partition: int, tag: str) -> None:
    res = produce(
        bootstrap,
        topic,
        [
            {"key": f"{tag}-{p}-{i}".encode(), "value": b"v", "partition": p}
            for p in range(PARTITIONS)
            for i in range(per_partition)
        ],
    )
    assert not res.errors


def _expected(tags: list[str], per_partition: int) -> set[str]:
    return {
        f"{tag}-{p}-{i}" for tag in tags for p in range(PARTITIONS) for i in range(per_partition)
    }


def test_java_consumer_reads_many_partitions_through_a_session(
    broker_factory, new_topic, java_tool
):
    metrics = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics})
    topic = new_topic(partitions=PARTITIONS, bootstrap=broker.bootstrap)
    _produce_to_every_partition(broker.bootstrap, topic, 2, "before")
    total = 2 * PARTITIONS * 2
    rows: list[dict] = []

    def consume() -> None:
        rows.extend(
            java_tool.json(
                "consume-group",
                broker.bootstrap,
                topic,
                f"g-{uuid.uuid4().hex[:8]}",
                total,
                90000,
                timeout=120,
            )
        )

    consumer = threading.Thread(target=consume)
    consumer.start()
    # Once the consumer fetches from its session, write as much again: it arrives through
    # incremental fetches that long-poll.
    wait_until(lambda: scrape(metrics).get(INCREMENTAL, 0) > 0, 60, "an incremental fetch")
    during = scrape(metrics)
    assert during[SESSIONS] >= 1
    assert during[CACHED] >= PARTITIONS
    _produce_to_every_partition(broker.bootstrap, topic, 2, "after")
    consumer.join(130)
    assert not consumer.is_alive()
    assert {r["key"] for r in rows} == _expected(["before", "after"], 2)
    assert len(rows) == total
    assert scrape(metrics)[INCREMENTAL] > during[INCREMENTAL]


def test_kafka_python_reads_many_partitions_through_a_session(broker_factory, new_topic):
    from kafka import KafkaConsumer, TopicPartition

    metrics = f"127.0.0.1:{free_port()}"
    broker = broker_factory({"metrics.listen": metrics})
    topic = new_topic(partitions=PARTITIONS, bootstrap=broker.bootstrap)
    _produce_to_every_partition(broker.bootstrap, topic, 1, "before")
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=200,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        keys: set[str] = set()

        def read_until(count: int) -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                keys.update(r.key.decode() for r in records)
            return len(keys) >= count

        wait_until(lambda: read_until(PARTITIONS), 60, "the first records")

        def fetched_incrementally() -> bool:
            read_until(PARTITIONS)  # kafka-python fetches only inside poll
            return scrape(metrics).get(INCREMENTAL, 0) > 0

        wait_until(fetched_incrementally, 60, "an incremental fetch")
        _produce_to_every_partition(broker.bootstrap, topic, 1, "after")
        wait_until(lambda: read_until(2 * PARTITIONS), 60, "the records written later")
        assert keys == _expected(["before", "after"], 1)
    finally:
        consumer.close()


def _fetch(
    session_id: int, epoch: int, topics=(), forgotten=(), max_wait_ms: int = 0
) -> FetchRequest:
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=tuple(topics),
        forgotten_topics_data=tuple(forgotten),
        rack_id="",
    )


def _wanted(topic: str, partitions: range, fetch_offset: int = 0) -> FetchTopic:
    return FetchTopic(
        topic=topic,
        partitions=tuple(
            FetchPartition(
                partition=i32(p),
                current_leader_epoch=i32(-1),
                fetch_offset=i64(fetch_offset),
                last_fetched_epoch=i32(-1),
                log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20),
            )
            for p in partitions
        ),
    )


def _partitions(response: FetchResponse) -> dict[int, object]:
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def test_session_errors_and_incremental_answers_on_the_wire(bootstrap, new_topic):
    topic = new_topic(partitions=3)
    with RawConnection(bootstrap) as conn:
        # An id never handed out.
        conn.send_request(_fetch(123456, 1))
        unknown = conn.recv_response(FetchResponse)
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found
        assert unknown.session_id == 0 and unknown.responses == ()

        # FINAL epoch: a full fetch without a session.
        conn.send_request(_fetch(0, -1, [_wanted(topic, range(3))]))
        sessionless = conn.recv_response(FetchResponse)
        assert sessionless.session_id == 0 and set(_partitions(sessionless)) == {0, 1, 2}

        # INITIAL epoch: a session is opened with every partition.
        conn.send_request(_fetch(0, 0, [_wanted(topic, range(3))]))
        full = conn.recv_response(FetchResponse)
        session_id = int(full.session_id)
        assert full.error_code == ErrorCode.none and session_id != 0
        assert set(_partitions(full)) == {0, 1, 2}

        # Nothing changed: the incremental answer carries no partition.
        conn.send_request(_fetch(session_id, 1))
        quiet = conn.recv_response(FetchResponse)
        assert quiet.error_code == ErrorCode.none and quiet.session_id == session_id
        assert _partitions(quiet) == {}

        # Epoch 2 is next; 5 is refused and leaves the session usable.
        conn.send_request(_fetch(session_id, 5))
        wrong = conn.recv_response(FetchResponse)
        assert wrong.error_code == ErrorCode.invalid_fetch_session_epoch
        assert wrong.responses == ()

        # A write to partition 1 shows up in a long-polling incremental fetch, alone.
        assert not produce(bootstrap, topic, [{"value": b"x", "partition": 1}]).errors
        conn.send_request(_fetch(session_id, 2, max_wait_ms=5000))
        changed = _partitions(conn.recv_response(FetchResponse))
        assert set(changed) == {1}
        assert changed[1].high_watermark == 1 and changed[1].records

        # The client moves partition 1 past the record and forgets partition 2.
        conn.send_request(
            _fetch(
                session_id,
                3,
                [_wanted(topic, range(1, 2), fetch_offset=1)],
                [ForgottenTopic(topic=topic, partitions=(i32(2),))],
            )
        )
        assert _partitions(conn.recv_response(FetchResponse)) == {}

        # A write to the forgotten partition is not reported; to partition 0 it is.
        assert not produce(bootstrap, topic, [{"value": b"y", "partition": 2}]).errors
        assert not produce(bootstrap, topic, [{"value": b"z", "partition": 0}]).errors
        conn.send_request(_fetch(session_id, 4, max_wait_ms=5000))
        assert set(_partitions(conn.recv_response(FetchResponse))) == {0}

        # A full fetch naming the session closes it: its id is then unknown.
        conn.send_request(_fetch(session_id, -1, [_wanted(topic, range(1))]))
        assert conn.recv_response(FetchResponse).session_id == 0
        conn.send_request(_fetch(session_id, 5))
        closed = conn.recv_response(FetchResponse)
        assert closed.error_code == ErrorCode.fetch_session_id_not_found


def test_no_sessions_with_zero_cache_slots(broker_factory, new_topic):
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    with RawConnection(broker.bootstrap) as conn:
        conn.send_request(_fetch(0, 0, [_wanted(topic, range(2))]))
        full = conn.recv_response(FetchResponse)
        assert full.error_code == ErrorCode.none and full.session_id == 0
        assert set(_partitions(full)) == {0, 1}
