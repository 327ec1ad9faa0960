"""Recompression of produced batches for a topic `compression.type` other than `producer`:
each codec into each other one, the header kept, the CRC valid, control batches untouched,
corrupt records refused; and in an in-process broker, what the log stores and in which order
pipelined writes land when one of them is recompressed in a worker thread."""

from __future__ import annotations

import datetime
import gzip
import random
import struct
from pathlib import Path
from typing import Any

import cramjam
import crc32c
import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i16, i32
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.handlers.produce import handle_produce
from raftka.broker.server import Broker, Listener
from raftka.log.validation import RECOMPRESS_IN_THREAD_BYTES
from raftka.protocol import records as r
from raftka.protocol.batch_builder import build_batch, decode_batch
from raftka.protocol.recompress import TOPIC_CODECS, compress_records, recompress_batch

CODECS = {
    "none": r.COMPRESSION_NONE,
    "gzip": r.COMPRESSION_GZIP,
    "snappy": r.COMPRESSION_SNAPPY,
    "lz4": r.COMPRESSION_LZ4,
    "zstd": r.COMPRESSION_ZSTD,
}
_HEADER = struct.Struct(">qiibIhiqqqhii")


def _source_payload(codec: int, records: bytes, snappy_raw: bool = False) -> bytes:
    """`records` compressed as a client would, independently of the code under test."""
    if codec == r.COMPRESSION_NONE:
        return records
    if codec == r.COMPRESSION_GZIP:
        return gzip.compress(records)
    if codec == r.COMPRESSION_SNAPPY:
        if snappy_raw:  # librdkafka's unframed form
            return bytes(cramjam.snappy.compress_raw(records))
        block = bytes(cramjam.snappy.compress_raw(records))
        return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    if codec == r.COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(records))
    return bytes(cramjam.zstd.compress(records))


