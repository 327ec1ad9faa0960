"""Learners and single-server membership changes (the steps of a replica reassignment)."""

from __future__ import annotations

import pytest

from raftka.consensus import EntryKind, MemoryRaftLog, RaftConfig, RaftCore, Role
from raftka.consensus.core import ConfigChangeError
from raftka.consensus.types import decode_config, decode_voters, encode_config
from tests.unit.raft_net import GROUP, Net


def _leader_with_learner() -> Net:
    net = Net([1, 2, 3])
    net.elect(1)
    net.add_node(4)
    net[1].propose_config_change(add_learner=4)
    net.deliver()
    return net


def test_config_payload_keeps_old_voter_only_entries_readable() -> None:
    assert decode_config(b"1,2,3") == (frozenset({1, 2, 3}), frozenset())
    payload = encode_config(frozenset({1, 2, 3}), frozenset({4, 5}))
    assert payload == b"1,2,3;4,5"
    assert decode_config(payload) == (frozenset({1, 2, 3}), frozenset({4, 5}))
    assert decode_voters(payload) == frozenset({1, 2, 3})
    assert encode_config(frozenset({2}), frozenset()) == b"2"


def test_learner_receives_the_log_but_does_not_count_toward_commit() -> None:
    net = _leader_with_learner()
    assert net[1].learners == frozenset({4}) and net[4].learners == frozenset({4})
    entry = net.propose(1, payload=b"a")
    assert net.logs[4].all_entries() == net.logs[1].all_entries()
    assert net[4].high_watermark == entry.end_offset
    # With two of the three voters down the learner's copy commits nothing.
    net.crash(2)
    net.crash(3)
    stuck = net[1].propose(1, b"b")
    net.deliver()
    assert net.logs[4].log_end_offset() == stuck.end_offset
    assert net[1].high_watermark < stuck.end_offset


def test_learner_never_campaigns_and_its_vote_does_not_count() -> None:
    net = _leader_with_learner()
    net.crash(1)
    net.tick(60, only=[4])
    assert net[4].role is Role.FOLLOWER and net[4].term == net[2].term
    # Voters 2 and 3 elect among themselves; the learner is not needed.
    net.tick(40, only=[2, 3, 4])
    leaders = [i for i in (2, 3) if net[i].role is Role.LEADER]
    assert len(leaders) == 1
    assert net[leaders[0]].learners == frozenset({4})


def test_a_learner_whose_leader_went_silent_keeps_its_id_but_not_as_heard() -> None:
    net = _leader_with_learner()
    assert [net[i].leader_heard_recently() for i in (1, 2, 4)] == [True, True, True]
    net.crash(1)
    timeout = net[4].config.election_timeout_ticks
    net.tick(timeout - 1, only=[4])
    assert (net[4].leader_id, net[4].leader_heard_recently()) == (1, True)
    net.tick(1, only=[4])
    assert (net[4].leader_id, net[4].leader_heard_recently()) == (1, False)
    net.tick(40, only=[2, 3, 4])  # a new leader's first message makes it heard again
    leader = next(i for i in (2, 3) if net[i].role is Role.LEADER)
    assert (net[4].leader_id, net[4].leader_heard_recently()) == (leader, True)


def test_a_learner_alone_cannot_keep_a_leader_in_office() -> None:
    net = _leader_with_learner()
    net.partition([1, 4], [2, 3])
    net.tick(30, only=[1, 4])
    assert net[1].role is not Role.LEADER, "check-quorum counts voters only"


def test_promote_then_remove_moves_the_replica_set() -> None:
    net = _leader_with_learner()
    net.propose(1, payload=b"a")
    net[1].propose_config_change(promote=4)
    net.deliver()
    assert net[1].voters == frozenset({1, 2, 3, 4}) and not net[1].learners
    net[1].propose_config_change(remove=2)
    net.deliver()
    assert net[1].voters == frozenset({1, 3, 4})
    entry = net.propose(1, payload=b"b")
    net.crash(3)
    later = net.propose(1, payload=b"c")
    assert net[1].high_watermark == later.end_offset > entry.end_offset, "1 and 4 are a majority"


