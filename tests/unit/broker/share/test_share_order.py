"""Filling a share-partition's delivery index from a real segment log and acquiring by it:
batches across segment rolls, the fetch's byte budget, and the batches sent holding every
acquired record."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path

import trio
from batches import encode_batch

from raftka.broker.handlers.share_order import acquire_indexed, fill_index
from raftka.broker.share.delivery_index import DeliveryIndex, IndexedOrder
from raftka.broker.share.manager import LedSharePartition
from raftka.broker.share.partition import AckType, SharePartition
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.record_headers import header_values, whole_batches
from raftka.protocol.records import validate_produce_records

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=3000, index_interval_bytes=200)


@dataclass
class HostedPartition:
    """What fill_index and acquire_indexed read of a partition."""

    hosted_log: PartitionLog
    high_watermark: int
    name: str = "t-0"


def backlog(
    tmp_path: Path, batches: int, per_batch: int, seed: int
) -> tuple[PartitionLog, list[int]]:
    log = PartitionLog.open(tmp_path / "t-0", SMALL, NOW)
    rng = random.Random(seed)
    priorities: list[int] = []
    for _ in range(batches):
        chosen = [rng.randrange(20) for _ in range(per_batch)]
        batch = encode_batch(
            [(None, b"x" * 20)] * per_batch,
            headers=[[("priority", str(p).encode())] for p in chosen],
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
        assert set(offsets) <= sent, "every acquired record is in a batch sent"
        delivered.extend(sorted(offsets, key=lambda o: (priorities[o], o)))
        for a in acquired:
            assert led.state.acknowledge("m", a.first, a.last, [AckType.ACCEPT], 5) == 0
    assert delivered == sorted(range(400), key=lambda o: (priorities[o], o))
    assert led.state.start_offset == 400


def test_the_byte_budget_stops_at_the_first_record_whose_batch_does_not_fit(
    tmp_path: Path,
) -> None:
    log, priorities = backlog(tmp_path, batches=10, per_batch=10, seed=8)
    partition = HostedPartition(log, log.log_end_offset)
    led = led_for(log)
    trio.run(fill_index, partition, led)  # type: ignore[arg-type]
    sizes = sorted(len(b) for b in whole_batches(log.read(0, 1 << 20, log.log_end_offset, False)))
    assert len(sizes) >= 3 and 3 * sizes[0] > sizes[-1] + sizes[-2]
    acquired, records, _ = acquire_indexed(
        partition,  # type: ignore[arg-type]
        led,
        "m",
        max_records=100,
        max_bytes=sizes[-1] + sizes[-2],  # two batches, never three
        max_in_flight=1000,
        now_ms=0,
        wall_ms=NOW,
        lock_ms=1000,
    )
    assert len(list(whole_batches(records))) == 2
    offsets = sorted(o for a in acquired for o in range(a.first, a.last + 1))
    lowest = sorted(range(100), key=lambda o: (priorities[o], o))
    assert offsets == sorted(lowest[: len(offsets)]), "a prefix of the priority order"
    # What did not fit stays in the index: the next fetch continues the order.
    more, _, _ = acquire_indexed(
        partition,  # type: ignore[arg-type]
        led,
        "m",
        max_records=100,
        max_bytes=1 << 20,
        max_in_flight=1000,
        now_ms=0,
        wall_ms=NOW,
        lock_ms=1000,
    )
    rest = sorted(o for a in more for o in range(a.first, a.last + 1))
    assert sorted(offsets + rest) == list(range(100))
