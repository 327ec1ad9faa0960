"""RaftNode end to end in one process: each node its own transport on 127.0.0.1."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
from raft_net import Net

from raftka.consensus import HardState, MemoryRaftLog, Message, MessageType, NotLeaderError, Role
from raftka.consensus.core import StorageError
from raftka.consensus.driver import RaftGroup, RaftGroupUpdate, RaftNode
from raftka.consensus.transport import PeerTransport
from raftka.consensus.types import Entry, Snapshot

TICK_MS = 20
NODES = (1, 2, 3)
VOTERS = frozenset(NODES)


class MemoryRaftGroupStorage:
    """RaftGroupStorage over a MemoryRaftLog; survives a simulated restart by being reused.

    With `sync_every_append` it behaves like a log with flush.messages=1 and records, in
    `events`, each sync as ("sync", end offset) when the (slow) fsync finishes.
    """

    def __init__(
        self, sync_every_append: bool = False, events: list[tuple[str, int]] | None = None
    ) -> None:
        self.raft_log = MemoryRaftLog()
        self.hard_state = HardState()
        self.sync_every_append = sync_every_append
        self.events = events if events is not None else []
        self.disk_full = False
        self.committer: CountingCommitter | None = None
        self.installed: list[Snapshot] = []
        self.followed_log_starts: list[int] = []

    def load_hard_state(self) -> HardState:
        return self.hard_state

    def save_hard_state(self, hard_state: HardState) -> None:
        self.hard_state = hard_state
        if self.committer is not None:
            self.committer.staged += 1

    def truncate_to(self, offset: int) -> None:
        self.raft_log.truncate_to(offset)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self.installed.append(snapshot)
        self.raft_log.install_snapshot(snapshot)

    def snapshot_data(self, end_offset: int) -> bytes | None:
        return f"state below {end_offset}".encode()

    def append(self, entries: Sequence[Entry]) -> None:
        if self.disk_full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.raft_log.append(entries)

    def follow_log_start(self, offset: int) -> None:
        self.followed_log_starts.append(offset)
        self.raft_log.delete_records_before(offset)

    def high_watermark_checkpoint(self) -> int | None:
        return None

    def entries_need_sync(self) -> bool:
        return self.sync_every_append

    def hard_state_needs_sync(self) -> bool:
        return self.sync_every_append

    def sync_job(self) -> Callable[[], None] | None:
        end = self.raft_log.log_end_offset()
        events = self.events

        def sync() -> None:
            time.sleep(0.005)  # long enough for a premature acknowledgement to show
            events.append(("sync", end))

        return sync


class CountingCommitter:
    """A HardStateCommitter that counts commits and the hard states each one covers (the
    storages above keep their hard state themselves; here each save is also staged)."""

    def __init__(self) -> None:
        self.staged = 0
        self.commits: list[int] = []

    def commit_job(self, fsync: bool) -> Callable[[], None] | None:
        if not self.staged:
            return None
        count, self.staged = self.staged, 0
        return lambda: self.commits.append(count)


def free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Cluster:
    """Three RaftNodes, each run in its own cancel scope so a test can crash and restart one."""

    def __init__(
        self, nursery: trio.Nursery, groups: Sequence[str], sync_every_append: bool = False
    ) -> None:
        self.nursery = nursery
        self.addresses = {
            node: ("127.0.0.1", port) for node, port in zip(NODES, free_ports(3), strict=True)
        }
        self.groups = list(groups)
        # One ordered record per node: its storage's syncs and the messages it sent.
        self.events: dict[int, list[tuple[str, int]]] = {node: [] for node in NODES}
        self.storage = {
            (node, g): MemoryRaftGroupStorage(sync_every_append, self.events[node])
            for node in NODES
            for g in groups
        }
        self.committers = {node: CountingCommitter() for node in NODES}
        self.nodes: dict[int, RaftNode] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.updates: dict[int, list[RaftGroupUpdate]] = {node: [] for node in NODES}

    async def start(self, node: int) -> None:
        transport = PeerTransport(node, self.addresses[node], self.addresses)
        send = transport.send
        events = self.events[node]

        def recording_send(m: Message) -> None:
            if m.type is MessageType.APPEND_RESPONSE and not m.reject:
                events.append(("ack", m.match_end))
            send(m)

        transport.send = recording_send  # type: ignore[method-assign]
        raft_node = RaftNode(
            node, transport, tick_ms=TICK_MS, seed=7, hard_states=self.committers[node]
        )
        for g in self.groups:
            storage = self.storage[node, g]
            storage.committer = self.committers[node]
            raft_node.add_raft_group(g, VOTERS, storage, self.updates[node].append)
        self.nodes[node] = raft_node
        scope = trio.CancelScope()
        self.scopes[node] = scope

        async def run(task_status: trio.TaskStatus[None]) -> None:
            with scope:
                await raft_node.run(task_status=task_status)

        await self.nursery.start(run)

    async def crash(self, node: int) -> None:
        self.scopes[node].cancel()
        raft_node = self.nodes.pop(node)
        with trio.fail_after(2):
            while raft_node.transport.running:
                await trio.sleep(0.01)

    def raft_group(self, node: int, g: str) -> RaftGroup:
        raft_group = self.nodes[node].raft_group(g)
        assert raft_group is not None
        return raft_group

    async def leader(self, g: str, timeout_s: float = 3.0) -> int:
        """Wait for exactly one live node to lead `g` with every live node agreeing."""
        with trio.fail_after(timeout_s):
            while True:
                leaders = [n for n in self.nodes if self.raft_group(n, g).role is Role.LEADER]
                if len(leaders) == 1:
                    leader = leaders[0]
                    term = self.raft_group(leader, g).term
                    if all(
                        self.raft_group(n, g).leader_id == leader
                        and self.raft_group(n, g).term == term
                        for n in self.nodes
                    ):
                        return leader
                await trio.sleep(TICK_MS / 1000)

    async def propose_committed(self, g: str, payload: bytes, records: int = 1) -> Entry:
        leader = await self.leader(g)
        raft_group = self.raft_group(leader, g)
        entry = raft_group.propose(records, payload)
        assert entry in self.storage[leader, g].raft_log.all_entries()  # persisted on return
        assert await raft_group.wait_committed(entry.end_offset, timeout_s=3)
        return entry

    async def replicated(self, g: str, entry: Entry, timeout_s: float = 3.0) -> None:
        """Every live node holds `entry` and knows it is committed."""
        with trio.fail_after(timeout_s):
            for node in self.nodes:
                assert await self.raft_group(node, g).wait_committed(entry.end_offset, timeout_s)
                assert entry in self.storage[node, g].raft_log.all_entries()


def run_cluster(
    groups: Sequence[str],
    scenario: Callable[[Cluster], Awaitable[None]],
    sync_every_append: bool = False,
) -> None:
    async def main() -> None:
        with trio.fail_after(25):
            async with trio.open_nursery() as nursery:
                cluster = Cluster(nursery, groups, sync_every_append)
                for node in NODES:
                    await cluster.start(node)
                await scenario(cluster)
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_elect_replicate_crash_failover_and_restart_catch_up() -> None:
    async def scenario(cluster: Cluster) -> None:
        g = "orders-0"
        first = await cluster.propose_committed(g, b"batch-1", records=3)
        await cluster.replicated(g, first)
        old_leader = await cluster.leader(g)
        updates = cluster.updates[old_leader]
        assert any(u.soft_state and u.soft_state.role is Role.LEADER for u in updates)
        assert any(u.high_watermark == first.end_offset for u in updates)

        await cluster.crash(old_leader)
        new_leader = await cluster.leader(g, timeout_s=5)
        assert new_leader != old_leader
        second = await cluster.propose_committed(g, b"batch-2", records=2)
        assert second.epoch > first.epoch

        await cluster.start(old_leader)  # same port, same storage (hard state and log)
        await cluster.replicated(g, second, timeout_s=5)
        assert cluster.raft_group(old_leader, g).leader_id == new_leader

    run_cluster(["orders-0"], scenario)


def test_fifty_groups_on_three_nodes() -> None:
    groups = [f"t-{i}" for i in range(50)]

    async def scenario(cluster: Cluster) -> None:
        for g in groups:
            await cluster.leader(g, timeout_s=5)
        leaders = {await cluster.leader(g) for g in groups}
        assert len(leaders) > 1, "election timeouts are spread per group"
        entries = {g: await cluster.propose_committed(g, g.encode()) for g in groups}
        for g, entry in entries.items():
            await cluster.replicated(g, entry)
        for node in NODES:
            commits = cluster.committers[node].commits
            # Every group changed term at least once on every node; far fewer commits did it.
            assert sum(commits) >= len(groups), commits
            assert len(commits) < sum(commits), commits

    run_cluster(groups, scenario)


def test_not_leader_and_lost_leadership_while_waiting() -> None:
    async def scenario(cluster: Cluster) -> None:
        g = "p-0"
        leader = await cluster.leader(g)
        follower = next(n for n in NODES if n != leader)
        with pytest.raises(NotLeaderError) as not_leader:
            cluster.raft_group(follower, g).propose(1, b"x")
        assert not_leader.value.leader_id == leader
        # Cut the leader off from its followers: its acks=all waiter must not hang.
        others = [n for n in NODES if n != leader]
        for n in others:
            await cluster.crash(n)
        entry = cluster.raft_group(leader, g).propose(1, b"never committed")
        with pytest.raises(NotLeaderError):
            await cluster.raft_group(leader, g).wait_committed(entry.end_offset, timeout_s=5)
        assert not await cluster.raft_group(leader, g).wait_committed(entry.end_offset, 0.05)

    run_cluster(["p-0"], scenario)


def test_shutdown_transfers_leadership() -> None:
    groups = [f"s-{i}" for i in range(10)]

    async def scenario(cluster: Cluster) -> None:
        for g in groups:
            await cluster.propose_committed(g, b"x")
        leaders = {g: await cluster.leader(g) for g in groups}
        node = max(set(leaders.values()), key=list(leaders.values()).count)
        await cluster.nodes[node].shutdown(timeout_s=3)
        for g in groups:
            assert cluster.raft_group(node, g).role is not Role.LEADER
        await cluster.crash(node)
        for g in groups:
            # Handed over, not timed out: a leader exists at once among the survivors.
            new_leader = await cluster.leader(g, timeout_s=0.5)
            assert new_leader != node

    run_cluster(groups, scenario)


def test_shutdown_hands_over_to_a_follower_that_is_still_running() -> None:
    """Brokers stopped one after another: the follower stopped just before still counts as
    recently active (and, with the lower id, came first), but a handover to it could never
    complete; the leader hands over to the follower that runs."""
    g = "h-0"

    async def scenario(cluster: Cluster) -> None:
        await cluster.propose_committed(g, b"x")
        leader = await cluster.leader(g)
        stopped, running = sorted(n for n in NODES if n != leader)
        await cluster.crash(stopped)
        transport = cluster.nodes[leader].transport
        with trio.fail_after(2):
            while transport.connected_to(stopped):
                await trio.sleep(0.01)
        await cluster.nodes[leader].shutdown(timeout_s=3)
        assert cluster.raft_group(leader, g).role is not Role.LEADER
        assert await cluster.leader(g) == running

    run_cluster([g], scenario)


def test_messages_for_unknown_groups_are_dropped_and_removed_groups_fail_waiters() -> None:
    async def scenario(cluster: Cluster) -> None:
        g = "r-0"
        leader = await cluster.leader(g)
        follower = next(n for n in NODES if n != leader)
        waiter_result: list[BaseException] = []

        async def wait_forever() -> None:
            try:
                await cluster.raft_group(follower, g).wait_committed(10**9, timeout_s=10)
            except NotLeaderError as exc:
                waiter_result.append(exc)

        cluster.nursery.start_soon(wait_forever)
        await trio.sleep(0.05)
        cluster.nodes[follower].remove_raft_group(g)
        await trio.sleep(0.01)
        assert len(waiter_result) == 1
        stats = cluster.nodes[follower].stats
        with trio.fail_after(2):
            while stats.messages_unknown_group == 0:
                await trio.sleep(TICK_MS / 1000)
        assert cluster.nodes[follower].raft_group(g) is None

    run_cluster(["r-0"], scenario)


def test_ticking_a_thousand_idle_followers() -> None:
    """Not a timed assertion: it exercises the tick path at scale (see scripts for figures)."""
    transport = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1), 3: ("127.0.0.1", 2)})
    node = RaftNode(1, transport, election_timeout_ticks=10**6)
    for i in range(1000):
        node.add_raft_group(f"t-{i}", VOTERS, MemoryRaftGroupStorage())
    for _ in range(10):
        node.tick()
    assert all(g.role is Role.FOLLOWER for g in node.raft_groups.values())


def test_single_voter_leaders_are_not_ticked() -> None:
    """A leader that is its group's only voter has nothing to do on a tick: a node with many
    such partitions visits none of them per tick. Until elected, the group is ticked (its
    election timer elects it); a multi-voter group always is."""
    transport = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1), 3: ("127.0.0.1", 2)})
    node = RaftNode(1, transport, election_timeout_ticks=3)
    alone = [
        node.add_raft_group(f"alone-{i}", frozenset({1}), MemoryRaftGroupStorage())
        for i in range(50)
    ]
    shared = node.add_raft_group("shared", VOTERS, MemoryRaftGroupStorage())
    assert node.ticked_group_count == 51
    for _ in range(6):  # past the longest randomized election timeout
        node.tick()
    assert all(g.role is Role.LEADER for g in alone)
    assert shared.role is not Role.LEADER
    assert node.ticked_group_count == 1
    alone[0].propose(1, b"x")
    assert node.ticked_group_count == 1
    node.remove_raft_group("shared")
    assert node.ticked_group_count == 0


def test_a_single_voter_commits_each_write_as_it_is_written() -> None:
    """The only voter's write commits it: the commit is applied in the same drive (the
    waiters released and the update told once per write, without a Ready of its own). A
    leader with followers commits only when they answer, so its write alone commits
    nothing."""
    transport = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1)})
    node = RaftNode(1, transport, tick_ms=TICK_MS, election_timeout_ticks=3)
    updates: list[RaftGroupUpdate] = []
    alone = node.add_raft_group("alone", frozenset({1}), MemoryRaftGroupStorage(), updates.append)

    async def scenario() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(node.run)
                while alone.role is not Role.LEADER:
                    await trio.sleep(TICK_MS / 1000)
                # The first waits for the election's term to be synced.
                first = alone.propose(1, b"first")
                assert await alone.wait_committed(first.end_offset, timeout_s=10)
                updates.clear()
                core = alone._core
                take_ready = core.ready
                readies: list[int] = []
                core.ready = lambda: readies.append(1) or take_ready()  # type: ignore[method-assign]
                for i in range(3):
                    entry = alone.propose(2, b"batch-%d" % i)
                    assert len(readies) == i + 1  # one Ready a write, its commit without one
                    assert alone.high_watermark == entry.end_offset == alone.durable_end
                    assert updates[-1].high_watermark == entry.end_offset
                assert [u.soft_state for u in updates] == [None] * 3
                nursery.cancel_scope.cancel()

    trio.run(scenario)

    net = Net([1, 2, 3])
    leader = net.elect(1)
    entry = leader.propose(1, b"x")
    net.drain(1)  # written and sent
    assert leader.take_commit() is None
    net.deliver()
    assert leader.high_watermark == entry.end_offset


def test_a_single_voter_leader_with_a_learner_is_ticked() -> None:
    """A learner never campaigns: what it lost while down reaches it only through the
    leader's heartbeats, so the only voter keeps ticking while it has learners."""
    transport = PeerTransport(1, ("127.0.0.1", 0), {2: ("127.0.0.1", 1)})
    node = RaftNode(1, transport, tick_ms=TICK_MS, election_timeout_ticks=3)
    group = node.add_raft_group("metadata", frozenset({1}), MemoryRaftGroupStorage())

    async def change(**kwargs: int) -> None:
        entry = group.propose_config_change(**kwargs)
        assert await group.wait_committed(entry.end_offset, timeout_s=10)

    async def scenario() -> None:
        with trio.fail_after(30):
            await leads_then_learner_comes_and_goes()

    async def leads_then_learner_comes_and_goes() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            while group.role is not Role.LEADER:
                await trio.sleep(TICK_MS / 1000)
            assert node.ticked_group_count == 0
            first = group.propose(1, b"x")  # a membership change waits for its term's entry
            assert await group.wait_committed(first.end_offset, timeout_s=10)
            await change(add_learner=2)
            assert group.status().learners == {2}
            assert node.ticked_group_count == 1
            await change(remove=2)
            assert group.status().learners == frozenset()
            assert node.ticked_group_count == 0
            nursery.cancel_scope.cancel()

    trio.run(scenario)


