"""A raftka cluster whose brokers each run in their own network namespace.

Built on the compat harness: a `NamespacedNode` is a `ClusterNode` (start, SIGTERM stop,
SIGKILL, SIGSTOP/SIGCONT, log in `broker.log`) launched through `ip netns exec` and listening
on its namespace's address; `ChaosCluster` is a `ClusterProcess` over such nodes. Also here:
the questions nemeses ask the cluster (partition leaders, a group's coordinator) and the full
disk (a size-limited tmpfs per broker and a filler file), and the fault shim (a slow fsync and
a jumped wall clock, `fault_shim.c` preloaded into every broker).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.chaos.netns import ChaosNetwork, ChaosSetupError, RunResources, run_command
from tests.compat.harness import ClusterNode, ClusterProcess, _recv_exactly, split_host_port

KAFKA_PORT = 9092
RAFT_PORT = 9093
FIND_COORDINATOR_KEY = 10
FILLER_NAME = "chaos-filler"
FILL_CHUNK_BYTES = 1 << 20
FAULT_SHIM_SOURCE = Path(__file__).with_name("fault_shim.c")
FSYNC_DELAY_FILE = "fault-fsync-delay-ms"
CLOCK_OFFSET_FILE = "fault-clock-offset-ms"


class NamespacedNode(ClusterNode):
    """A cluster voter inside network namespace `netns`, reachable at `host`.

    Its data directory may be given (a mounted small filesystem for the full-disk nemesis);
    the pid is the broker's own (`ip netns exec` execs the command), so SIGSTOP and SIGKILL
    reach the broker itself.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        netns: str,
        peers: str,
        config: dict[str, str],
        *,
        base_dir: Path,
        data_dir: Path,
        python: str,
        startup_timeout_s: float,
    ) -> None:
        self.host = host
        self.netns = netns
        super().__init__(
            node_id,
            RAFT_PORT,
            peers,
            config,
            port=KAFKA_PORT,
            base_dir=base_dir,
            data_dir=data_dir,
            python=python,
            startup_timeout_s=startup_timeout_s,
        )
        self.extra_args = ["--node-id", str(node_id), "--raft-listen", self.raft_address]
        self.extra_args += ["--peers", peers]
        #: Environment put before the broker's command (`env K=V ... python ...`).
        self.fault_env: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    def command(self) -> list[str]:
        env = [f"{k}={v}" for k, v in sorted(self.fault_env.items())]
        # `env` execs the broker, so the pid is still the broker's own.
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            *(["env", *env] if env else []),
            *super().command(),
        ]

    def set_fsync_delay_ms(self, delay_ms: int) -> None:
        """fsync and fdatasync of this broker sleep `delay_ms` first (0: no delay); needs the
        fault shim (`ChaosCluster.preload_fault_shim`)."""
        write_control_file(self.base_dir / FSYNC_DELAY_FILE, delay_ms)

    def set_clock_offset_ms(self, offset_ms: int) -> None:
        """This broker's wall clock runs `offset_ms` ahead (negative: behind) of the real one,
        within 100 ms; its monotonic clock is untouched. Needs the fault shim."""
        write_control_file(self.base_dir / CLOCK_OFFSET_FILE, offset_ms)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        if self.paused:
            state += ", paused"
        return f"NamespacedNode({self.node_id}, {self.bootstrap}, {state})"


class ChaosCluster(ClusterProcess):
    """`ClusterProcess` over `NamespacedNode`s, one per namespace of `network`.

    With `disk_bytes`, every broker's data directory lives on its own tmpfs of that size
    (`disk_dir(node_id)`), so one broker's disk can be filled without touching the others.
    """

    def __init__(
        self,
        network: ChaosNetwork,
        resources: RunResources,
        base_dir: Path,
        config: dict[str, str],
        *,
        disk_bytes: int | None = None,
        startup_timeout_s: float = 45.0,
        python: str = sys.executable,
    ) -> None:
        self.base_dir = base_dir
        self.startup_timeout_s = startup_timeout_s
        self.network = network
        self.resources = resources
        self.disk_bytes = disk_bytes
        peers = ",".join(f"{n}@{network.address(n)}:{RAFT_PORT}" for n in network.node_ids)
        self.nodes = []
        for node_id in network.node_ids:
            node_dir = base_dir / f"node-{node_id}"
            self.nodes.append(
                NamespacedNode(
                    node_id,
                    network.address(node_id),
                    network.netns(node_id),
                    peers,
                    config,
                    base_dir=node_dir,
                    data_dir=node_dir / "disk" / "data",
                    python=python,
                    startup_timeout_s=startup_timeout_s,
                )
            )

    def preload_fault_shim(self) -> None:
        """Compile `fault_shim.c` and start every broker with it preloaded (before start)."""
        library = build_fault_shim(self.base_dir)
        for node in self.nodes:
            node.base_dir.mkdir(parents=True, exist_ok=True)
            node.set_fsync_delay_ms(0)
            node.set_clock_offset_ms(0)
            node.fault_env = {
                "LD_PRELOAD": str(library),
                "RAFTKA_FAULT_FSYNC_DELAY_FILE": str(node.base_dir / FSYNC_DELAY_FILE),
                "RAFTKA_FAULT_CLOCK_OFFSET_FILE": str(node.base_dir / CLOCK_OFFSET_FILE),
            }

    def disk_dir(self, node_id: int) -> Path:
        """The broker's filesystem root (its data directory is `data` inside it)."""
        return self.base_dir / f"node-{node_id}" / "disk"

    def mount_disks(self) -> None:
        """A tmpfs of `disk_bytes` under every broker's data directory (before start)."""
        if self.disk_bytes is None:
            return
        for node in self.nodes:
            disk = self.disk_dir(node.node_id)
            disk.mkdir(parents=True, exist_ok=True)
            self.resources.add_mount(str(disk))
            run_command(
                [
                    "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={self.disk_bytes},mode=0755",
                    "tmpfs",
                    str(disk),
                ]
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def live_bootstrap(self) -> str:
        """Addresses of the brokers that are running and not paused (all when none is)."""
        live = [n.bootstrap for n in self.running()]
        return ",".join(live) if live else self.bootstrap


# -- the fault shim --------------------------------------------------------------------------


def fault_shim_unavailable_reason() -> str | None:
    """Why the fault shim cannot be built here (no C compiler), or None when it can."""
    if shutil.which("cc") is None:
        return (
            "no C compiler `cc` to build tests/chaos/fault_shim.c "
            "(scripts/setup installs gcc when run as root)"
        )
    return None


def build_fault_shim(out_dir: Path) -> Path:
    """Compile the fault shim into `out_dir`; the shared library's path."""
    reason = fault_shim_unavailable_reason()
    if reason is not None:
        raise ChaosSetupError(reason)
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / "fault_shim.so"
    run_command(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(FAULT_SHIM_SOURCE), "-ldl"]
    )
    return library


