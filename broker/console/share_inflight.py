"""A share-partition's records in flight as the console shows them: by state and by
delivery count, from the state of a share-partition this broker leads."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from raftka.broker.share.partition import RecordState

if TYPE_CHECKING:
    from raftka.broker.share.partition import SharePartition


def deliveries_text(state: SharePartition) -> str:
    """Records in flight per delivery count, `COUNT: RECORDS` ascending ("none" when no
    record is in flight)."""
    by_count: Counter[int] = Counter()
    for r in state.ranges:
        by_count[r.delivery_count] += r.last - r.first + 1
    if not by_count:
        return "none"
    return ", ".join(f"{count}: {records}" for count, records in sorted(by_count.items()))


def inflight_cells(state: SharePartition) -> list[int | str]:
    """Acquired, available, acknowledged and archived records in flight, and by delivery
    count, of a share-partition this broker leads."""
    counts = state.counts()
    return [
        counts[RecordState.ACQUIRED],
        counts[RecordState.AVAILABLE],
        counts[RecordState.ACKNOWLEDGED],
        counts[RecordState.ARCHIVED],
        deliveries_text(state),
    ]