def _plain_records(codec: int, payload: bytes) -> bytes:
    """The uncompressed records of a payload in `codec` as Kafka's readers take it."""
    if codec == r.COMPRESSION_NONE:
        return payload
    if codec == r.COMPRESSION_GZIP:
        return gzip.decompress(payload)
    if codec == r.COMPRESSION_SNAPPY:
        assert payload[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1), "xerial framing"
        out, pos = b"", 16
        while pos < len(payload):
            (length,) = struct.unpack_from(">i", payload, pos)
            out += bytes(cramjam.snappy.decompress_raw(payload[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        return out
    if codec == r.COMPRESSION_LZ4:
        # Kafka's reader wants independent blocks (FLG bit 5) of at most 64 KiB (BD 4).
        assert payload[:4] == b"\x04\x22\x4d\x18" and payload[4] & 0x20 and payload[5] >> 4 == 4
        return bytes(cramjam.lz4.decompress(payload))
    assert payload[:4] == b"\x28\xb5\x2f\xfd", "a zstd frame"
    return bytes(cramjam.zstd.decompress(payload))


def _batch(
    codec: int,
    values: list[bytes],
    *,
    snappy_raw: bool = False,
    producer: tuple[int, int, int] = (7000, 3, 42),
    transactional: bool = True,
    attributes_extra: int = 0,
) -> tuple[bytes, bytes]:
    """(batch in `codec`, its uncompressed records section) with every header field set."""
    plain = build_batch(
        [(b"k%d" % i, value) for i, value in enumerate(values)],
        1_700_000_000_000,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        transactional=transactional,
    )
    records = plain[r.RECORDS_OFFSET :]
    payload = _source_payload(codec, records, snappy_raw)
    fields = list(_HEADER.unpack_from(plain))
    fields[1] = r.RECORDS_OFFSET + len(payload) - r.LOG_OVERHEAD
    fields[2] = 17  # partitionLeaderEpoch
    fields[5] |= codec | attributes_extra
    fields[8] = 1_700_000_000_500  # maxTimestamp
    batch = bytearray(_HEADER.pack(*fields) + payload)
    struct.pack_into(">I", batch, r.CRC_OFFSET, crc32c.crc32c(bytes(batch[r.ATTRIBUTES_OFFSET :])))
    return bytes(batch), records


@pytest.mark.parametrize("target", sorted(CODECS))
@pytest.mark.parametrize("source", [*sorted(CODECS), "snappy-raw"])
def test_each_codec_into_each_other(source: str, target: str) -> None:
    source_codec = CODECS[source.removesuffix("-raw")]
    values = [b"value-%d-" % i * 20 for i in range(50)]
    batch, records = _batch(source_codec, values, snappy_raw=source == "snappy-raw")
    out = recompress_batch(batch, CODECS[target])
    if source_codec == CODECS[target]:
        assert out == batch, "a batch already in the topic's codec is stored as sent"
        return
    (header,) = r.validate_produce_records(out, 1 << 20, produce_version=9)  # CRC, length
    before = r.read_batch_header(batch)
    assert header.compression == CODECS[target]
    assert header.attributes & ~r.COMPRESSION_MASK == before.attributes & ~r.COMPRESSION_MASK
    kept = ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp")
    kept += ("max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count")
    assert {f: getattr(header, f) for f in kept} == {f: getattr(before, f) for f in kept}
    assert header.is_transactional
    assert _plain_records(CODECS[target], out[r.RECORDS_OFFSET :]) == records
    if CODECS[target] == r.COMPRESSION_NONE:
        assert [rec.value for rec in decode_batch(out)] == values


def test_large_snappy_records_are_framed_in_32_kib_blocks() -> None:
    records = bytes(range(256)) * 1000  # 256,000 bytes
    payload = compress_records(r.COMPRESSION_SNAPPY, records)
    assert _plain_records(r.COMPRESSION_SNAPPY, payload) == records
    blocks, pos = 0, 16
    while pos < len(payload):
        (length,) = struct.unpack_from(">i", payload, pos)
        pos += 4 + length
        blocks += 1
    assert blocks == -(-len(records) // (32 * 1024))


def test_log_append_time_flag_is_kept() -> None:
    batch, _ = _batch(r.COMPRESSION_GZIP, [b"a"], attributes_extra=r.TIMESTAMP_TYPE_MASK)
    out = recompress_batch(batch, r.COMPRESSION_ZSTD)
    assert r.read_batch_header(out).is_log_append_time


def test_control_batches_pass_untouched() -> None:
    marker = build_batch([(b"\x00\x00\x00\x01", b"")], 5, producer_id=1, control=True)
    assert r.read_batch_header(marker).is_control
    for codec in TOPIC_CODECS.values():
        assert recompress_batch(marker, codec) == marker


def _reframe(
    batch: bytes, payload: bytes, records_count: int | None = None, codec: int | None = None
) -> bytes:
    """`batch` with `payload` as its records (maybe another count or codec), CRC valid."""
    fields = list(_HEADER.unpack_from(batch))
    fields[1] = r.RECORDS_OFFSET + len(payload) - r.LOG_OVERHEAD
    if codec is not None:
        fields[5] = fields[5] & ~r.COMPRESSION_MASK | codec
    if records_count is not None:
        fields[12] = records_count
        fields[6] = records_count - 1
    out = bytearray(_HEADER.pack(*fields) + payload)
    struct.pack_into(">I", out, r.CRC_OFFSET, crc32c.crc32c(bytes(out[r.ATTRIBUTES_OFFSET :])))
    return bytes(out)


def _corrupt_batches() -> dict[str, bytes]:
    gzipped, records = _batch(r.COMPRESSION_GZIP, [b"x" * 100] * 3)
    payload = gzipped[r.RECORDS_OFFSET :]
    garbage = payload[:10] + bytes(b ^ 0x5A for b in payload[10:])
    snappy, _ = _batch(r.COMPRESSION_SNAPPY, [b"y" * 100] * 3)
    torn = snappy[: len(snappy) - 5]
    return {
        "gzip garbage": _reframe(gzipped, garbage),
        "gzip truncated": _reframe(gzipped, payload[: len(payload) // 2]),
        "snappy torn block": _reframe(snappy, torn[r.RECORDS_OFFSET :]),
        "zstd garbage": _reframe(
            gzipped, b"\x28\xb5\x2f\xfd" + b"\xff" * 40, codec=r.COMPRESSION_ZSTD
        ),
        "more records than declared": _reframe(
            gzipped, gzip.compress(records + records[:20]), records_count=3
        ),
        "fewer records than declared": _reframe(gzipped, payload, records_count=4),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_batches()))
def test_corrupt_records_are_refused_with_invalid_record(case: str) -> None:
    batch = _corrupt_batches()[case]
    r.validate_produce_records(batch, 1 << 20, produce_version=9)  # the header is fine
    with pytest.raises(r.InvalidRecords) as info:
        recompress_batch(batch, r.COMPRESSION_LZ4)
    assert info.value.error_code == r.INVALID_RECORD
    assert "offset" in info.value.message


def test_decompression_is_bounded() -> None:
    batch, _ = _batch(r.COMPRESSION_ZSTD, [b"\x00" * 200_000])
    with pytest.raises(r.InvalidRecords) as info:
        recompress_batch(batch, r.COMPRESSION_GZIP, max_decompressed_bytes=100_000)
    assert info.value.error_code == r.INVALID_RECORD


# -- in an in-process broker ---------------------------------------------------------------

TOPIC = "recompressed"


_run = run_with_broker


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    instance = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path / "data")
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    created = _run(
        instance,
        instance.controller.execute,
        CreateTopicCommand(
            name=TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs={"compression.type": "zstd"},
        ),
    )
    assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        partition = instance.topics.partition(TOPIC, 0)
        while partition is None or not partition.is_leader:
            await trio.sleep(0.01)
            partition = instance.topics.partition(TOPIC, 0)

    _run(instance, led)
    return instance


def _request(records: bytes) -> tuple[Any, ProduceRequest]:
    header = RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="t"
    )
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=TOPIC, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    return header, request


async def _produce_all(broker: Broker, batches: list[bytes]) -> list[Any]:
    """Produce each batch as its own request, started in order without waiting."""
    from raftka.broker.services import RequestContext

    answers: list[Any] = [None] * len(batches)

    async def one(index: int, records: bytes) -> None:
        header, request = _request(records)
        context = RequestContext(broker.services, header, 0, 9, "127.0.0.1", 1)
        response = await handle_produce(context, request)
        answers[index] = response.responses[0].partition_responses[0]

    async with trio.open_nursery() as nursery:
        for index, records in enumerate(batches):
            nursery.start_soon(one, index, records)
            await trio.sleep(0)  # the next request arrives once this one has started
    return answers


def _stored(broker: Broker) -> list[r.BatchHeader]:
    log = broker.topics.partition(TOPIC, 0).log  # type: ignore[union-attr]
    assert log is not None
    data = log.read(0, 1 << 30, log.log_end_offset, True)
    return list(r.iter_batch_headers(data))


def test_pipelined_writes_keep_their_order_around_a_threaded_recompression(
    broker: Broker,
) -> None:
    large, _ = _batch(
        r.COMPRESSION_GZIP,
        [random.Random(i).randbytes(300) for i in range(300)],
        producer=(9000, 0, 0),
        transactional=False,
    )
    assert len(large) > RECOMPRESS_IN_THREAD_BYTES  # recompressed in a worker thread
    small, _ = _batch(r.COMPRESSION_LZ4, [b"s"] * 5, producer=(9000, 0, 300), transactional=False)
    same, _ = _batch(r.COMPRESSION_ZSTD, [b"z"] * 2, producer=(9000, 0, 305), transactional=False)
    answers = _run(broker, _produce_all, broker, [large, small, same])
    assert [a.error_code for a in answers] == [ErrorCode.none] * 3, answers
    assert [a.base_offset for a in answers] == [0, 300, 305]
    stored = _stored(broker)
    assert [(h.base_offset, h.base_sequence) for h in stored] == [(0, 0), (300, 300), (305, 305)]
    assert {h.compression for h in stored} == {r.COMPRESSION_ZSTD}


def test_a_corrupt_batch_is_refused_and_nothing_is_stored(broker: Broker) -> None:
    gzipped, _ = _batch(r.COMPRESSION_GZIP, [b"x" * 100] * 3, transactional=False)
    payload = gzipped[r.RECORDS_OFFSET :]
    corrupt = _reframe(gzipped, payload[:10] + bytes(b ^ 0x5A for b in payload[10:]))
    (answer,) = _run(broker, _produce_all, broker, [corrupt])
    assert answer.error_code == ErrorCode.invalid_record
    assert "cannot be decompressed" in answer.error_message
    assert answer.record_errors[0].batch_index == 0
    assert _stored(broker) == []
    good, _ = _batch(r.COMPRESSION_GZIP, [b"ok"], producer=(-1, -1, -1), transactional=False)
    (answer,) = _run(broker, _produce_all, broker, [good])
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)


def test_levels_of_kip_390_are_applied() -> None:
    records = b"".join(b"record %d of a compressible batch; " % (i % 50) for i in range(5000))
    for codec, low, high in (
        (r.COMPRESSION_GZIP, 1, 9),
        (r.COMPRESSION_LZ4, 1, 17),
        (r.COMPRESSION_ZSTD, -5, 19),
    ):
        fast = compress_records(codec, records, low)
        small = compress_records(codec, records, high)
        assert len(small) < len(fast), (codec, len(small), len(fast))
        assert _plain_records(codec, fast) == records == _plain_records(codec, small)
    # Kafka's defaults: gzip -1 is zlib's 6, lz4 9 is the fast compressor.
    assert compress_records(r.COMPRESSION_GZIP, records, -1) == compress_records(
        r.COMPRESSION_GZIP, records, 6
    )
    assert compress_records(r.COMPRESSION_LZ4, records, 9) == compress_records(
        r.COMPRESSION_LZ4, records
    )


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("compression.gzip.level", ["-1", "1", "9"], ["0", "-2", "10"]),
        ("compression.lz4.level", ["1", "9", "17"], ["0", "18"]),
        ("compression.zstd.level", ["-131072", "0", "22"], ["-131073", "23"]),
        ("compression.type", [*TOPIC_CODECS, "producer"], ["brotli", "none", "GZIP"]),
    ],
)
def test_compression_configs_take_kafkas_values(name: str, good: list[str], bad: list[str]) -> None:
    from raftka.broker.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigError

    for definitions in (BROKER_CONFIGS, TOPIC_CONFIGS):
        for value in good:
            definitions[name].parse(value)
        for value in bad:
            with pytest.raises(ConfigError, match=name):
                definitions[name].parse(value)