def write_control_file(path: Path, value: int) -> None:
    """Replace a fault shim's control file atomically (the shim never reads half a number)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n")
    tmp.replace(path)


# -- full disk -------------------------------------------------------------------------------


def fill_disk(disk: Path, max_bytes: int) -> int:
    """Write a filler file until the filesystem at `disk` has no space left; bytes written.

    Bounded by `max_bytes` (the filesystem's size) so a filesystem that never reports ENOSPC
    cannot make this loop forever.
    """
    filler = disk / FILLER_NAME
    written = 0
    chunk = b"\0" * FILL_CHUNK_BYTES
    with open(filler, "ab", buffering=0) as out:
        while written <= max_bytes:
            try:
                written += out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 16 or 1]
        with contextlib.suppress(OSError):
            os.fsync(out.fileno())
    return written


def free_disk(disk: Path) -> None:
    """Delete the filler file: the space returns at once."""
    with contextlib.suppress(FileNotFoundError):
        (disk / FILLER_NAME).unlink()


# -- questions to the cluster ----------------------------------------------------------------


def _topic_metadata(bootstrap: str, topic: str, timeout_s: float) -> Any:
    """The topic's Metadata (confluent-kafka's TopicMetadata), or None when no broker
    answered or the topic has an error."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000, "log_level": 0})
    try:
        md = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except KafkaException:
        return None
    if md is None or md.error is not None:
        return None
    return md


def partition_leaders(bootstrap: str, topic: str, timeout_s: float = 5.0) -> dict[int, int]:
    """{partition: leader node id} from Metadata; empty when no broker answered."""
    md = _topic_metadata(bootstrap, topic, timeout_s)
    if md is None:
        return {}
    return {p.id: p.leader for p in md.partitions.values() if p.leader >= 0}


def partition_replicas(bootstrap: str, topic: str, timeout_s: float = 5.0) -> dict[int, list[int]]:
    """{partition: replica node ids} from Metadata; empty when no broker answered."""
    md = _topic_metadata(bootstrap, topic, timeout_s)
    if md is None:
        return {}
    return {p.id: list(p.replicas) for p in md.partitions.values()}


def raftka_cli(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """`raftka ARGS --output json` as an operator runs it, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "raftka.broker", *args, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def find_coordinator(
    address: str, group: str, timeout_s: float = 3.0, key_type: int = 0
) -> int | None:
    """The node id of `group`'s coordinator (key_type 0; with key_type 1, `group` is a
    transactional id and the answer its transaction coordinator), by a FindCoordinator v1
    request to `address`.

    None when the broker answers with an error (e.g. COORDINATOR_NOT_AVAILABLE) or not at all.
    """
    host, port = split_host_port(address)
    client_id = b"raftka-chaos"
    key = group.encode()
    correlation_id = 0x0C0C
    payload = struct.pack(">hhih", FIND_COORDINATOR_KEY, 1, correlation_id, len(client_id))
    payload += client_id + struct.pack(">h", len(key)) + key + struct.pack(">b", key_type)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if not 14 <= size <= 1 << 16:
                return None
            response = _recv_exactly(sock, size)
    except OSError:
        return None
    got_correlation_id, _throttle_ms, error_code, message_len = struct.unpack(
        ">iihh", response[:12]
    )
    if got_correlation_id != correlation_id or error_code != 0:
        return None
    pos = 12 + max(message_len, 0)
    (node_id,) = struct.unpack(">i", response[pos : pos + 4])
    return node_id if node_id >= 0 else None


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    timeout_s: float = 60,
    configs: dict[str, str] | None = None,
) -> None:
    """Create `topic` (with topic `configs`) and wait until Metadata shows a leader for
    every partition."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        future = admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    config=configs or {},
                )
            ],
            operation_timeout=10,
            request_timeout=10,
        )[topic]
        try:
            future.result(timeout=15)
            break
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            last_error = str(error)
        time.sleep(0.5)
    while time.monotonic() < deadline:
        if len(partition_leaders(bootstrap, topic)) == partitions:
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} not ready within {timeout_s} s (last error: {last_error})")
