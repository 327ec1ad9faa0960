"""ListOffsets answers of a leader whose high watermark has not reached its epoch start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from raftka.broker.handlers.list_offsets import EARLIEST, LATEST, OffsetNotAvailable, _lookup


@dataclass
class LogView:
    log_start_offset: int = 0
    by_timestamp: dict[int, tuple[int, int]] = field(default_factory=dict)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.by_timestamp.get(timestamp)


@dataclass
class LeaderView:
    """What _lookup reads of a partition; `behind`: a new leader below its epoch start."""

    high_watermark: int
    behind: bool
    hosted_log: Any = field(default_factory=LogView)

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def high_watermark_behind_epoch_start(self) -> bool:
        return self.behind


def test_latest_is_not_available_until_the_new_leader_commits_its_epoch_start() -> None:
    with pytest.raises(OffsetNotAvailable):
        _lookup(LeaderView(high_watermark=10, behind=True), LATEST, 0)
    assert _lookup(LeaderView(high_watermark=12, behind=False), LATEST, 0) == (12, -1)


def test_timestamp_lookup_past_the_high_watermark_waits_for_the_new_leader() -> None:
    log = LogView(by_timestamp={100: (5, 100), 200: (11, 200)})
    behind = LeaderView(high_watermark=10, behind=True, hosted_log=log)
    assert _lookup(behind, 100, 0) == (5, 100)  # below the high watermark: a real answer
    with pytest.raises(OffsetNotAvailable):
        _lookup(behind, 200, 0)
    assert _lookup(LeaderView(high_watermark=10, behind=False, hosted_log=log), 200, 0) == (-1, -1)


def test_earliest_is_always_available() -> None:
    assert _lookup(LeaderView(high_watermark=0, behind=True), EARLIEST, 0) == (0, -1)
