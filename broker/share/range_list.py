"""The offset ranges of a share-partition, kept sorted in chunks (`RangeList`).

A share-partition on a priority or fair topic holds as many ranges as runs of records
acknowledged out of order: hundreds of thousands on a backlog of a million. In one Python
list, each split or merge moved the list's tail, so every fetch and acknowledgement paid
for the whole backlog. Here the ranges are held in chunks of at most `CHUNK_MAX`, each
with the first offsets of its ranges beside it, and the first offset of each chunk beside
the chunks: finding the range holding an offset is two bisections of integer lists, and a
split or merge moves at most one chunk's entries (and, when a chunk splits or empties, the
chunk list: a few thousand entries at a million ranges).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Generic, Protocol, TypeVar

#: Ranges per chunk: a chunk grown past it is split in two halves.
CHUNK_MAX = 512
#: A chunk shrunk below it is joined to the next one when both fit in one.
_CHUNK_LOW = CHUNK_MAX // 4


class Span(Protocol):
    """A range of offsets [first, last]; `first` never changes while it is in a list."""

    first: int
    last: int


R = TypeVar("R", bound=Span)


class RangeList(Generic[R]):
    """Disjoint ranges ascending by first offset. Callers may change a range's `last` in
    place (keeping the ranges disjoint) but never its `first`."""

    __slots__ = ("_chunks", "_firsts", "_heads", "_len")

    def __init__(self, ranges: Iterable[R] = ()) -> None:
        items = list(ranges)
        half = CHUNK_MAX // 2
        self._chunks: list[list[R]] = [items[i : i + half] for i in range(0, len(items), half)]
        self._firsts: list[list[int]] = [[r.first for r in chunk] for chunk in self._chunks]
        self._heads: list[int] = [firsts[0] for firsts in self._firsts]
        self._len = len(items)

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[R]:
        return chain.from_iterable(self._chunks)

    def __repr__(self) -> str:
        return f"RangeList({list(self)!r})"

    def first(self) -> R | None:
        return self._chunks[0][0] if self._chunks else None

    def last(self) -> R | None:
        return self._chunks[-1][-1] if self._chunks else None

    def _locate(self, offset: int) -> tuple[int, int]:
        """(chunk, index) of the last range whose first offset is at most `offset`; (-1, -1)
        when there is none."""
        c = bisect_right(self._heads, offset) - 1
        if c < 0:
            return -1, -1
        return c, bisect_right(self._firsts[c], offset) - 1

    def covering(self, offset: int) -> R | None:
        """The range holding `offset`, if any."""
        c = bisect_right(self._heads, offset) - 1
        if c < 0:
            return None
        r = self._chunks[c][bisect_right(self._firsts[c], offset) - 1]
        return r if r.last >= offset else None

    def overlapping(self, first: int, last: int) -> list[R]:
        """The ranges holding any offset of [first, last], ascending. Costs those ranges
        (and a bisection), not the ranges around them."""
        out: list[R] = []
        c, i = self._locate(first)
        if c < 0:
            c, i = 0, 0
        chunks = self._chunks
        while c < len(chunks):
            chunk = chunks[c]
            while i < len(chunk):
                r = chunk[i]
                if r.first > last:
                    return out
                if r.last >= first:
                    out.append(r)
                i += 1
            c, i = c + 1, 0
        return out

    def around(self, first: int, last: int) -> list[R]:
        """`overlapping(first, last)` with the range before and the range after them (when
        there are such): what a change of [first, last] may merge with."""
        out: list[R] = []
        c, i = self._locate(first)
        if c < 0:
            c, i = 0, 0
        elif i > 0:
            i -= 1
        elif c > 0:
            c, i = c - 1, len(self._chunks[c - 1]) - 1
        chunks = self._chunks
        while c < len(chunks):
            chunk = chunks[c]
            while i < len(chunk):
                r = chunk[i]
                out.append(r)
                if r.first > last:
                    return out
                i += 1
            c, i = c + 1, 0
        return out

    # -- changes ----------------------------------------------------------------------------

    def insert(self, r: R) -> None:
        """Add `r`, which overlaps none of the ranges."""
        if not self._chunks:
            self._chunks.append([r])
            self._firsts.append([r.first])
            self._heads.append(r.first)
            self._len = 1
            return
        c, i = self._locate(r.first)
        if c < 0:
            c, i = 0, -1
        self._chunks[c].insert(i + 1, r)
        self._firsts[c].insert(i + 1, r.first)
        if i < 0:
            self._heads[c] = r.first
        self._len += 1
        if len(self._chunks[c]) > CHUNK_MAX:
            self._split_chunk(c)

    def append(self, r: R) -> None:
        """Add `r`, which begins past the last range."""
        if self._chunks and len(self._chunks[-1]) < CHUNK_MAX:
            self._chunks[-1].append(r)
            self._firsts[-1].append(r.first)
            self._len += 1
        else:
            self.insert(r)

    def remove(self, r: R) -> None:
        """Take out `r` (a range of this list)."""
        c, i = self._locate(r.first)
        if c < 0 or self._chunks[c][i] is not r:
            raise ValueError(f"range at {r.first} is not in the list")
        self._delete(c, i)

    def pop_first(self) -> R:
        r = self._chunks[0][0]
        self._delete(0, 0)
        return r

    def drop_below(self, offset: int) -> None:
        """Take out every range beginning below `offset`."""
        while self._chunks and self._chunks[0][-1].first < offset:
            self._len -= len(self._chunks[0])
            del self._chunks[0], self._firsts[0], self._heads[0]
        if self._chunks:
            n = bisect_right(self._firsts[0], offset - 1)
            if n:
                del self._chunks[0][:n], self._firsts[0][:n]
                self._heads[0] = self._firsts[0][0]
                self._len -= n

    def _delete(self, c: int, i: int) -> None:
        chunk, firsts = self._chunks[c], self._firsts[c]
        del chunk[i], firsts[i]
        self._len -= 1
        if not chunk:
            del self._chunks[c], self._firsts[c], self._heads[c]
            return
        if i == 0:
            self._heads[c] = firsts[0]
        if (
            len(chunk) < _CHUNK_LOW
            and c + 1 < len(self._chunks)
            and len(chunk) + len(self._chunks[c + 1]) <= CHUNK_MAX
        ):
            chunk.extend(self._chunks[c + 1])
            firsts.extend(self._firsts[c + 1])
            del self._chunks[c + 1], self._firsts[c + 1], self._heads[c + 1]

    def _split_chunk(self, c: int) -> None:
        chunk, firsts = self._chunks[c], self._firsts[c]
        half = len(chunk) // 2
        self._chunks.insert(c + 1, chunk[half:])
        self._firsts.insert(c + 1, firsts[half:])
        self._heads.insert(c + 1, firsts[half])
        del chunk[half:], firsts[half:]

    def check(self) -> None:
        """Assert the list's invariants (for tests)."""
        assert len(self._chunks) == len(self._firsts) == len(self._heads)
        assert self._len == sum(len(chunk) for chunk in self._chunks)
        previous_last: int | None = None
        for chunk, firsts, head in zip(self._chunks, self._firsts, self._heads, strict=True):
            assert chunk and len(chunk) <= CHUNK_MAX and head == firsts[0]
            assert firsts == [r.first for r in chunk]
            for r in chunk:
                assert r.first <= r.last, r
                assert previous_last is None or previous_last < r.first, r
                previous_last = r.last
