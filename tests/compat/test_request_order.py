"""Requests of one connection take effect in the order they arrived (Kafka reads one request
per connection at a time, and clients rely on it): a later OffsetCommit is never overwritten
by an earlier one, and an idempotent producer's pipelined batches land in request order."""

from __future__ import annotations

import io
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from clients import (
    RawConnection,
    create_topic,
    find_transaction_coordinator,
    retry_retriable,
    wait_until,
)
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from batches import encode_batch  # noqa: E402

ASYNC_COMMITS = 300
LAST_OFFSET = 1000


def _group() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


def test_async_commits_then_a_sync_commit_keep_the_last(
    broker_factory: Any, new_topic: Any
) -> None:
    """librdkafka sends async commits back to back on the coordinator's connection; the
    synchronous commit sent after them must be the one that stays."""
    bootstrap = broker_factory({"log.flush.interval.messages": "1"}).bootstrap
    topic = new_topic(partitions=1, bootstrap=bootstrap)
    group = _group()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        # A first synchronous commit: the coordinator is known and ready before the burst.
        wait_until(
            lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False),
            30,
            "a first synchronous commit to succeed",
        )
        for offset in range(1, ASYNC_COMMITS + 1):
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
        consumer.commit(offsets=[TopicPartition(topic, 0, LAST_OFFSET)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.error is None, committed.error
        assert committed.offset == LAST_OFFSET, (
            f"committed offset {committed.offset} after commits 1..{ASYNC_COMMITS} and then "
            f"{LAST_OFFSET} on one connection: an earlier commit overwrote the last one"
        )
    finally:
        consumer.close()


# -- raw wire: requests written back to back on one socket ------------------------------------

COMMIT_VERSION = 8


def _commit_request(group: str, topic: str, offset: int) -> Any:
    from kio.schema.offset_commit.v8 import request as module

    return module.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            module.OffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    module.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def _find_group_coordinator(bootstrap: str, group: str) -> None:
    """FindCoordinator for the group, as clients ask before committing (it creates
    `__consumer_offsets` on a fresh broker), retried until answered without error."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
    from kio.static.primitive import i8

    def send() -> Any:
        with RawConnection(bootstrap) as conn:
            conn.send_request(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
            return conn.recv_response(FindCoordinatorResponse)

    retry_retriable(send, retriable={15})


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from kio.schema.offset_fetch.v7 import request, response

    def send() -> Any:
        with RawConnection(bootstrap) as conn:
            conn.send_request(
                request.OffsetFetchRequest(
                    group_id=group,
                    topics=(request.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
                    require_stable=False,
                )
            )
            return conn.recv_response(response.OffsetFetchResponse)

    answer = retry_retriable(send)
    assert answer.error_code == 0, answer
    return int(answer.topics[0].partitions[0].committed_offset)


def test_pipelined_offset_commits_apply_in_request_order(bootstrap: str, new_topic: Any) -> None:
    """Many OffsetCommits written at once, then an OffsetFetch on the same socket: the fetch
    sees the last commit, and the group keeps it."""
    from kio.schema.offset_commit.v8 import response as commit_response
    from kio.schema.offset_fetch.v7 import request as fetch_request
    from kio.schema.offset_fetch.v7 import response as fetch_response

    topic = new_topic(partitions=1)
    group = _group()
    _find_group_coordinator(bootstrap, group)
    # The coordinator is ready: one commit answered without a retriable error.
    with RawConnection(bootstrap) as conn:

        def first() -> Any:
            conn.send_request(_commit_request(group, topic, 0))
            return conn.recv_response(commit_response.OffsetCommitResponse)

        retry_retriable(first)
    count = 200
    with RawConnection(bootstrap, timeout=30) as conn:
        requests = [_commit_request(group, topic, offset) for offset in range(1, count + 1)]
        requests.append(
            fetch_request.OffsetFetchRequest(
                group_id=group,
                topics=(fetch_request.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
                require_stable=False,
            )
        )
        first_id = _send_at_once(conn, requests)
        for correlation_id in range(first_id, first_id + count):
            conn.correlation_id = correlation_id
            answer = conn.recv_response(commit_response.OffsetCommitResponse)
            assert answer.topics[0].partitions[0].error_code == 0, answer
        conn.correlation_id = first_id + count
        fetched = conn.recv_response(fetch_response.OffsetFetchResponse)
    assert fetched.topics[0].partitions[0].committed_offset == count, (
        f"OffsetFetch after commits 1..{count} on one connection saw "
        f"{fetched.topics[0].partitions[0].committed_offset}"
    )
    # Every commit was answered, so applied: the group keeps the last one.
    assert _committed(bootstrap, group, topic) == count


def _send_at_once(conn: RawConnection, requests: list[Any]) -> int:
    """Write the requests with one send, as a pipelining client does; returns the first
    correlation id (the others follow it)."""
    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32

    first_id = conn.correlation_id + 1
    frames = bytearray()
    for request in requests:
        conn.correlation_id += 1
        header_cls = request.__header_schema__
        header = header_cls(
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__),
            correlation_id=i32(conn.correlation_id),
            client_id="raftka-compat",
        )
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        frames += struct.pack(">i", buf.tell()) + buf.getvalue()
    conn.send_raw(bytes(frames))
    return first_id


# -- Produce: an idempotent producer's pipelined requests ----------------------------------------

PRODUCE_REQUESTS = 120
LARGE_VALUE_BYTES = 100 * 1024  # over produce's threshold for recompressing in a worker thread


def _init_producer_id(bootstrap: str, transactional_id: str | None = None) -> tuple[int, int]:
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.init_producer_id.v4.response import InitProducerIdResponse

    def send() -> Any:
        with RawConnection(bootstrap) as conn:
            conn.send_request(
                InitProducerIdRequest(
                    transactional_id=transactional_id,
                    transaction_timeout=datetime.timedelta(seconds=60),
                )
            )
            return conn.recv_response(InitProducerIdResponse)

    if transactional_id is not None:
        find_transaction_coordinator(bootstrap, transactional_id)
    answer = retry_retriable(send)
    assert answer.error_code == 0, answer
    return int(answer.producer_id), int(answer.producer_epoch)


def _produce_request(topic: str, records: bytes, transactional_id: str | None = None) -> Any:
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )


def test_pipelined_idempotent_produce_lands_in_request_order(
    bootstrap: str, new_topic: Any
) -> None:
    """Produce requests of one idempotent producer written at once, one batch each: every one
    is accepted and their offsets follow request order, also when some batches are
    recompressed in a worker thread (the topic stores gzip) while later ones arrive."""
    from kio.schema.produce.v9.response import ProduceResponse

    topic = new_topic(partitions=1, config={"compression.type": "gzip"})
    producer_id, epoch = _init_producer_id(bootstrap)
    requests = []
    for sequence in range(PRODUCE_REQUESTS):
        size = LARGE_VALUE_BYTES if sequence % 7 == 3 else 16
        value = f"{sequence:08d}".encode().ljust(size, b".")
        batch = encode_batch(
            [(None, value)],
            base_timestamp=int(time.time() * 1000),
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
        )
        requests.append(_produce_request(topic, batch))
    with RawConnection(bootstrap, timeout=60) as conn:
        first_id = _send_at_once(conn, requests)
        offsets = []
        for correlation_id in range(first_id, first_id + PRODUCE_REQUESTS):
            conn.correlation_id = correlation_id
            answer = conn.recv_response(ProduceResponse)
            partition = answer.responses[0].partition_responses[0]
            assert partition.error_code == 0, (
                f"request {correlation_id - first_id} (sequence {correlation_id - first_id}) "
                f"refused: {partition}"
            )
            offsets.append(int(partition.base_offset))
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
        f"base offsets do not follow request order: {offsets}"
    )


def _add_partition_to_txn(
    bootstrap: str, transactional_id: str, producer: tuple[int, int], topic: str
) -> None:
    from kio.schema.add_partitions_to_txn.v3.request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    from kio.schema.add_partitions_to_txn.v3.response import AddPartitionsToTxnResponse

    def send() -> Any:
        with RawConnection(bootstrap) as conn:
            conn.send_request(
                AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=transactional_id,
                    v3_and_below_producer_id=producer[0],
                    v3_and_below_producer_epoch=producer[1],
                    v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),
                )
            )
            return conn.recv_response(AddPartitionsToTxnResponse)

    answer = retry_retriable(send, retriable={14, 15, 16, 51})
    (result,) = answer.results_by_topic_v3_and_below[0].results_by_partition
    assert result.partition_error_code == 0, answer


def test_pipelined_transactional_produce_lands_in_request_order(broker_factory: Any) -> None:
    """A transactional producer's first Produce requests to a partition in a transaction,
    written at once: the first batch is verified with the transaction coordinator (KIP-890)
    before it is appended, and the batches pipelined behind it still land after it, in
    sequence order, instead of being refused as out of order."""
    from kio.schema.produce.v9.response import ProduceResponse

    bootstrap = broker_factory({"transaction.state.log.num.partitions": "5"}).bootstrap
    topic = f"order-txn-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic)
    transactional_id = f"order-{uuid.uuid4().hex[:10]}"
    producer_id, epoch = _init_producer_id(bootstrap, transactional_id)
    _add_partition_to_txn(bootstrap, transactional_id, (producer_id, epoch), topic)
    count = 5
    requests = [
        _produce_request(
            topic,
            encode_batch(
                [(None, f"{sequence}".encode())],
                base_timestamp=int(time.time() * 1000),
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                attributes=0x10,  # transactional
            ),
            transactional_id,
        )
        for sequence in range(count)
    ]
    with RawConnection(bootstrap, timeout=60) as conn:
        first_id = _send_at_once(conn, requests)
        offsets = []
        for correlation_id in range(first_id, first_id + count):
            conn.correlation_id = correlation_id
            answer = conn.recv_response(ProduceResponse)
            partition = answer.responses[0].partition_responses[0]
            assert partition.error_code == 0, (
                f"transactional batch {correlation_id - first_id} refused: {partition}"
            )
            offsets.append(int(partition.base_offset))
    assert offsets == sorted(offsets) and len(set(offsets)) == count, offsets


# -- admin: CreateTopics then a request about the new topic ---------------------------------------


def test_request_after_create_topics_sees_the_topic(bootstrap: str) -> None:
    """CreateTopics and DescribeConfigs of the new topic written at once: DescribeConfigs
    finds the topic, as it would if the client had waited for the first answer."""
    import datetime

    from kio.schema.create_topics.v7 import request as create
    from kio.schema.create_topics.v7.response import CreateTopicsResponse
    from kio.schema.describe_configs.v4 import request as describe
    from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
    from kio.static.primitive import i8, i16, i32

    topic = f"order-admin-{uuid.uuid4().hex[:10]}"
    requests = [
        create.CreateTopicsRequest(
            topics=(
                create.CreatableTopic(
                    name=topic,
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(create.CreatableTopicConfig(name="retention.ms", value="123456"),),
                ),
            ),
            timeout=datetime.timedelta(seconds=30),
        ),
        describe.DescribeConfigsRequest(
            resources=(
                describe.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=topic, configuration_keys=("retention.ms",)
                ),
            ),
        ),
    ]
    with RawConnection(bootstrap, timeout=60) as conn:
        first_id = _send_at_once(conn, requests)
        conn.correlation_id = first_id
        created = conn.recv_response(CreateTopicsResponse)
        conn.correlation_id = first_id + 1
        described = conn.recv_response(DescribeConfigsResponse)
    assert created.topics[0].error_code == 0, created
    (result,) = described.results
    assert result.error_code == 0, (
        f"DescribeConfigs sent right after CreateTopics of {topic} did not find it: {result}"
    )
    assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "123456")], result
