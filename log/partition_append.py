"""How batches enter a partition's log: offsets assigned and leader epochs stamped by the
leader, or copied as they are by a follower; segments rolled; the producer state and
aborted-transaction index kept up to date.
"""

from __future__ import annotations

from typing import Final

from raftka.protocol.batch_builder import end_txn_marker
from raftka.protocol.records import (
    CONTROL_FLAG_MASK,
    BatchHeader,
    set_log_append_time,
    stamp_batches,
)

from .cleaner import decode_clean_request
from .errors import NonContiguousAppend
from .partition_core import AppendInfo
from .partition_flush import PartitionFlush
from .producer_state import write_snapshot
from .segment import LogSegment

#: An AppendInfo from its fields without the NamedTuple's Python-level `__new__` (one per
#: append).
_new_info: Final = tuple.__new__


class PartitionAppend(PartitionFlush):
    """Appending batches, as the leader or as a follower copying its leader, and rolling
    segments."""

    def _roll_if_due(self, append_bytes: int, last_offset: int, max_ts: int, now_ms: int) -> None:
        active = self.segments[-1]
        if active.roll_due(
            append_bytes,
            last_offset,
            max_ts,
            self.config.segment_bytes,
            self.config.segment_ms,
            now_ms,
        ):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        active = self.segments[-1]
        if active.size_bytes == 0:
            return active
        active.seal()
        # Like Kafka, a snapshot per roll bounds the headers replayed after a crash. A lost
        # one only means more headers to replay: no fsync here, the next flush job syncs it.
        self._files_to_sync.add(
            write_snapshot(self.directory, self.log_end_offset, self.producer_state, False)
        )
        segment = self._new_segment(self.log_end_offset, now_ms, fresh=True)
        self._append_segment(segment)
        self._directory_dirty = True
        return segment

    def append(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Append validated batches as the leader, with one write.

        `headers` must describe batches tiling `records` from position 0 (as returned by
        `validate_produce_records`). Offsets are assigned from `log_end_offset`, the leader
        epoch is stamped, and with LogAppendTime the timestamp is set and the CRC recomputed.
        A writable `records` (bytearray, writable memoryview) is stamped in place, so the
        caller holds the batches as stored; anything else is copied once.
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        size = len(records)
        if headers[0].position != 0 or headers[-1].end_position != size:
            raise ValueError("headers do not tile the records buffer")
        count = 0
        for header in headers:
            count += header.last_offset_delta + 1
        first_offset = self.log_end_offset
        last_offset = first_offset + count - 1
        self._clock_ms = now_ms
        log_append_time_ms = now_ms if self.config.message_timestamp_type_log_append else -1
        if log_append_time_ms >= 0:
            max_timestamp, offset_of_max = log_append_time_ms, first_offset
        else:
            max_timestamp, offset_of_max = self._max_timestamp_of(headers, first_offset)
        self._roll_if_due(size, last_offset, max_timestamp, now_ms)

        buf: bytearray | memoryview
        if isinstance(records, bytearray) or (
            isinstance(records, memoryview) and not records.readonly
        ):
            buf = records
        else:
            buf = bytearray(records)
        stamp_batches(buf, headers, first_offset, leader_epoch)
        if log_append_time_ms >= 0:
            for header in headers:
                set_log_append_time(buf, header, log_append_time_ms)
        self.segments[-1].append(buf, headers, first_offset, log_append_time_ms)
        self.log_end_offset = last_offset + 1
        self._update_producer_state(buf, headers, first_offset, log_append_time_ms)
        self._unflushed_messages += count
        if leader_epoch >= 0 and self.epochs.assign(leader_epoch, first_offset):
            self._epochs_dirty = True
        return _new_info(
            AppendInfo,
            (first_offset, last_offset, log_append_time_ms, max_timestamp, offset_of_max, size),
        )

    def _update_producer_state(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        first_offset: int,
        log_append_time_ms: int,
    ) -> None:
        """Record just appended batches (in the active segment) in the producer state; an
        ABORT marker that ends a transaction gets its aborted-transaction index entry."""
        offset = first_offset
        for header in headers:
            if header.producer_id >= 0:
                timestamp = log_append_time_ms if log_append_time_ms >= 0 else header.max_timestamp
                marker = None
                if header.is_control:
                    marker = end_txn_marker(
                        memoryview(records)[header.position : header.end_position]
                    )
                completed = self.producer_state.update(header, offset, timestamp, marker)
                if completed is not None and completed.is_aborted:
                    self._index_aborted(self.segments[-1], completed)
            offset += header.last_offset_delta + 1

    @staticmethod
    def _max_timestamp_of(headers: list[BatchHeader], first_offset: int) -> tuple[int, int]:
        max_timestamp, offset_of_max = -1, -1
        offset = first_offset
        for header in headers:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, offset
            offset += header.last_offset_delta + 1
        return max_timestamp, offset_of_max

    def append_replicated(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append batches that already carry offsets and epochs (a follower copying its
        leader), `headers` as read from `records`. They must start at `log_end_offset` and
        be contiguous, else NonContiguousAppend and nothing is written. `now_ms` drives
        segment.ms rolling.
        """
        if not headers:
            raise ValueError("append needs at least one batch")
        size = len(records)
        if headers[0].position != 0 or headers[-1].end_position != size:
            raise ValueError("headers do not tile the records buffer")
        first_offset = expected = self.log_end_offset
        # Contiguity and the largest timestamp (`_max_timestamp_of`) in one pass.
        max_timestamp, offset_of_max = -1, -1
        for header in headers:
            if header.base_offset != expected:
                raise NonContiguousAppend(
                    f"batch at offset {header.base_offset}, expected {expected}"
                )
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, expected
            expected += header.last_offset_delta + 1
        if now_ms is not None:
            self._clock_ms = now_ms
        now = self._clock_ms
        self._roll_if_due(size, expected - 1, max_timestamp, now)
        self.segments[-1].append(records, headers, first_offset, as_stored=True)
        self.log_end_offset = expected
        self._update_producer_state(records, headers, first_offset, -1)
        self._unflushed_messages += expected - first_offset
        epochs = self.epochs
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch != epochs.latest_epoch:
                self._epochs_dirty |= epochs.assign(epoch, header.base_offset)
            if header.attributes & CONTROL_FLAG_MASK and header.producer_id < 0:
                request = decode_clean_request(
                    header, memoryview(records)[header.position : header.end_position]
                )
                if request is not None:
                    self.clean_requests.append(request)
        return _new_info(
            AppendInfo, (first_offset, expected - 1, -1, max_timestamp, offset_of_max, size)
        )
