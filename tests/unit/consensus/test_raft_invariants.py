"""Each broken invariant of the Raft core, its log view and storage raises a named error.

These guard against bugs (a driver breaking the Ready contract, a leader sending an append that
breaks log matching), so the inputs here are ones a correct cluster never produces.
"""

from __future__ import annotations

import pytest
import trio
from raft_net import GROUP

from raftka.consensus import (
    Entry,
    HardState,
    MemoryRaftLog,
    Message,
    MessageType,
    RaftConfig,
    RaftCore,
    RaftInvariantError,
)
from raftka.consensus.driver import RaftNode
from raftka.consensus.progress import Inflights
from raftka.consensus.raft_log import LogView
from raftka.consensus.transport import PeerTransport


def follower(entries: list[Entry], high_watermark: int | None = None) -> RaftCore:
    log = MemoryRaftLog()
    log.append(entries)
    config = RaftConfig(node_id=1, group=GROUP, voters=frozenset({1, 2, 3}))
    return RaftCore(config, log, HardState(term=1), high_watermark)


def append_from_leader(prev_offset: int, prev_epoch: int, *entries: Entry) -> Message:
    return Message(
        group=GROUP,
        type=MessageType.APPEND,
        from_id=2,
        to=1,
        term=2,
        prev_offset=prev_offset,
        prev_epoch=prev_epoch,
        entries=entries,
    )


# ---------------------------------------------------------------------- the core
def test_high_watermark_checkpoint_beyond_the_log_is_refused() -> None:
    with pytest.raises(RaftInvariantError, match="checkpoint 6 outside the log"):
        follower([Entry(0, 4, 1, b"")], high_watermark=6)
    assert follower([Entry(0, 4, 1, b"")], high_watermark=5).high_watermark == 5


def test_ready_twice_and_advance_without_ready_are_refused() -> None:
    core = follower([])
    core.campaign()
    rd = core.ready()
    with pytest.raises(RaftInvariantError, match="before the last Ready's advance"):
        core.ready()
    core.advance(rd)
    with pytest.raises(RaftInvariantError, match="advance\\(\\) without a ready"):
        core.advance(rd)


def test_advance_before_the_entries_are_persisted_is_refused() -> None:
    config = RaftConfig(node_id=1, group=GROUP, voters=frozenset({1}))
    core = RaftCore(config, MemoryRaftLog())
    core.campaign()  # a single voter wins at once and appends its no-op
    rd = core.ready()
    assert rd.entries
    with pytest.raises(RaftInvariantError, match="the log ends at 0, the Ready at 1"):
        core.advance(rd)  # the driver wrote nothing


def test_a_message_for_another_node_or_group_is_refused() -> None:
    core = follower([])
    heartbeat = Message(GROUP, MessageType.HEARTBEAT, from_id=2, to=3, term=1)
    with pytest.raises(RaftInvariantError, match="HEARTBEAT for node 3"):
        core.step(heartbeat)
    other_group = Message("other-0", MessageType.HEARTBEAT, from_id=2, to=1, term=1)
    with pytest.raises(RaftInvariantError, match="of group 'other-0'"):
        core.step(other_group)


def test_an_empty_proposal_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record, not 0"):
        follower([]).propose(0, b"")


def test_an_append_that_would_truncate_committed_entries_is_refused() -> None:
    # A malformed append: its entry starts before the prev offset it claims to follow.
    core = follower([Entry(0, 4, 1, b"a"), Entry(5, 9, 1, b"b")], high_watermark=10)
    with pytest.raises(RaftInvariantError, match="truncation to 5 .* high watermark 10"):
        core.step(append_from_leader(9, 1, Entry(5, 9, 2, b"c")))


def test_an_append_breaking_log_matching_is_refused() -> None:
    # Same base offset and epoch as the entry held, but a different batch boundary.
    core = follower([Entry(0, 4, 1, b"a")])
    with pytest.raises(RaftInvariantError, match="at 0 of epoch 1 ends at 4 here but at 2"):
        core.step(append_from_leader(-1, 0, Entry(0, 2, 1, b"a")))


# ---------------------------------------------------------------------- log view and storage
def test_log_view_refuses_gaps_and_reads_outside_the_log() -> None:
    stable = MemoryRaftLog()
    stable.append([Entry(0, 4, 1, b"")])
    view = LogView(stable)
    with pytest.raises(RaftInvariantError, match="entry at offset 6 appended at log end offset 5"):
        view.append([Entry(6, 7, 1, b"")])
    view.append([Entry(5, 7, 1, b"")])
    assert view.entry_at(7).base_offset == 5
    with pytest.raises(RaftInvariantError, match="no entry at offset 8: the log holds \\[0, 8\\)"):
        view.entry_at(8)


def test_memory_log_refuses_gaps_empty_entries_and_offsets_inside_a_batch() -> None:
    log = MemoryRaftLog(log_start_offset=10)
    with pytest.raises(RaftInvariantError, match="offset 0 appended at log end offset 10"):
        log.append([Entry(0, 0, 1, b"")])
    with pytest.raises(RaftInvariantError, match="\\[10, 9\\] holds no offset"):
        log.append([Entry(10, 9, 1, b"")])
    log.append([Entry(10, 14, 1, b""), Entry(15, 19, 1, b"")])
    with pytest.raises(RaftInvariantError, match="no entry at offset 9"):
        log.entry_at(9)
    with pytest.raises(RaftInvariantError, match="offset 12 does not start a batch"):
        log.entries_from(12, 100)
    with pytest.raises(RaftInvariantError, match="offset 17 does not start a batch"):
        log.truncate_to(17)
    log.truncate_to(15)
    assert log.log_end_offset() == 15


def test_inflights_refuse_an_append_beyond_their_capacity() -> None:
    inflights = Inflights(capacity=2)
    inflights.add(5)
    inflights.add(9)
    with pytest.raises(RaftInvariantError, match="ending at 12 sent with 2 appends in flight"):
        inflights.add(12)


def test_raft_node_refuses_another_nodes_transport() -> None:
    transport = PeerTransport(2, ("127.0.0.1", 0), {})

    async def build() -> None:
        with pytest.raises(ValueError, match="node 1 given the transport of node 2"):
            RaftNode(1, transport)

    trio.run(build)
