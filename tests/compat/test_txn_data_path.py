"""Transactions on the partition data path, with a real broker and real clients.

No transactional producer is used (the coordinator lives elsewhere): a restore-mode topic
takes hand-built transactional batches and COMMIT/ABORT markers at exact offsets, leaving
one transaction open. confluent-kafka consumers then read it under read_committed (only the
committed records, up to the last stable offset) and read_uncommitted (every data record);
ListOffsets and Fetch report the LSO and the aborted transactions; a WriteTxnMarkers request
(API 27) commits the open transaction; a restart keeps all of it."""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
import uuid
from typing import Any

from clients import (
    RawConnection,
    create_topic,
    fetch_v12,
    find_transaction_coordinator,
    wait_until,
    watermarks,
)
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from test_restore_mode import produce, set_restore

from raftka.protocol.batch_builder import build_batch, build_end_txn_marker

RESTORE = "raftka.restore.in.progress"
T0 = 1_600_000_000_000
COMMITTED_PID, ABORTED_PID, OPEN_PID = 1000, 2000, 3000
OPEN_EPOCH = 5


def data(offset: int, values: list[bytes], pid: int = -1, epoch: int = -1) -> bytes:
    return build_batch(
        [(None, v) for v in values],
        T0,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0 if pid >= 0 else -1,
        transactional=pid >= 0,
    )


def end_marker(offset: int, pid: int, committed: bool, epoch: int = 0) -> bytes:
    return build_end_txn_marker(pid, epoch, 0, committed, T0, base_offset=offset)


# offset: 0 a0 | 1-2 committed txn | 3-4 aborted txn | 5 COMMIT | 6 ABORT | 7 a1 |
#         8-9 open txn | 10 a2
LAYOUT = [
    data(0, [b"a0"]),
    data(1, [b"c1", b"c2"], COMMITTED_PID, 0),
    data(3, [b"x1", b"x2"], ABORTED_PID, 0),
    end_marker(5, COMMITTED_PID, committed=True),
    end_marker(6, ABORTED_PID, committed=False),
    data(7, [b"a1"]),
    data(8, [b"o1", b"o2"], OPEN_PID, OPEN_EPOCH),
    data(10, [b"a2"]),
]
OPEN_TXN_START = 8
LOG_END = 11
COMMITTED_VALUES = [b"a0", b"c1", b"c2", b"a1"]
ALL_DATA_VALUES = [b"a0", b"c1", b"c2", b"x1", b"x2", b"a1", b"o1", b"o2", b"a2"]


