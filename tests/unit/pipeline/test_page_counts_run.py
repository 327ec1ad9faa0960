"""PageCountsJob.run's bounded mode, with a stand-in for Spark's StreamingQuery (the loop's
timing is what is tested; the Spark end is tested in tests/compat/test_pipeline.py)."""

from __future__ import annotations

import io
import json
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


class _CutQuery(_Query):
    """A query that reports batch 0 and is stopped after batch 1 ran (its windows emitted) but
    before its progress was reported."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(clock, first_batch_at=0.0)

    @property
    def recentProgress(self) -> list[dict[str, Any]]:  # noqa: N802 - Spark's name
        return [{"batchId": 0, "numInputRows": 600}]


def _checkpoint(root: Any, *, committed: list[int], ends: dict[int, dict[str, int]]) -> None:
    for batch_id, partitions in ends.items():
        (root / "offsets").mkdir(exist_ok=True)
        (root / "offsets" / str(batch_id)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"events": partitions}) + "\n"
        )
    for batch_id in committed:
        (root / "commits").mkdir(exist_ok=True)
        (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


@pytest.mark.parametrize("committed", [True, False])
def test_a_batch_committed_before_the_stop_counts_though_its_progress_never_came(
    tmp_path: Any, committed: bool
) -> None:
    # Spark commits a batch, then reports its progress; a stop between the two left the run
    # saying "0 window(s) written" for windows it wrote, which no later run would repeat.
    _checkpoint(
        tmp_path,
        committed=[0, 1] if committed else [0],
        ends={0: {"0": 232, "1": 191, "2": 177}, 1: {"0": 240, "1": 191, "2": 180}},
    )
    clock = [0.0]
    query = _CutQuery(clock)
    out = io.StringIO()
    job = PageCountsJob(None, "127.0.0.1:1", str(tmp_path), out=out)  # type: ignore[arg-type]
    job.start = lambda **_: query  # type: ignore[method-assign]
    job.result.windows_by_batch.update({0: 0, 1: 15})
    result = job.run(duration_s=5, clock=lambda: clock[0])
    if committed:
        assert (result.batches, result.events, result.windows) == (2, 611, 15)
        assert "after 2 batch(es), 611 events read, 15 window(s) written" in out.getvalue()
    else:
        # Not committed: a later run repeats the batch, and counts it then.
        assert (result.batches, result.events, result.windows) == (1, 600, 0)
