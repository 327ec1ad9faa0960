"""A share-partition's persisted state: a whole snapshot, and the updates laid over it.

A snapshot holds everything (start offset, state epoch, the state batches from the start
to the last offset ever acquired, the kept priority changes and release delays). An update
holds what changed since the previous write: the new start offset, and for each changed
span of offsets the state batches, priorities and delays now in it, all of the span (an
entry of the span that the update leaves out is gone). `fold` lays updates over their
snapshot; the result is the state a whole snapshot written at the last update would hold.
"""

from __future__ import annotations

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
    """The state `updates` (in the order written) make of `snapshot`. The updates are first
    combined among themselves (each is small), then laid over the snapshot in one pass, so
    the cost is the snapshot's size plus the updates' total size times their number."""
    if not updates:
        return snapshot
    spans: list[Span] = []
    batches: list[StateBatch] = []
    priorities: dict[int, int] = {}
    delays: dict[int, int] = {}
    for update in updates:
        batches = _overlay(batches, update.spans, update.batches)
        spans = merge_spans([*spans, *update.spans])
        _replace_within(priorities, update.spans, update.priorities)
        _replace_within(delays, update.spans, update.delays)
    start = updates[-1].start_offset
    combined = _overlay(list(snapshot.batches), spans, batches)
    kept_priorities = {o: p for o, p in snapshot.priorities if not _covered(spans, o)}
    kept_priorities.update(priorities)
    kept_delays = {o: at for o, at in snapshot.delays if not _covered(spans, o)}
    kept_delays.update(delays)
    return PersistedState(
        snapshot.state_epoch,
        start,
        tuple(_from_start(combined, start)),
        tuple(sorted((o, p) for o, p in kept_priorities.items() if o >= start)),
        tuple(sorted((o, at) for o, at in kept_delays.items() if o >= start)),
        snapshot.snapshot_id,
    )


def _covered(spans: Sequence[Span], offset: int) -> bool:
    i = bisect_right(spans, offset, key=lambda s: s[0]) - 1
    return i >= 0 and spans[i][1] >= offset


def _replace_within(
    entries: dict[int, int], spans: Sequence[Span], replacing: Iterable[tuple[int, int]]
) -> None:
    for offset in [o for o in entries if _covered(spans, o)]:
        del entries[offset]
    entries.update(replacing)


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
