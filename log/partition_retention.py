"""How old data leaves a partition's log: whole segments deleted by retention.ms and
retention.bytes, and the log start moved forward by DeleteRecords.
"""

from __future__ import annotations

import logging

from .errors import OffsetOutOfRange
from .partition_core import PartitionCore

logger = logging.getLogger("raftka.log")


class PartitionRetention(PartitionCore):
    """Deleting old data: retention by time and size, and DeleteRecords."""

    def _delete_first_segment(self) -> None:
        segment = self.segments.pop(0)
        self._bases.pop(0)
        segment.delete()
        self._directory_dirty = True
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self._epochs_dirty |= self.epochs.truncate_from_start(self.log_start_offset)

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete whole old segments by retention.ms (a segment's largest timestamp, or its
        file time if it has none) and retention.bytes, oldest first, unless cleanup.policy
        lacks delete. Never deletes the active segment, nor one with offsets at or above
        `high_watermark`. Returns how many went.
        """
        limit = self.log_end_offset if high_watermark is None else high_watermark
        self.producer_state.remove_expired(now_ms)
        deleted = 0
        if not self.config.delete:
            return 0  # cleanup.policy=compact: the cleaner alone removes records
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while len(self.segments) > 1 and self.segments[1].base_offset <= limit:
                segment = self.segments[0]
                largest = (
                    segment.max_timestamp
                    if segment.max_timestamp >= 0
                    else segment.last_modified_ms()
                )
                if now_ms - largest <= retention_ms:
                    break
                self._delete_first_segment()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            while (
                len(self.segments) > 1
                and self.segments[1].base_offset <= limit
                and excess >= self.segments[0].size_bytes
            ):
                excess -= self.segments[0].size_bytes
                self._delete_first_segment()
                deleted += 1
        if deleted:
            logger.info(
                "%s: retention deleted %d segments",
                self.directory,
                deleted,
                extra={"partition": self.directory.name},
            )
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """Advance `log_start_offset` to `offset` (DeleteRecords); returns the new value.

        Segments wholly below it are deleted. Raises OffsetOutOfRange past the log end.
        """
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._log_start_dirty = True
            self._epochs_dirty |= self.epochs.truncate_from_start(offset)
            while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
                self._delete_first_segment()
        return self.log_start_offset
