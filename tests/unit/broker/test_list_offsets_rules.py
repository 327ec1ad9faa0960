"""ListOffsets answers of a leader whose high watermark has not reached its epoch start, and
of a replica asked for its own log (replica id -2, Kafka's debugging replica id)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.replica.manager import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    OffsetNotAvailable,
    lookup_offset,
    replica_partition,
)


@dataclass
class LogView:
    log_start_offset: int = 0
    log_end_offset: int = 0
    max_timestamp: tuple[int, int] | None = None
    by_timestamp: dict[int, tuple[int, int]] = field(default_factory=dict)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.by_timestamp.get(timestamp)

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        return self.max_timestamp


@dataclass
class LeaderView:
    """What lookup_offset reads of a partition; `behind`: a new leader below its epoch start."""

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
        lookup_offset(LeaderView(high_watermark=10, behind=True), LATEST, 0)
    assert lookup_offset(LeaderView(high_watermark=12, behind=False), LATEST, 0) == (12, -1)


def test_timestamp_lookup_past_the_high_watermark_waits_for_the_new_leader() -> None:
    log = LogView(by_timestamp={100: (5, 100), 200: (11, 200)})
    behind = LeaderView(high_watermark=10, behind=True, hosted_log=log)
    assert lookup_offset(behind, 100, 0) == (5, 100)  # below the high watermark: a real answer
    with pytest.raises(OffsetNotAvailable):
        lookup_offset(behind, 200, 0)
    assert lookup_offset(LeaderView(high_watermark=10, behind=False, hosted_log=log), 200, 0) == (
        -1,
        -1,
    )


def test_earliest_is_always_available() -> None:
    assert lookup_offset(LeaderView(high_watermark=0, behind=True), EARLIEST, 0) == (0, -1)


def test_a_replica_is_answered_up_to_its_log_end_not_the_high_watermark() -> None:
    log = LogView(log_start_offset=3, log_end_offset=15, by_timestamp={200: (11, 200)})
    follower = LeaderView(high_watermark=10, behind=False, hosted_log=log)
    assert lookup_offset(follower, LATEST, None) == (15, -1)
    assert lookup_offset(follower, EARLIEST, None) == (3, -1)
    assert lookup_offset(follower, 200, None) == (11, 200)  # past the high watermark, below the end
    assert lookup_offset(follower, LATEST, 0) == (
        10,
        -1,
    )  # a consumer still sees the high watermark
    assert lookup_offset(follower, 200, 0) == (-1, -1)


def test_a_replica_is_answered_even_while_a_new_leader_is_behind_its_epoch_start() -> None:
    log = LogView(log_end_offset=12, max_timestamp=(300, 11))
    behind = LeaderView(high_watermark=10, behind=True, hosted_log=log)
    assert lookup_offset(behind, LATEST, None) == (12, -1)
    assert lookup_offset(behind, MAX_TIMESTAMP, None) == (11, 300)
    assert lookup_offset(behind, MAX_TIMESTAMP, 0) == (-1, -1)


def replica(epoch: int, *, hosted: bool = True, offline: bool = False) -> Any:
    return SimpleNamespace(
        raft=object() if hosted else None,
        log=object() if hosted else None,
        leader_epoch=epoch,
        offline=offline,
    )


def test_any_hosted_replica_answers_at_its_epoch() -> None:
    follower = replica(4)
    assert replica_partition(follower, -1) is follower  # no epoch given: not fenced
    assert replica_partition(follower, 4) is follower
    assert replica_partition(follower, 3) == ErrorCode.fenced_leader_epoch
    assert replica_partition(follower, 5) == ErrorCode.unknown_leader_epoch
    assert replica_partition(replica(4, hosted=False), -1) == ErrorCode.not_leader_or_follower
    offline = replica(4, hosted=False, offline=True)  # its log directory failed here
    assert replica_partition(offline, -1) == ErrorCode.kafka_storage_error
    assert replica_partition(None, -1) == ErrorCode.unknown_topic_or_partition
