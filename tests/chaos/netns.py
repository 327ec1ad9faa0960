"""Network namespaces on a private bridge, and partitions made of dropped packets.

Each broker gets a namespace with one veth pair whose other end is on a Linux bridge in the
root namespace; the bridge holds the client address (`.1`) of a private /24 chosen so that it
overlaps no route on the machine, and broker N is `.(10 + N)`. Clients (the workload) run in
the root namespace and reach every broker through the bridge; a partition is an nftables set
of blocked peer addresses inside each broker's namespace (dropped both on input and output),
so a partitioned broker sees its peers' packets vanish, as on a real network, while clients
still reach it.

Every name carries the run's tag, so parallel runs never collide, and everything a run
creates (namespaces, bridge, mounts) is listed in a state file under `STATE_DIR`: a later run
removes what a run killed before its own clean-up left behind (`cleanup_stale_runs`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = Path("/run/raftka-chaos")
NFT_TABLE = "raftka_chaos"
NFT_IMPAIR_TABLE = "raftka_chaos_impair"  # family ip: `dup to` needs it
NETEM_LIMIT_PACKETS = 10000  # netem's queue; the default 1000 drops packets under delay
COMMAND_TIMEOUT_S = 30.0
NODE_HOST_BASE = 10  # broker N is .(10 + N) of the run's /24
SUBNET_FIRST_OCTETS = range(200, 250)  # candidates 10.200.0.0/24 .. 10.249.255.0/24

NFT_RULESET = f"""
table inet {NFT_TABLE} {{
    set blocked {{
        type ipv4_addr
    }}
    chain input {{
        type filter hook input priority 0; policy accept;
        ip saddr @blocked drop
    }}
    chain output {{
        type filter hook output priority 0; policy accept;
        ip daddr @blocked drop
    }}
}}
table ip {NFT_IMPAIR_TABLE} {{
    chain impair_in {{
        type filter hook input priority 10; policy accept;
    }}
    chain impair_out {{
        type filter hook output priority 10; policy accept;
    }}
}}
"""


class ChaosSetupError(RuntimeError):
    """A command that builds or tears down the test network failed."""


def run_command(
    argv: list[str], *, check: bool = True, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short system command (ip, nft, mount) with a time limit."""
    try:
        result = subprocess.run(
            argv,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ChaosSetupError(f"{' '.join(argv)}: no answer within {COMMAND_TIMEOUT_S} s") from exc
    if check and result.returncode != 0:
        raise ChaosSetupError(
            f"{' '.join(argv)} exited with {result.returncode}: {result.stderr.strip()}"
        )
    return result


def chaos_unavailable_reason() -> str | None:
    """Why this machine cannot run the fault tests, or None when it can.

    They need Linux, root (namespaces, a bridge, tmpfs mounts), `ip`, `nft` and `mount`, and
    a kernel that lets us create a namespace.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "needs root to create network namespaces, a bridge and tmpfs mounts"
    for tool in ("ip", "nft", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not found (scripts/setup installs nftables when run as root)"
    probe = f"rkc-probe-{os.getpid()}-{random.randrange(1 << 30):x}"
    result = run_command(["ip", "netns", "add", probe], check=False)
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip()}"
    try:
        result = run_command(
            ["ip", "netns", "exec", probe, "nft", "-f", "-"], check=False, input_text=NFT_RULESET
        )
        if result.returncode != 0:
            return f"nftables does not work inside a namespace: {result.stderr.strip()}"
    finally:
        run_command(["ip", "netns", "del", probe], check=False)
    return None


# -- impaired links: loss, delay, duplication, reordering -------------------------------------


@dataclass(frozen=True)
class LinkImpairment:
    """What a link does to packets: lose, delay (with jitter), duplicate or reorder some.

    Percentages are of packets; `reorder_pct` needs a delay (netem sends those packets at
    once while the rest wait). `merge` combines two nemeses' impairments of one link.
    """

    loss_pct: float = 0.0
    delay_ms: int = 0
    jitter_ms: int = 0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("loss_pct", "duplicate_pct", "reorder_pct"):
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(f"{name} must be between 0 and 100")
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.jitter_ms > self.delay_ms:
            raise ValueError("delay_ms and jitter_ms must be >= 0, jitter_ms <= delay_ms")

    @property
    def empty(self) -> bool:
        return self == LinkImpairment()

    @property
    def needs_netem(self) -> bool:
        """Delay and reordering need netem; loss and duplication also work with nftables."""
        return self.delay_ms > 0 or self.reorder_pct > 0

    def merge(self, other: LinkImpairment) -> LinkImpairment:
        return LinkImpairment(
            loss_pct=max(self.loss_pct, other.loss_pct),
            delay_ms=max(self.delay_ms, other.delay_ms),
            jitter_ms=max(self.jitter_ms, other.jitter_ms),
            duplicate_pct=max(self.duplicate_pct, other.duplicate_pct),
            reorder_pct=max(self.reorder_pct, other.reorder_pct),
        )

    def netem_args(self) -> list[str]:
        """The `tc qdisc replace ... root` arguments after the device: `netem ...`."""
        args = ["netem", "limit", str(NETEM_LIMIT_PACKETS)]
        if self.delay_ms:
            args += ["delay", f"{self.delay_ms}ms"]
            if self.jitter_ms:
                args += [f"{self.jitter_ms}ms"]
        if self.loss_pct:
            args += ["loss", f"{self.loss_pct:g}%"]
        if self.duplicate_pct:
            args += ["duplicate", f"{self.duplicate_pct:g}%"]
        if self.reorder_pct and self.delay_ms:
            args += ["reorder", f"{self.reorder_pct:g}%"]
        return args

    def nft_rules(self) -> list[str]:
        """The nftables fallback (no delay or reordering): lines of an nft script adding
        random loss both ways and duplicates on output to `NFT_IMPAIR_TABLE`'s chains."""
        rules = []
        if self.loss_pct:
            per_mille = round(self.loss_pct * 10)
            for chain, device in (("impair_in", "iifname"), ("impair_out", "oifname")):
                rules.append(
                    f'add rule ip {NFT_IMPAIR_TABLE} {chain} {device} "eth0" '
                    f"numgen random mod 1000 < {per_mille} drop"
                )
        if self.duplicate_pct:
            per_mille = round(self.duplicate_pct * 10)
            # `dup to` sends a copy to the packet's own destination: the peer gets it twice.
            rules.append(
                f'add rule ip {NFT_IMPAIR_TABLE} impair_out oifname "eth0" '
                f"numgen random mod 1000 < {per_mille} dup to ip daddr"
            )
        return rules

    def describe(self) -> str:
        parts = []
        if self.loss_pct:
            parts.append(f"{self.loss_pct:g}% loss")
        if self.delay_ms:
            parts.append(f"{self.delay_ms}±{self.jitter_ms} ms delay")
        if self.duplicate_pct:
            parts.append(f"{self.duplicate_pct:g}% duplicated")
        if self.reorder_pct and self.delay_ms:
            parts.append(f"{self.reorder_pct:g}% reordered")
        return ", ".join(parts) or "none"


def netem_unavailable_reason() -> str | None:
    """Why `tc ... netem` cannot be used here, or None when it can (probed in a scratch
    namespace; the answer does not change while the machine runs, so it is kept)."""
    global _NETEM_REASON  # noqa: PLW0603 - a probe of the running kernel, made once
    if _NETEM_REASON is None:
        _NETEM_REASON = _probe_netem() or ""
    return _NETEM_REASON or None


_NETEM_REASON: str | None = None


def _probe_netem() -> str | None:
    if shutil.which("tc") is None:
        return "tc not found (Debian's iproute2 package has it)"
    probe = f"rkc-netem-{os.getpid()}-{random.randrange(1 << 30):x}"
    result = run_command(["ip", "netns", "add", probe], check=False)
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip()}"
    try:
        argv = ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        result = run_command(argv, check=False)
        if result.returncode == 0:
            return None
        if shutil.which("modprobe") is not None:
            run_command(["modprobe", "sch_netem"], check=False)
            if run_command(argv, check=False).returncode == 0:
                return None
        return (
            f"the kernel ({os.uname().release}) has no netem qdisc: `tc qdisc add ... netem` "
            f"says {result.stderr.strip()!r}"
            + ("" if shutil.which("modprobe") else " and there is no modprobe to load sch_netem")
        )
    finally:
        run_command(["ip", "netns", "del", probe], check=False)


