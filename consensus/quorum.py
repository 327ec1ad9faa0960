"""Majority arithmetic: which offset a majority holds, and how an election stands.

Pure functions over plain mappings, so they can be tested exhaustively on their own.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping

from raftka.consensus.types import NodeId


def majority_size(voter_count: int) -> int:
    return voter_count // 2 + 1


def committed_end(voters: Collection[NodeId], match_ends: Mapping[NodeId, int]) -> int:
    """Largest log end offset that a majority of `voters` hold (exclusive, like Kafka's HW).

    A voter missing from `match_ends` holds nothing (0). With no voters nothing can be
    committed, so the answer is 0.
    """
    if not voters:
        return 0
    ends = sorted((match_ends.get(v, 0) for v in voters), reverse=True)
    return ends[majority_size(len(ends)) - 1]


class VoteResult(enum.Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def vote_result(voters: Collection[NodeId], votes: Mapping[NodeId, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority can no longer grant, else PENDING."""
    need = majority_size(len(voters))
    granted = sum(1 for v in voters if votes.get(v) is True)
    rejected = sum(1 for v in voters if votes.get(v) is False)
    if granted >= need:
        return VoteResult.WON
    if len(voters) - rejected < need:
        return VoteResult.LOST
    return VoteResult.PENDING
