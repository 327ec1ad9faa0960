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


@pytest.mark.parametrize("after_s", [0.05, 0.3, 0.8])
def test_a_sigterm_while_starting_stops_the_broker_cleanly(tmp_path: Path, after_s: float) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    broker = _start(data_dir, port)
    time.sleep(after_s)
    broker.send_signal(signal.SIGTERM)
    _, stderr = broker.communicate(timeout=60)
    assert broker.returncode == 0, stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in stderr
    # The data directory is whole: the next start serves.
    again = _start(data_dir, port)
    try:
        roundtrip_works(f"127.0.0.1:{port}", "after-a-stop")
    finally:
        again.send_signal(signal.SIGTERM)
        _, stderr = again.communicate(timeout=60)
    assert again.returncode == 0, stderr.decode(errors="replace")[-2000:]
