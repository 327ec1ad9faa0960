"""PageCountsJob.run's bounded mode, with a stand-in for Spark's StreamingQuery (the loop's
timing is what is tested; the Spark end is tested in tests/compat/test_pipeline.py)."""

from __future__ import annotations

import io
from typing import Any

import pytest

pytest.importorskip("pyspark")

from raftka.pipeline.page_counts import PageCountsJob  # noqa: E402


class _Query:
    """A query whose first micro-batch finishes at `first_batch_at` seconds."""

    def __init__(self, clock: list[float], first_batch_at: float) -> None:
        self.clock = clock
        self.first_batch_at = first_batch_at
        self.isActive = True
        self.stopped_at: float | None = None

    @property
    def recentProgress(self) -> list[dict[str, Any]]:  # noqa: N802 - Spark's name
        if self.clock[0] < self.first_batch_at:
            return []
        return [{"batchId": 0, "numInputRows": 5}]

    def awaitTermination(self, timeout_s: float) -> None:  # noqa: N802 - Spark's name
        self.clock[0] += timeout_s

    def exception(self) -> None:
        return None

    def stop(self) -> None:
        self.stopped_at = self.clock[0]
        self.isActive = False


@pytest.mark.parametrize("first_batch_at", [0.5, 100.0])
def test_duration_counts_from_the_first_finished_batch(first_batch_at: float) -> None:
    clock = [0.0]
    query = _Query(clock, first_batch_at)
    job = PageCountsJob(None, "127.0.0.1:1", "/nonexistent", out=io.StringIO())  # type: ignore[arg-type]
    job.start = lambda **_: query  # type: ignore[method-assign]
    result = job.run(duration_s=20, clock=lambda: clock[0])
    assert result.batches == 1
    assert query.stopped_at is not None
    # Stopped 20 s (give or take a one-second poll) after the batch, not after the start.
    assert first_batch_at + 20 <= query.stopped_at <= first_batch_at + 22
