"""The metadata quorum as a broker reports it (DescribeQuorum, `raftka cluster status`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class QuorumView:
    """The metadata quorum as this broker sees it (log end offsets: what the controller
    knows of each replica; -1 unknown)."""

    leader_id: int
    epoch: int
    high_watermark: int
    voters: frozenset[int]
    observers: frozenset[int]
    log_end_offsets: Mapping[int, int]
