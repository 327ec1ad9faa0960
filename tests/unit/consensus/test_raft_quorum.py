"""Small pure pieces of the Raft core: quorum arithmetic, follower progress, the log view."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftka.consensus import Entry, MemoryRaftLog
from raftka.consensus.progress import Progress, ProgressState
from raftka.consensus.quorum import VoteResult, committed_end, majority_size, vote_result
from raftka.consensus.raft_log import LogView


def test_majority_size() -> None:
    assert [majority_size(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_committed_end_is_what_a_majority_holds() -> None:
    assert committed_end({1, 2, 3}, {1: 10, 2: 7, 3: 3}) == 7
    assert committed_end({1, 2, 3, 4}, {1: 10, 2: 7, 3: 3, 4: 1}) == 3
    assert committed_end({1, 2, 3}, {1: 10}) == 0, "missing voters hold nothing"
    assert committed_end({1}, {1: 4}) == 4
    assert committed_end(set(), {}) == 0
    assert committed_end({1, 2, 3}, {1: 9, 2: 9, 3: 0, 99: 100}) == 9, "non-voters do not count"


@given(st.dictionaries(st.integers(1, 9), st.integers(0, 50), min_size=1))
def test_committed_end_property(match_ends: dict[int, int]) -> None:
    voters = set(match_ends)
    end = committed_end(voters, match_ends)
    holders = sum(1 for v in voters if match_ends[v] >= end)
    assert holders >= majority_size(len(voters))
    above = sum(1 for v in voters if match_ends[v] > end)
    assert above < majority_size(len(voters)), "no larger end is held by a majority"


def test_vote_result() -> None:
    voters = {1, 2, 3}
    assert vote_result(voters, {1: True}) is VoteResult.PENDING
    assert vote_result(voters, {1: True, 2: True}) is VoteResult.WON
    assert vote_result(voters, {1: True, 2: False}) is VoteResult.PENDING
    assert vote_result(voters, {1: True, 2: False, 3: False}) is VoteResult.LOST
    assert vote_result({1, 2, 3, 4}, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result({1}, {1: True}) is VoteResult.WON
    assert vote_result(voters, {7: True, 8: True, 1: True}) is VoteResult.PENDING


def test_progress_probe_then_replicate_with_bounded_inflights() -> None:
    pr = Progress(next_offset=10, max_inflight=2)
    assert pr.state is ProgressState.PROBE and not pr.paused
    pr.sent_append(12)
    assert pr.paused, "probe: one append at a time"
    assert pr.maybe_decrease(rejected_prev_offset=9, probe_prev_offset=4)
    assert pr.next_offset == 5 and not pr.paused
    assert not pr.maybe_decrease(rejected_prev_offset=9, probe_prev_offset=2), "stale reject"
    assert pr.maybe_update(7)
    pr.become_replicate()
    assert pr.next_offset == 7
    pr.sent_append(9)
    pr.sent_append(11)
    assert pr.paused and pr.next_offset == 11
    pr.maybe_update(9)
    pr.inflights.free_to(9)
    assert not pr.paused
    assert not pr.maybe_decrease(rejected_prev_offset=6, probe_prev_offset=0), "below match"
    assert pr.maybe_decrease(rejected_prev_offset=10, probe_prev_offset=0)
    assert pr.next_offset == 9 == pr.match_end


def _log(*entries: Entry) -> MemoryRaftLog:
    log = MemoryRaftLog()
    log.append(entries)
    return log


def test_log_view_unstable_tail_and_pending_truncation() -> None:
    stable = _log(Entry(0, 0, 1, b"a"), Entry(1, 4, 1, b"b"), Entry(5, 5, 2, b"c"))
    view = LogView(stable)
    view.append([Entry(6, 7, 2, b"d")])
    assert view.log_end_offset() == 8 and view.entry_at(3).base_offset == 1
    assert [e.base_offset for e in view.entries_from(1, 10_000)] == [1, 5, 6]
    view.truncate_to(6)  # only unstable entries go: nothing for the driver to truncate
    assert view.pending_truncate is None and view.log_end_offset() == 6
    view.truncate_to(5)
    view.append([Entry(5, 5, 3, b"e")])
    assert view.pending_truncate == 5
    assert [e.epoch for e in view.entries_from(0, 10_000)] == [1, 1, 3]
    stable.truncate_to(5)
    stable.append(view.unstable)
    view.persisted()
    assert view.unstable == [] and view.log_end_offset() == 6


def test_log_view_find_conflict_by_epoch() -> None:
    view = LogView(_log(Entry(0, 0, 1, b""), Entry(1, 4, 1, b""), Entry(5, 9, 3, b"")))
    assert view.find_conflict_by_epoch(9, 3) == 9
    assert view.find_conflict_by_epoch(9, 2) == 4
    assert view.find_conflict_by_epoch(3, 5) == 0, "a batch that ends after the offset is skipped"
    assert view.find_conflict_by_epoch(100, 1) == 4
    assert view.find_conflict_by_epoch(9, 0) == -1
    assert view.is_batch_end(4, 1) and not view.is_batch_end(3, 1) and view.is_batch_end(-1, 0)


def _linear_conflict(entries: list[Entry], offset: int, epoch: int) -> int:
    for entry in reversed(entries):
        if entry.epoch <= epoch and entry.last_offset <= offset:
            return entry.last_offset
    return -1


@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2)), min_size=0, max_size=30),
    st.integers(-1, 80),
    st.integers(0, 40),
)
def test_find_conflict_by_epoch_matches_a_backward_walk(
    shape: list[tuple[int, int]], offset: int, epoch: int
) -> None:
    entries: list[Entry] = []
    current_epoch, base = 1, 0
    for count, epoch_step in shape:  # epochs never decrease along a Raft log
        current_epoch += epoch_step
        entries.append(Entry(base, base + count - 1, current_epoch, b""))
        base += count
    view = LogView(_log(*entries))
    assert view.find_conflict_by_epoch(offset, epoch) == _linear_conflict(entries, offset, epoch)


def test_a_follower_is_caught_up_when_it_holds_the_leaders_log_now_or_as_of_its_last_answer() -> (
    None
):
    pr = Progress(next_offset=0, max_inflight=4)
    pr.match_end = 10
    pr.answered(tick=5, previous_tick=None, leader_end=10)
    assert pr.caught_up_tick == 5
    # The leader's log grew to 20 before the next answer, which holds 15: behind now, and
    # also behind what the leader had at the answer before (10 <= 15 holds: caught up then).
    pr.match_end = 15
    pr.answered(tick=8, previous_tick=5, leader_end=20)
    assert pr.caught_up_tick == 5
    pr.match_end = 20
    pr.answered(tick=9, previous_tick=8, leader_end=30)
    assert pr.caught_up_tick == 8, "it holds the 20 the leader had at its answer of tick 8"
    # Falling behind: the caught-up time stays where it was.
    pr.match_end = 25
    pr.answered(tick=12, previous_tick=9, leader_end=60)
    assert pr.caught_up_tick == 8
    pr.answered(tick=13, previous_tick=12, leader_end=60)
    assert pr.caught_up_tick == 8
    fresh = Progress(next_offset=0, max_inflight=4)
    fresh.answered(tick=3, previous_tick=None, leader_end=7)
    assert fresh.caught_up_tick is None