# -- what a run created ----------------------------------------------------------------------


def _process_start_ticks(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time), to tell a live owner from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class RunResources:
    """The namespaces, bridge and mounts one run created, mirrored in a state file.

    Thread-safe. `release_all()` removes everything still listed, in the order that works
    (processes in the namespaces, mounts, namespaces, bridge) and keeps going past errors.
    """

    def __init__(self, tag: str, state_dir: Path = STATE_DIR) -> None:
        self.tag = tag
        self.state_path = state_dir / f"{tag}.json"
        self.owner_pid = os.getpid()
        self.owner_start = _process_start_ticks(self.owner_pid)
        self.bridge: str | None = None
        self.netns: list[str] = []
        self.mounts: list[str] = []
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> RunResources:
        state = json.loads(path.read_text())
        resources = cls(state["tag"], path.parent)
        resources.owner_pid = state["owner_pid"]
        resources.owner_start = state["owner_start"]
        resources.bridge = state["bridge"]
        resources.netns = list(state["netns"])
        resources.mounts = list(state["mounts"])
        return resources

    def owner_alive(self) -> bool:
        start = _process_start_ticks(self.owner_pid)
        return start is not None and start == self.owner_start

    def _save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "tag": self.tag,
            "owner_pid": self.owner_pid,
            "owner_start": self.owner_start,
            "bridge": self.bridge,
            "netns": self.netns,
            "mounts": self.mounts,
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_path)

    def add_netns(self, name: str) -> None:
        with self._lock:
            self.netns.append(name)
            self._save()

    def set_bridge(self, name: str) -> None:
        with self._lock:
            self.bridge = name
            self._save()

    def add_mount(self, path: str) -> None:
        with self._lock:
            self.mounts.append(path)
            self._save()

    def remove_mount(self, path: str) -> None:
        with self._lock:
            if path in self.mounts:
                self.mounts.remove(path)
            self._save()

    def release_all(self) -> list[str]:
        """Remove everything listed; returns the errors (empty when all went)."""
        errors: list[str] = []
        with self._lock:
            for name in self.netns:
                # Only processes inside this run's own namespaces: our brokers.
                pids = run_command(["ip", "netns", "pids", name], check=False).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
            for path in reversed(self.mounts):
                result = run_command(["umount", path], check=False)
                if result.returncode != 0:
                    lazy = run_command(["umount", "-l", path], check=False)
                    if lazy.returncode != 0:
                        errors.append(f"umount {path}: {lazy.stderr.strip()}")
            self.mounts = []
            for name in self.netns:
                result = run_command(["ip", "netns", "del", name], check=False)
                if result.returncode != 0 and "No such file" not in result.stderr:
                    errors.append(f"ip netns del {name}: {result.stderr.strip()}")
            self.netns = []
            if self.bridge is not None:
                result = run_command(["ip", "link", "del", self.bridge], check=False)
                if result.returncode != 0 and "Cannot find" not in result.stderr:
                    errors.append(f"ip link del {self.bridge}: {result.stderr.strip()}")
                self.bridge = None
            if errors:
                self._save()
            else:
                with contextlib.suppress(FileNotFoundError):
                    self.state_path.unlink()
        return errors


