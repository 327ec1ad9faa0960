"""ShareFetch on a priority or fair topic (`share.delivery.order=priority` or `fair`,
raftka's own) or a fifo topic honouring delays (`share.delivery.delay.enable=true`): the
share-partition's delivery index is filled from the log's batches (read and decoded in a
worker thread, once per record), and a fetch acquires the records that are due in the
index's order (lowest (priority, offset) first, or round robin across fairness keys),
wherever they lie in the backlog, sending the whole batches that hold them.

Any other fifo topic never comes here: its fetches read no record.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from raftka.broker.config import (
    SHARE_DEFAULT_PRIORITY,
    SHARE_DELAY_ENABLE,
    SHARE_DELIVERY_ORDER,
    SHARE_FAIR_KEY,
)
from raftka.broker.share.delivery_index import (
    FairKey,
    IndexedOrder,
    IndexedRecord,
    offset_of,
    runs_of,
)
from raftka.broker.share.partition import Acquired
from raftka.log import OffsetOutOfRange
from raftka.protocol.record_headers import header_values, whole_batches
from raftka.protocol.records import UnsupportedBatch, read_batch_header

if TYPE_CHECKING:
    from raftka.broker.share.manager import LedSharePartition
    from raftka.broker.topics import Partition
    from raftka.log.segment import LogSegment

logger = logging.getLogger("raftka.share")

#: Bytes of log read (and decoded) per worker-thread call while filling an index.
INDEX_READ_BYTES = 1024 * 1024


def indexed_order(partition: Partition) -> IndexedOrder | None:
    """How the share-partitions of the partition's topic are indexed; None for a fifo
    topic that ignores delays (no index: offset order, records never read)."""
    config = partition.topic.config
    order = config.get_str(SHARE_DELIVERY_ORDER)
    if order == "priority":
        return IndexedOrder(True, config.get_int(SHARE_DEFAULT_PRIORITY))
    if order == "fair":
        return IndexedOrder(False, fair=FairKey.parse(config.get_str(SHARE_FAIR_KEY)))
    if config.get_bool(SHARE_DELAY_ENABLE):
        return IndexedOrder(False)
    return None


def _decode_headers(
    fd: int, position: int, length: int, names: tuple[bytes, ...], with_key: bool
) -> list[IndexedRecord]:
    """The records of the whole batches at [position, position + length) of a segment file
    (the values of the headers `names`, then the key `with_key`); in a worker thread, on a
    descriptor of its own."""
    chunk = b""
    while len(chunk) < length:
        more = os.pread(fd, length - len(chunk), position + len(chunk))
        if not more:
            raise OSError(f"short read at {position + len(chunk)}")
        chunk += more
    records: list[IndexedRecord] = []
    absent = (None,) * (len(names) + with_key)
    for batch in whole_batches(chunk):
        header = read_batch_header(batch, 0)
        try:
            records.extend(header_values(batch, names, with_key))
        except UnsupportedBatch as exc:
            # Delivered in default order: the consumer sees what the batch holds.
            logger.warning("batch at %d has unreadable headers: %s", header.base_offset, exc)
            if not header.is_control:
                offsets = range(header.base_offset, header.next_offset)
                records.extend((o, absent) for o in offsets)
    return records


async def fill_index(partition: Partition, led: LedSharePartition) -> None:
    """Index the records below the high watermark not indexed yet."""
    index = led.index
    if index is None:
        return
    log = partition.hosted_log
    while True:
        high_watermark = partition.high_watermark
        start = max(index.scanned_to, led.state.start_offset, log.log_start_offset)
        if start >= high_watermark:
            index.scanned_to = max(index.scanned_to, start)
            return
        try:
            # Located here (batch headers, as a fetch does); read and decoded in a thread
            # through a descriptor that outlives a segment deleted meanwhile.
            found = log.fetch_slice(start, INDEX_READ_BYTES, high_watermark, True)
            if found is None:
                return
            fd = os.dup(found.segment.fd)
            try:
                records = await trio.to_thread.run_sync(
                    _decode_headers,
                    fd,
                    found.position,
                    found.length,
                    index.order.header_names(),
                    index.order.with_key,
                )
            finally:
                os.close(fd)
        except (OSError, OffsetOutOfRange) as exc:
            logger.info("indexing %s from %d stopped for now: %s", partition.name, start, exc)
            return
        if found.next_offset <= start:
            return
        if max(index.scanned_to, led.state.start_offset) <= start:  # no one else got here first
            index.scanned_to = start
            index.add(records, found.next_offset, led.state)


@dataclass(slots=True)
class _Batch:
    base_offset: int
    next_offset: int
    segment: LogSegment
    position: int
    length: int


def acquire_indexed(
    partition: Partition,
    led: LedSharePartition,
    member_id: str,
    max_records: int,
    max_bytes: int,
    max_in_flight: int,
    now_ms: float,
    wall_ms: int,
    lock_ms: int,
) -> tuple[list[Acquired], bytes, int]:
    """Acquire up to `max_records` due records in the index's order, while at most
    `max_in_flight` records are acquired and (past the first) their batches fit in
    `max_bytes`: (the ranges acquired, the batches holding them in offset order, their
    bytes). No await: the segments stay valid."""
    index = led.index
    assert index is not None, "an indexed topic's share-partition has an index"
    state = led.state
    index.settle(state)
    want = min(max_records, max_in_flight - index.in_flight())
    if want <= 0:
        return [], b"", 0
    keys = index.take(state, wall_ms, want)
    if not keys:
        return [], b"", 0
    log = partition.hosted_log
    high_watermark = partition.high_watermark
    batches: list[_Batch] = []  # by base offset
    chosen: list[int] = []
    used = 0
    for n, key in enumerate(keys):
        offset = offset_of(key)
        i = bisect_right(batches, offset, key=lambda b: b.base_offset) - 1
        if i < 0 or batches[i].next_offset <= offset:
            try:
                found = log.fetch_slice(offset, 1, high_watermark, True)
            except OffsetOutOfRange:
                found = None
            if found is None:
                index.forget(key)  # gone below the log start: done
                continue
            if chosen and used + found.length > max_bytes:
                index.give_back(keys[n:])
                break
            base = int.from_bytes(found.segment.pread(8, found.position), "big")
            batch = _Batch(base, found.next_offset, found.segment, found.position, found.length)
            batches.insert(bisect_right(batches, base, key=lambda b: b.base_offset), batch)
            used += found.length
        chosen.append(key)
    acquired = state.acquire_offsets(
        member_id, runs_of(offset_of(k) for k in chosen), now_ms, lock_ms
    )
    index.acquired(chosen)
    records = b"".join(b.segment.pread(b.length, b.position) for b in batches)
    return acquired, records, used


def record_values(
    partition: Partition, offset: int, order: IndexedOrder
) -> tuple[bytes | None, ...] | None:
    """The values one record is indexed by (as `IndexedRecord`'s), read from the batch
    holding it; None when the log holds no record at `offset` (below its start, past the
    high watermark, or a control batch). For the queue API's changes of one record."""
    try:
        found = partition.hosted_log.fetch_slice(offset, 1, partition.high_watermark, True)
    except OffsetOutOfRange:
        return None
    if found is None:
        return None
    for batch in whole_batches(found.segment.pread(found.length, found.position)):
        header = read_batch_header(batch, 0)
        if header.is_control or not header.base_offset <= offset < header.next_offset:
            continue
        try:
            for at, values in header_values(batch, order.header_names(), order.with_key):
                if at == offset:
                    return values
        except UnsupportedBatch:
            return (None,) * (len(order.header_names()) + order.with_key)
    return None
