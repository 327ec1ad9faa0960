"""Random and mutated request frames never crash the decoder or a handler.

Every frame goes through the same steps as on a connection: prefix, version check,
decode, handler, response encoding. Decoding may refuse a frame (FrameError: the connection
would be closed); nothing else may fail, and stored data must stay readable.
"""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from batches import encode_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer
from running_broker import run_with_broker
from trio.testing import MockClock

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.security.listeners import ListenerSpec, SecurityProtocol
from raftka.broker.security.session import ClientSession
from raftka.broker.server import Broker, Listener
from raftka.broker.services import RequestContext
from raftka.protocol.api import (
    FrameError,
    build,
    decode_request,
    encode_response,
    read_prefix,
    request_type,
)
from raftka.protocol.records import validate_produce_records

TOPIC = "fuzzed"
MAX_VIRTUAL_WAIT_S = 100 * 24 * 3600  # past Kafka's longest max_wait (int32 milliseconds)
AUTOJUMP_AFTER_IDLE_S = 0.25


def _frame(api_key: int, version: int, **values: Any) -> bytes:
    entity = request_type(api_key, version)
    assert entity is not None
    header_type = HeaderV2 if entity.__flexible__ else HeaderV1
    buf = io.BytesIO()
    entity_writer(header_type)(
        buf,
        header_type(
            request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="f"
        ),
    )
    entity_writer(entity)(buf, build(entity, **values))
    return buf.getvalue()


def _seed_frames() -> list[bytes]:
    frames = []
    batch = encode_batch([(b"k", b"v"), (None, b"w")])
    for version in (0, 3):
        frames.append(
            _frame(18, version, client_software_name="fuzz", client_software_version="1.0")
        )
    for version in (1, 4, 9, 12):
        m = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["_"])
        topic = build(m.MetadataRequestTopic, name=TOPIC, topic_id=uuid.UUID(int=0))
        frames.append(
            _frame(
                3,
                version,
                topics=(topic,),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            )
        )
    for version in (3, 9):
        m = __import__(f"kio.schema.produce.v{version}.request", fromlist=["_"])
        data = build(m.PartitionProduceData, index=0, records=batch)
        topic = build(m.TopicProduceData, name=TOPIC, partition_data=(data,))
        frames.append(
            _frame(
                0,
                version,
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=1),
                topic_data=(topic,),
            )
        )
    for version in (4, 12):
        m = __import__(f"kio.schema.fetch.v{version}.request", fromlist=["_"])
        part = build(m.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=65536)
        topic = build(m.FetchTopic, topic=TOPIC, partitions=(part,))
        frames.append(
            _frame(
                1,
                version,
                replica_id=-1,
                max_wait=datetime.timedelta(0),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                topics=(topic,),
                forgotten_topics_data=(),
            )
        )
    for version in (1, 7):
        m = __import__(f"kio.schema.list_offsets.v{version}.request", fromlist=["_"])
        part = build(m.ListOffsetsPartition, partition_index=0, timestamp=-1)
        topic = build(m.ListOffsetsTopic, name=TOPIC, partitions=(part,))
        frames.append(_frame(2, version, replica_id=-1, isolation_level=0, topics=(topic,)))
    m = __import__("kio.schema.create_topics.v7.request", fromlist=["_"])
    topic = build(
        m.CreatableTopic,
        name="made",
        num_partitions=2,
        replication_factor=1,
        assignments=(),
        configs=(),
    )
    frames.append(_frame(19, 7, topics=(topic,), timeout=datetime.timedelta(seconds=1)))
    m = __import__("kio.schema.describe_configs.v4.request", fromlist=["_"])
    resource = build(
        m.DescribeConfigsResource, resource_type=2, resource_name=TOPIC, configuration_keys=None
    )
    frames.append(_frame(32, 4, resources=(resource,), include_synonyms=True))
    return frames


SEEDS = _seed_frames()


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        position = draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[position] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del frame[position:]
        elif kind == "insert":
            frame[position:position] = draw(st.binary(max_size=8))
        elif kind == "delete":
            del frame[position : position + draw(st.integers(1, 8))]
    return bytes(frame)


