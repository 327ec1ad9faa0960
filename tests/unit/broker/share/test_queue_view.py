"""A share-partition's queue view: the lag (records past the start offset not yet
acknowledged or archived) split into available, delayed and acquired, on a priority index
with a record delayed by its header and one by a delayed release."""

from __future__ import annotations

from raftka.broker.share.delivery_index import DeliveryIndex, IndexedOrder, offset_of, runs_of
from raftka.broker.share.partition import AckType, SharePartition
from raftka.broker.share.queue_view import queue_view

NOW = 1_700_000_000_000
LIMIT = 5


def test_the_view_splits_the_lag() -> None:
    state = SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(True, 0), 0)
    later = str(NOW + 1000).encode()
    index.add([(o, (b"1", None)) for o in range(5)] + [(5, (b"0", later))], 6)
    keys = index.take(state, NOW, 3)
    offsets = [offset_of(k) for k in keys]
    assert sorted(offsets) == [0, 1, 2]
    state.acquire_offsets("m", runs_of(offsets), 0, 30_000)
    index.acquired(keys)
    assert state.acknowledge("m", 2, 2, [AckType.ACCEPT], LIMIT) == 0
    assert state.delay_release("m", 1, NOW + 500)
    assert state.acknowledge("m", 1, 1, [AckType.RELEASE], LIMIT) == 0

    view = queue_view(state, index, 6, NOW)
    # 2 done; 0 acquired; 1 (its release) and 5 (its header) delayed; 3 and 4 available.
    assert (view.start_offset, view.log_end_offset) == (0, 6)
    assert (view.acknowledged, view.archived, view.lag) == (1, 0, 5)
    assert (view.acquired, view.delayed, view.available) == (1, 2, 2)
    # Past both times nothing is delayed; records not read into the index yet are
    # available (the log end counts them).
    later_view = queue_view(state, index, 8, NOW + 2000)
    assert (later_view.lag, later_view.delayed, later_view.available) == (7, 0, 6)
    # A plain fifo topic has no index and nothing delayed.
    assert queue_view(state, None, 6, NOW).delayed == 0
