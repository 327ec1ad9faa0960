"""Restore mode (`raftka.restore.in.progress=true`): raw Produce v9 requests carrying batches
at their own offsets, as `raftka restore` sends them, on one broker and on a 3-node cluster;
confluent-kafka then reads back exactly what was written."""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import pytest
from clients import (
    RawConnection,
    create_topic,
    fetch_v12,
    make_producer,
    wait_until,
    watermarks,
    zigzag_varint,
)
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from test_cluster import partition_state, state_from_any

RESTORE = "raftka.restore.in.progress"
PID = 123456789
EPOCH = 3
T0 = 1_600_000_000_000  # a fixed past time: restored timestamps are kept verbatim
HEADER = struct.Struct(">qiibIhiqqqhii")
TRANSACTIONAL = 0x10
CONTROL = 0x20


def _blob(value: bytes | None) -> bytes:
    return zigzag_varint(-1) if value is None else zigzag_varint(len(value)) + value


@dataclass(frozen=True)
class Rec:
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def batch(
    base_offset: int,
    records: Sequence[Rec],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch as a backup holds it: its own offsets, timestamps and headers."""
    first = records[0].timestamp
    body = bytearray()
    for delta, rec in enumerate(records):
        one = bytearray(b"\x00")
        one += zigzag_varint(rec.timestamp - first) + zigzag_varint(delta)
        one += _blob(rec.key) + _blob(rec.value) + zigzag_varint(len(rec.headers))
        for name, value in rec.headers:
            one += _blob(name.encode()) + _blob(value)
        body += zigzag_varint(len(one)) + one
    delta = len(records) - 1 if last_offset_delta is None else last_offset_delta
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            delta,
            first,
            max(r.timestamp for r in records),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + body
    )
    return (
        struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc))
        + after_crc
    )


def control(base_offset: int, control_type: int, **kwargs: Any) -> bytes:
    key = struct.pack(">hh", 0, control_type)
    return batch(
        base_offset,
        [Rec(T0, key, b"\x00\x00\x00\x00\x00\x00")],
        attributes=CONTROL | kwargs.pop("attributes", 0),
        **kwargs,
    )


def produce(bootstrap: str, topic: str, records: bytes) -> Any:
    """The partition response of one Produce v9 (acks=all) to partition 0 of `topic`."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v9.response import ProduceResponse

    request = ProduceRequest(
        transactional_id=None,
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


def fetch_headers(bootstrap: str, topic: str, offset: int) -> list[tuple[int, ...]]:
    """Batch headers (Kafka's field order) of partition 0 from `offset`, by a raw Fetch."""
    from kio.schema.fetch.v12.response import FetchResponse

    request = fetch_v12(topic, offset)
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        response = conn.recv_response(FetchResponse)
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, part.error_code
    data = bytes(part.records or b"")
    headers = []
    pos = 0
    while len(data) - pos >= HEADER.size:
        header = HEADER.unpack_from(data, pos)
        headers.append(header)
        pos += header[1] + 12
    return headers


def set_restore(bootstrap: str, topic: str, on: bool) -> None:
    entry = (
        ConfigEntry(RESTORE, "true", incremental_operation=AlterConfigOpType.SET)
        if on
        else ConfigEntry(RESTORE, None, incremental_operation=AlterConfigOpType.DELETE)
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def produce_once_out_of_restore(leader: Callable[[], str], topic: str, records: bytes) -> Any:
    """Produce `records` as a client would, once the leader has applied the end of restore
    mode (it applies config changes from the metadata log a moment after the admin call
    returns; until then it refuses a batch at offset 0 and writes nothing). The leader is
    looked up again for every attempt, as a client does: on a loaded machine an election
    may move it meanwhile, and the former leader answers NOT_LEADER_OR_FOLLOWER."""
    answer = wait_until(
        lambda: (
            (a := produce(leader(), topic, records))
            and a.error_code != ErrorCode.not_leader_or_follower
            and not (a.error_message or "").startswith("restore:")
            and a
        ),
        30,
        f"the leader of {topic}-0 to take a client write",
    )
    assert answer.error_code == ErrorCode.none, answer
    return answer


def restore_config(bootstrap: str, topic: str) -> tuple[str, bool]:
    """(value, is_default) of the restore flag as DescribeConfigs reports it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    entry = entries[RESTORE]
    return entry.value, entry.is_default


def read_all(bootstrap: str, topic: str, start: int, count: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        got: list[Any] = []
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=30)
        while len(got) < count and datetime.datetime.now() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
        return got
    finally:
        consumer.close()


@dataclass
class Target:
    """Where the test talks: `bootstrap` for clients, `leader` for raw Produce/Fetch."""

    bootstrap: str
    leader: Callable[[str], str]
    replication_factor: int


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "single":
        broker = request.getfixturevalue("broker_factory")()
        return Target(broker.bootstrap, lambda topic: broker.bootstrap, 1)
    cluster = request.getfixturevalue("cluster_factory")()

    def leader(topic: str) -> str:
        state = wait_until(
            lambda: (s := state_from_any(cluster.nodes, topic)) and len(s["isr"]) == 3 and s,
            30,
            f"{topic}: a leader and 3 in-sync replicas",
        )
        (node,) = [n for n in cluster.nodes if n.node_id == state["leader"]]
        assert partition_state(node.bootstrap, topic)["leader"] == node.node_id
        return str(node.bootstrap)

    return Target(cluster.bootstrap, leader, 3)


def restore_topic(target: Target) -> tuple[str, str]:
    topic = f"restore-{uuid.uuid4().hex[:10]}"
    create_topic(
        target.bootstrap,
        topic,
        config={RESTORE: "true", "message.timestamp.type": "LogAppendTime"},
        replication_factor=target.replication_factor,
    )
    return topic, target.leader(topic)


def test_restore_keeps_offsets_timestamps_headers_and_producer_ids(target: Target) -> None:
    topic, leader = restore_topic(target)
    first = batch(
        0,
        [
            Rec(T0, b"k0", b"v0", (("trace", b"a"),)),
            Rec(T0 + 5, b"k1", b"v1", (("trace", b"b"), ("n", b"1"))),
            Rec(T0 + 10, None, b"v2"),
        ],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=0,
    )
    second = batch(
        3,
        [Rec(T0 + 20, b"k3", b"v3"), Rec(T0 + 21, b"k4", None, (("h", b""),))],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=3,
    )
    answer = produce(leader, topic, first + second)  # two batches in one request
    assert answer.error_code == ErrorCode.none, answer
    assert answer.base_offset == 0
    # A transactional batch and its COMMIT marker, as a backup of a transaction holds them.
    transaction = batch(
        5,
        [Rec(T0 + 30, b"k5", b"v5")],
        producer_id=PID + 1,
        producer_epoch=0,
        base_sequence=0,
        attributes=TRANSACTIONAL,
    )
    marker = control(6, 1, producer_id=PID + 1, producer_epoch=0, attributes=TRANSACTIONAL)
    answer = produce(leader, topic, transaction + marker)
    assert answer.error_code == ErrorCode.none, answer
    assert answer.base_offset == 5

    # A batch at the wrong offset: refused, nothing written.
    answer = produce(
        leader, topic, batch(7, [Rec(T0, None, b"x")]) + batch(9, [Rec(T0, None, b"y")])
    )
    assert answer.error_code == ErrorCode.invalid_record, answer
    assert answer.error_message == f"restore: batch starts at offset 9 but {topic}-0 ends at 8"
    answer = produce(leader, topic, batch(3, [Rec(T0, None, b"x")]))
    assert answer.error_code == ErrorCode.invalid_record, answer
    assert answer.error_message == f"restore: batch starts at offset 3 but {topic}-0 ends at 7"
    # KRAFT_VOTERS would change the replica set: refused, nothing written.
    answer = produce(leader, topic, batch(7, [Rec(T0, None, b"x")]) + control(8, 6))
    assert answer.error_code == ErrorCode.invalid_record, answer
    assert "KRAFT_VOTERS" in answer.error_message
    # A truncated trailing batch.
    answer = produce(leader, topic, first[:-3])
    assert answer.error_code == ErrorCode.corrupt_message, answer
    assert watermarks(target.bootstrap, topic) == (0, 7)

    stored = fetch_headers(leader, topic, 0)
    # (baseOffset, ..., producerId, producerEpoch, baseSequence, count) per batch
    assert [(h[0], h[9], h[10], h[11], h[12]) for h in stored] == [
        (0, PID, EPOCH, 0, 3),
        (3, PID, EPOCH, 3, 2),
        (5, PID + 1, 0, 0, 1),
        (6, PID + 1, 0, -1, 1),
    ]
    assert [h[5] & 0x08 for h in stored] == [0, 0, 0, 0], "no batch was restamped"

    assert restore_config(target.bootstrap, topic) == ("true", False)
    set_restore(target.bootstrap, topic, on=False)
    assert restore_config(target.bootstrap, topic) == ("false", True)
    messages = read_all(target.bootstrap, topic, 0, 6)
    assert [
        (m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers() or []) for m in messages
    ] == [
        (0, T0, b"k0", b"v0", [("trace", b"a")]),
        (1, T0 + 5, b"k1", b"v1", [("trace", b"b"), ("n", b"1")]),
        (2, T0 + 10, None, b"v2", []),
        (3, T0 + 20, b"k3", b"v3", []),
        (4, T0 + 21, b"k4", None, [("h", b"")]),
        (5, T0 + 30, b"k5", b"v5", []),
    ]

    # The producer state learned the restored batches: a retry of the second is a duplicate.
    retry = batch(
        0,
        [Rec(T0 + 20, b"k3", b"v3"), Rec(T0 + 21, b"k4", None, (("h", b""),))],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=3,
    )
    answer = produce_once_out_of_restore(lambda: target.leader(topic), topic, retry)
    assert answer.base_offset == 3
    assert watermarks(target.bootstrap, topic) == (0, 7)

    # A fresh idempotent producer gets a producer id above every restored one.
    producer = make_producer(target.bootstrap, **{"enable.idempotence": True})
    producer.produce(topic, b"fresh", partition=0)
    assert producer.flush(30) == 0
    (fresh,) = fetch_headers(target.leader(topic), topic, 7)
    assert fresh[0] == 7
    assert fresh[9] > PID + 1, fresh


def test_restore_from_offset_above_zero(target: Target) -> None:
    """A backup beginning at F: one LEADER_CHANGE batch spanning [0, F), DeleteRecords(F),
    then the backup's batches from F on."""
    start = 1000
    topic, leader = restore_topic(target)
    span = control(0, 2, last_offset_delta=start - 1)
    answer = produce(leader, topic, span)
    assert answer.error_code == ErrorCode.none, answer
    assert watermarks(target.bootstrap, topic) == (0, start)
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    wanted = TopicPartition(topic, 0, start)
    # The leader keeps what a follower has still to copy: retry until every replica has it.
    wait_until(
        lambda: admin.delete_records([wanted])[wanted].result(timeout=30).low_watermark == start,
        30,
        f"DeleteRecords({start}) to move the log start of {topic}-0",
    )
    assert watermarks(target.bootstrap, topic) == (start, start)

    answer = produce(
        leader, topic, batch(start, [Rec(T0, b"k", b"first"), Rec(T0 + 1, None, b"x")])
    )
    assert answer.error_code == ErrorCode.none, answer
    assert answer.base_offset == start
    assert watermarks(target.bootstrap, topic) == (start, start + 2)
    set_restore(target.bootstrap, topic, on=False)
    messages = read_all(target.bootstrap, topic, start, 2)
    assert [(m.offset(), m.timestamp()[1], m.value()) for m in messages] == [
        (start, T0, b"first"),
        (start + 1, T0 + 1, b"x"),
    ]
    # Out of restore mode a client write is appended as usual, after the restored data.
    answer = produce_once_out_of_restore(
        lambda: target.leader(topic), topic, batch(0, [Rec(T0, None, b"after")])
    )
    assert answer.base_offset == start + 2
    assert watermarks(target.bootstrap, topic) == (start, start + 3)


def test_restored_producer_state_survives_a_leader_change(cluster_factory) -> None:
    """Followers learn producer state from the restored batches they copy: after the leader
    dies, a retry of a restored batch is still recognised as a duplicate."""
    cluster = cluster_factory()
    topic = f"restore-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap, topic, config={RESTORE: "true"}, replication_factor=3)
    state = wait_until(
        lambda: (s := state_from_any(cluster.nodes, topic)) and len(s["isr"]) == 3 and s,
        30,
        f"{topic}: 3 in-sync replicas",
    )
    (old_leader,) = [n for n in cluster.nodes if n.node_id == state["leader"]]
    restored = batch(
        0,
        [Rec(T0, None, b"a"), Rec(T0 + 1, None, b"b")],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=0,
    )
    answer = produce(old_leader.bootstrap, topic, restored)
    assert answer.error_code == ErrorCode.none, answer
    set_restore(cluster.bootstrap, topic, on=False)
    old_leader.kill()
    survivors = [n for n in cluster.nodes if n is not old_leader]
    new_state = wait_until(
        lambda: (s := state_from_any(survivors, topic)) and s["leader"] != old_leader.node_id and s,
        30,
        f"{topic}: a new leader",
    )
    (new_leader,) = [n for n in survivors if n.node_id == new_state["leader"]]

    def survivors_leader() -> str:
        state = state_from_any(survivors, topic)
        assert state and state["leader"] != old_leader.node_id, state
        (node,) = [n for n in survivors if n.node_id == state["leader"]]
        return str(node.bootstrap)

    answer = produce_once_out_of_restore(survivors_leader, topic, restored)
    assert answer.base_offset == 0, "the retry was appended again"
    assert watermarks(new_leader.bootstrap, topic)[1] in (2, 3)  # 3: the new leader's no-op
    old_leader.start()


def test_produce_after_delete_records_to_the_log_end(cluster_factory) -> None:
    """An ordinary replicated topic: once DeleteRecords moves the leader's log start to its
    log end, the leader no longer knows the epoch of the batch before it; the next write
    must still replicate."""
    cluster = cluster_factory()
    topic = f"deleted-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap, topic, replication_factor=3)
    producer = make_producer(cluster.bootstrap, acks="all")
    for value in (b"a", b"b", b"c"):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    end = watermarks(cluster.bootstrap, topic)[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = TopicPartition(topic, 0, end)
    wait_until(
        lambda: admin.delete_records([wanted])[wanted].result(timeout=30).low_watermark == end,
        30,
        f"DeleteRecords({end})",
    )
    producer.produce(topic, b"d", partition=0)
    assert producer.flush(30) == 0
    assert watermarks(cluster.bootstrap, topic) == (end, end + 1)
