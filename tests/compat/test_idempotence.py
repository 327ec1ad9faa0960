"""Idempotent producers (KIP-98): InitProducerId and sequence checks on Produce, with real
clients and with hand-built batches over a raw socket, across broker restarts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from clients import RawConnection, consume, produce, retry_retriable, watermarks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from batches import encode_batch  # noqa: E402

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


# -- raw protocol helpers ------------------------------------------------------------------


def init_producer_id(bootstrap: str, transactional_id: str | None = None) -> tuple[int, int, int]:
    """(error code, producer id, epoch) from an InitProducerId v4 request, retried while
    the broker's producer id manager or transaction coordinator is not ready (as Kafka
    answers a fresh broker's first requests)."""
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.init_producer_id.v4.response import InitProducerIdResponse

    def send() -> InitProducerIdResponse:
        with RawConnection(bootstrap) as conn:
            conn.send_request(
                InitProducerIdRequest(
                    transactional_id=transactional_id,
                    transaction_timeout=datetime.timedelta(seconds=60),
                )
            )
            return conn.recv_response(InitProducerIdResponse)

    resp = retry_retriable(send)
    return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


def idempotent_batch(
    producer_id: int, epoch: int, seq: int, values: list[bytes], transactional: bool = False
) -> bytes:
    return encode_batch(
        [(None, v) for v in values],
        base_timestamp=int(time.time() * 1000),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=0x10 if transactional else 0,
    )


def produce_raw(bootstrap: str, topic: str, records: bytes, partition: int = 0) -> tuple[int, int]:
    """(error code, base offset) of a Produce v9 request with acks=all."""
    import datetime

    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.schema.produce.v9.response import ProduceResponse

    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        resp = conn.recv_response(ProduceResponse)
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


# -- InitProducerId --------------------------------------------------------------------------


def test_init_producer_id_gives_fresh_ids(bootstrap):
    ids = set()
    for _ in range(3):
        error, producer_id, epoch = init_producer_id(bootstrap)
        assert error == 0
        assert producer_id >= 0 and epoch == 0
        ids.add(producer_id)
    assert len(ids) == 3


def test_producer_ids_are_not_reused_after_restart(broker_factory):
    broker = broker_factory()
    before = {init_producer_id(broker.bootstrap)[1] for _ in range(3)}
    broker.kill()
    broker.start()
    after = {init_producer_id(broker.bootstrap)[1] for _ in range(3)}
    assert not before & after
    broker.restart()
    again = {init_producer_id(broker.bootstrap)[1] for _ in range(3)}
    assert not (before | after) & again


# -- sequence checks over a raw socket -------------------------------------------------------


def test_duplicate_batch_is_stored_once(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    _err, pid, epoch = init_producer_id(bootstrap)
    first = idempotent_batch(pid, epoch, 0, [b"a", b"b", b"c"])
    assert produce_raw(bootstrap, topic, first) == (0, 0)
    assert produce_raw(bootstrap, topic, idempotent_batch(pid, epoch, 3, [b"d"])) == (0, 3)
    # The very same batch again (a client retry): same base offset, nothing appended.
    assert produce_raw(bootstrap, topic, first) == (0, 0)
    assert watermarks(bootstrap, topic, 0)[1] == 4
    got = consume(bootstrap, topic, [0], count=4)[0]
    assert [m.value() for m in got] == [b"a", b"b", b"c", b"d"]


def test_out_of_order_sequence_is_rejected(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    _err, pid, epoch = init_producer_id(bootstrap)
    assert produce_raw(bootstrap, topic, idempotent_batch(pid, epoch, 0, [b"a"]))[0] == 0
    error, _offset = produce_raw(bootstrap, topic, idempotent_batch(pid, epoch, 5, [b"gap"]))
    assert error == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A new epoch of a known producer must start at 0; an older epoch is fenced.
    error, _offset = produce_raw(bootstrap, topic, idempotent_batch(pid, epoch + 1, 1, [b"x"]))
    assert error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_raw(bootstrap, topic, idempotent_batch(pid, epoch + 1, 0, [b"b"]))[0] == 0
    error, _offset = produce_raw(bootstrap, topic, idempotent_batch(pid, epoch, 1, [b"old"]))
    assert error == INVALID_PRODUCER_EPOCH
    assert watermarks(bootstrap, topic, 0)[1] == 2


def test_transactional_batch_without_transactional_id_is_refused(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    _err, pid, epoch = init_producer_id(bootstrap)
    batch = idempotent_batch(pid, epoch, 0, [b"t"], transactional=True)
    # Kafka refuses transactional records in a request without a transactional id.
    assert produce_raw(bootstrap, topic, batch)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert watermarks(bootstrap, topic, 0)[1] == 0


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_duplicate_is_recognised_after_restart(broker_factory, new_topic, stop):
    broker = broker_factory()
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    _err, pid, epoch = init_producer_id(broker.bootstrap)
    batches = [idempotent_batch(pid, epoch, 2 * i, [b"%d" % i, b"x"]) for i in range(6)]
    offsets = [produce_raw(broker.bootstrap, topic, b) for b in batches]
    assert offsets == [(0, 2 * i) for i in range(6)]
    if stop == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    for i in range(1, 6):  # the last five batches are remembered
        assert produce_raw(broker.bootstrap, topic, batches[i]) == (0, 2 * i)
    assert watermarks(broker.bootstrap, topic, 0)[1] == 12
    error, _ = produce_raw(broker.bootstrap, topic, idempotent_batch(pid, epoch, 13, [b"gap"]))
    assert error == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_raw(broker.bootstrap, topic, idempotent_batch(pid, epoch, 12, [b"n"])) == (0, 12)


# -- real clients ----------------------------------------------------------------------------


def test_librdkafka_idempotent_producer_exactly_once_in_order(bootstrap, new_topic):
    topic = new_topic(partitions=3)
    n = 20_000
    records = [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 3} for i in range(n)
    ]
    res = produce(
        bootstrap,
        topic,
        records,
        timeout=120,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
    )
    assert not res.errors, res.errors[:3]
    acked = res.offsets_by_partition()
    assert sum(len(v) for v in acked.values()) == n
    got = consume(bootstrap, topic, [0, 1, 2], count=n, timeout=120)
    for p in range(3):
        expected = [r["value"] for r in records if r["partition"] == p]
        assert [m.value() for m in got[p]] == expected, f"partition {p}"
        assert [m.offset() for m in got[p]] == acked[p]
        assert watermarks(bootstrap, topic, p)[1] == len(expected)
