"""When the metadata image is retained as a snapshot: bytes applied or time since the last."""

from __future__ import annotations

from raftka.broker.clock import ManualClock
from raftka.broker.cluster.retention import SnapshotRetention


def test_due_after_enough_bytes_past_the_log_start() -> None:
    retention = SnapshotRetention(max_bytes=100, max_interval_s=0, retained=None)
    retention.start(0.0)
    retention.applied(99)
    assert not retention.due(applied_end=10, log_start_offset=0, now_s=1e9)
    retention.applied(1)
    assert retention.due(applied_end=10, log_start_offset=0, now_s=0.0)
    assert not retention.due(applied_end=10, log_start_offset=10, now_s=0.0), "nothing new"


def test_due_after_the_interval_counted_from_start_or_the_last_retention() -> None:
    clock = ManualClock()
    retention = SnapshotRetention(max_bytes=1 << 30, max_interval_s=60, retained=None)
    assert not retention.due(5, 0, clock.now_s()), "not started: no interval yet"
    retention.start(clock.now_s())
    clock.advance(59)
    assert not retention.due(5, 0, clock.now_s())
    clock.advance(1)
    assert retention.due(5, 0, clock.now_s())
    retention.retain(5, b"{}", clock.now_s())
    clock.advance(60)
    assert not retention.due(5, 0, clock.now_s()), "nothing applied past the retained one"
    assert retention.due(6, 0, clock.now_s())


def test_the_retained_snapshot_is_served_only_for_its_end() -> None:
    retention = SnapshotRetention(max_bytes=10, max_interval_s=0, retained=(7, b"old"))
    assert retention.retained_end == 7
    assert retention.snapshot_ending_at(7) == b"old"
    assert retention.snapshot_ending_at(8) is None
    retention.applied(50)
    retention.retain(9, b"new", 3.0)
    assert (retention.retained, retention.bytes_since_retained) == ((9, b"new"), 0)
    assert retention.snapshot_ending_at(7) is None
    assert not retention.due(9, 0, 3.0)
