"""When the metadata image is retained as a snapshot and the metadata log truncated behind
it (Kafka's `metadata.log.max.record.bytes.between.snapshots` and
`metadata.log.max.snapshot.interval.ms`). Pure: the caller gives the time."""

from __future__ import annotations


class SnapshotRetention:
    """The retained snapshot (the image below the metadata log's start, what a broker that
    needs older offsets is sent) and when the next one is due."""

    def __init__(
        self, max_bytes: int, max_interval_s: float, retained: tuple[int, bytes] | None
    ) -> None:
        self.max_bytes = max_bytes
        #: 0: no time limit.
        self.max_interval_s = max_interval_s
        #: (end offset, image JSON) of the retained snapshot, if one was taken.
        self.retained = retained
        #: When the snapshot was last retained (or counting started), in loop seconds.
        self.retained_at: float | None = None
        self.bytes_since_retained = 0

    @property
    def retained_end(self) -> int:
        """The offset the retained snapshot ends at (0: none)."""
        return self.retained[0] if self.retained is not None else 0

    def start(self, now_s: float) -> None:
        """Count the interval from `now_s` if nothing was retained since this broker started."""
        if self.retained_at is None:
            self.retained_at = now_s

    def applied(self, size_bytes: int) -> None:
        """`size_bytes` more of the metadata log were applied to the image."""
        self.bytes_since_retained += size_bytes

    def due(self, applied_end: int, log_start_offset: int, now_s: float) -> bool:
        """Whether the image applied up to `applied_end` should be retained now: it is past
        both the retained snapshot and the log start, and enough bytes or time went by."""
        if applied_end <= max(self.retained_end, log_start_offset):
            return False
        if self.bytes_since_retained >= self.max_bytes:
            return True
        return (
            self.max_interval_s > 0
            and self.retained_at is not None
            and now_s - self.retained_at >= self.max_interval_s
        )

    def retain(self, end: int, raw: bytes, now_s: float) -> None:
        """The image below `end` (JSON `raw`) is durable and retained."""
        self.retained = (end, raw)
        self.retained_at = now_s
        self.bytes_since_retained = 0

    def snapshot_ending_at(self, end: int) -> bytes | None:
        """The retained image if it ends at `end` (the log start); None otherwise."""
        if self.retained is None or self.retained[0] != end:
            return None
        return self.retained[1]
