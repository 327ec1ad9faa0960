"""A share-partition as a queue's user sees it, from the state its leader holds: the
records waiting (Kafka's lag: past the start offset and neither acknowledged nor archived)
split into available now, delayed (not acquirable before a later time) and acquired (in
flight), beside those acknowledged and archived past the start offset.

The lag is honest on a priority or fair topic, where records far past the start offset are
done while older ones wait: it is not the log end offset minus the start offset."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from raftka.broker.share.partition import RecordState

if TYPE_CHECKING:
    from raftka.broker.share.delivery_index import DeliveryIndex
    from raftka.broker.share.partition import SharePartition


@dataclass(frozen=True, slots=True)
class QueueView:
    start_offset: int
    log_end_offset: int
    #: available + delayed + acquired.
    lag: int
    available: int
    delayed: int
    acquired: int
    acknowledged: int
    archived: int

    def as_json(self) -> dict[str, int]:
        return asdict(self)


def queue_view(
    state: SharePartition, index: DeliveryIndex | None, high_watermark: int, now_wall_ms: int
) -> QueueView:
    """The view of `state` (its `index` filled up to `high_watermark`, None on a plain fifo
    topic, whose records are never delayed) at wall time `now_wall_ms`."""
    counts = state.counts()
    acknowledged = counts[RecordState.ACKNOWLEDGED]
    archived = counts[RecordState.ARCHIVED]
    acquired = counts[RecordState.ACQUIRED]
    lag = max(0, high_watermark - state.start_offset - acknowledged - archived)
    delayed = 0 if index is None else index.delayed(state, now_wall_ms)
    return QueueView(
        start_offset=state.start_offset,
        log_end_offset=high_watermark,
        lag=lag,
        available=max(0, lag - acquired - delayed),
        delayed=delayed,
        acquired=acquired,
        acknowledged=acknowledged,
        archived=archived,
    )
