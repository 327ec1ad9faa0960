"""A follower's log start follows the leader's (DeleteRecords across leader changes)."""

from __future__ import annotations

import time
from pathlib import Path

import trio
from batches import encode_batch
from test_raft_driver import Cluster, run_cluster

from raftka.broker.replication import HardStateStore, PartitionRaftStorage
from raftka.consensus import MemoryRaftLog, Message, MessageType
from raftka.consensus.codec import decode_frame, encode_messages, message_size_bytes
from raftka.consensus.core import RaftConfig, RaftCore
from raftka.consensus.types import Entry, HardState
from raftka.log import LogConfig, PartitionLog

GROUP = "orders-0"
VOTERS = frozenset({1, 2, 3})


def _decoded(messages: list[Message]) -> list[Message]:
    parts = encode_messages(messages)
    frame = b"".join(bytes(p) for p in parts)
    decoded = decode_frame(frame[4:])
    assert isinstance(decoded, list)
    return decoded


def test_codec_round_trip_of_the_log_start() -> None:
    entry = Entry(50, 99, 2, b"x" * 100)
    messages = [
        Message(GROUP, MessageType.HEARTBEAT, 1, 2, 3, high_watermark=80, log_start_offset=60),
        Message(
            GROUP,
            MessageType.APPEND,
            1,
            2,
            3,
            prev_offset=49,
            prev_epoch=2,
            entries=(entry,),
            high_watermark=80,
            log_start_offset=0,
        ),
        Message(GROUP, MessageType.APPEND_RESPONSE, 2, 1, 3, match_end=100, log_start_offset=60),
        Message(GROUP, MessageType.HEARTBEAT_RESPONSE, 2, 1, 3),  # not told: -1
    ]
    decoded = _decoded(messages)
    assert decoded == messages
    assert [m.log_start_offset for m in decoded] == [60, 0, 60, -1]
    # The transport's byte budget counts the field exactly.
    for m in messages:
        one = b"".join(bytes(p) for p in encode_messages([m]))
        assert message_size_bytes(m) == len(one) - 4 - 1 - 4  # length, kind, count


def _follower() -> tuple[RaftCore, MemoryRaftLog]:
    log = MemoryRaftLog()
    log.append([Entry(0, 49, 1, b"a"), Entry(50, 99, 1, b"b")])
    config = RaftConfig(node_id=2, group=GROUP, voters=VOTERS, seed=1)
    return RaftCore(config, log, HardState(term=1)), log


def _step(core: RaftCore, log: MemoryRaftLog, m: Message) -> tuple[int | None, int]:
    """Step `m` and apply the Ready as a driver would: (the Ready's log start, the log start
    the answer reported)."""
    core.step(m)
    rd = core.ready()
    if rd.log_start_offset is not None:
        log.delete_records_before(rd.log_start_offset)
    core.advance(rd)
    (answer,) = rd.messages
    return rd.log_start_offset, answer.log_start_offset


def _heartbeat(high_watermark: int, log_start: int) -> Message:
    return Message(
        GROUP,
        MessageType.HEARTBEAT,
        1,
        2,
        1,
        high_watermark=high_watermark,
        log_start_offset=log_start,
    )


def test_a_follower_log_start_follows_the_leader_bounded_by_its_high_watermark() -> None:
    core, log = _follower()
    append = Message(
        GROUP,
        MessageType.APPEND,
        1,
        2,
        1,
        prev_offset=99,
        prev_epoch=1,
        high_watermark=50,
        log_start_offset=60,
    )
    # Only committed offsets go: the high watermark (50) bounds the leader's start (60).
    # The core reads the log start before the driver raised it (the driver corrects the
    # answers of such a Ready).
    assert _step(core, log, append) == (50, 0)
    assert core.leader_log_start == 60
    assert _step(core, log, _heartbeat(100, 60)) == (60, 50)
    # Never lowered, nothing new when nothing changed, nothing from a leader that does not say.
    assert _step(core, log, _heartbeat(100, 40)) == (None, 60)
    assert _step(core, log, _heartbeat(100, 60)) == (None, 60)
    assert _step(core, log, _heartbeat(100, -1)) == (None, 60)
    assert _step(core, log, _heartbeat(100, 99)) == (99, 60)
    assert log.record_log_start() == 99
    assert log.log_start_offset() == 0  # the Raft log keeps its batches


def test_without_the_field_the_log_start_stays() -> None:
    core, log = _follower()
    assert _step(core, log, _heartbeat(100, -1)) == (None, 0)
    assert core.leader_log_start == -1