def cleanup_stale_runs(state_dir: Path = STATE_DIR) -> list[str]:
    """Release what runs whose process is gone left behind; returns one line per run."""
    released = []
    if not state_dir.is_dir():
        return released
    for path in sorted(state_dir.glob("*.json")):
        try:
            resources = RunResources.load(path)
        except (OSError, ValueError, KeyError):
            continue
        if resources.owner_alive():
            continue
        errors = resources.release_all()
        note = f"; errors: {errors}" if errors else ""
        released.append(f"released resources of dead run {resources.tag}{note}")
    return released


# -- the network -----------------------------------------------------------------------------


def _used_networks() -> list[ipaddress.IPv4Network]:
    networks = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for line in run_command(argv, check=False).stdout.splitlines():
            for word in line.split():
                if "/" in word or word[:1].isdigit():
                    with contextlib.suppress(ValueError):
                        networks.append(ipaddress.IPv4Network(word, strict=False))
    return networks


def choose_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A private /24 that overlaps no address or route on this machine."""
    used = _used_networks()
    for _ in range(200):
        candidate = ipaddress.IPv4Network(
            f"10.{rng.choice(SUBNET_FIRST_OCTETS)}.{rng.randrange(256)}.0/24"
        )
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise ChaosSetupError("no free private /24 found for the test network")


class ChaosNetwork:
    """A bridge, one namespace per broker, and partitions between brokers.

    Partitions are owned: `block(owner, pairs)` replaces what `owner` blocks, `heal(owner)`
    lifts it, and each namespace drops the union over all owners, so nemeses running at the
    same time do not undo each other's partitions.
    """

    def __init__(self, resources: RunResources, node_ids: Iterable[int]) -> None:
        self.resources = resources
        self.tag = resources.tag
        self.node_ids = sorted(node_ids)
        self.bridge = f"rkc{self.tag}"
        self.subnet: ipaddress.IPv4Network | None = None
        self._blocked_by_owner: dict[str, set[frozenset[int]]] = {}
        self._applied: dict[int, frozenset[str]] = {}
        self._impaired_by_owner: dict[str, dict[int, LinkImpairment]] = {}
        self._impairment_applied: dict[int, LinkImpairment] = {}
        self._lock = threading.Lock()

    def host_end(self, node_id: int) -> str:
        """The root-namespace end of the broker's veth pair (its egress is the broker's
        ingress)."""
        return f"rkc{self.tag}h{node_id}"

    def netns(self, node_id: int) -> str:
        return f"raftka-chaos-{self.tag}-n{node_id}"

    def address(self, node_id: int) -> str:
        assert self.subnet is not None, "network not created"
        return str(self.subnet.network_address + NODE_HOST_BASE + node_id)

    @property
    def client_address(self) -> str:
        assert self.subnet is not None, "network not created"
        return str(self.subnet.network_address + 1)

    def create(self) -> None:
        """Bridge with the client address, then a namespace and veth pair per broker."""
        self.subnet = choose_subnet(random.Random(os.urandom(8)))
        prefix = self.subnet.prefixlen
        self.resources.set_bridge(self.bridge)
        run_command(["ip", "link", "add", self.bridge, "type", "bridge"])
        run_command(["ip", "addr", "add", f"{self.client_address}/{prefix}", "dev", self.bridge])
        run_command(["ip", "link", "set", self.bridge, "up"])
        for node_id in self.node_ids:
            ns = self.netns(node_id)
            host_end, ns_end = self.host_end(node_id), f"rkc{self.tag}p{node_id}"
            self.resources.add_netns(ns)
            run_command(["ip", "netns", "add", ns])
            run_command(["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end])
            run_command(["ip", "link", "set", ns_end, "netns", ns])
            run_command(["ip", "link", "set", host_end, "master", self.bridge])
            run_command(["ip", "link", "set", host_end, "up"])
            run_command(["ip", "-n", ns, "link", "set", ns_end, "name", "eth0"])
            run_command(
                ["ip", "-n", ns, "addr", "add", f"{self.address(node_id)}/{prefix}", "dev", "eth0"]
            )
            run_command(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run_command(["ip", "-n", ns, "link", "set", "lo", "up"])
            run_command(["ip", "netns", "exec", ns, "nft", "-f", "-"], input_text=NFT_RULESET)
            self._applied[node_id] = frozenset()

    def exec_prefix(self, node_id: int) -> list[str]:
        """argv prefix that runs a command inside the broker's namespace."""
        return ["ip", "netns", "exec", self.netns(node_id)]

    # -- partitions ------------------------------------------------------------------------

    def block(self, owner: str, pairs: Iterable[tuple[int, int]]) -> None:
        """Drop every packet between each pair of brokers (both ways), as `owner`'s fault."""
        with self._lock:
            self._blocked_by_owner[owner] = {frozenset(p) for p in pairs if p[0] != p[1]}
            self._apply()

    def heal(self, owner: str | None = None) -> None:
        """Lift `owner`'s partitions, or every partition when owner is None."""
        with self._lock:
            if owner is None:
                self._blocked_by_owner.clear()
            else:
                self._blocked_by_owner.pop(owner, None)
            self._apply()

    def blocked_pairs(self) -> set[frozenset[int]]:
        with self._lock:
            return set().union(*self._blocked_by_owner.values())

    def _apply(self) -> None:
        pairs: set[frozenset[int]] = set().union(*self._blocked_by_owner.values())
        for node_id in self.node_ids:
            peers = {peer for pair in pairs if node_id in pair for peer in pair if peer != node_id}
            addresses = frozenset(self.address(peer) for peer in peers)
            if self._applied.get(node_id) == addresses:
                continue
            # One nft transaction: the set is never briefly empty between flush and add.
            script = f"flush set inet {NFT_TABLE} blocked\n"
            if addresses:
                script += (
                    f"add element inet {NFT_TABLE} blocked {{ {', '.join(sorted(addresses))} }}\n"
                )
            run_command(self.exec_prefix(node_id) + ["nft", "-f", "-"], input_text=script)
            self._applied[node_id] = addresses

    # -- impaired links --------------------------------------------------------------------

    def impair(self, owner: str, links: dict[int, LinkImpairment]) -> None:
        """Impair each listed broker's link (both directions), as `owner`'s fault; replaces
        what `owner` impaired before. Several owners' impairments of a link are merged."""
        with self._lock:
            self._impaired_by_owner[owner] = dict(links)
            self._apply_impairments()

    def heal_links(self, owner: str | None = None) -> None:
        """Lift `owner`'s impairments, or every impairment when owner is None."""
        with self._lock:
            if owner is None:
                self._impaired_by_owner.clear()
            else:
                self._impaired_by_owner.pop(owner, None)
            self._apply_impairments()

    def impairments(self) -> dict[int, LinkImpairment]:
        """What each broker's link does now (brokers with a healthy link left out)."""
        with self._lock:
            return {n: i for n, i in self._impairment_applied.items() if not i.empty}

    def _apply_impairments(self) -> None:
        for node_id in self.node_ids:
            wanted = LinkImpairment()
            for links in self._impaired_by_owner.values():
                if node_id in links:
                    wanted = wanted.merge(links[node_id])
            if self._impairment_applied.get(node_id, LinkImpairment()) == wanted:
                continue
            for argv, input_text in impairment_commands(
                self.netns(node_id), self.host_end(node_id), wanted, netem_unavailable_reason()
            ):
                run_command(argv, input_text=input_text)
            self._impairment_applied[node_id] = wanted