_run = run_with_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    config = BrokerConfig({"num.partitions": "2"}, environ={})
    instance = Broker(config, Listener("127.0.0.1", 0), Path(tmp_path_factory.mktemp("data")))
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    created = _run(
        instance,
        instance.controller.execute,
        CreateTopicCommand(name=TOPIC, num_partitions=2, replication_factor=1),
    )
    assert created.error_code == ErrorCode.none, created
    try:
        yield instance
    finally:
        instance.close()


def _serve_frame(broker: Broker, frame: bytes) -> None:
    try:
        prefix = read_prefix(frame)
    except FrameError:
        return
    handler = broker.services.handlers.get(prefix.api_key)
    if handler is None or not handler.min_version <= prefix.api_version <= handler.max_version:
        return
    try:
        header, request = decode_request(frame, prefix)
    except FrameError:
        return
    # A connection's session on a plaintext listener, as every served request has one
    # (the SASL handlers need it).
    session = ClientSession.for_listener(
        ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, "", 0), None
    )
    context = RequestContext(
        broker.services,
        header,
        prefix.api_key,
        prefix.api_version,
        "127.0.0.1",
        1,
        session=session,
    )

    async def run() -> Any:
        # Virtual time: a mutated max_wait of days is a legitimate long poll, not a hang;
        # a request that never finishes still fails here.
        with trio.fail_after(MAX_VIRTUAL_WAIT_S):
            return await handler.handle(context, request)

    # The clock jumps only after the loop has been idle this long in real time, so work the
    # broker hands to worker threads (opening a new topic's logs, syncs) finishes first.
    response = _run(broker, run, clock=MockClock(autojump_threshold=AUTOJUMP_AFTER_IDLE_S))
    if response is not None:
        encode_response(prefix.correlation_id, response)


def _check_logs_readable(broker: Broker) -> None:
    for partition in broker.topics.local_partitions():
        log = partition.log
        assert log is not None
        data = log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)
        headers = validate_produce_records(data, 1 << 30)
        if headers:
            assert headers[-1].last_offset == log.log_end_offset - 1


def test_seed_frames_are_served(broker: Broker) -> None:
    for frame in SEEDS:
        _serve_frame(broker, frame)
    _check_logs_readable(broker)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=mutated_frames())
def test_mutated_frames_never_crash(broker: Broker, frame: bytes) -> None:
    _serve_frame(broker, frame)
    _check_logs_readable(broker)


@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=256))
def test_random_frames_never_crash(broker: Broker, frame: bytes) -> None:
    _serve_frame(broker, frame)


def test_absurd_array_length_is_refused_not_allocated(broker: Broker) -> None:
    """kio's native reader reserves memory for a declared array length; a frame claiming
    billions of elements must be refused before it reaches kio (which would abort)."""
    fetch = SEEDS[[i for i, f in enumerate(SEEDS) if f[:4] == b"\x00\x01\x00\x0c"][0]]
    prefix = read_prefix(fetch)
    # Fetch v12: after the header and the fixed fields comes the compact topics array.
    header_end = 8 + 2 + len(b"f") + 1  # key/version/correlation, client id "f", no tags
    fixed = 4 + 4 + 4 + 4 + 1 + 4 + 4  # replica id .. session epoch
    topics_at = header_end + fixed
    huge = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])  # uvarint 2**32 - 1 elements
    frame = fetch[:topics_at] + huge + fetch[topics_at + 1 :]
    with pytest.raises(FrameError, match="cannot fit"):
        decode_request(frame, prefix)
    _serve_frame(broker, frame)  # and the full path survives it too


def test_null_array_where_none_is_allowed_is_refused() -> None:
    """ListOffsets v1 with a null topics array: Kafka's parser refuses it, so do we."""
    frame = (
        b"\x00\x02\x00\x01\x00\x00\x00\x00\x00\x00"  # ListOffsets v1, correlation 0, client ""
        b"\x07\x00\x01f"  # replica id
        b"\xff\xff\xff\xff"  # topics: null
    )
    with pytest.raises(FrameError, match="null array"):
        decode_request(frame, read_prefix(frame))
