"""The history of a run: one JSON object per line, in the order events were recorded.

Every event has `t` (seconds since the run's start, monotonic clock) and `type`; operations
that take time also have `t0`, when they were invoked. The types, and what the checker reads
from them:

- `send`: `process`, `value`, `t0`, `outcome` (`ok` with `partition` and `offset`, `failed`
  with `error`, or `unknown` when the producer cannot tell: a timeout, or still in flight at
  the end).
- `poll`: `process`, `records` ([partition, offset, value], in the order the consumer
  returned them); `poll-error`: `process`, `error`.
- `assign`: `process`, `partitions`, `how` (`assign` or `rebalance`): a new assignment epoch,
  after which a consumer may legitimately read a partition from another position.
- `commit`: `process`, `group`, `t0`, `offsets` ({partition: next offset}), `outcome`
  (`ok` or `failed` with `error`); `committed`: `process`, `group`, `t0`, `offsets` read back
  with OffsetFetch (-1: none).
- `nemesis`: `name`, `phase` (`start` with `t0` when injecting began / `end` / `info`),
  `detail`; `phase`: `name`, a step of the run (faults, healed, final read).
- `final-read`: `complete`, `high_watermarks`, `positions` (records are `poll` events of
  process `final`).
- `replicas`: `identical`, `partitions` (per partition, per node: bytes and digest of the
  concatenated segment files), `diffs`.
- `quorum`: `voters`, `observers`, `want` (every broker): the metadata quorum once healed,
  in a run with the `membership` nemesis.
- `node-exit`: `node`, `code`, `log_tail`: a broker exited without a nemesis stopping it;
  `unclean-stop`: `node`, `detail`: SIGTERM did not end in exit code 0 in time.
- `workload-error`: `process`, `error`, `traceback`; `client-fatal`: `process`, `error`.
- `provenance`: `duplicates`: {value: [[partition, offset, producer id, producer epoch,
  sequence]]} of duplicated values, from a replica's log; `client-epoch`: `process`,
  `detail`: librdkafka's idempotent producer bumped its epoch or saw a sequence error.
- `client-protocol-error`: `process`, `detail` (a response the client could not parse; the
  first few per client); `client-protocol-errors`: `failures` per client, at the end.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class History:
    """Appends events to a JSON-lines file; safe to call from every worker thread.

    Each line is flushed as it is written, so a run that dies still leaves its history.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.events_written = 0
        self.counts: Counter[str] = Counter()  # by type, sends by `send:<outcome>`

    def now(self) -> float:
        """Seconds since the history was opened (the `t` of events recorded now)."""
        return time.monotonic() - self._start

    def record(self, event_type: str, **fields: Any) -> Event:
        """Write one event stamped with the current time; returns it."""
        with self._lock:
            event = {"t": round(self.now(), 6), "type": event_type, **fields}
            if not self._file.closed:
                self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
                self._file.flush()
                self.events_written += 1
            self.counts[event_type] += 1
            if event_type == "send":
                self.counts[f"send:{fields['outcome']}"] += 1
            return event

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_history(path: Path) -> Iterator[Event]:
    """The events of a history file, in file order; a torn last line is ignored."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if not line.endswith("\n"):
                break
            yield json.loads(line)
