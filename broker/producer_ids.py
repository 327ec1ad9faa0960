"""Producer ids for InitProducerId, unique across the cluster and across restarts.

Each broker hands out ids `sequence * NODE_ID_SPACE + node_id` from a counter kept in lmdb
and reserved in blocks (committed before any id of a block is used; ids of a block unused at
shutdown are skipped), so two brokers never issue the same id and a restart never reuses one.
"""

from __future__ import annotations

from pathlib import Path

import lmdb
import trio

NODE_ID_SPACE = 1 << 16
BLOCK_SIZE = 1000
_NEXT_BLOCK_KEY = b"producer-ids/next-block"


class ProducerIdAllocator:
    def __init__(self, path: Path, node_id: int, block_size: int = BLOCK_SIZE) -> None:
        if not 0 <= node_id < NODE_ID_SPACE:
            raise ValueError(f"node.id must be below {NODE_ID_SPACE}, got {node_id}")
        path.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.block_size = block_size
        self._env = lmdb.open(str(path), map_size=1 << 20, subdir=True)
        self._sequences = range(0)
        self._reserving = trio.Lock()

    async def next_producer_id(self) -> int:
        """A new id; reserving a block commits (and fsyncs) lmdb in a worker thread."""
        async with self._reserving:
            if not self._sequences:
                start = await trio.to_thread.run_sync(self._reserve_block)
                self._sequences = range(start, start + self.block_size)
            sequence = self._sequences[0]
            self._sequences = self._sequences[1:]
        return sequence * NODE_ID_SPACE + self.node_id

    def _reserve_block(self) -> int:
        with self._env.begin(write=True) as txn:
            raw = txn.get(_NEXT_BLOCK_KEY)
            start = int(raw) if raw is not None else 0
            txn.put(_NEXT_BLOCK_KEY, str(start + self.block_size).encode())
        return start

    def close(self) -> None:
        self._env.close()
