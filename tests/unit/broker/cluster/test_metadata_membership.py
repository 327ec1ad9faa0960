"""The metadata group's membership changes: each committed, and Kafka's errors when one
cannot be made (virtual time: trio's MockClock, read through the broker's clock)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from raftka.broker.clock import SYSTEM_CLOCK
from raftka.broker.cluster.control.voters import VoterStep
from raftka.broker.cluster.membership import MetadataMembership
from raftka.broker.cluster.validation import TopicError
from raftka.consensus.core import ConfigChangeError, NotLeaderError
from raftka.consensus.types import Role


class FakeRaft:
    """A metadata Raft group led here whose changes commit unless told otherwise."""

    def __init__(self, refuse: Exception | None = None, commits: bool = True) -> None:
        self.refuse = refuse
        self.commits = commits
        self.role = Role.LEADER
        self.high_watermark = 10
        self.match_ends: dict[int, int] = {2: 10, 3: 4}
        self.changes: list[dict[str, int | None]] = []
        self.transferred_to: int | None = None

    def propose_config_change(self, **change: int | None) -> Any:
        if self.refuse is not None:
            raise self.refuse
        self.changes.append(change)
        return SimpleNamespace(end_offset=11, epoch=1)

    async def wait_committed(self, end_offset: int, timeout_s: float, epoch: int) -> bool:
        if not self.commits:
            await trio.sleep(timeout_s)
        return self.commits

    def follower_match_ends(self) -> dict[int, int]:
        return self.match_ends

    def status(self) -> Any:
        return SimpleNamespace(voters=frozenset({1, 2, 3}))

    def transfer_leadership(self, target: int) -> None:
        self.transferred_to = target


def _run(raft: FakeRaft, step: VoterStep | str) -> TopicError | None:
    membership = MetadataMembership(raft, 1, SYSTEM_CLOCK)  # type: ignore[arg-type]

    async def main() -> None:
        if step == "hand_off":
            await membership.hand_off()
        else:
            assert isinstance(step, VoterStep)
            await membership.take(step)

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    except TopicError as exc:
        return exc
    return None


def test_steps_are_committed_changes() -> None:
    raft = FakeRaft()
    assert _run(raft, VoterStep("add_learner", 4)) is None
    assert _run(raft, VoterStep("promote", 2)) is None  # caught up: match end 10
    assert _run(raft, VoterStep("remove", 3)) is None
    assert _run(raft, VoterStep("demote", 2)) is None
    assert raft.changes == [
        {"add_learner": 4, "promote": None, "remove": None},
        {"add_learner": None, "promote": 2, "remove": None},
        {"add_learner": None, "promote": None, "remove": 3},
        {"demote": 2},
    ]
    assert _run(raft, VoterStep("catch_up", 2)) is None


@pytest.mark.parametrize(
    ("raft", "step", "code"),
    [
        (FakeRaft(refuse=ConfigChangeError("busy")), VoterStep("add_learner", 4), "timed"),
        (FakeRaft(refuse=NotLeaderError(2)), VoterStep("remove", 3), "controller"),
        (FakeRaft(commits=False), VoterStep("promote", 2), "timed"),
        (FakeRaft(), VoterStep("catch_up", 3), "timed"),  # match end 4 of 10
        (FakeRaft(), "hand_off", "timed"),  # leadership never moves
    ],
)
def test_changes_that_cannot_be_made_answer_kafkas_errors(
    raft: FakeRaft, step: VoterStep | str, code: str
) -> None:
    error = _run(raft, step)
    assert error is not None
    expected = ErrorCode.request_timed_out if code == "timed" else ErrorCode.not_controller
    assert error.error_code == expected, error.message


def test_hand_off_goes_to_the_voter_furthest_along() -> None:
    raft = FakeRaft()
    _run(raft, "hand_off")
    assert raft.transferred_to == 2
