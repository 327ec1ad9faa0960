"""Random append / truncate / flush / reopen sequences against a list-of-batches model."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from batches import encode_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import iter_batch_headers, validate_produce_records

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100)

append = st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 3), st.integers(0, 90))
truncate = st.tuples(st.just("truncate"), st.integers(0, 200), st.just(0), st.just(0))
other = st.tuples(
    st.sampled_from(["flush", "job", "jobs", "close", "kill", "roll"]),
    st.just(0),
    st.just(0),
    st.just(0),
)
steps = st.lists(st.one_of(append, append, append, truncate, other), max_size=30)


def kill(log: PartitionLog) -> None:
    for segment in log.segments:
        for index in (segment.offset_index, segment.time_index):
            index.write_pending()
        segment.release()  # the descriptor goes with the process


def check(log: PartitionLog, model: list[tuple[int, int, int]]) -> None:
    end = model[-1][1] + 1 if model else log.log_start_offset
    assert log.log_end_offset == end
    got = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 300, log.log_end_offset, True)
        assert data
        for header in iter_batch_headers(data):
            got.append((header.base_offset, header.last_offset, header.partition_leader_epoch))
            offset = header.next_offset
    assert got == model
    assert log.read(log.log_end_offset, 100, log.log_end_offset, True) == b""
    # The zero-copy path (batch headers only, the last appends' from memory) finds the
    # bytes a read finds, from every offset and under every limit.
    for offset in range(log.log_start_offset, log.log_end_offset):
        for max_bytes, max_offset in ((1, end), (150, end), (300, (offset + end + 1) // 2)):
            found = log.fetch_slice(offset, max_bytes, max_offset, True)
            sliced = b"" if found is None else found.segment.pread(found.length, found.position)
            assert sliced == log.read(offset, max_bytes, max_offset, True)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps)
def test_random_operations_keep_log_consistent(
    ops: list[tuple[str, int, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = PartitionLog.open(directory, CONFIG, NOW)
        model: list[tuple[int, int, int]] = []  # (base offset, last offset, epoch)
        epoch = 0
        jobs: list[Callable[[], None]] = []
        for op, a, b, c in ops:
            if op == "append":
                epoch = max(epoch, b)
                batch = encode_batch(count=a, value_size=c)
                info = log.append(batch, validate_produce_records(batch, 1 << 20), epoch, NOW)
                model.append((info.first_offset, info.last_offset, epoch))
            elif op == "truncate" and model:
                target = a % (log.log_end_offset + 1)
                log.truncate_to(target)
                model = [m for m in model if m[1] < target]
                if model:
                    epoch = model[-1][2]
            elif op == "flush":
                log.flush(NOW)
            elif op == "job":
                job = log.flush_job(NOW)
                if job is not None:
                    jobs.append(job)
            elif op == "jobs":
                for job in reversed(jobs):
                    job()
                jobs.clear()
            elif op == "roll":
                log.roll(NOW)
            elif op in ("close", "kill"):
                if op == "close":
                    log.close()
                else:
                    kill(log)
                jobs.clear()  # a job outliving its process never runs
                log = PartitionLog.open(directory, CONFIG, NOW)
            check(log, model)
            assert log.recovery_point <= log.log_end_offset
            assert [e for e, _ in log.epochs.entries] == sorted({m[2] for m in model})
        log.close()
