"""raftka broker processes for the tools: one broker, or a cluster of a few, on free ports
of 127.0.0.1 with data under a folder of the caller's, started as
`python -m raftka.broker serve` and ready once they answer Kafka's ApiVersions.

The compat suite's brokers build on these classes: a subclass may override `allocate_port`
(where free ports come from), `launcher` (the name in the log's start banner), `cwd` (the
child's working directory), `stop_error` (what an unclean stop raises) and, for a cluster,
`node_class` (the class of its nodes).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Self

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35


class BrokerStartError(RuntimeError):
    """The broker process exited or did not answer ApiVersions in time."""


class BrokerStopError(RuntimeError):
    """The broker did not shut down cleanly (timeout or non-zero exit code)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def split_host_port(bootstrap: str) -> tuple[str, int]:
    """Host and port of the first address of a bootstrap list."""
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def api_versions_request_v3(correlation_id: int) -> bytes:
    """ApiVersions v3, as librdkafka sends it first (flexible request header v2)."""
    client_id = b"raftka-tools"
    header = struct.pack(">hhi", API_VERSIONS_KEY, 3, correlation_id)
    header += struct.pack(">h", len(client_id)) + client_id + b"\x00"  # no tagged fields
    software_name = b"raftka-tools"
    software_version = b"0.1"
    body = bytes([len(software_name) + 1]) + software_name
    body += bytes([len(software_version) + 1]) + software_version + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock`; ConnectionError if the peer closes first."""
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
        sock.sendall(api_versions_request_v3(correlation_id))
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        if not 6 <= size <= 1 << 20:
            raise ValueError(f"implausible ApiVersions response size {size}")
        response = recv_exactly(sock, size)
    got_correlation_id, error_code = struct.unpack(">ih", response[:6])
    if got_correlation_id != correlation_id:
        raise ValueError(f"correlation id {got_correlation_id} != {correlation_id}")
    return int(error_code)


def set_parent_death_signal() -> None:
    """Runs in the child before exec: die with SIGKILL if the tool's process dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_as_child(target: Callable[..., object], *args: object) -> None:
    """A tool's worker process (multiprocessing): it dies with the tool, then runs
    `target(*args)`. Without that, a worker whose tool was killed runs on, and one that waits
    to be told to stop (a consumer reading until the producers' count is known) never
    stops."""
    set_parent_death_signal()
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():
        return  # the tool died before the signal was asked for
    target(*args)


class BrokerProcess:
    """One raftka broker running as `python -m raftka.broker serve` in a subprocess.

    The broker listens on 127.0.0.1:<port>; its stdout and stderr go to `broker.log` in
    `base_dir`, its data to `data_dir` (`base_dir/data` unless given). `start()` returns
    once the port answers a Kafka ApiVersions request. The child is killed if the process
    that started it dies, so no broker outlives a tool.
    """

    #: Named in the `=== <launcher>: starting ...` line written to the log at every start.
    launcher = "tools"
    #: The child's working directory (None: the caller's).
    cwd: Path | None = None
    #: Raised by `stop()` when the broker does not shut down cleanly.
    stop_error: type[BrokerStopError] = BrokerStopError

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
        self.port = port or self.allocate_port()
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

    def allocate_port(self) -> int:
        """A free port for the broker's listener when none is given."""
        return free_port()

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

    def start(self) -> Self:
        """Launch the broker and wait until it answers; kills it on failure."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Launch the broker process without waiting for it to answer."""
        if self.is_running():
            raise RuntimeError(f"broker already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._killed = False
        argv = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"=== {self.launcher}: starting {' '.join(argv)}\n".encode())
            log.flush()
            # Launched from the calling thread: PR_SET_PDEATHSIG fires when the *thread*
            # that forked the child exits, so never spawn from a short-lived thread.
            self._proc = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=set_parent_death_signal,
            )

    def wait_ready(self) -> Self:
        """Until the broker answers ApiVersions; BrokerStartError (and killed) otherwise."""
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

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
                raise self.stop_error(
                    f"broker {self.bootstrap} had already exited with code {code}\n"
                    f"--- broker log tail ---\n{self.log_tail(40)}"
                )
            return
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.stop_error(
                f"broker {self.bootstrap} (pid {proc.pid}) did not exit within {timeout} s "
                f"of SIGTERM; killed\n--- broker log tail ---\n{self.log_tail(40)}"
            ) from None
        if code != 0:
            raise self.stop_error(
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

    def restart(self, timeout: float = 15) -> Self:
        """Clean stop, then start again on the same port and data dir."""
        self.stop(timeout=timeout)
        return self.start()

    def __enter__(self) -> Self:
        return self.start() if not self.is_running() else self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.stop()
        else:
            self.kill()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"BrokerProcess({self.bootstrap}, {state}, data_dir={self.data_dir})"


def metadata_brokers(bootstrap: str, timeout_s: float = 5.0) -> tuple[list[int], int]:
    """(sorted broker ids, controller id) from one Metadata request to `bootstrap` only."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    md = admin.list_topics(timeout=timeout_s)
    return sorted(md.brokers), int(md.controller_id)


class ClusterNode(BrokerProcess):
    """One voter of a `ClusterProcess`: a `BrokerProcess` with a node id and a Raft port.

    A voter only starts serving clients once it has registered with the metadata quorum,
    so a cluster's nodes must all be launched (`spawn()`) before any is waited for
    (`wait_ready()`).
    """

    def __init__(
        self,
        node_id: int,
        raft_port: int,
        peers: str,
        config: dict[str, str] | None = None,
        *,
        port: int | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 20.0,
        python: str = sys.executable,
    ) -> None:
        self.node_id = node_id
        self.raft_port = raft_port
        self.peers = peers
        extra = ["--node-id", str(node_id), "--raft-listen", f"127.0.0.1:{raft_port}"]
        extra += ["--peers", peers]
        super().__init__(
            config,
            port=port,
            base_dir=base_dir,
            data_dir=data_dir,
            startup_timeout_s=startup_timeout_s,
            python=python,
            extra_args=extra,
        )

    @property
    def raft_address(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"ClusterNode({self.node_id}, {self.bootstrap}, raft {self.raft_port}, {state})"


class ClusterProcess:
    """`size` raftka brokers on free ports (Kafka and Raft), each with its own data dir
    under `base_dir/node-N/`, every one listing all voters in `--peers`.

    `start()` launches all nodes at once (a voter serves clients only once it has
    registered with the metadata quorum) and returns when every node answers Metadata
    listing all `size` brokers. `nodes[i]` is node i + 1's `ClusterNode`; `node(id)` looks
    one up by node id.
    """

    #: The class of `nodes`.
    node_class: type[ClusterNode] = ClusterNode
    #: Raised by `stop()` when a node does not shut down cleanly.
    stop_error: type[BrokerStopError] = BrokerStopError

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
                port = self.allocate_port()
                while port in kafka_ports or port in raft_ports:
                    port = self.allocate_port()
                ports.append(port)
        peers = ",".join(f"{i + 1}@127.0.0.1:{raft_ports[i]}" for i in range(size))
        self.nodes = [
            self.node_class(
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

    def allocate_port(self) -> int:
        """A free port for a node's Kafka or Raft listener."""
        return free_port()

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
        """The nodes expected to answer clients: those whose process is running."""
        return [n for n in self.nodes if n.is_running()]

    def start(self) -> Self:
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

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM every node (one at a time, so leadership can move) and require exit 0."""
        errors = []
        for node in self.nodes:
            try:
                node.stop(timeout=timeout)
            except BrokerStopError as exc:
                errors.append(str(exc))
        if errors:
            raise self.stop_error("\n".join(errors))

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def log_tails(self, n: int = 40) -> str:
        return "\n".join(
            f"--- node {node.node_id} ({node.bootstrap}) log tail ---\n{node.log_tail(n)}"
            for node in self.nodes
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                self.stop()
        finally:
            self.kill()

    def __repr__(self) -> str:
        return f"ClusterProcess({self.nodes!r})"
