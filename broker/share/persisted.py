"""A share-partition's persisted state: a whole snapshot, and the updates laid over it.

A snapshot holds everything (start offset, state epoch, the state batches from the start
to the last offset ever acquired, the kept priority changes and release delays). An update
holds what changed since the previous write: the new start offset, and for each changed
span of offsets the state batches, priorities and delays now in it, all of the span (an
entry of the span that the update leaves out is gone). `fold` lays updates over their
snapshot; the result is the state a whole snapshot written at the last update would hold.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raftka.broker.share.partition import StateBatch, merge_spans

#: [first, last] offsets, inclusive.
Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class PersistedState:
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    #: (offset, priority) of queued records whose priority was changed (raftka's own).
    priorities: tuple[tuple[int, int], ...] = ()
    #: (offset, epoch ms) of records released with a delay, not acquirable before then.
    delays: tuple[tuple[int, int], ...] = ()
    #: Which snapshot this is: updates name the snapshot they follow (0: one written
    #: without updates to follow, as every state before incremental writes).
    snapshot_id: int = 0


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """What changed since the previous write of the share-partition's state."""

    state_epoch: int
    #: The snapshot this update follows; the state leader refuses it after any other.
    snapshot_id: int
    start_offset: int
    #: Ascending, disjoint, none below `start_offset`.
    spans: tuple[Span, ...]
    batches: tuple[StateBatch, ...]
    priorities: tuple[tuple[int, int], ...] = ()
    delays: tuple[tuple[int, int], ...] = ()


def fold(snapshot: PersistedState, updates: Sequence[StateUpdate]) -> PersistedState:
    """The state `updates` (in the order written) make of `snapshot`. Each offset takes its
    state from the last update whose spans cover it (from the snapshot when none does),
    found in one sweep over all the updates' spans, so the cost is the snapshot's size plus
    the updates' total size (times a logarithm), whatever their number: a state partition's
    leader folds up to a snapshot interval of updates when a share-partition is loaded."""
    if not updates:
        return snapshot
    pieces = _newest_cover(updates)
    firsts = [p[0] for p in pieces]
    batches: list[StateBatch] = []
    for first, last, u in pieces:
        batches.extend(_clipped(updates[u].batches, first, last))

    def newest(offset: int) -> int:
        """The index of the last update covering `offset`, -1 for none."""
        i = bisect_right(firsts, offset) - 1
        return pieces[i][2] if i >= 0 and pieces[i][1] >= offset else -1

    priorities = {o: p for o, p in snapshot.priorities if newest(o) < 0}
    delays = {o: at for o, at in snapshot.delays if newest(o) < 0}
    for u, update in enumerate(updates):
        priorities.update((o, p) for o, p in update.priorities if newest(o) == u)
        delays.update((o, at) for o, at in update.delays if newest(o) == u)
    start = updates[-1].start_offset
    spans = merge_spans((first, last) for first, last, _u in pieces)
    combined = _overlay(list(snapshot.batches), spans, batches)
    return PersistedState(
        snapshot.state_epoch,
        start,
        tuple(_from_start(combined, start)),
        tuple(sorted((o, p) for o, p in priorities.items() if o >= start)),
        tuple(sorted((o, at) for o, at in delays.items() if o >= start)),
        snapshot.snapshot_id,
    )


def _newest_cover(updates: Sequence[StateUpdate]) -> list[tuple[int, int, int]]:
    """(first, last, u): the offsets the updates' spans cover, ascending and disjoint, each
    piece with the index of the last update covering it (adjacent pieces of one update
    joined). A sweep over the spans' ends with a heap of the spans open at each point."""
    spans = sorted(
        (first, last, u) for u, update in enumerate(updates) for first, last in update.spans
    )
    points = sorted({p for first, last, _u in spans for p in (first, last + 1)})
    pieces: list[tuple[int, int, int]] = []
    open_spans: list[tuple[int, int]] = []  # (-u, last)
    s = 0
    for here, after in zip(points, points[1:], strict=False):
        while s < len(spans) and spans[s][0] <= here:
            heapq.heappush(open_spans, (-spans[s][2], spans[s][1]))
            s += 1
        while open_spans and open_spans[0][1] < here:
            heapq.heappop(open_spans)
        if not open_spans:
            continue
        u = -open_spans[0][0]
        if pieces and pieces[-1][2] == u and pieces[-1][1] + 1 == here:
            pieces[-1] = (pieces[-1][0], after - 1, u)
        else:
            pieces.append((here, after - 1, u))
    return pieces


def _clipped(batches: Sequence[StateBatch], first: int, last: int) -> list[StateBatch]:
    """The parts of `batches` (ascending, disjoint) within [first, last]."""
    i = max(bisect_right(batches, first, key=lambda b: b.first) - 1, 0)
    out: list[StateBatch] = []
    while i < len(batches) and batches[i].first <= last:
        b = batches[i]
        if b.last >= first:
            out.append(
                StateBatch(max(b.first, first), min(b.last, last), b.state, b.delivery_count)
            )
        i += 1
    return out


def _overlay(
    base: list[StateBatch], spans: Sequence[Span], batches: Iterable[StateBatch]
) -> list[StateBatch]:
    """`base` with every offset of `spans` taken from `batches` instead (all inside
    `spans`); both ascending and disjoint."""
    out: list[StateBatch] = []
    j = 0
    for b in base:
        first = b.first
        while first <= b.last:
            while j < len(spans) and spans[j][1] < first:
                j += 1
            if j == len(spans) or spans[j][0] > b.last:
                out.append(StateBatch(first, b.last, b.state, b.delivery_count))
                break
            span_first, span_last = spans[j]
            if span_first > first:
                out.append(StateBatch(first, span_first - 1, b.state, b.delivery_count))
            first = span_last + 1
    out.extend(batches)
    out.sort(key=lambda b: b.first)
    return out


def _from_start(batches: list[StateBatch], start: int) -> list[StateBatch]:
    """The batches from `start` on, adjacent ones of one state and count joined (as
    `SharePartition.state_batches` writes them)."""
    out: list[StateBatch] = []
    for b in batches:
        if b.last < start:
            continue
        first = max(b.first, start)
        if (
            out
            and out[-1].last + 1 == first
            and out[-1].state == b.state
            and out[-1].delivery_count == b.delivery_count
        ):
            out[-1] = StateBatch(out[-1].first, b.last, b.state, b.delivery_count)
        else:
            out.append(StateBatch(first, b.last, b.state, b.delivery_count))
    return out
