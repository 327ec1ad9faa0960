"""Producer ids for InitProducerId, unique across the cluster and across restarts.

Each broker hands out ids `sequence * NODE_ID_SPACE + node_id` from a counter kept in lmdb
and reserved in blocks (committed before any id of a block is used; ids of a block unused at
shutdown are skipped), so two brokers never issue the same id and a restart never reuses one.
No id below the cluster's producer id floor (raised by `raftka restore`, kept in the metadata
image) is handed out: the allocator skips to sequences whose ids all lie at or above it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lmdb
import trio

NODE_ID_SPACE = 1 << 16
BLOCK_SIZE = 1000
_NEXT_BLOCK_KEY = b"producer-ids/next-block"


def first_sequence_at_or_above(floor: int, node_id: int) -> int:
    """The smallest sequence whose id `sequence * NODE_ID_SPACE + node_id` is >= `floor`."""
    return max(0, -(-(floor - node_id) // NODE_ID_SPACE))


class ProducerIdAllocator:
    def __init__(
        self,
        path: Path,
        node_id: int,
        block_size: int = BLOCK_SIZE,
        floor: Callable[[], int] = lambda: 0,
    ) -> None:
        """`floor` returns the cluster's producer id floor at the time of a call."""
        if not 0 <= node_id < NODE_ID_SPACE:
            raise ValueError(f"node.id must be below {NODE_ID_SPACE}, got {node_id}")
        path.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.block_size = block_size
        self._floor = floor
        self._env = lmdb.open(str(path), map_size=1 << 20, subdir=True)
        self._sequences = range(0)
        self._reserving = trio.Lock()

    async def next_producer_id(self) -> int:
        """A new id, at or above the floor; reserving a block commits (and fsyncs) lmdb in a
        worker thread."""
        async with self._reserving:
            lowest = first_sequence_at_or_above(self._floor(), self.node_id)
            if self._sequences and self._sequences[-1] < lowest:
                self._sequences = range(0)  # the whole block lies below the floor
            if not self._sequences:
                start = await trio.to_thread.run_sync(self._reserve_block, lowest)
                self._sequences = range(start, start + self.block_size)
            sequence = max(self._sequences[0], lowest)
            self._sequences = range(sequence + 1, self._sequences.stop)
        return sequence * NODE_ID_SPACE + self.node_id

    def _reserve_block(self, lowest: int) -> int:
        """Reserve the next block, starting no lower than sequence `lowest`."""
        with self._env.begin(write=True) as txn:
            raw = txn.get(_NEXT_BLOCK_KEY)
            start = max(int(raw) if raw is not None else 0, lowest)
            txn.put(_NEXT_BLOCK_KEY, str(start + self.block_size).encode())
        return start

    def close(self) -> None:
        self._env.close()
