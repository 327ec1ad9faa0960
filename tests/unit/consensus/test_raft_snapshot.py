"""InstallSnapshot: followers that need offsets below the leader's log start."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from batches import encode_batch
from log_replicas import Replica, leader_of, run
from raft_net import GROUP, Net
from test_raft_driver import NODES, Cluster, MemoryRaftGroupStorage, run_cluster

from raftka.consensus import (
    Entry,
    EntryKind,
    MemoryRaftLog,
    Message,
    MessageType,
    RaftConfig,
    RaftCore,
    Role,
)
from raftka.consensus.codec import decode_stream, encode_messages, message_size_bytes
from raftka.consensus.progress import ProgressState
from raftka.consensus.types import Snapshot, encode_config


def E(base: int, last: int, epoch: int, payload: bytes = b"x") -> Entry:
    return Entry(base, last, epoch, payload, EntryKind.DATA)


def msg(type: MessageType, frm: int, to: int, term: int, **kw: object) -> Message:
    return Message(group=GROUP, type=type, from_id=frm, to=to, term=term, **kw)  # type: ignore[arg-type]


def _leader_with_truncated_log(net: Net, down: int = 3, batches: int = 6) -> None:
    """Node 1 leads; `down` misses `batches` batches, then node 1 deletes all but the last."""
    net.elect(1)
    net.crash(down)
    for i in range(batches):
        net.propose(1, 2, f"b{i}".encode())
    leader = net[1]
    assert leader.high_watermark == leader.log.log_end_offset()
    last = leader.log.entry_at(leader.log.log_end_offset() - 1)
    net.logs[1].truncate_prefix(last.base_offset)


def test_follower_below_the_log_start_is_snapshotted_then_appended_to() -> None:
    net = Net([1, 2, 3])
    _leader_with_truncated_log(net)
    leader = net[1]
    start = leader.log.log_start_offset()
    assert start > 0
    net.start(3)
    net.tick(2)
    snapshots = [m for m in net.delivered if m.type is MessageType.SNAPSHOT and m.to == 3]
    assert snapshots, "the leader must send a snapshot to the follower below its log start"
    assert snapshots[0].prev_offset == start - 1
    assert snapshots[0].prev_epoch == leader.term
    assert snapshots[0].snapshot_voters == frozenset({1, 2, 3})
    installed = [rd.snapshot for rd in net.readies[3] if rd.snapshot is not None]
    assert installed == [Snapshot(start, leader.term, frozenset({1, 2, 3}))]
    # Appends follow the snapshot: the follower's log now equals the leader's.
    assert net.logs[3].log_start_offset() == start
    assert net.logs[3].all_entries() == net.logs[1].all_entries()
    assert leader.progress[3].state is ProgressState.REPLICATE
    assert leader.progress[3].match_end == leader.log.log_end_offset()
    entry = net.propose(1, 1, b"after")
    assert net.logs[3].all_entries()[-1] == entry
    assert net[3].high_watermark == entry.end_offset
    # The installed boundary answers log matching and elections with the snapshot's epoch.
    assert net[3].log.epoch_at(start - 1) == snapshots[0].prev_epoch


def test_snapshot_is_acknowledged_in_the_ready_that_installs_it() -> None:
    """The acknowledgement travels in the Ready carrying the install: the driver holds it
    until the install is durable (the core's durability contract)."""
    net = Net([1, 2, 3])
    _leader_with_truncated_log(net)
    net.start(3)
    net.tick(2)
    for rd in net.readies[3]:
        if rd.snapshot is not None:
            acks = [m for m in rd.messages if m.type is MessageType.APPEND_RESPONSE]
            assert [m.match_end for m in acks] == [rd.snapshot.end_offset]
            assert rd.high_watermark == rd.snapshot.end_offset
            break
    else:
        raise AssertionError("no Ready installed a snapshot on node 3")


def test_stale_snapshot_is_acknowledged_without_installing() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.propose(1, 3)
    follower = net[2]
    hw = follower.high_watermark
    assert hw > 0
    follower.step(msg(MessageType.SNAPSHOT, 1, 2, net[1].term, prev_offset=hw - 2, prev_epoch=1))
    rd = follower.ready()
    assert rd.snapshot is None
    assert [(m.type, m.match_end) for m in rd.messages] == [(MessageType.APPEND_RESPONSE, hw)]
    follower.advance(rd)


def test_snapshot_of_an_older_term_is_answered_with_the_current_term() -> None:
    net = Net([1, 2, 3], terms={3: 2})
    old = net[3]
    old.step(msg(MessageType.SNAPSHOT, 1, 3, 1, prev_offset=50, prev_epoch=1))
    rd = old.ready()
    assert rd.snapshot is None
    assert [(m.type, m.term) for m in rd.messages] == [(MessageType.APPEND_RESPONSE, 2)]
    old.advance(rd)


def test_follower_log_past_a_matching_snapshot_keeps_its_suffix() -> None:
    """Raft §7: a snapshot describing a prefix of the follower's log keeps what follows."""
    logs = {2: [E(0, 1, 1), E(2, 4, 1), E(5, 5, 1)]}
    net = Net([1, 2, 3], logs=logs, terms={2: 1})
    follower = net[2]
    follower.step(msg(MessageType.SNAPSHOT, 1, 2, 2, prev_offset=4, prev_epoch=1))
    rd = follower.ready()
    assert rd.snapshot is None
    assert [m.match_end for m in rd.messages if m.type is MessageType.APPEND_RESPONSE] == [5]
    assert rd.high_watermark == 5
    follower.advance(rd)
    assert net.logs[2].all_entries() == logs[2]


def test_snapshot_replaces_a_follower_log_that_diverges_below_the_leader_log_start() -> None:
    # Node 3 holds an old epoch's batches the leader never had, below the leader's start.
    net = Net(
        [1, 2, 3],
        logs={1: [E(0, 1, 1)], 2: [E(0, 1, 1)], 3: [E(0, 1, 1), E(2, 9, 2, b"lost")]},
        terms={1: 2, 2: 2, 3: 2},
    )
    net.crash(3)
    net.elect(1)
    for i in range(4):
        net.propose(1, 2, f"c{i}".encode())
    leader = net[1]
    net.logs[1].truncate_prefix(leader.log.entry_at(leader.log.log_end_offset() - 1).base_offset)
    net.start(3)
    net.tick(3)
    assert any(rd.snapshot is not None for rd in net.readies[3])
    assert net.logs[3].all_entries() == net.logs[1].all_entries()
    assert net[3].high_watermark == leader.high_watermark


def test_lost_snapshot_is_sent_again_after_an_election_timeout() -> None:
    net = Net([1, 2, 3])
    _leader_with_truncated_log(net)
    net.drop = lambda m: m.type is MessageType.SNAPSHOT
    net.start(3)
    net.tick(2)
    leader = net[1]
    assert leader.progress[3].state is ProgressState.SNAPSHOT
    sent_before = sum(1 for m in net.delivered if m.type is MessageType.SNAPSHOT)
    assert sent_before == 0
    # While the snapshot is pending nothing else is sent to node 3 but heartbeats.
    net.drop = lambda m: False
    net.delivered.clear()
    net.tick(1)
    assert not [m for m in net.delivered if m.to == 3 and m.type is MessageType.APPEND]
    net.tick(12)
    assert any(m.type is MessageType.SNAPSHOT and m.to == 3 for m in net.delivered)
    assert leader.progress[3].state is ProgressState.REPLICATE
    assert net.logs[3].all_entries() == net.logs[1].all_entries()


def test_installed_node_votes_and_campaigns_with_the_snapshot_epoch() -> None:
    net = Net([1, 2, 3])
    _leader_with_truncated_log(net)
    net.start(3)
    net.tick(2)
    # Now node 3 holds only the leader's last batch; drop it to an empty log at the start.
    snap_end = net.logs[3].log_start_offset()
    node3 = net[3]
    last_offset, last_epoch = node3.log.last_offset_and_epoch()
    assert last_offset == net.logs[3].log_end_offset() - 1
    assert last_epoch == net[1].term
    # A stale candidate (epoch 0, short log) gets no vote from it.
    node3.step(
        msg(
            MessageType.VOTE,
            2,
            3,
            net[1].term + 5,
            last_offset=snap_end + 50,
            last_epoch=0,
            force=True,
        )
    )
    rd = node3.ready()
    assert [m.reject for m in rd.messages if m.type is MessageType.VOTE_RESPONSE] == [True]
    node3.advance(rd)


def test_new_leader_below_whose_log_start_a_follower_lags_snapshots_it() -> None:
    net = Net([1, 2, 3])
    _leader_with_truncated_log(net)
    # Node 2 has every entry and deletes its prefix too, then leads.
    net.logs[2].truncate_prefix(net.logs[1].log_start_offset())
    net.crash(1)
    net.start(3)
    net.elect(2)
    net.tick(3)
    assert net[2].role is Role.LEADER
    assert any(rd.snapshot is not None for rd in net.readies[3])
    assert net.logs[3].all_entries() == net.logs[2].all_entries()


def test_snapshot_message_round_trips_through_the_codec() -> None:
    m = msg(
        MessageType.SNAPSHOT,
        1,
        2,
        7,
        prev_offset=99,
        prev_epoch=6,
        high_watermark=120,
        snapshot_voters=frozenset({1, 2, 3}),
        snapshot_data=b"image" * 20_000,
    )
    other = msg(MessageType.HEARTBEAT, 1, 2, 7, high_watermark=5)
    frame = b"".join(bytes(p) for p in encode_messages([m, other]))
    assert decode_stream(frame) == [[m, other]]


def test_driver_snapshots_a_follower_below_the_log_start_then_appends_to_it() -> None:
    """Through the trio driver and real transport, with fsync before acknowledgements: the
    follower installs the snapshot (with the data its leader's storage supplied), acks only
    after the install was synced, and is then appended to. The follower comes back with an
    empty disk: with its old log it could catch up from appends its leader's transport
    queued while it was down."""
    g = "orders-0"

    async def scenario(cluster: Cluster) -> None:
        first = await cluster.propose_committed(g, b"a")
        await cluster.replicated(g, first)
        leader = await cluster.leader(g)
        lagging = next(n for n in NODES if n != leader)
        await cluster.crash(lagging)
        entries = [await cluster.propose_committed(g, b"b%d" % i, records=2) for i in range(5)]
        leader_log = cluster.storage[leader, g].raft_log
        start = entries[-1].base_offset
        for node in NODES:
            if node != lagging:
                cluster.storage[node, g].raft_log.truncate_prefix(start)
        events = cluster.events[lagging]
        cluster.storage[lagging, g] = MemoryRaftGroupStorage(True, events)
        await cluster.start(lagging)
        await cluster.replicated(g, entries[-1], timeout_s=5)
        storage = cluster.storage[lagging, g]
        assert [(s.end_offset, s.data) for s in storage.installed] == [
            (start, f"state below {start}".encode())
        ]
        assert storage.raft_log.log_start_offset() == start
        after = await cluster.propose_committed(g, b"after")
        await cluster.replicated(g, after)
        assert storage.raft_log.all_entries() == leader_log.all_entries()
        ack = events.index(("ack", start))
        assert any(kind == "sync" and end >= start for kind, end in events[:ack]), events

    run_cluster([g], scenario, sync_every_append=True)


class SegmentReplica(Replica):
    """A replica on the real segment log whose driver also installs snapshots."""

    def drain(self, outbox: list[Message]) -> None:
        while self.core.has_ready():
            rd = self.core.ready()
            if rd.hard_state is not None:
                self.storage.save_hard_state(rd.hard_state)
            if rd.snapshot is not None:
                self.storage.install_snapshot(rd.snapshot)
            if rd.truncate_to is not None:
                self.storage.truncate_to(rd.truncate_to)
            self.storage.append(rd.entries)
            for m in rd.messages:
                if m.type is MessageType.SNAPSHOT:
                    data = self.storage.snapshot_data(m.prev_offset + 1)
                    assert data == b"", "a partition's snapshot carries no data"
            outbox.extend(rd.messages)
            if rd.high_watermark is not None:
                self.high_watermark = rd.high_watermark
            self.core.advance(rd)


def test_segment_log_follower_restarts_its_log_at_the_leader_log_start(tmp_path: Path) -> None:
    voters = frozenset({1, 2, 3})
    replicas = {i: SegmentReplica(i, tmp_path / f"node-{i}", voters) for i in voters}
    run(replicas, 40)
    leader = leader_of(replicas)
    lagging = next(r for r in replicas.values() if r is not leader)
    down = frozenset({lagging.node_id})
    for i in range(10):
        leader.core.propose(1, encode_batch([(None, b"record-%d" % i)]))
        leader.drain([])
        run(replicas, 1, down)
    run(replicas, 3, down)
    start = leader.log.log_end_offset - 3
    for replica in replicas.values():
        if replica is not lagging:
            replica.log.delete_records_before(start)
    run(replicas, 5)
    assert lagging.log.log_start_offset == start
    assert lagging.log.log_end_offset == leader.log.log_end_offset
    end = leader.log.log_end_offset
    assert lagging.log.read(start, 1 << 20, end, True) == leader.log.read(start, 1 << 20, end, True)
    assert lagging.high_watermark == leader.high_watermark == end
    # The epoch of the boundary survives a restart (it answers elections from it).
    lagging.log.close()
    lagging.open()
    assert lagging.log.log_start_offset == start
    assert lagging.storage.log_start_epoch() == leader.core.term
    assert lagging.core.log.last_offset_and_epoch() == (end - 1, leader.core.term)


def test_a_new_learner_below_the_log_start_is_snapshotted_with_the_learners() -> None:
    """A replica a reassignment adds starts with an empty log: a snapshot brings it up, and
    carries the configuration in force at the log start, learners included."""
    net = Net([1, 2, 3])
    net.elect(1)
    net.add_node(4)
    net[1].propose_config_change(add_learner=4)
    net.deliver()
    net.crash(4)
    net.logs[4] = MemoryRaftLog()  # its copy is lost: it comes back empty
    for i in range(4):
        net.propose(1, 2, f"b{i}".encode())
    leader = net[1]
    last = leader.log.entry_at(leader.log.log_end_offset() - 1)
    for node in (1, 2, 3):
        net.logs[node].truncate_prefix(last.base_offset)
    start = leader.log.log_start_offset()
    net.start(4)
    net.tick(2)
    snapshots = [m for m in net.delivered if m.type is MessageType.SNAPSHOT and m.to == 4]
    assert snapshots, "the leader must send a snapshot to the learner below its log start"
    assert snapshots[0].snapshot_voters == frozenset({1, 2, 3})
    assert snapshots[0].snapshot_learners == frozenset({4})
    assert net.logs[4].log_start_offset() == start
    assert net.logs[4].log_start_config() == (frozenset({1, 2, 3}), frozenset({4}))
    assert net[4].voters == frozenset({1, 2, 3}) and net[4].learners == frozenset({4})
    assert net.logs[4].all_entries() == net.logs[1].all_entries()
    # A restart finds the configuration from the log start; a promotion goes on from there.
    net.crash(4)
    net.start(4)
    assert net[4].learners == frozenset({4})
    net.tick(2)
    net[1].propose_config_change(promote=4)
    net.deliver()
    assert net[4].voters == frozenset({1, 2, 3, 4}) and net[4].learners == frozenset()


def test_a_prefix_deletion_keeps_the_configuration_in_force_at_the_new_start() -> None:
    log = MemoryRaftLog()
    log.append(
        [
            E(0, 0, 1),
            Entry(1, 1, 1, encode_config(frozenset({1}), frozenset({2})), EntryKind.CONFIG),
            E(2, 2, 1),
        ]
    )
    log.truncate_prefix(2)
    assert log.log_start_config() == (frozenset({1}), frozenset({2}))
    core = RaftCore(RaftConfig(node_id=1, group=GROUP, voters=frozenset({1, 2, 3})), log)
    assert core.voters == frozenset({1}) and core.learners == frozenset({2})


def test_snapshot_learners_round_trip_through_the_codec() -> None:
    m = msg(
        MessageType.SNAPSHOT,
        1,
        4,
        3,
        prev_offset=9,
        prev_epoch=2,
        snapshot_voters=frozenset({1, 2, 3}),
        snapshot_learners=frozenset({4, 5}),
        snapshot_data=b"",
    )
    frame = b"".join(bytes(p) for p in encode_messages([m]))
    assert decode_stream(frame) == [[m]]
    plain = replace(m, snapshot_learners=frozenset())
    plain_frame = b"".join(bytes(p) for p in encode_messages([plain]))
    assert message_size_bytes(m) - message_size_bytes(plain) == len(frame) - len(plain_frame)


def test_segment_log_follower_catches_up_when_the_leader_log_starts_inside_a_batch(
    tmp_path: Path,
) -> None:
    """DeleteRecords may leave the log start inside a batch; batches travel whole, so the
    follower's log restarts at that batch's base offset and takes the batch from there."""
    voters = frozenset({1, 2, 3})
    replicas = {i: SegmentReplica(i, tmp_path / f"node-{i}", voters) for i in voters}
    run(replicas, 40)
    leader = leader_of(replicas)
    lagging = next(r for r in replicas.values() if r is not leader)
    down = frozenset({lagging.node_id})
    for i in range(6):
        leader.core.propose(3, encode_batch([(None, b"r%d-%d" % (i, j)) for j in range(3)]))
        leader.drain([])
        run(replicas, 1, down)
    run(replicas, 3, down)
    last_base = leader.log.batch_header_at(leader.log.log_end_offset - 1).base_offset
    batch_base = leader.log.batch_header_at(last_base - 2).base_offset
    inside = batch_base + 1
    for replica in replicas.values():
        if replica is not lagging:
            replica.log.delete_records_before(inside)
    run(replicas, 5)
    assert lagging.log.log_start_offset == batch_base
    end = leader.log.log_end_offset
    assert lagging.log.log_end_offset == end
    assert lagging.log.read(inside, 1 << 20, end, True) == leader.log.read(
        inside, 1 << 20, end, True
    )
    assert lagging.high_watermark == leader.high_watermark == end
