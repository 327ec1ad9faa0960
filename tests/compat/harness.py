"""Broker processes and client tools for the compat suite.

Nothing here imports pytest, so tests/chaos can reuse it. The broker processes are
raftka.broker.tools.processes's (the tools in scripts/ start theirs with that module, which
imports nothing from tests/); this module adds what only the suite needs: ports from a
block per pytest-xdist worker, pausing a cluster node, brokers joining a running cluster.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from raftka.broker.tools import processes

# Re-exported: the suite and tests/chaos import these from here.
from raftka.broker.tools.processes import API_VERSIONS_KEY as API_VERSIONS_KEY
from raftka.broker.tools.processes import UNSUPPORTED_VERSION as UNSUPPORTED_VERSION
from raftka.broker.tools.processes import BrokerStartError as BrokerStartError
from raftka.broker.tools.processes import api_versions_request_v3 as _api_versions_request_v3  # noqa: F401
from raftka.broker.tools.processes import metadata_brokers as metadata_brokers
from raftka.broker.tools.processes import probe_api_versions as probe_api_versions
from raftka.broker.tools.processes import recv_exactly as _recv_exactly  # noqa: F401
from raftka.broker.tools.processes import set_parent_death_signal as _set_parent_death_signal  # noqa: F401
from raftka.broker.tools.processes import split_host_port as split_host_port

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_BUILD_DIR = JAVA_DIR / "build"
JAVA_JAR_NAMES = (
    "kafka-clients.jar",
    "slf4j-api.jar",
    "lz4-java.jar",
    "snappy-java.jar",
    "zstd-jni.jar",
)


class BrokerStopError(processes.BrokerStopError, AssertionError):
    """The broker did not shut down cleanly (timeout or non-zero exit code); an
    AssertionError too, so a test reports it as a failure."""


# -- ports ------------------------------------------------------------------------------------
#
# Each pytest-xdist worker (`PYTEST_XDIST_WORKER` gw0, gw1, ...) owns a block of ports of its
# own and hands them out one after another, so two workers never pick the same port and one
# worker never picks a port twice while a broker it started has not bound it yet. Every block
# lies outside the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), so no
# client connection's local port can take one between the pick and the broker's bind. A port
# is still checked free (bound and released) before it is handed out: a broker of another run
# or a process outside the suite may hold it.

EPHEMERAL_RANGE_PATH = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default ephemeral range, when the kernel's cannot be read.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
#: Below this, ports belong to well-known and commonly configured services.
LOWEST_PORT = 10000
HIGHEST_PORT = 65535
#: A worker's block is at least this large, however many workers run.
MIN_BLOCK = 256


def ephemeral_range() -> tuple[int, int]:
    """(first, last) of the ports the kernel picks for outgoing connections."""
    try:
        first, last = (int(part) for part in EPHEMERAL_RANGE_PATH.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return first, last


def worker() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (name.startswith("gw") and name[2:].isdigit()):
        return 0, 1
    index = int(name[2:])
    return index, max(int(count) if count.isdigit() else 1, index + 1)


def worker_block(index: int, count: int, ephemeral: tuple[int, int] | None = None) -> range:
    """Worker `index` of `count`'s ports: an equal share of the ports outside the
    ephemeral range (the larger side of it), disjoint from every other worker's."""
    first, last = ephemeral if ephemeral is not None else ephemeral_range()
    below = range(LOWEST_PORT, max(LOWEST_PORT, first))
    above = range(min(last + 1, HIGHEST_PORT + 1), HIGHEST_PORT + 1)
    pool = below if len(below) >= len(above) else above
    size = len(pool) // count
    if size < MIN_BLOCK:
        raise RuntimeError(
            f"{len(pool)} ports outside the ephemeral range {first}-{last} are too few "
            f"for {count} workers"
        )
    start = pool.start + index * size
    return range(start, start + size)


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` on `host` could be bound a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Hands out this worker's ports in order, from a random point of its block (so two
    test runs side by side rarely walk the same ports), wrapping around at its end."""

    def __init__(self, block: range, seed: int | None = None) -> None:
        self.block = block
        self.next = random.Random(seed).randrange(len(block))

    def take(self, width: int = 1, host: str = "127.0.0.1") -> int:
        """The first of `width` consecutive ports, each free a moment ago, none handed out
        by this allocator before (until it has gone once round its block)."""
        for _ in range(len(self.block)):
            offset = self.next % len(self.block)
            if offset + width > len(self.block):
                self.next += len(self.block) - offset
                continue
            self.next += width
            first = self.block[offset]
            if all(is_free(first + i, host) for i in range(width)):
                return first
        raise RuntimeError(f"no {width} free consecutive port(s) in {self.block}")


@functools.cache
def _worker_ports() -> PortAllocator:
    """This process's allocator, made on first use (xdist has set the worker's environment
    by then); one per process, so that no port is handed out twice."""
    return PortAllocator(worker_block(*worker()))


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's block, free a moment ago and not handed out before."""
    return _worker_ports().take(1, host)


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port p such that p and p + 1 are both free and neither was handed out before."""
    return _worker_ports().take(2, host)


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A port p such that p to p + count - 1 are all free and none was handed out before."""
    return _worker_ports().take(count, host)


def free_ports(names: Iterable[str], host: str = "127.0.0.1") -> dict[str, int]:
    """One free port per name (a listener's, say), all distinct."""
    return {name: free_port(host) for name in names}


class BrokerProcess(processes.BrokerProcess):
    """One raftka broker running as `python -m raftka.broker serve` in a subprocess, on a
    port of this worker's block, started from the repository root.

    Its stdout and stderr go to `broker.log` in `base_dir`. `start()` returns once the port
    answers a Kafka ApiVersions request. The child is killed if the test process dies, so
    no broker outlives a run.
    """

    launcher = "harness"
    cwd = REPO_ROOT
    stop_error = BrokerStopError

    def allocate_port(self) -> int:
        return free_port()


# -- Java client tool ------------------------------------------------------------------------


class JavaToolError(RuntimeError):
    """KafkaTool exited non-zero or timed out."""


def find_java_jars() -> list[Path] | None:
    """kafka-clients and its dependencies from shigawire-apache-flink-libraries, or None."""
    candidates = [Path(sysconfig.get_paths()["purelib"]) / "pyflink" / "lib"]
    candidates += [Path(p) / "pyflink" / "lib" for p in sys.path if p]
    for lib in candidates:
        jars = [lib / name for name in JAVA_JAR_NAMES]
        if all(jar.is_file() for jar in jars):
            return jars
    return None


class JavaTool:
    """Compiles `java/KafkaTool.java` on demand and runs its commands.

    Calling it returns the tool's stdout lines; `.json(...)` parses each line as JSON.
    """

    def __init__(self, jars: list[Path], java: str = "java", javac: str = "javac") -> None:
        self.jars = jars
        self.java = java
        self.javac = javac
        self.source = JAVA_DIR / "KafkaTool.java"
        self.build_dir = JAVA_BUILD_DIR

    @property
    def classpath(self) -> str:
        return os.pathsep.join([str(self.build_dir), *map(str, self.jars)])

    def compile(self) -> None:
        """Compile when the class file is missing or older than the source."""
        class_file = self.build_dir / "KafkaTool.class"
        if class_file.exists() and class_file.stat().st_mtime >= self.source.stat().st_mtime:
            return
        self.build_dir.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                self.javac,
                "-nowarn",
                "-cp",
                os.pathsep.join(map(str, self.jars)),
                "-d",
                str(self.build_dir),
                str(self.source),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise JavaToolError(f"javac failed:\n{result.stderr}{result.stdout}")

    def __call__(self, *args: object, timeout: float = 60) -> list[str]:
        argv = [self.java, "-XX:TieredStopAtLevel=1", "-cp", self.classpath, "KafkaTool"]
        argv += [str(a) for a in args]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            raise JavaToolError(
                f"KafkaTool {' '.join(map(str, args))} timed out after {timeout} s\n"
                f"--- stderr ---\n{stderr[-4000:]}"
            ) from None
        if result.returncode != 0:
            raise JavaToolError(
                f"KafkaTool {' '.join(map(str, args))} exited with {result.returncode}\n"
                f"--- stderr ---\n{result.stderr[-4000:]}\n--- stdout ---\n{result.stdout[-2000:]}"
            )
        return result.stdout.splitlines()

    def json(self, *args: object, timeout: float = 60) -> list[dict]:
        return [json.loads(line) for line in self(*args, timeout=timeout) if line.strip()]


# -- a local multi-broker cluster ------------------------------------------------------------


class ClusterNode(processes.ClusterNode):
    """One voter of a `ClusterProcess`: a `BrokerProcess` with a node id and a Raft port.

    Adds `pause()` (SIGSTOP) and `resume()` (SIGCONT); `stop()` resumes a paused node first.
    """

    launcher = "harness"
    cwd = REPO_ROOT
    stop_error = BrokerStopError
    #: Set by `pause()`; cleared by `resume()`, `spawn()` and `kill()`.
    paused = False

    def allocate_port(self) -> int:
        return free_port()

    def spawn(self) -> None:
        """Launch the process without waiting for it to answer (see `wait_ready`)."""
        self.paused = False
        super().spawn()

    def pause(self) -> None:
        """SIGSTOP: the process stays alive but does nothing (no ticks, no answers)."""
        if not self.is_running():
            raise RuntimeError(f"node {self.node_id} is not running")
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause()`."""
        if self.is_running():
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 15) -> None:
        if self.paused:
            self.resume()
        super().stop(timeout=timeout)

    def kill(self) -> None:
        super().kill()
        self.paused = False

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        if self.paused:
            state += ", paused"
        return f"ClusterNode({self.node_id}, {self.bootstrap}, raft {self.raft_port}, {state})"


class ClusterProcess(processes.ClusterProcess):
    """`size` raftka brokers on free ports of this worker's block (Kafka and Raft), each
    with its own data dir under `base_dir/node-N/`, every one listing all voters in `--peers`.

    `start()` launches all nodes at once and returns when every node answers Metadata
    listing all `size` brokers. `nodes[i]` is a `ClusterNode` (`kill()`, `stop()`,
    `start()`, `pause()`, `resume()`, `data_dir`); `node(id)` looks one up by node id;
    `running()` leaves out paused nodes; `add_joiner()` grows the cluster.
    """

    node_class = ClusterNode
    stop_error = BrokerStopError
    nodes: list[ClusterNode]

    def allocate_port(self) -> int:
        return free_port()

    def running(self) -> list[ClusterNode]:  # type: ignore[override]
        return [n for n in self.nodes if n.is_running() and not n.paused]

    def add_joiner(self, node_id: int, cluster_id: str) -> ClusterNode:
        """Launch broker `node_id` joining the running cluster (`--join`, `--cluster-id`),
        its --peers the cluster's plus itself; it is added to `nodes` and returned once it
        answers ApiVersions (it has registered)."""
        raft_port = free_port()
        peers = f"{self.nodes[0].peers},{node_id}@127.0.0.1:{raft_port}"
        node = ClusterNode(
            node_id,
            raft_port,
            peers,
            self.nodes[0].config,
            base_dir=self.base_dir / f"node-{node_id}",
            startup_timeout_s=self.startup_timeout_s,
            python=self.nodes[0].python,
        )
        node.extra_args += ["--join", "--cluster-id", cluster_id]
        self.nodes.append(node)
        return node.start()