def _synced_end(events: list[tuple[str, int]]) -> int:
    return max((value for kind, value in events if kind == "sync"), default=0)


def test_sync_every_append_acknowledges_only_after_fsync() -> None:
    """flush.messages=1: acks=1 (wait_durable) never precedes the leader's fsync, acks=all
    (wait_committed) never precedes a majority's, and no follower claims a match (sends an
    APPEND_RESPONSE) beyond what it has synced."""

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader("d-0")
        group = cluster.raft_group(leader, "d-0")
        for i in range(20):
            entry = group.propose(3, f"batch-{i}".encode())
            assert group.durable_end < entry.end_offset  # written, not yet synced
            assert await group.wait_durable(entry.end_offset, 3, entry.epoch)
            assert _synced_end(cluster.events[leader]) >= entry.end_offset
            assert await group.wait_committed(entry.end_offset, 3, entry.epoch)
            synced = [n for n in NODES if _synced_end(cluster.events[n]) >= entry.end_offset]
            assert len(synced) >= 2, (entry, synced)
        for node in NODES:
            synced = 0
            for kind, value in cluster.events[node]:
                if kind == "sync":
                    synced = max(synced, value)
                else:
                    assert value <= synced, (node, kind, value, synced)

    run_cluster(["d-0"], scenario, sync_every_append=True)