def test_a_leader_sends_its_log_start() -> None:
    log = MemoryRaftLog()
    log.append([Entry(0, 49, 1, b"a")])
    log.delete_records_before(20)
    config = RaftConfig(node_id=1, group=GROUP, voters=frozenset({1, 2}), seed=1)
    core = RaftCore(config, log, HardState(term=1))
    core.campaign()
    messages: list[Message] = []
    for _ in range(5):
        while core.has_ready():
            rd = core.ready()
            messages.extend(rd.messages)
            log.append(rd.entries)
            core.advance(rd)
        for m in list(messages):
            if m.type is MessageType.PRE_VOTE or m.type is MessageType.VOTE:
                response = MessageType(m.type + 1)
                core.step(Message(GROUP, response, 2, 1, m.term))
                messages.remove(m)
    appends = [m for m in messages if m.type is MessageType.APPEND]
    assert appends, messages
    assert all(m.log_start_offset == 20 for m in appends)


def _storage(tmp_path: Path, metadata: bool = False) -> PartitionRaftStorage:
    log = PartitionLog.open(tmp_path / GROUP, LogConfig(), time.time_ns() // 1_000_000)
    hard_states = HardStateStore(tmp_path / "raft.lmdb")
    if metadata:
        return PartitionRaftStorage(
            GROUP, log, hard_states, snapshot_source=lambda end: b"", on_snapshot=lambda s: None
        )
    return PartitionRaftStorage(GROUP, log, hard_states)


def _fill(storage: PartitionRaftStorage) -> None:
    storage.append(
        [
            Entry(0, 49, 1, encode_batch([(None, b"v")] * 50)),
            Entry(50, 99, 1, encode_batch([(None, b"w")] * 50)),
        ]
    )


def test_partition_storage_follows_a_start_inside_a_batch(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    _fill(storage)
    storage.follow_log_start(60)
    assert storage.log.log_start_offset == 60
    assert storage.record_log_start() == 60
    # The Raft log starts at the base of the batch holding the log start.
    assert storage.log_start_offset() == 50
    assert storage.entry_at(55).base_offset == 50
    storage.follow_log_start(30)  # never lowered
    assert storage.log.log_start_offset == 60
    storage.follow_log_start(100)
    assert storage.log.log_start_offset == 100
    assert storage.log_start_offset() == 100


def test_the_metadata_log_keeps_its_own_start(tmp_path: Path) -> None:
    storage = _storage(tmp_path, metadata=True)
    _fill(storage)
    storage.follow_log_start(60)
    assert storage.log.log_start_offset == 0


def test_followers_follow_and_the_leader_learns_their_log_starts() -> None:
    async def scenario(cluster: Cluster) -> None:
        g = "orders-0"
        entry = await cluster.propose_committed(g, b"batch", records=10)
        await cluster.replicated(g, entry)
        leader = await cluster.leader(g)
        followers = [n for n in cluster.nodes if n != leader]
        raft_group = cluster.raft_group(leader, g)
        assert raft_group.low_watermark() == 0
        assert all(cluster.raft_group(n, g).low_watermark() is None for n in followers)
        cluster.storage[leader, g].raft_log.delete_records_before(
            6
        )  # DeleteRecords before 6 on the leader
        # The followers have not heard of it yet: the low watermark waits for them.
        assert raft_group.low_watermark() == 0
        with trio.fail_after(5):
            while not all(
                cluster.storage[n, g].raft_log.record_log_start() == 6 for n in followers
            ):
                await trio.sleep(0.02)
        with trio.fail_after(5):
            while raft_group.low_watermark() != 6:
                await trio.sleep(0.02)
        for n in followers:
            assert max(cluster.storage[n, g].followed_log_starts) == 6

    run_cluster(["orders-0"], scenario)


def test_a_down_replica_stops_counting_and_follows_when_it_is_back() -> None:
    async def scenario(cluster: Cluster) -> None:
        g = "orders-0"
        entry = await cluster.propose_committed(g, b"batch", records=10)
        await cluster.replicated(g, entry)
        leader = await cluster.leader(g)
        down, up = [n for n in cluster.nodes if n != leader]
        await cluster.crash(down)
        cluster.storage[leader, g].raft_log.delete_records_before(6)
        raft_group = cluster.raft_group(leader, g)
        # Once the crashed replica has not answered for an election timeout, the low
        # watermark no longer waits for it (Kafka counts live replicas only).
        with trio.fail_after(10):
            while raft_group.low_watermark() != 6:
                await trio.sleep(0.02)
        assert cluster.storage[up, g].raft_log.record_log_start() == 6
        assert cluster.storage[down, g].raft_log.record_log_start() == 0
        await cluster.start(down)
        with trio.fail_after(10):
            while cluster.storage[down, g].raft_log.record_log_start() != 6:
                await trio.sleep(0.02)

    run_cluster(["orders-0"], scenario)
