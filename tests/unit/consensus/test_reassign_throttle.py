"""The leader-side replication throttle in the Raft driver: APPENDs to a throttled learner
wait for the node's token bucket, in order; voters are never held back."""

from __future__ import annotations

from typing import Any

from test_raft_driver import MemoryRaftGroupStorage

from raftka.consensus.core import RaftConfig, RaftCore
from raftka.consensus.driver import AppendThrottle, RaftGroup
from raftka.consensus.types import EntryKind, Message, MessageType, Role

GROUP = "moves-0"
VOTERS = frozenset({1, 2, 3})
PAYLOAD = b"x" * 939  # 1000 bytes with the batch header


class Host:
    """Four RaftGroups (1-3 voters, 4 outside) whose messages are delivered by hand, on a
    node whose throttle runs on a hand-moved clock; an append carries at most two 1000-byte
    batches, so the bucket's granularity is small against its rate."""

    def __init__(self, rate: int) -> None:
        self.now = 0.0
        self.queue_bytes_max = 1 << 20  # the transport's per-peer budget
        self.append_throttle = AppendThrottle(rate, clock=lambda: self.now)
        self._throttled_groups: dict[str, RaftGroup] = {}
        self.outbox: list[Message] = []
        self.sent_to_4: list[Message] = []
        self.groups: dict[int, RaftGroup] = {}
        for node in (1, 2, 3, 4):
            storage = MemoryRaftGroupStorage()
            config = RaftConfig(
                node_id=node, group=GROUP, voters=VOTERS, seed=node, max_append_bytes=2000
            )
            core = RaftCore(config, storage.raft_log)
            self.groups[node] = RaftGroup(GROUP, core, storage, self, None, self)  # type: ignore[arg-type]

    def send(self, message: Message) -> None:
        if message.to == 4 and message.type is MessageType.APPEND:
            self.sent_to_4.append(message)
        self.outbox.append(message)

    def _queue_sync(self, ticket: Any) -> None:
        ticket.group._synced(ticket)

    def _note_soft_state(self) -> None:
        pass

    def _set_ticked(self, group: RaftGroup, ticked: bool) -> None:
        pass

    def deliver(self) -> None:
        while self.outbox:
            m = self.outbox.pop(0)
            self.groups[m.to]._step(m)

    def release(self) -> None:
        for name, group in list(self._throttled_groups.items()):
            if not group._release_throttled():
                del self._throttled_groups[name]
        self.deliver()


def _bytes_to_4(host: Host) -> int:
    return sum(len(e.payload) + 61 for m in host.sent_to_4 for e in m.entries)


def test_appends_to_a_throttled_learner_follow_the_rate_and_stop_once_it_is_a_voter() -> None:
    host = Host(rate=5000)
    leader = host.groups[1]
    leader.campaign()
    host.deliver()
    assert leader.role is Role.LEADER
    for _ in range(20):
        leader.propose(1, PAYLOAD, EntryKind.DATA)
    host.deliver()
    leader.throttled_peers = frozenset({4})
    leader.propose_config_change(add_learner=4)
    host.deliver()
    # One second's worth (5000 bytes) leaves at once, the rest waits for tokens.
    sent = _bytes_to_4(host)
    assert 0 < sent <= 5000 + 1000
    assert host.groups[4].log_end_offset < leader.log_end_offset
    host.now += 1.0
    host.release()
    assert sent < _bytes_to_4(host) <= sent + 5000 + 1000
    for _ in range(10):
        host.now += 1.0
        host.release()
    assert host.groups[4].log_end_offset == leader.log_end_offset, "caught up at the rate"
    offsets = [e.base_offset for m in host.sent_to_4 for e in m.entries]
    assert offsets == sorted(offsets), "throttled appends keep their order"
    # Promoted, it is a voter: nothing is held back any more, even with tokens spent.
    leader.propose_config_change(promote=4)
    host.deliver()
    host.append_throttle.try_take(10**9)
    before = leader.log_end_offset
    leader.propose(1, PAYLOAD, EntryKind.DATA)
    host.deliver()
    assert host.groups[4].log_end_offset == leader.log_end_offset > before


def test_a_snapshot_to_a_throttled_learner_is_not_held_back() -> None:
    """A learner below the leader's log start is sent a snapshot at once, whatever the
    bucket holds (a partition's snapshot carries no data); appends then follow the rate."""
    host = Host(rate=5000)
    leader = host.groups[1]
    leader.campaign()
    host.deliver()
    for _ in range(20):
        leader.propose(1, PAYLOAD, EntryKind.DATA)
    host.deliver()
    storage = leader._storage
    start = leader.log_end_offset - 6
    storage.raft_log.truncate_prefix(start)  # type: ignore[attr-defined]
    leader.throttled_peers = frozenset({4})
    assert host.append_throttle.try_take(5000)  # the bucket is spent
    leader.propose_config_change(add_learner=4)
    host.deliver()
    learner_log = host.groups[4]._storage.raft_log  # type: ignore[attr-defined]
    assert learner_log.log_start_offset() == start, "installed the snapshot at once"
    assert host.groups[4].log_end_offset < leader.log_end_offset, "appends wait for tokens"
    for _ in range(10):
        host.now += 1.0
        host.release()
    assert host.groups[4].log_end_offset == leader.log_end_offset
