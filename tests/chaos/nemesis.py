"""Nemeses: the faults, each injected and repaired on a schedule bounded by the run's time.

A nemesis has `inject()` (returns what it did, or None when it found no target) and
`repair()`. `NemesisThread` runs one nemesis: a quiet interval, the fault, a hold, the repair,
again until the deadline; every start and end is a `nemesis` event in the history, which the
plot shades. Several nemeses run at once as several threads: node operations take a per-node
lock and partitions are owned per nemesis (`ChaosNetwork.block`), so they compose.

Names (`NEMESES`): kill-random, kill-leader, kill-coordinator (SIGKILL, then restart),
pause (SIGSTOP/SIGCONT), partition-leader (a partition's leader cut off from every other
broker), partition-majority (a random minority from the majority), partition-bridge (two halves
that only one broker sees both of), disk-full (one broker's filesystem filled, then emptied),
rolling-restart (SIGTERM and restart every broker, one at a time), net-loss, net-delay,
net-duplicate (a random subset of brokers' links lose, delay with jitter and reordering, or
duplicate packets: `tc netem`, nftables where the kernel has no netem), slow-disk (one
broker's fsyncs sleep first), clock-jump (one broker's wall clock stepped forwards or
backwards by seconds to minutes; its monotonic clock untouched), reassign (one replica of a
random partition moved to a broker holding none, through `raftka partitions reassign`; the
topic has one replica fewer than there are brokers when it runs), membership (a voter of the
metadata quorum, half the time the controller, taken out with `raftka cluster remove-voter`
and added back with `raftka cluster add-voter`), decommission (a broker decommissioned with
`raftka cluster decommission`, then wiped, rejoined with `raftka serve --join` and made a
voter again).
"""

from __future__ import annotations

import json
import queue
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tests.chaos.cluster import (
    ChaosCluster,
    NamespacedNode,
    fill_disk,
    find_coordinator,
    free_disk,
    partition_leaders,
    partition_replicas,
    raftka_cli,
)
from tests.chaos.history import History
from tests.chaos.netns import ChaosNetwork, LinkImpairment, netem_unavailable_reason
from tests.compat.harness import BrokerStartError, BrokerStopError

T = TypeVar("T")

#: How long a repair keeps asking for a removed voter to be added back (each try waits for
#: the broker to catch up; it may be down or cut off meanwhile).
VOTER_RESTORE_S = 30.0
#: The same once every other fault is healed (the run's end).
VOTER_RESTORE_AT_END_S = 120.0

QUIET_S = (2.0, 4.0)  # healthy time before each fault
HOLD_S = (4.0, 7.0)  # how long a fault lasts
RESTART_TIMEOUT_S = 45.0
ROLLING_PAUSE_S = 2.0  # between one broker's restart and the next one's SIGTERM
MAX_CRASH_RESTARTS = 5  # per broker, by the watchdog


