"""A SIGTERM that reaches `raftka serve` while it starts (loading its modules, opening its
logs, before it serves) stops it cleanly: exit code 0, its logs closed, and the next start
serves from them. A supervisor (systemd, a test harness) may stop a broker at any moment."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clients import roundtrip_works
from harness import free_port


def _start(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raftka.broker",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its caught-signal mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.parametrize("after_s", [0.0, 0.3, 0.8])
def test_a_sigterm_while_starting_stops_the_broker_cleanly(tmp_path: Path, after_s: float) -> None:
    """`after_s` counts from the moment the process catches SIGTERM, the first thing
    `raftka serve` does: before that the interpreter itself is starting (20 ms on a quiet
    machine, more on a busy one), and SIGTERM ends it as it ends any process that has not
    set a handler, with nothing of the broker opened yet."""
    data_dir = tmp_path / "data"
    port = free_port()
    broker = _start(data_dir, port)
    deadline = time.monotonic() + 30
    while not _catches_sigterm(broker.pid):
        assert broker.poll() is None, broker.communicate()[1].decode(errors="replace")[-2000:]
        assert time.monotonic() < deadline, "the broker never set a SIGTERM handler"
        time.sleep(0.001)
    time.sleep(after_s)
    broker.send_signal(signal.SIGTERM)
    _, stderr = broker.communicate(timeout=60)
    assert broker.returncode == 0, stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in stderr
    if after_s == 0.0:
        # Caught as the broker began to start: by the deferred handler, not the broker's.
        assert b"SIGTERM received while starting" in stderr, stderr[-2000:]
    # The data directory is whole: the next start serves.
    again = _start(data_dir, port)
    try:
        roundtrip_works(f"127.0.0.1:{port}", "after-a-stop")
    finally:
        again.send_signal(signal.SIGTERM)
        _, stderr = again.communicate(timeout=60)
    assert again.returncode == 0, stderr.decode(errors="replace")[-2000:]