def test_one_change_at_a_time_and_only_valid_steps() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.add_node(4)
    net.crash(2)
    net.crash(3)
    net[1].propose_config_change(add_learner=4)
    net.drain(1)
    with pytest.raises(ConfigChangeError, match="not committed"):
        net[1].propose_config_change(promote=4)
    net.start(2)
    net.start(3)
    net.tick(3)
    assert not net[1].pending_config_change()
    with pytest.raises(ConfigChangeError, match="already a member"):
        net[1].propose_config_change(add_learner=4)
    with pytest.raises(ConfigChangeError, match="not a learner"):
        net[1].propose_config_change(promote=2)
    with pytest.raises(ConfigChangeError, match="exactly one"):
        net[1].propose_config_change(promote=4, remove=2)
    net[1].propose_config_change(remove=4)
    net.deliver()
    assert net[1].learners == frozenset() and net[1].voters == frozenset({1, 2, 3})


def test_demote_makes_a_voter_a_learner_in_one_entry() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.propose(1, payload=b"a")
    end = net.logs[1].log_end_offset()
    net[1].propose_config_change(demote=3)
    net.deliver()
    (config,) = [e for e in net.logs[1].all_entries() if e.base_offset >= end]
    assert config.kind is EntryKind.CONFIG
    assert decode_config(config.payload) == (frozenset({1, 2}), frozenset({3}))
    assert net[3].voters == frozenset({1, 2}) and net[3].learners == frozenset({3})
    # The demoted broker keeps receiving the log; it no longer counts toward commit.
    entry = net.propose(1, payload=b"b")
    assert net.logs[3].all_entries() == net.logs[1].all_entries()
    net.crash(2)
    stuck = net[1].propose(1, b"c")
    net.deliver()
    assert net.logs[3].log_end_offset() == stuck.end_offset
    assert net[1].high_watermark == entry.end_offset < stuck.end_offset


def test_only_another_voter_is_demoted() -> None:
    net = _leader_with_learner()
    with pytest.raises(ConfigChangeError, match="not a voter"):
        net[1].propose_config_change(demote=4)
    with pytest.raises(ConfigChangeError, match="cannot demote itself"):
        net[1].propose_config_change(demote=1)
    with pytest.raises(ConfigChangeError, match="exactly one"):
        net[1].propose_config_change(demote=2, remove=3)
    assert net[1].voters == frozenset({1, 2, 3}) and net[1].learners == frozenset({4})


def test_removed_leader_steps_down_after_transfer_and_removal() -> None:
    """What a reassignment does when the leader leaves: transfer first, then remove it."""
    net = _leader_with_learner()
    net[1].propose_config_change(promote=4)
    net.deliver()
    net[1].transfer_leadership(4)
    net.deliver()
    assert net[4].role is Role.LEADER
    net.propose(4, payload=b"x")
    net[4].propose_config_change(remove=1)
    net.deliver()
    assert net[4].voters == frozenset({2, 3, 4})
    assert net[1].role is Role.FOLLOWER


def test_leader_that_removes_itself_steps_down_once_committed() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.propose(1)
    net[1].propose_config_change(remove=1)
    net.deliver()
    net.tick(1)
    assert net[1].role is Role.FOLLOWER


def test_configs_are_recovered_and_truncated_with_the_log() -> None:
    net = _leader_with_learner()
    log = net.logs[4]
    restarted = RaftCore(RaftConfig(node_id=4, group=GROUP, voters=frozenset({1, 2, 3})), log)
    assert restarted.learners == frozenset({4}) and not restarted.promotable
    # Truncating the CONFIG entry away reverts to the configuration before it.
    config_offset = next(e for e in log.all_entries() if e.kind is EntryKind.CONFIG).base_offset
    fresh = MemoryRaftLog()
    fresh.append([e for e in log.all_entries() if e.base_offset < config_offset])
    before = RaftCore(RaftConfig(node_id=4, group=GROUP, voters=frozenset({1, 2, 3})), fresh)
    assert before.learners == frozenset() and before.voters == frozenset({1, 2, 3})
