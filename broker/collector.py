"""The cyclic garbage collector of a serving broker process.

CPython's collector, with its default thresholds (700, 10, 10), runs a young collection every
700 container allocations and a full one, which walks every tracked object, whenever the
survivors grow by a quarter. A broker allocates a few dozen containers per request and holds
some 70,000 long-lived objects once started (configs, the schema, the metadata image): under
one-record Produce load the full collections alone took 15-25% of its CPU.

So once the broker serves: a full collection, then `gc.freeze()`, which moves everything alive
into a permanent generation no collection walks again, and a young generation of
`YOUNG_THRESHOLD` allocations. Cycles made later are collected as before; only what the start
left alive is never looked at again. Set by `raftka serve` for its own process (never by
in-process tests, which share one interpreter).
"""

from __future__ import annotations

import gc

#: Container allocations (net of deallocations) between young collections; CPython's is 700.
YOUNG_THRESHOLD = 20_000
#: Young collections between middle ones, and middle between full (CPython's: 10 and 10).
OLDER_THRESHOLD = 20


def settle_after_start() -> None:
    """Collect once, freeze what survives, and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