def read_values(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    """Values a consumer with `isolation` reads from offset 0: the first `count`, then
    whatever else arrives within a few more polls (there should be nothing)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=30)
        while len(got) < count and datetime.datetime.now() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        for _ in range(4):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        return got
    finally:
        consumer.close()


def list_offset_latest(bootstrap: str, topic: str, isolation_level: int) -> int:
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.static.primitive import i8, i32, i64

    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(isolation_level),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),),
            ),
        ),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        response = conn.recv_response(ListOffsetsResponse)
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none, part
    return int(part.offset)


def fetch_committed(bootstrap: str, topic: str, offset: int, max_wait_s: float = 0) -> Any:
    """Partition 0 of a read_committed Fetch v12 from `offset`, long-polling up to
    `max_wait_s` for a byte."""
    from kio.schema.fetch.v12.response import FetchResponse
    from kio.static.primitive import i8

    request = dataclasses.replace(
        fetch_v12(topic, offset),
        isolation_level=i8(1),
        max_wait=datetime.timedelta(seconds=max_wait_s),
    )
    with RawConnection(bootstrap, timeout=max_wait_s + 30) as conn:
        conn.send_request(request)
        response = conn.recv_response(FetchResponse)
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, part
    return part


def write_markers(
    bootstrap: str, topic: str, partition: int, pid: int, epoch: int, committed: bool
) -> ErrorCode:
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )
    from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
    from kio.static.primitive import i16, i32, i64

    request = WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                transaction_result=committed,
                topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(i32(partition),)),),
                coordinator_epoch=i32(0),
            ),
        )
    )
    with RawConnection(bootstrap, timeout=60) as conn:
        conn.send_request(request)
        response = conn.recv_response(WriteTxnMarkersResponse)
    (result,) = response.markers
    assert result.producer_id == pid
    return ErrorCode(result.topics[0].partitions[0].error_code)


def restored_topic(bootstrap: str) -> str:
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, config={RESTORE: "true"})
    answer = wait_until(
        lambda: (
            (a := produce(bootstrap, topic, b"".join(LAYOUT)))
            and a.error_code != ErrorCode.not_leader_or_follower
            and a
        ),
        30,
        f"{topic}-0 to take the restored batches",
    )
    assert answer.error_code == ErrorCode.none, answer
    set_restore(bootstrap, topic, on=False)
    return topic


def check_open_transaction_state(bootstrap: str, topic: str) -> None:
    assert list_offset_latest(bootstrap, topic, 1) == OPEN_TXN_START
    assert list_offset_latest(bootstrap, topic, 0) == LOG_END
    # librdkafka asks ListOffsets with its default isolation.level=read_committed.
    assert watermarks(bootstrap, topic) == (0, OPEN_TXN_START)
    part = fetch_committed(bootstrap, topic, 0)
    assert part.high_watermark == LOG_END
    assert part.last_stable_offset == OPEN_TXN_START
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [
        (ABORTED_PID, 3)
    ]
    assert read_values(bootstrap, topic, "read_committed", 4) == COMMITTED_VALUES


def test_read_committed_sees_committed_records_up_to_the_lso(broker_factory) -> None:
    broker = broker_factory()
    topic = restored_topic(broker.bootstrap)
    check_open_transaction_state(broker.bootstrap, topic)
    assert read_values(broker.bootstrap, topic, "read_uncommitted", 9) == ALL_DATA_VALUES

    broker.restart()  # .txnindex, producer snapshot and the open transaction survive
    check_open_transaction_state(broker.bootstrap, topic)

    # A fenced producer's marker is refused and writes nothing.
    stale = write_markers(broker.bootstrap, topic, 0, OPEN_PID, OPEN_EPOCH - 1, True)
    assert stale == ErrorCode.invalid_producer_epoch
    assert list_offset_latest(broker.bootstrap, topic, 0) == LOG_END
    assert list_offset_latest(broker.bootstrap, topic, 1) == OPEN_TXN_START

    # A read_committed long poll at the LSO wakes when the commit moves it: its answer
    # holds the open transaction's records (had it only timed out, it would hold none).
    polled: list[Any] = []
    poller = threading.Thread(
        target=lambda: polled.append(fetch_committed(broker.bootstrap, topic, OPEN_TXN_START, 60))
    )
    poller.start()
    time.sleep(1)  # let the poll reach the broker and wait there first
    assert write_markers(broker.bootstrap, topic, 0, OPEN_PID, OPEN_EPOCH, True) == ErrorCode.none
    poller.join(90)
    assert polled and polled[0].records, "the long poll did not see the committed records"
    assert polled[0].last_stable_offset == LOG_END + 1
    assert list_offset_latest(broker.bootstrap, topic, 1) == LOG_END + 1
    assert read_values(broker.bootstrap, topic, "read_committed", 7) == [
        *COMMITTED_VALUES,
        b"o1",
        b"o2",
        b"a2",
    ]


def test_write_txn_markers_for_unknown_partitions(broker_factory) -> None:
    broker = broker_factory()
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, topic)
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    assert write_markers(broker.bootstrap, missing, 0, 1, 0, True) == (
        ErrorCode.unknown_topic_or_partition
    )
    assert write_markers(broker.bootstrap, topic, 7, 1, 0, False) == (
        ErrorCode.unknown_topic_or_partition
    )


def transactional_produce(bootstrap: str, topic: str, transactional_id: str | None) -> Any:
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v9.response import ProduceResponse

    records = build_batch(
        [(None, b"t")], T0, producer_id=77, producer_epoch=0, base_sequence=0, transactional=True
    )
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=15),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    with RawConnection(bootstrap, timeout=30) as conn:
        conn.send_request(request)
        response = conn.recv_response(ProduceResponse)
    return response.responses[0].partition_responses[0]


def test_transactional_produce_needs_an_id_and_the_coordinator(broker_factory) -> None:
    broker = broker_factory()
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, topic)
    wait_until(lambda: list_offset_latest(broker.bootstrap, topic, 0) == 0, 30, f"{topic}-0 led")
    answer = transactional_produce(broker.bootstrap, topic, None)
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed, answer
    # No coordinator has added the partition to a transaction: refused, nothing written.
    find_transaction_coordinator(broker.bootstrap, "tx-1")
    answer = transactional_produce(broker.bootstrap, topic, "tx-1")
    assert answer.error_code == ErrorCode.invalid_txn_state, answer
    assert list_offset_latest(broker.bootstrap, topic, 0) == 0


def test_transactions_replicate_across_a_cluster(cluster_factory) -> None:
    """Markers and transactional batches replicate as Raft entries; the leader answers the
    LSO and aborted transactions, and a marker written through it commits on a majority."""
    from test_cluster import partition_state, state_from_any

    cluster = cluster_factory()
    topic = f"txn-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap, topic, config={RESTORE: "true"}, replication_factor=3)
    state = wait_until(
        lambda: (s := state_from_any(cluster.nodes, topic)) and len(s["isr"]) == 3 and s,
        30,
        f"{topic}: a leader and 3 in-sync replicas",
    )
    (node,) = [n for n in cluster.nodes if n.node_id == state["leader"]]
    assert partition_state(node.bootstrap, topic)["leader"] == node.node_id
    leader = str(node.bootstrap)
    answer = produce(leader, topic, b"".join(LAYOUT))
    assert answer.error_code == ErrorCode.none, answer
    set_restore(cluster.bootstrap, topic, on=False)

    check_open_transaction_state(leader, topic)

    # A new leader rebuilt the same transaction state from the replicated batches.
    node.kill()
    state = wait_until(
        lambda: (
            (s := state_from_any(cluster.nodes, topic))
            and s["leader"] not in (None, -1, node.node_id)
            and s
        ),
        60,
        f"{topic}: a new leader",
    )
    (successor,) = [n for n in cluster.nodes if n.node_id == state["leader"]]
    leader = str(successor.bootstrap)
    wait_until(
        lambda: list_offset_latest(leader, topic, 0) >= LOG_END, 30, "the new leader to answer"
    )
    assert list_offset_latest(leader, topic, 1) == OPEN_TXN_START
    part = fetch_committed(leader, topic, 0)
    assert part.last_stable_offset == OPEN_TXN_START
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [
        (ABORTED_PID, 3)
    ]
    node.start()

    assert write_markers(leader, topic, 0, OPEN_PID, OPEN_EPOCH, True) == ErrorCode.none
    end = list_offset_latest(leader, topic, 0)
    assert list_offset_latest(leader, topic, 1) == end
    assert read_values(cluster.bootstrap, topic, "read_committed", 7) == [
        *COMMITTED_VALUES,
        b"o1",
        b"o2",
        b"a2",
    ]