class Spawner:
    """Starts broker processes from one thread that lives as long as the run.

    The harness sets PR_SET_PDEATHSIG, which fires when the *thread* that forked the broker
    exits; a broker restarted from a nemesis thread would die with that thread.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="chaos-spawner", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            request()

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the spawner thread and return its result (or raise its exception)."""
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def request() -> None:
            try:
                outcome["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                outcome["error"] = exc
            done.set()

        self._requests.put(request)
        done.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join(10)


@dataclass
class NemesisContext:
    """What nemeses act on, shared by every nemesis thread of a run."""

    cluster: ChaosCluster
    network: ChaosNetwork
    history: History
    spawner: Spawner
    topic: str
    group: str
    log: Callable[[str], None]
    disk_bytes: int | None = None
    #: FindCoordinator's key type of `group`: 0 a group, 1 a transactional id.
    coordinator_key_type: int = 0
    expected_down: set[int] = field(default_factory=set)
    starting: set[int] = field(default_factory=set)  # spawned, not yet answering
    start_timeouts: set[int] = field(default_factory=set)  # killed by the harness at start-up
    crash_restarts: dict[int, int] = field(default_factory=dict)
    #: Brokers the membership nemesis took out of the metadata voters, not yet added back.
    removed_voters: set[int] = field(default_factory=set)
    #: At most this many faults in place at once across all nemesis threads (None: no limit).
    fault_slots: threading.Semaphore | None = None
    _node_locks: dict[int, threading.RLock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def node_lock(self, node_id: int) -> threading.RLock:
        with self._lock:
            return self._node_locks.setdefault(node_id, threading.RLock())

    def running_nodes(self) -> list[NamespacedNode]:
        return [n for n in self.cluster.nodes if n.is_running() and not n.paused]

    def kill(self, node: NamespacedNode) -> None:
        with self.node_lock(node.node_id):
            self.expected_down.add(node.node_id)
            node.kill()

    def restart(self, node: NamespacedNode) -> str:
        """Start a stopped broker and wait until it answers; a description of the outcome."""
        with self.node_lock(node.node_id):
            if node.is_running():
                self.expected_down.discard(node.node_id)
                return f"node {node.node_id} already running"
            self.spawner.call(node.spawn)
            self.expected_down.discard(node.node_id)
            self.starting.add(node.node_id)
        try:
            node.wait_ready()
        except BrokerStartError as exc:
            if "did not answer" in str(exc):
                # The harness killed it (SIGKILL) when it did not answer in time, e.g. cut off
                # from the majority it must register with: not a crash of the broker's own.
                self.start_timeouts.add(node.node_id)
            self.history.record(
                "nemesis",
                name="restart",
                phase="info",
                detail=f"node {node.node_id} did not start: {str(exc)[:2000]}",
            )
            return f"node {node.node_id} failed to start (see history)"
        finally:
            self.starting.discard(node.node_id)
        return f"node {node.node_id} restarted"

    def leader_of_some_partition(self, rng: random.Random) -> tuple[int | None, str]:
        """(node id, why) of the leader of a random partition of the workload's topic."""
        leaders = partition_leaders(self.cluster.live_bootstrap(), self.topic)
        if not leaders:
            return None, "no leader known"
        partition = rng.choice(sorted(leaders))
        return leaders[partition], f"leader of {self.topic}-{partition}"

    def coordinator(self, rng: random.Random) -> tuple[int | None, str]:
        """(node id, why) of the coordinator of `group` (a group or a transactional id), by
        FindCoordinator to running brokers."""
        nodes = self.running_nodes()
        rng.shuffle(nodes)
        for node in nodes:
            node_id = find_coordinator(
                node.bootstrap, self.group, key_type=self.coordinator_key_type
            )
            if node_id is not None:
                what = "transactional id" if self.coordinator_key_type == 1 else "group"
                return node_id, f"coordinator of {what} {self.group} (per node {node.node_id})"
        return None, "no coordinator known"

    def heal_all(self) -> list[str]:
        """Undo every fault: network, links, pauses, filled and slow disks, jumped clocks,
        stopped brokers."""
        done = []
        self.network.heal()
        self.network.heal_links()
        for node in self.cluster.nodes:
            with self.node_lock(node.node_id):
                if node.paused:
                    node.resume()
                    done.append(f"resumed node {node.node_id}")
            if self.disk_bytes is not None:
                free_disk(self.cluster.disk_dir(node.node_id))
            if node.fault_env:
                node.set_fsync_delay_ms(0)
                node.set_clock_offset_ms(0)
        for node in self.cluster.nodes:
            if not node.is_running():
                done.append(self.restart(node))
        if self.removed_voters:
            done.append(self.restore_voters(VOTER_RESTORE_AT_END_S))
        return done

    def restore_voters(self, timeout_s: float) -> str:
        """Add every removed voter back (`raftka cluster add-voter`), trying for up to
        `timeout_s`; says which are voters again and which are not."""
        deadline = time.monotonic() + timeout_s
        restored, errors = [], {}
        for node_id in sorted(self.removed_voters):
            while True:
                bootstrap = self.cluster.live_bootstrap()
                try:
                    answer = raftka_cli(
                        "cluster", "add-voter", str(node_id), "--bootstrap-servers", bootstrap
                    )
                    ok = answer.returncode == 0 or "already votes" in answer.stderr
                    error = answer.stderr.strip()[-300:]
                except subprocess.TimeoutExpired:
                    ok, error = False, "add-voter timed out"
                if ok:
                    self.removed_voters.discard(node_id)
                    restored.append(node_id)
                    break
                errors[node_id] = error
                if time.monotonic() >= deadline:
                    break
                time.sleep(1.0)
        detail = f"voters {restored} added back" if restored else "no voter added back"
        if self.removed_voters:
            # Another nemesis (decommission) may have taken one out meanwhile: not tried here.
            still = sorted(self.removed_voters)
            why = [errors.get(n, f"{n} taken out meanwhile") for n in still]
            detail += f"; {still} not yet ({'; '.join(why)})"
        return detail

    def cluster_id(self) -> str:
        """The cluster's id, from a broker's meta.properties (a broker that joins needs it)."""
        for node in self.cluster.nodes:
            meta = node.data_dir / "meta.properties"
            if meta.exists():
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        raise RuntimeError("no broker's data directory names the cluster id")

    def metadata_quorum(self) -> dict[str, Any] | None:
        """`raftka cluster quorum` (DescribeQuorum) of the running brokers; None when it
        failed."""
        try:
            answer = raftka_cli(
                "cluster", "quorum", "--bootstrap-servers", self.cluster.live_bootstrap()
            )
        except subprocess.TimeoutExpired:
            return None
        if answer.returncode != 0:
            return None
        quorum: dict[str, Any] = json.loads(answer.stdout)
        return quorum


class Nemesis:
    """One kind of fault. Subclasses set `name` and implement `inject` and `repair`."""

    name = "none"
    hold_s = HOLD_S
    #: Brokers must be started with the fault shim preloaded (`ChaosCluster.preload_fault_shim`).
    needs_fault_shim = False
    #: Part of `--nemesis all` (reassign is not: it changes the topic's replication factor).
    in_all = True

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this machine cannot inject this fault, or None when it can."""
        return None

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        self.ctx = ctx
        self.rng = rng

    def inject(self) -> str | None:
        raise NotImplementedError

    def repair(self) -> str | None:
        raise NotImplementedError

    def pick_node(self, node_id: int | None) -> NamespacedNode | None:
        if node_id is not None:
            node = self.ctx.cluster.node(node_id)
            if node.is_running():
                return node
        running = self.ctx.running_nodes()
        return self.rng.choice(running) if running else None


class KillNemesis(Nemesis):
    """SIGKILL a broker chosen by `target()`; the repair restarts it."""

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.victim: NamespacedNode | None = None

    def target(self) -> tuple[int | None, str]:
        return None, "random node"

    def inject(self) -> str | None:
        node_id, why = self.target()
        node = self.pick_node(node_id)
        if node is None:
            return None
        if node.node_id != node_id:
            why = "random node" if node_id is None else f"{why}: not running, random node"
        self.ctx.kill(node)
        self.victim = node
        return f"kill -9 node {node.node_id} ({why})"

    def repair(self) -> str | None:
        if self.victim is None:
            return None
        victim, self.victim = self.victim, None
        return self.ctx.restart(victim)


class KillRandom(KillNemesis):
    name = "kill-random"


class KillLeader(KillNemesis):
    name = "kill-leader"

    def target(self) -> tuple[int | None, str]:
        return self.ctx.leader_of_some_partition(self.rng)


class KillCoordinator(KillNemesis):
    name = "kill-coordinator"

    def target(self) -> tuple[int | None, str]:
        return self.ctx.coordinator(self.rng)


class Pause(Nemesis):
    """SIGSTOP a broker (half the time a partition leader); the repair sends SIGCONT."""

    name = "pause"

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.victim: NamespacedNode | None = None

    def inject(self) -> str | None:
        node_id, why = None, "random node"
        if self.rng.random() < 0.5:
            node_id, why = self.ctx.leader_of_some_partition(self.rng)
        node = self.pick_node(node_id)
        if node is None:
            return None
        with self.ctx.node_lock(node.node_id):
            if not node.is_running():
                return None
            node.pause()
        self.victim = node
        return f"SIGSTOP node {node.node_id} ({why if node.node_id == node_id else 'random node'})"

    def repair(self) -> str | None:
        if self.victim is None:
            return None
        victim, self.victim = self.victim, None
        with self.ctx.node_lock(victim.node_id):
            victim.resume()
        return f"SIGCONT node {victim.node_id}"


def pairs_between(side_a: list[int], side_b: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for a in side_a for b in side_b]


class PartitionNemesis(Nemesis):
    """Drops packets between groups of brokers; the repair lifts this nemesis's drops."""

    def sides(self) -> tuple[list[tuple[int, int]], str]:
        raise NotImplementedError

    def inject(self) -> str | None:
        pairs, description = self.sides()
        self.ctx.network.block(self.name, pairs)
        return description

    def repair(self) -> str | None:
        self.ctx.network.heal(self.name)
        return "healed"


class PartitionLeader(PartitionNemesis):
    name = "partition-leader"

    def sides(self) -> tuple[list[tuple[int, int]], str]:
        ids = list(self.ctx.network.node_ids)
        node_id, why = self.ctx.leader_of_some_partition(self.rng)
        if node_id not in ids:
            node_id, why = self.rng.choice(ids), "random node"
        others = [n for n in ids if n != node_id]
        return pairs_between([node_id], others), f"isolate node {node_id} ({why}) from {others}"


class PartitionMajority(PartitionNemesis):
    name = "partition-majority"

    def sides(self) -> tuple[list[tuple[int, int]], str]:
        ids = list(self.ctx.network.node_ids)
        self.rng.shuffle(ids)
        minority, majority = sorted(ids[: len(ids) // 2]), sorted(ids[len(ids) // 2 :])
        return pairs_between(minority, majority), f"minority {minority} | majority {majority}"


class PartitionBridge(PartitionNemesis):
    name = "partition-bridge"

    def sides(self) -> tuple[list[tuple[int, int]], str]:
        ids = list(self.ctx.network.node_ids)
        self.rng.shuffle(ids)
        bridge = ids[0]
        half = (len(ids) - 1) // 2
        left, right = sorted(ids[1 : 1 + half]), sorted(ids[1 + half :])
        return (
            pairs_between(left, right),
            f"{left} | {right}, node {bridge} sees both sides",
        )


class DiskFull(Nemesis):
    """Fills one broker's filesystem with a filler file; the repair deletes it."""

    name = "disk-full"

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.victim: int | None = None

    def inject(self) -> str | None:
        assert self.ctx.disk_bytes is not None, "disk-full needs the brokers on small disks"
        node_id, why = None, "random node"
        if self.rng.random() < 0.5:
            node_id, why = self.ctx.leader_of_some_partition(self.rng)
        if node_id not in self.ctx.network.node_ids:
            node_id, why = self.rng.choice(self.ctx.network.node_ids), "random node"
        written = fill_disk(self.ctx.cluster.disk_dir(node_id), self.ctx.disk_bytes)
        self.victim = node_id
        return f"filled the disk of node {node_id} ({why}) with {written >> 20} MiB"

    def repair(self) -> str | None:
        if self.victim is None:
            return None
        victim, self.victim = self.victim, None
        free_disk(self.ctx.cluster.disk_dir(victim))
        return f"freed the disk of node {victim}"


class RollingRestart(Nemesis):
    """SIGTERM every broker in turn, restarting each before the next (one fault window)."""

    name = "rolling-restart"
    hold_s = (0.0, 0.0)

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.deadline = float("inf")

    def step(self, steps: list[str], detail: str) -> None:
        steps.append(detail)
        self.ctx.history.record("nemesis", name=self.name, phase="info", detail=detail)
        self.ctx.log(f"{self.name}: {detail}")

    def inject(self) -> str | None:
        steps = []
        for node in self.ctx.cluster.nodes:
            if time.monotonic() >= self.deadline:
                break
            with self.ctx.node_lock(node.node_id):
                # A broker another nemesis is restarting has not installed its SIGTERM handler.
                if not node.is_running() or node.node_id in self.ctx.starting:
                    continue
                self.ctx.expected_down.add(node.node_id)
                try:
                    node.stop()
                    self.step(steps, f"SIGTERM node {node.node_id}: clean exit")
                except BrokerStopError as exc:
                    self.ctx.history.record(
                        "unclean-stop", node=node.node_id, detail=str(exc)[:3000]
                    )
                    self.step(steps, f"SIGTERM node {node.node_id}: unclean stop")
            self.step(steps, self.ctx.restart(node))
            time.sleep(ROLLING_PAUSE_S)
        return f"restarted {len(steps) // 2} broker(s) one at a time" if steps else None

    def repair(self) -> str | None:
        return "rolling restart done"


class LinkNemesis(Nemesis):
    """Impairs the links of a random non-empty subset of brokers (both directions, to peers
    and clients alike); the repair restores them."""

    def impairment(self) -> LinkImpairment:
        raise NotImplementedError

    def inject(self) -> str | None:
        ids = list(self.ctx.network.node_ids)
        chosen = sorted(self.rng.sample(ids, self.rng.randint(1, len(ids))))
        impairment = self.impairment()
        self.ctx.network.impair(self.name, dict.fromkeys(chosen, impairment))
        return f"links of nodes {chosen}: {impairment.describe()}"

    def repair(self) -> str | None:
        self.ctx.network.heal_links(self.name)
        return "links healed"


class NetLoss(LinkNemesis):
    name = "net-loss"

    def impairment(self) -> LinkImpairment:
        return LinkImpairment(loss_pct=round(self.rng.uniform(5, 30), 1))


class NetDelay(LinkNemesis):
    name = "net-delay"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return netem_unavailable_reason()

    def impairment(self) -> LinkImpairment:
        delay_ms = self.rng.randrange(20, 400)
        return LinkImpairment(
            delay_ms=delay_ms,
            jitter_ms=delay_ms // 2,
            reorder_pct=round(self.rng.uniform(5, 25), 1),
        )


class NetDuplicate(LinkNemesis):
    name = "net-duplicate"

    def impairment(self) -> LinkImpairment:
        return LinkImpairment(duplicate_pct=round(self.rng.uniform(5, 30), 1))


def _fault_shim_reason() -> str | None:
    from tests.chaos.cluster import fault_shim_unavailable_reason

    return fault_shim_unavailable_reason()


class SlowDisk(Nemesis):
    """Every fsync of one broker (half the time a leader) sleeps 50 ms to 2 s first; the
    repair makes them fast again. The data still reaches the disk, only late."""

    name = "slow-disk"
    needs_fault_shim = True

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.victim: NamespacedNode | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return _fault_shim_reason()

    def inject(self) -> str | None:
        node_id, why = None, "random node"
        if self.rng.random() < 0.5:
            node_id, why = self.ctx.leader_of_some_partition(self.rng)
        if node_id not in self.ctx.network.node_ids:
            node_id, why = self.rng.choice(self.ctx.network.node_ids), "random node"
        delay_ms = self.rng.choice((50, 200, 500, 1000, 2000))
        self.victim = self.ctx.cluster.node(node_id)
        self.victim.set_fsync_delay_ms(delay_ms)
        return f"every fsync of node {node_id} ({why}) sleeps {delay_ms} ms first"

    def repair(self) -> str | None:
        if self.victim is None:
            return None
        victim, self.victim = self.victim, None
        victim.set_fsync_delay_ms(0)
        return f"fsyncs of node {victim.node_id} fast again"


class ClockJump(Nemesis):
    """Steps one broker's wall clock forwards or backwards by 5 s to 5 minutes (as a bad NTP
    step would); the repair steps it back to the real time, a jump the other way."""

    name = "clock-jump"
    needs_fault_shim = True

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.victim: NamespacedNode | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return _fault_shim_reason()

    def inject(self) -> str | None:
        node = self.ctx.cluster.node(self.rng.choice(self.ctx.network.node_ids))
        offset_s = self.rng.choice((-1, 1)) * self.rng.randrange(5, 300)
        node.set_clock_offset_ms(offset_s * 1000)
        self.victim = node
        return f"wall clock of node {node.node_id} jumps {offset_s:+d} s"

    def repair(self) -> str | None:
        if self.victim is None:
            return None
        victim, self.victim = self.victim, None
        victim.set_clock_offset_ms(0)
        return f"wall clock of node {victim.node_id} back to the real time"


class Reassign(Nemesis):
    """Moves one replica of a random partition of the workload's topic to a broker that holds
    none (Kafka's AlterPartitionReassignments, by `raftka partitions reassign`), while the
    other nemeses' faults go on; the fault window is the time given to the move, and the
    repair only reports whether it finished (a move carries on after the window)."""

    name = "reassign"
    in_all = False

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.moving: tuple[int, list[int]] | None = None

    def inject(self) -> str | None:
        bootstrap = self.ctx.cluster.live_bootstrap()
        replicas = partition_replicas(bootstrap, self.ctx.topic)
        ids = list(self.ctx.network.node_ids)
        movable = sorted(p for p, r in replicas.items() if set(ids) - set(r))
        if not movable:
            return None
        partition = self.rng.choice(movable)
        old = replicas[partition]
        new = list(old)
        new[self.rng.randrange(len(new))] = self.rng.choice(sorted(set(ids) - set(old)))
        spec = f"{self.ctx.topic}:{partition}={','.join(map(str, new))}"
        answer = raftka_cli("partitions", "reassign", spec, "--bootstrap-servers", bootstrap)
        if answer.returncode != 0:
            self.ctx.history.record(
                "nemesis",
                name=self.name,
                phase="info",
                detail=f"reassign {spec} refused: {answer.stderr.strip()[-500:]}",
            )
            return None
        self.moving = (partition, new)
        return f"move {self.ctx.topic}-{partition} from {old} to {new}"

    def repair(self) -> str | None:
        if self.moving is None:
            return None
        (partition, new), self.moving = self.moving, None
        now = partition_replicas(self.ctx.cluster.live_bootstrap(), self.ctx.topic)
        done = sorted(now.get(partition, [])) == sorted(new)
        return f"{self.ctx.topic}-{partition} {'on' if done else 'still moving to'} {new}"


class Membership(Nemesis):
    """Takes a voter out of the metadata quorum (KIP-853's RemoveRaftVoter, by `raftka
    cluster remove-voter`), half the time the controller, which hands its role to another
    voter first; the broker stays registered and serves as an observer. The repair adds it
    back (`raftka cluster add-voter`: it catches up, then is promoted), trying while the other
    nemeses' faults go on; one it could not add back is added back before the next removal,
    and at the run's end once every other fault is healed. One voter out at a time. Part
    of `all`: it needs nothing of the run's set-up, and the run's end adds every voter
    back before the quorum is checked."""

    name = "membership"

    def inject(self) -> str | None:
        ctx = self.ctx
        if ctx.removed_voters:
            detail = ctx.restore_voters(VOTER_RESTORE_S)
            ctx.history.record("nemesis", name=self.name, phase="info", detail=detail)
            if ctx.removed_voters:
                return None
        quorum = ctx.metadata_quorum()
        if quorum is None:
            return None
        voters = sorted(quorum["voters"])
        if len(voters) < 2:
            return None
        leader = quorum["leader"]
        if leader in voters and self.rng.random() < 0.5:
            node_id, why = leader, "the controller"
        else:
            node_id, why = self.rng.choice(voters), "a voter"
        # A removal that failed or timed out may have been made all the same, even later
        # (a controller that hands its role off answers NOT_CONTROLLER while the new one
        # makes the change): the repair adds the broker back either way (add-voter of a
        # voter answers "already votes").
        ctx.removed_voters.add(node_id)
        try:
            answer = raftka_cli(
                "cluster",
                "remove-voter",
                str(node_id),
                "--bootstrap-servers",
                ctx.cluster.live_bootstrap(),
            )
            failed = answer.returncode != 0
            error = answer.stderr.strip().splitlines()[-1:] if failed else []
        except subprocess.TimeoutExpired:
            failed, error = True, ["remove-voter timed out"]
        now = ctx.metadata_quorum()
        after = "unknown" if now is None else f"{sorted(now['voters'])}"
        return f"remove voter {node_id} ({why}) of {voters}: voters now {after}" + (
            f" (the command failed: {error[0] if error else ''})" if failed else ""
        )

    def repair(self) -> str | None:
        if not self.ctx.removed_voters:
            return None
        return self.ctx.restore_voters(VOTER_RESTORE_S)


#: How long one `raftka cluster decommission` waits for its moves, at inject and at repair.
DECOMMISSION_WAIT_S = 20
#: How long the run's end (every other fault healed) keeps asking for a decommission to
#: finish; a repair during the faults asks once and leaves the rest to the next window.
DECOMMISSION_AT_END_S = 120.0


def decommission_outcome(returncode: int, stderr: str) -> tuple[bool | None, str]:
    """What a `raftka cluster decommission` run said: (True: moved off and unregistered,
    False: moves still under way, None: refused) and its last line. Progress lines come
    first on stderr, so only the last line says how the command ended."""
    last = (stderr.strip().splitlines() or [""])[-1][-300:]
    if returncode == 0:
        return True, last
    if "is not registered" in last:
        return True, last  # an earlier try finished it (perhaps after it answered)
    if "partitions left to move" in stderr or "timed out" in last.lower():
        return False, last
    return None, last


class Decommission(Nemesis):
    """Decommissions a broker while the other nemeses' faults go on (`raftka cluster
    decommission`: every replica on it moves to a broker holding none of that partition,
    then it leaves the voters and is unregistered), then replaces it as an operator replaces
    a machine: the process is stopped, its data directory wiped, and it starts again with
    `raftka serve --join --cluster-id ID`, registers anew as an observer and is made a
    voter again (`raftka cluster add-voter`). The fault window is the decommission; the
    repair finishes it, rejoins and promotes the broker. One broker at a time; one whose
    decommission did not finish is carried on with before another is chosen. Every topic
    has one replica fewer than there are brokers in a run with it (a replica needs a broker
    free to take it)."""

    name = "decommission"
    in_all = False

    def __init__(self, ctx: NemesisContext, rng: random.Random) -> None:
        super().__init__(ctx, rng)
        self.target: int | None = None  # decommission asked for, not yet rejoined
        self.decommissioned = False  # the target's decommission finished

    def inject(self) -> str | None:
        ctx = self.ctx
        if self.target is not None:
            detail = self.finish(0.0)
            ctx.history.record("nemesis", name=self.name, phase="info", detail=detail)
            if self.target is not None:
                return None
        candidates = [n.node_id for n in ctx.running_nodes() if n.node_id not in ctx.removed_voters]
        if not candidates:
            return None
        node_id = self.rng.choice(sorted(candidates))
        done, said = self._decommission(node_id, DECOMMISSION_WAIT_S)
        if done is None:
            ctx.history.record(
                "nemesis",
                name=self.name,
                phase="info",
                detail=f"decommission {node_id} refused: {said}",
            )
            return None
        self.target = node_id
        self.decommissioned = done
        return f"decommission broker {node_id}: " + ("done" if done else f"under way ({said})")

    def repair(self) -> str | None:
        if self.target is None:
            return None
        return self.finish(0.0)

    def _decommission(self, node_id: int, wait_s: float) -> tuple[bool | None, str]:
        """(True: moved off and unregistered, False: still moving, None: refused, and why)."""
        try:
            answer = raftka_cli(
                "cluster",
                "decommission",
                str(node_id),
                "--wait-timeout",
                str(int(wait_s)),
                "--bootstrap-servers",
                self.ctx.cluster.live_bootstrap(),
                timeout_s=wait_s + 30,
            )
        except subprocess.TimeoutExpired:
            return False, "decommission timed out"
        return decommission_outcome(answer.returncode, answer.stderr)

    def finish(self, timeout_s: float) -> str:
        """Carry the target's decommission through (one try, more for up to `timeout_s`),
        then wipe and rejoin it and make it a voter again; says how far it got."""
        ctx, node_id = self.ctx, self.target
        assert node_id is not None
        deadline = time.monotonic() + timeout_s
        while not self.decommissioned:
            done, said = self._decommission(node_id, DECOMMISSION_WAIT_S)
            if done:
                self.decommissioned = True
                break
            if time.monotonic() >= deadline:
                return f"decommission of broker {node_id} not finished yet: {said}"
            if done is None:
                time.sleep(1.0)
        node = ctx.cluster.node(node_id)
        with ctx.node_lock(node_id):
            ctx.expected_down.add(node_id)
            if node.is_running():
                try:
                    node.stop(timeout=30)
                except BrokerStopError as exc:
                    ctx.history.record("unclean-stop", node=node_id, detail=str(exc)[:3000])
            cluster_id = ctx.cluster_id()
            shutil.rmtree(node.data_dir, ignore_errors=True)
            if "--join" not in node.extra_args:
                node.extra_args += ["--join", "--cluster-id", cluster_id]
            ctx.removed_voters.add(node_id)
        self.target, self.decommissioned = None, False
        started = ctx.restart(node)
        voters = ctx.restore_voters(VOTER_RESTORE_S)
        return f"broker {node_id} decommissioned, wiped and rejoined ({started}); {voters}"


def reassignments_in_progress(bootstrap: str) -> list[dict[str, Any]] | None:
    """The moves still under way (`raftka partitions reassignments`), None when no broker
    answered."""
    import json

    answer = raftka_cli("partitions", "reassignments", "--bootstrap-servers", bootstrap)
    if answer.returncode != 0:
        return None
    moves: list[dict[str, Any]] = json.loads(answer.stdout).get("reassignments", [])
    return moves


NEMESES: dict[str, type[Nemesis]] = {
    cls.name: cls
    for cls in (
        KillRandom,
        KillLeader,
        KillCoordinator,
        Pause,
        PartitionLeader,
        PartitionMajority,
        PartitionBridge,
        DiskFull,
        RollingRestart,
        NetLoss,
        NetDelay,
        NetDuplicate,
        SlowDisk,
        ClockJump,
        Reassign,
        Membership,
        Decommission,
    )
}


def all_nemeses() -> list[str]:
    """What `--nemesis all` runs: every nemesis this machine can run that is part of `all`."""
    unavailable = unavailable_nemeses()
    return sorted(n for n, cls in NEMESES.items() if cls.in_all and n not in unavailable)


def unavailable_nemeses() -> dict[str, str]:
    """{name: why} of the nemeses this machine cannot run (e.g. net-delay without netem)."""
    reasons = {name: cls.unavailable_reason() for name, cls in NEMESES.items()}
    return {name: reason for name, reason in reasons.items() if reason is not None}


class NemesisThread(threading.Thread):
    """Runs one nemesis until `deadline` (monotonic): quiet, inject, hold, repair, repeat.

    A fault still in place at the deadline is repaired then; `stop()` ends the schedule early.
    """

    def __init__(self, nemesis: Nemesis, deadline: float) -> None:
        super().__init__(name=f"nemesis-{nemesis.name}", daemon=True)
        self.nemesis = nemesis
        self.deadline = deadline
        self.stop_event = threading.Event()
        self.faults = 0
        self.error: BaseException | None = None
        if isinstance(nemesis, RollingRestart):
            nemesis.deadline = deadline

    def stop(self) -> None:
        self.stop_event.set()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to `seconds` but not past the deadline; False when time is up."""
        remaining = min(seconds, self.deadline - time.monotonic())
        if remaining > 0:
            self.stop_event.wait(remaining)
        return not self.stop_event.is_set() and time.monotonic() < self.deadline

    def run(self) -> None:
        nemesis, ctx, rng = self.nemesis, self.nemesis.ctx, self.nemesis.rng
        try:
            while self._wait(rng.uniform(*QUIET_S)):
                if self.deadline - time.monotonic() < nemesis.hold_s[0]:
                    break  # too little time left for a whole fault
                if not self._take_slot():
                    break
                try:
                    self._one_fault()
                finally:
                    if ctx.fault_slots is not None:
                        ctx.fault_slots.release()
        except BaseException as exc:  # noqa: BLE001 - the runner reports it and heals
            self.error = exc
            ctx.history.record("nemesis", name=nemesis.name, phase="info", detail=f"error: {exc!r}")

    def _take_slot(self) -> bool:
        """Wait for a free fault slot (when the run limits faults at once); False when the
        deadline or `stop()` came first."""
        slots = self.nemesis.ctx.fault_slots
        if slots is None:
            return True
        while not self.stop_event.is_set():
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return False
            if slots.acquire(timeout=min(remaining, 0.5)):
                return True
        return False

    def _one_fault(self) -> None:
        """Inject, hold, repair: one fault window (none when the nemesis finds no target)."""
        nemesis, ctx, rng = self.nemesis, self.nemesis.ctx, self.nemesis.rng
        t0 = ctx.history.now()
        detail = nemesis.inject()
        if detail is None:
            ctx.history.record("nemesis", name=nemesis.name, phase="info", detail="no target")
            return
        self.faults += 1
        ctx.history.record("nemesis", name=nemesis.name, phase="start", t0=t0, detail=detail)
        ctx.log(f"{nemesis.name}: {detail}")
        self._wait(rng.uniform(*nemesis.hold_s))
        detail = nemesis.repair()
        ctx.history.record("nemesis", name=nemesis.name, phase="end", detail=detail)
        ctx.log(f"{nemesis.name}: {detail}")


class Watchdog(threading.Thread):
    """Notices brokers that exited although no nemesis stopped them, and restarts them.

    Each such exit is a `node-exit` event (a crash, which fails the run), except a broker the
    harness killed because it did not answer within the start-up timeout (recorded as such);
    restarts are bounded per broker so a broker that cannot start does not loop forever.
    """

    def __init__(self, ctx: NemesisContext) -> None:
        super().__init__(name="chaos-watchdog", daemon=True)
        self.ctx = ctx
        self.stop_event = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(RESTART_TIMEOUT_S + 5)

    def run(self) -> None:
        while not self.stop_event.wait(0.5):
            for node in self.ctx.cluster.nodes:
                with self.ctx.node_lock(node.node_id):
                    code = node.returncode
                    if code is None or node.node_id in self.ctx.expected_down:
                        continue
                    if node.node_id in self.ctx.starting:
                        continue  # `restart` reports a start-up exit itself, then we see it
                    restarts = self.ctx.crash_restarts.get(node.node_id, 0)
                    self.ctx.expected_down.add(node.node_id)
                    timed_out = node.node_id in self.ctx.start_timeouts
                    self.ctx.start_timeouts.discard(node.node_id)
                if timed_out:
                    detail = f"node {node.node_id} killed after a start-up timeout; restarting"
                    self.ctx.history.record("nemesis", name="restart", phase="info", detail=detail)
                    self.ctx.log(f"watchdog: {detail}")
                else:
                    self.ctx.history.record(
                        "node-exit", node=node.node_id, code=code, log_tail=node.log_tail(30)
                    )
                    self.ctx.log(f"watchdog: node {node.node_id} exited with code {code}")
                if restarts >= MAX_CRASH_RESTARTS or self.stop_event.wait(2.0):
                    continue
                self.ctx.crash_restarts[node.node_id] = restarts + 1
                self.ctx.log(f"watchdog: {self.ctx.restart(node)}")