def test_default_policy_acknowledges_on_write() -> None:
    """Kafka's default (no flush.messages): written is durable enough; nothing is fsynced."""

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader("d-0")
        group = cluster.raft_group(leader, "d-0")
        entry = group.propose(1, b"x")
        assert group.durable_end >= entry.end_offset
        assert await group.wait_committed(entry.end_offset, 3, entry.epoch)
        assert all(_synced_end(cluster.events[n]) == 0 for n in NODES)

    run_cluster(["d-0"], scenario)


def test_full_disk_on_the_leader_refuses_writes_and_recovers() -> None:
    """A leader whose write fails answers StorageError with nothing stored, stops leading
    (and does not campaign while its disk is full); the others carry on; once space
    returns it catches up and the logs converge."""

    async def scenario(cluster: Cluster) -> None:
        first = await cluster.propose_committed("f-0", b"before")
        leader = await cluster.leader("f-0")
        storage = cluster.storage[leader, "f-0"]
        storage.disk_full = True
        before = storage.raft_log.all_entries()
        with pytest.raises(StorageError):
            cluster.raft_group(leader, "f-0").propose(1, b"refused")
        assert storage.raft_log.all_entries() == before
        assert cluster.raft_group(leader, "f-0").role is not Role.LEADER
        with trio.fail_after(5):
            while True:
                others = [n for n in NODES if n != leader]
                leaders = [n for n in others if cluster.raft_group(n, "f-0").role is Role.LEADER]
                if leaders:
                    break
                await trio.sleep(TICK_MS / 1000)
        group = cluster.raft_group(leaders[0], "f-0")
        during = group.propose(1, b"during")
        assert await group.wait_committed(during.end_offset, 3, during.epoch)
        assert cluster.raft_group(leader, "f-0").role is Role.FOLLOWER
        storage.disk_full = False
        await cluster.replicated("f-0", during)
        assert first in storage.raft_log.all_entries()
        assert (
            storage.raft_log.all_entries()
            == cluster.storage[leaders[0], "f-0"].raft_log.all_entries()
        )

    run_cluster(["f-0"], scenario)


def test_leader_changes_and_follower_match_ends_for_monitoring() -> None:
    g = "m-0"

    async def scenario(cluster: Cluster) -> None:
        entry = await cluster.propose_committed(g, b"x")
        await cluster.replicated(g, entry)
        leader = await cluster.leader(g)
        before = {node: cluster.raft_group(node, g).leader_changes for node in NODES}
        assert all(count >= 1 for count in before.values()), before
        follower = next(n for n in NODES if n != leader)
        assert cluster.raft_group(follower, g).follower_match_ends() == {}
        caught_up = {n: entry.end_offset for n in NODES if n != leader}
        with trio.fail_after(3):
            while cluster.raft_group(leader, g).follower_match_ends() != caught_up:
                await trio.sleep(TICK_MS / 1000)

        await cluster.crash(leader)
        new_leader = await cluster.leader(g, timeout_s=5)
        assert cluster.raft_group(new_leader, g).leader_changes > before[new_leader]
        assert set(cluster.raft_group(new_leader, g).follower_match_ends()) == set(NODES) - {
            new_leader
        }

    run_cluster([g], scenario)
