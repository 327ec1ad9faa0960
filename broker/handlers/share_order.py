"""ShareFetch on a priority or fair topic (`share.delivery.order=priority` or `fair`,
raftka's own) or a fifo topic honouring delays (`share.delivery.delay.enable=true`): the
share-partition's delivery index is filled from the log's batches (read and decoded in a
worker thread, once per record), and a fetch acquires the records that are due in the
index's order (lowest (priority, offset) first, or round robin across fairness keys),
wherever they lie in the backlog. A fetch sends only the records it acquired: for each
batch holding some, a batch of just those (base offset, offset deltas and producer fields
kept, as Kafka's cleaner leaves a compacted batch), read from where the index saw each
record, so its cost follows the records it takes, not the batches around them or the
backlog. A compressed batch is sent whole (its records lie nowhere in the log by
themselves).

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
    SHARE_FAIR_PER_TURN,
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
from raftka.protocol.record_headers import (
    batch_of_records,
    header_values,
    record_offset_delta,
    whole_batches,
)
from raftka.protocol.records import (
    COMPRESSION_NONE,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    UnsupportedBatch,
    read_batch_header,
)

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
        fair = FairKey.parse(config.get_str(SHARE_FAIR_KEY))
        return IndexedOrder(False, fair=fair, per_turn=config.get_int(SHARE_FAIR_PER_TURN))
    if config.get_bool(SHARE_DELAY_ENABLE):
        return IndexedOrder(False)
    return None


def _decode_headers(
    fd: int, position: int, length: int, names: tuple[bytes, ...], with_key: bool
) -> tuple[list[IndexedRecord], list[int]]:
    """The records of the whole batches at [position, position + length) of a segment file
    (the values of the headers `names`, then the key `with_key`), and where each lies in its
    batch (start, length, flattened; 0, 0 where not known); in a worker thread, on a
    descriptor of its own."""
    chunk = b""
    while len(chunk) < length:
        more = os.pread(fd, length - len(chunk), position + len(chunk))
        if not more:
            raise OSError(f"short read at {position + len(chunk)}")
        chunk += more
    records: list[IndexedRecord] = []
    spans: list[int] = []
    absent = (None,) * (len(names) + with_key)
    for batch in whole_batches(chunk):
        header = read_batch_header(batch, 0)
        done = len(records)
        try:
            records.extend(header_values(batch, names, with_key, spans))
        except UnsupportedBatch as exc:
            # Delivered in default order, whole: the consumer sees what the batch holds.
            logger.warning("batch at %d has unreadable headers: %s", header.base_offset, exc)
            del records[done:]
            del spans[2 * done :]
            if not header.is_control:
                offsets = range(header.base_offset, header.next_offset)
                records.extend((o, absent) for o in offsets)
                spans.extend(0 for _ in range(2 * len(offsets)))
    return records, spans


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
                records, spans = await trio.to_thread.run_sync(
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
            index.add(records, found.next_offset, led.state, spans)


@dataclass(slots=True)
class _Batch:
    header: BatchHeader
    raw_header: bytes
    segment: LogSegment
    position: int
    length: int
    #: (offset, start in the batch, length) of the records chosen from it; None: sent whole.
    chosen: list[tuple[int, int, int]] | None
    cost: int  # bytes it adds to the answer

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    def encode(self) -> bytes:
        """The batch as sent: whole, or just the records chosen (whole when those are not
        where the index saw them, as after the log was rewritten)."""
        if self.chosen is None:
            return self.segment.pread(self.length, self.position)
        self.chosen.sort()
        # One read per run of adjacent records.
        runs: list[list[int]] = []
        for _, start, length in self.chosen:
            if runs and runs[-1][1] == start:
                runs[-1][1] += length
            else:
                runs.append([start, start + length])
        data = b"".join(
            self.segment.pread(end - start, self.position + start) for start, end in runs
        )
        base = self.header.base_offset
        parts: list[bytes] = []
        at = 0
        for offset, _, length in self.chosen:
            record = data[at : at + length]
            at += length
            if record_offset_delta(record) != offset - base:
                return self.segment.pread(self.length, self.position)
            parts.append(record)
        return batch_of_records(self.raw_header, parts)


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
    `max_in_flight` records are acquired and (past the first) what is sent of them fits in
    `max_bytes`: (the ranges acquired, a batch of just the acquired records per batch holding
    some, in offset order, their bytes). Reads and sends only those records (a compressed
    batch whole). No await: the segments stay valid."""
    index = led.index
    assert index is not None, "an indexed topic's share-partition has an index"
    state = led.state
    index.settle(state)
    index.spans.drop_below(state.start_offset)
    want = min(max_records, max_in_flight - index.in_flight())
    if want <= 0:
        return [], b"", 0
    keys = index.take(state, wall_ms, want)
    if not keys:
        return [], b"", 0
    log = partition.hosted_log
    high_watermark = partition.high_watermark
    spans = index.spans
    batches: list[_Batch] = []  # by base offset
    chosen: list[int] = []
    used = 0
    for n, key in enumerate(keys):
        offset = offset_of(key)
        i = bisect_right(batches, offset, key=lambda b: b.base_offset) - 1
        batch = batches[i] if i >= 0 and offset < batches[i].header.next_offset else None
        if batch is None:
            try:
                found = log.fetch_slice(offset, 1, high_watermark, True)
            except OffsetOutOfRange:
                found = None
            if found is None:
                index.forget(key)  # gone below the log start: done
                continue
            raw = found.segment.pread(RECORD_BATCH_OVERHEAD, found.position)
            header = read_batch_header(raw, 0)
            plain = header.compression == COMPRESSION_NONE
            batch = _Batch(
                header, raw, found.segment, found.position, found.length, [] if plain else None, 0
            )
            new = True
        else:
            new = False
        span = spans.get(offset) if batch.chosen is not None else None
        if span is not None:
            add = span[1] + (RECORD_BATCH_OVERHEAD if new else 0)
        else:
            add = batch.length - batch.cost  # sent whole from now on
        if chosen and used + add > max_bytes:
            index.give_back(keys[n:])
            break
        if new:
            batches.insert(
                bisect_right(batches, batch.base_offset, key=lambda b: b.base_offset), batch
            )
        if span is not None and batch.chosen is not None:
            batch.chosen.append((offset, span[0], span[1]))
        else:
            batch.chosen = None
        batch.cost += add
        used += add
        chosen.append(key)
    acquired = state.acquire_offsets(
        member_id, runs_of(offset_of(k) for k in chosen), now_ms, lock_ms
    )
    index.acquired(chosen)
    records = b"".join(b.encode() for b in batches)
    return acquired, records, len(records)


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
