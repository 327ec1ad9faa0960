"""Filling a share-partition's delivery index from a real segment log and acquiring by it:
batches across segment rolls, the fetch's byte budget, and the batches sent holding just the
acquired records (a compressed batch whole)."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from batches import encode_batch

from raftka.broker.handlers.share_order import acquire_indexed, fill_index
from raftka.broker.share.delivery_index import DeliveryIndex, IndexedOrder
from raftka.broker.share.manager import LedSharePartition
from raftka.broker.share.partition import AckType, SharePartition
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.record_headers import header_values, whole_batches
from raftka.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    batch_crc,
    iter_batch_headers,
    validate_produce_records,
)

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=3000, index_interval_bytes=200)


@dataclass
class HostedPartition:
    """What fill_index and acquire_indexed read of a partition."""

    hosted_log: PartitionLog
    high_watermark: int
    name: str = "t-0"


def backlog(
    tmp_path: Path,
    batches: int,
    per_batch: int,
    seed: int,
    config: LogConfig = SMALL,
    gzip: bool = False,
) -> tuple[PartitionLog, list[int]]:
    log = PartitionLog.open(tmp_path / "t-0", config, NOW)
    rng = random.Random(seed)
    priorities: list[int] = []
    for _ in range(batches):
        chosen = [rng.randrange(20) for _ in range(per_batch)]
        first = len(priorities)
        batch = encode_batch(
            [(None, b"value %d" % (first + i)) for i in range(per_batch)],
            headers=[[("priority", str(p).encode())] for p in chosen],
            gzip=gzip,
        )
        log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW)
        priorities.extend(chosen)
    return log, priorities


def led_for(log: PartitionLog) -> LedSharePartition:
    state = SharePartition(0)
    state.left_acquired = []
    key = ("g", uuid.uuid4(), 0)
    return LedSharePartition(key, 0, state, 0, index=DeliveryIndex(IndexedOrder(True, 0), 0))


def test_a_backlog_across_segments_is_acquired_in_priority_order(tmp_path: Path) -> None:
    log, priorities = backlog(tmp_path, batches=40, per_batch=10, seed=5)
    assert len(log.segments) > 3
    partition = HostedPartition(log, log.log_end_offset)
    led = led_for(log)
    trio.run(fill_index, partition, led)  # type: ignore[arg-type]
    assert led.index is not None and led.index.scanned_to == 400
    delivered: list[int] = []
    while True:
        acquired, records, length = acquire_indexed(
            partition,  # type: ignore[arg-type]
            led,
            "m",
            max_records=25,
            max_bytes=1 << 20,
            max_in_flight=100,
            now_ms=0,
            wall_ms=NOW,
            lock_ms=1000,
        )
        if not acquired:
            break
        assert length == len(records)
        sent = {o for b in whole_batches(records) for o, _ in header_values(b, (b"priority",))}
        offsets = [o for a in acquired for o in range(a.first, a.last + 1)]
        assert set(offsets) == sent, "the batches sent hold the acquired records, no other"
        for header in iter_batch_headers(records):
            assert batch_crc(records, header.position, header.size_bytes) == header.crc
        delivered.extend(sorted(offsets, key=lambda o: (priorities[o], o)))
        for a in acquired:
            assert led.state.acknowledge("m", a.first, a.last, [AckType.ACCEPT], 5) == 0
    assert delivered == sorted(range(400), key=lambda o: (priorities[o], o))
    assert led.state.start_offset == 400


def fetch(partition: HostedPartition, led: LedSharePartition, **limits: int) -> tuple[Any, bytes]:
    acquired, records, length = acquire_indexed(
        partition,  # type: ignore[arg-type]
        led,
        "m",
        max_records=limits.get("max_records", 1000),
        max_bytes=limits.get("max_bytes", 1 << 20),
        max_in_flight=1000,
        now_ms=0,
        wall_ms=NOW,
        lock_ms=1000,
    )
    assert length == len(records)
    return acquired, records


def test_the_byte_budget_stops_at_the_first_record_that_does_not_fit(tmp_path: Path) -> None:
    log, priorities = backlog(tmp_path, batches=10, per_batch=10, seed=8)
    partition = HostedPartition(log, log.log_end_offset)
    led = led_for(log)
    trio.run(fill_index, partition, led)  # type: ignore[arg-type]
    whole = len(log.read(0, 1 << 20, log.log_end_offset, False))
    budget = 800
    acquired, records = fetch(partition, led, max_bytes=budget)
    offsets = sorted(o for a in acquired for o in range(a.first, a.last + 1))
    assert 1 < len(offsets) < 100
    assert len(records) <= budget < whole
    lowest = sorted(range(100), key=lambda o: (priorities[o], o))
    assert offsets == sorted(lowest[: len(offsets)]), "a prefix of the priority order"
    # What did not fit stays in the index: the next fetch continues the order.
    more, _ = fetch(partition, led)
    rest = sorted(o for a in more for o in range(a.first, a.last + 1))
    assert sorted(offsets + rest) == list(range(100))


def test_scattered_records_are_sent_without_the_rest_of_their_batches(tmp_path: Path) -> None:
    """Records of one priority spread over big batches: a fetch sends those records (their
    values, offsets intact), so its bytes follow the records taken, not the batches."""
    log, priorities = backlog(tmp_path, batches=20, per_batch=200, seed=3, config=LogConfig())
    partition = HostedPartition(log, log.log_end_offset)
    led = led_for(log)
    trio.run(fill_index, partition, led)  # type: ignore[arg-type]
    acquired, records = fetch(partition, led, max_records=50)
    offsets = [o for a in acquired for o in range(a.first, a.last + 1)]
    assert len(offsets) == 50
    assert offsets == sorted(sorted(range(4000), key=lambda o: (priorities[o], o))[:50])
    touched = len({o // 200 for o in offsets})
    assert touched >= 5, "the records lie in several batches"
    values: dict[int, bytes | None] = {}
    for batch in whole_batches(records):
        for offset, (value,) in header_values(batch, (b"priority",)):
            values[offset] = value
    assert sorted(values) == offsets
    assert all(values[o] == str(priorities[o]).encode() for o in offsets)
    one_record = max(len(b) for b in whole_batches(log.read(0, 1 << 20, 4000, False))) // 200
    assert len(records) <= touched * RECORD_BATCH_OVERHEAD + 50 * 2 * one_record


def test_a_compressed_batch_is_sent_whole(tmp_path: Path) -> None:
    log, priorities = backlog(tmp_path, batches=4, per_batch=50, seed=4, gzip=True)
    partition = HostedPartition(log, log.log_end_offset)
    led = led_for(log)
    trio.run(fill_index, partition, led)  # type: ignore[arg-type]
    acquired, records = fetch(partition, led, max_records=10)
    offsets = {o for a in acquired for o in range(a.first, a.last + 1)}
    sent = [o for b in whole_batches(records) for o, _ in header_values(b, (b"priority",))]
    assert len(offsets) == 10 and offsets < set(sent)
    assert len(sent) == 50 * len({o // 50 for o in offsets}), "whole batches"
