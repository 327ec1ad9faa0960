"""Cancelling a cleaning: the worker thread stops before its log is released and leaves no
staging folder or swap marker behind; a snapshot install drops a marker already there."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from test_log_cleaner import (
    T0,
    batches_of,
    open_log,
    random_ops,
    request_clean,
    write_ops,
)

from raftka.broker.compaction import LogCleaner
from raftka.broker.config import BrokerConfig
from raftka.log.cleaner import (
    CLEANER_STAGING_DIR,
    CLEANER_SWAP_FILE,
    CleaningCancelled,
    CleaningJob,
    CleanRequest,
)


def segment_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def test_a_cancelled_cleaning_stops_its_thread_and_leaves_no_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory)
    write_ops(log, random_ops(5))
    request = request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    log.flush()
    rewriting = threading.Event()
    original = CleaningJob._clean_segment

    def slow_rewrite(self: CleaningJob, *args: Any) -> Any:
        self.throttle.bytes_per_second = 1.0  # the rewrite would now take hours
        rewriting.set()
        return original(self, *args)

    monkeypatch.setattr(CleaningJob, "_clean_segment", slow_rewrite)
    cleaner = LogCleaner.__new__(LogCleaner)
    cleaner.config = BrokerConfig(environ={})  # the cleaner's rate: unbounded
    partition = SimpleNamespace(log=log, name="t-0", topic=SimpleNamespace(name="t"))
    jobs: list[CleaningJob] = []
    start_cleaning = log.start_cleaning

    def record_job(*args: Any) -> CleaningJob:
        jobs.append(start_cleaning(*args))
        return jobs[-1]

    monkeypatch.setattr(log, "start_cleaning", record_job)
    before = segment_files(directory)
    batches_before = batches_of(log)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def clean() -> None:
                with scope:
                    await cleaner._carry_out(partition, log, request)  # type: ignore[arg-type]

            nursery.start_soon(clean)
            with trio.fail_after(10):
                while not rewriting.is_set():
                    await trio.sleep(0.01)
            scope.cancel()

    trio.run(main)
    (job,) = jobs
    assert not (directory / CLEANER_STAGING_DIR).exists(), "the thread stopped and cleaned up"
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert job.done.is_set(), "the cleaning thread ended before the cancelled call returned"
    assert all(source.fd == -1 for source in job.sources)
    assert log.clean_requests == [request], "the request is still to be carried out"
    log.close()
    reopened = open_log(directory)
    assert segment_files(directory) == before
    assert batches_of(reopened) == batches_before
    assert reopened.clean_requests == [request]


def test_a_job_writes_no_marker_once_its_log_is_closed(tmp_path: Path) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory)
    write_ops(log, random_ops(6))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    job = log.start_cleaning(log.clean_requests[0], T0, float("inf"))
    log.close()
    with pytest.raises(CleaningCancelled):
        job.run()
    log.abandon_cleaning(job)
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert not (directory / CLEANER_STAGING_DIR).exists()


def test_a_snapshot_install_drops_a_staged_cleaning(tmp_path: Path) -> None:
    directory = tmp_path / "p-0"
    log = open_log(directory)
    write_ops(log, random_ops(7))
    request_clean(log, CleanRequest(0, log.log_end_offset, T0, 1000, 1 << 20))
    job = log.start_cleaning(log.clean_requests[0], T0, float("inf"))
    job.run()  # staged and committed by the marker, not yet swapped in
    assert (directory / CLEANER_SWAP_FILE).exists()
    start = log.log_end_offset + 100
    log.truncate_fully_and_start_at(start, T0, epoch=5)
    log.abandon_cleaning(job)
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert not (directory / CLEANER_STAGING_DIR).exists()
    log.close()
    reopened = open_log(directory)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, start)
    assert batches_of(reopened) == []
    assert [segment.base_offset for segment in reopened.segments] == [start]
