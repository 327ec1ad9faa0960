"""Broker processes and client tools for the compat suite.

Nothing here imports pytest, so tests/chaos can reuse it. The tools in scripts/ start their
brokers with raftka.broker.tools.processes instead (the package imports nothing from tests/).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

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

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35


class BrokerStartError(RuntimeError):
    """The broker process exited or did not answer ApiVersions in time."""


class BrokerStopError(AssertionError):
    """The broker did not shut down cleanly (timeout or non-zero exit code)."""


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


def free_ports(names: Iterable[str], host: str = "127.0.0.1") -> dict[str, int]:
    """One free port per name (a listener's, say), all distinct."""
    return {name: free_port(host) for name in names}


def split_host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _api_versions_request_v3(correlation_id: int) -> bytes:
    """ApiVersions v3, as librdkafka sends it first (flexible request header v2)."""
    client_id = b"raftka-harness"
    header = struct.pack(">hhi", API_VERSIONS_KEY, 3, correlation_id)
    header += struct.pack(">h", len(client_id)) + client_id + b"\x00"  # no tagged fields
    software_name = b"raftka-harness"
    software_version = b"0.1"
    body = bytes([len(software_name) + 1]) + software_name
    body += bytes([len(software_version) + 1]) + software_version + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("connection closed by broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def probe_api_versions(bootstrap: str, timeout_s: float = 2.0) -> int:
    """Send one ApiVersions request and return the response's error code.

    0 means the broker accepted v3; 35 (UNSUPPORTED_VERSION) is also a valid Kafka answer
    (the broker then lists its versions). Raises OSError/ConnectionError/ValueError otherwise.
    """
    host, port = split_host_port(bootstrap)
    correlation_id = 0x5AF7
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(_api_versions_request_v3(correlation_id))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        if not 6 <= size <= 1 << 20:
            raise ValueError(f"implausible ApiVersions response size {size}")
        response = _recv_exactly(sock, size)
    got_correlation_id, error_code = struct.unpack(">ih", response[:6])
    if got_correlation_id != correlation_id:
        raise ValueError(f"correlation id {got_correlation_id} != {correlation_id}")
    return error_code


def _set_parent_death_signal() -> None:
    """Runs in the child before exec: die with SIGKILL if the test process dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class BrokerProcess:
    """One raftka broker running as `python -m raftka.broker serve` in a subprocess.

    The broker listens on 127.0.0.1:<port>; its stdout and stderr go to `broker.log` in
    `data_dir`'s parent folder. `start()` returns once the port answers a Kafka ApiVersions
    request. The child is killed if the test process dies, so no broker outlives a run.
    """

    def __init__(
        self,
        config: dict[str, str] | None = None,
        *,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 20.0,
        python: str = sys.executable,
        extra_args: list[str] | None = None,
    ) -> None:
        self.config = dict(config or {})
        self.port = port or free_port()
        if base_dir is None:
            base_dir = tempfile.mkdtemp(prefix="raftka-broker-")
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(data_dir) if data_dir is not None else self.base_dir / "data"
        self.log_path = self.base_dir / "broker.log"
        self.startup_timeout_s = startup_timeout_s
        self.python = python
        self.extra_args = list(extra_args or [])
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed = False  # the last exit was our SIGKILL, not a crash

    # -- what tests read -------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("broker not started")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        argv = [self.python, "-m", "raftka.broker", "serve", "--listen", self.bootstrap]
        argv += ["--data-dir", str(self.data_dir)]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv + self.extra_args

    def log_tail(self, n: int = 40) -> str:
        """The last `n` lines the broker wrote to stdout/stderr (all starts appended)."""
        try:
            with open(self.log_path, errors="replace") as log:
                return "".join(deque(log, maxlen=n))
        except FileNotFoundError:
            return "(no broker log yet)\n"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        self.spawn()
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def spawn(self) -> None:
        """Launch the broker process without waiting for it to answer."""
        if self.is_running():
            raise RuntimeError(f"broker already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._killed = False
        argv = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: starting {' '.join(argv)}\n".encode())
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            # Launched from the calling thread: PR_SET_PDEATHSIG fires when the *thread*
            # that forked the child exits, so never spawn from a short-lived thread.
            self._proc = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_set_parent_death_signal,
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: Exception | None = None
        while True:
            code = self.returncode
            if code is not None:
                raise BrokerStartError(
                    f"broker exited with code {code} during start-up\n"
                    f"command: {' '.join(self.command())}\n"
                    f"--- broker log tail ({self.log_path}) ---\n{self.log_tail(40)}"
                )
            try:
                error_code = probe_api_versions(self.bootstrap, timeout_s=1.0)
                if error_code in (0, UNSUPPORTED_VERSION):
                    return
                last_error = ValueError(f"ApiVersions error code {error_code}")
            except (OSError, ValueError) as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"broker on {self.bootstrap} did not answer ApiVersions within "
                    f"{self.startup_timeout_s:.0f} s (last error: {last_error!r})\n"
                    f"command: {' '.join(self.command())}\n"
                    f"--- broker log tail ({self.log_path}) ---\n{self.log_tail(40)}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, wait, and require exit code 0 (a clean shutdown).

        A no-op if the broker is not running because `kill()` stopped it; an error if it
        exited by itself with a non-zero code.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            if code not in (None, 0) and not self._killed:
                raise BrokerStopError(
                    f"broker {self.bootstrap} had already exited with code {code}\n"
                    f"--- broker log tail ---\n{self.log_tail(40)}"
                )
            return
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BrokerStopError(
                f"broker {self.bootstrap} (pid {proc.pid}) did not exit within {timeout} s "
                f"of SIGTERM; killed\n--- broker log tail ---\n{self.log_tail(40)}"
            ) from None
        if code != 0:
            raise BrokerStopError(
                f"broker {self.bootstrap} exited with code {code} after SIGTERM (expected 0)\n"
                f"--- broker log tail ---\n{self.log_tail(40)}"
            )

    def kill(self) -> None:
        """SIGKILL and reap; a no-op if the broker is not running."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
            self._killed = True

    def restart(self, timeout: float = 15) -> BrokerProcess:
        """Clean stop, then start again on the same port and data dir."""
        self.stop(timeout=timeout)
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start() if not self.is_running() else self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.stop()
        else:
            self.kill()

    def __repr__(self) -> str:
        state = f"pid {self._proc.pid}" if self.is_running() else "stopped"
        return f"BrokerProcess({self.bootstrap}, {state}, data_dir={self.data_dir})"


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


def metadata_brokers(bootstrap: str, timeout_s: float = 5.0) -> tuple[list[int], int]:
    """(sorted broker ids, controller id) from one Metadata request to `bootstrap` only."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    md = admin.list_topics(timeout=timeout_s)
    return sorted(md.brokers), md.controller_id


class ClusterNode(BrokerProcess):
    """One voter of a `ClusterProcess`: a `BrokerProcess` with a node id and a Raft port.

    Adds `pause()` (SIGSTOP) and `resume()` (SIGCONT); `stop()` resumes a paused node first.
    """

    def __init__(
        self,
        node_id: int,
        raft_port: int,
        peers: str,
        config: dict[str, str] | None = None,
        **kwargs: object,
    ) -> None:
        self.node_id = node_id
        self.raft_port = raft_port
        self.peers = peers
        self.paused = False
        extra = ["--node-id", str(node_id), "--raft-listen", f"127.0.0.1:{raft_port}"]
        extra += ["--peers", peers]
        super().__init__(config, extra_args=extra, **kwargs)  # type: ignore[arg-type]

    @property
    def raft_address(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    def spawn(self) -> None:
        """Launch the process without waiting for it to answer (see `wait_ready`).

        A voter only starts serving clients once it has registered with the metadata
        quorum, so a cluster's nodes must all be launched before any is waited for.
        """
        self.paused = False
        super().spawn()

    def wait_ready(self) -> ClusterNode:
        """Until the node answers ApiVersions (it has registered); kills it on failure."""
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def start(self) -> ClusterNode:
        self.spawn()
        return self.wait_ready()

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
        state = f"pid {self._proc.pid}" if self.is_running() else "stopped"
        if self.paused:
            state += ", paused"
        return f"ClusterNode({self.node_id}, {self.bootstrap}, raft {self.raft_port}, {state})"


class ClusterProcess:
    """`size` raftka brokers on free ports (Kafka and Raft), each with its own data dir
    under `base_dir/node-N/`, every one listing all voters in `--peers`.

    `start()` launches all nodes at once and returns when every node answers Metadata
    listing all `size` brokers. `nodes[i]` is a `ClusterNode` (`kill()`, `stop()`,
    `start()`, `pause()`, `resume()`, `data_dir`); `node(id)` looks one up by node id.
    """

    def __init__(
        self,
        size: int = 3,
        config: dict[str, str] | None = None,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 30.0,
        python: str = sys.executable,
    ) -> None:
        python = os.path.abspath(python) if os.sep in python else python
        if base_dir is None:
            base_dir = tempfile.mkdtemp(prefix="raftka-cluster-")
        self.base_dir = Path(base_dir)
        self.startup_timeout_s = startup_timeout_s
        kafka_ports: list[int] = []
        raft_ports: list[int] = []
        while len(kafka_ports) < size:
            for ports in (kafka_ports, raft_ports):
                port = free_port()
                while port in kafka_ports or port in raft_ports:
                    port = free_port()
                ports.append(port)
        peers = ",".join(f"{i + 1}@127.0.0.1:{raft_ports[i]}" for i in range(size))
        self.nodes = [
            ClusterNode(
                i + 1,
                raft_ports[i],
                peers,
                config,
                port=kafka_ports[i],
                base_dir=self.base_dir / f"node-{i + 1}",
                startup_timeout_s=startup_timeout_s,
                python=python,
            )
            for i in range(size)
        ]

    @property
    def bootstrap(self) -> str:
        """Every node's Kafka address, comma-separated (a client's bootstrap.servers)."""
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def running(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.is_running() and not n.paused]

    def start(self) -> ClusterProcess:
        try:
            for node in self.nodes:
                node.spawn()
            for node in self.nodes:
                node.wait_ready()
            self.wait_formed()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_formed(self, timeout_s: float | None = None) -> None:
        """Until every running node answers Metadata listing all nodes as brokers."""
        timeout_s = self.startup_timeout_s if timeout_s is None else timeout_s
        want = sorted(n.node_id for n in self.nodes)
        deadline = time.monotonic() + timeout_s
        last: dict[int, object] = {}
        while True:
            pending = []
            for node in self.running():
                try:
                    ids, _controller = metadata_brokers(node.bootstrap, timeout_s=2.0)
                    last[node.node_id] = ids
                    if ids != want:
                        pending.append(node)
                except Exception as exc:  # noqa: BLE001 - reported on timeout
                    last[node.node_id] = exc
                    pending.append(node)
            if not pending:
                return
            if time.monotonic() >= deadline:
                tails = "\n".join(
                    f"--- node {n.node_id} log tail ({n.log_path}) ---\n{n.log_tail(30)}"
                    for n in pending
                )
                raise BrokerStartError(
                    f"cluster did not form within {timeout_s:.0f} s: brokers seen per node "
                    f"{last} (want {want})\n{tails}"
                )
            time.sleep(0.2)

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

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM every node (one at a time, so leadership can move) and require exit 0."""
        errors = []
        for node in self.nodes:
            try:
                node.stop(timeout=timeout)
            except AssertionError as exc:
                errors.append(str(exc))
        if errors:
            raise BrokerStopError("\n".join(errors))

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def log_tails(self, n: int = 40) -> str:
        return "\n".join(
            f"--- node {node.node_id} ({node.bootstrap}) log tail ---\n{node.log_tail(n)}"
            for node in self.nodes
        )

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                self.stop()
        finally:
            self.kill()

    def __repr__(self) -> str:
        return f"ClusterProcess({self.nodes!r})"