def impairment_commands(
    netns: str, host_end: str, impairment: LinkImpairment, netem_missing: str | None
) -> list[tuple[list[str], str | None]]:
    """The commands (argv, stdin) that make a broker's link do `impairment` and nothing
    else: netem on both ends of the veth pair when the kernel has it, else nftables rules
    in the broker's namespace (loss and duplication only)."""
    if netem_missing is None:
        commands: list[tuple[list[str], str | None]] = []
        for prefix in (["tc", "-n", netns], ["tc"]):
            device = "eth0" if len(prefix) > 1 else host_end
            if impairment.empty:
                # `replace` with the default qdisc: unlike `del`, fine when nothing is there.
                argv = [*prefix, "qdisc", "replace", "dev", device, "root", "pfifo"]
                commands.append((argv, None))
                commands.append(([*prefix, "qdisc", "del", "dev", device, "root"], None))
            else:
                argv = [*prefix, "qdisc", "replace", "dev", device, "root"]
                commands.append(([*argv, *impairment.netem_args()], None))
        return commands
    if impairment.needs_netem:
        raise ChaosSetupError(f"{impairment.describe()} needs netem: {netem_missing}")
    script = "".join(
        f"flush chain ip {NFT_IMPAIR_TABLE} {chain}\n" for chain in ("impair_in", "impair_out")
    )
    script += "".join(rule + "\n" for rule in impairment.nft_rules())
    return [(["ip", "netns", "exec", netns, "nft", "-f", "-"], script)]
