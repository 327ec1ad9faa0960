"""A tool's worker processes end with the tool: a bench killed with SIGKILL (a timeout, a
user's kill -9) leaves no consumer behind reading forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TOOL = textwrap.dedent(
    """
    import multiprocessing, pathlib, sys, time
    from raftka.broker.tools.processes import run_as_child

    def work(ready):
        pathlib.Path(ready).write_text("working")
        time.sleep(600)

    if __name__ == "__main__":
        worker = multiprocessing.get_context("spawn").Process(
            target=run_as_child, args=(work, sys.argv[1])
        )
        worker.start()
        print(worker.pid, flush=True)
        time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie nobody reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_worker_dies_with_its_killed_tool(tmp_path: Path) -> None:
    script = tmp_path / "tool.py"
    script.write_text(TOOL)
    ready = tmp_path / "ready"
    tool = subprocess.Popen(
        [sys.executable, str(script), str(ready)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert tool.stdout is not None
        worker = int(tool.stdout.readline())
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists() and _alive(worker), "the worker did not start"
        tool.send_signal(signal.SIGKILL)
        tool.wait(10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), "the worker outlived its tool"
    finally:
        tool.kill()
        tool.wait(10)
        if "worker" in locals() and _alive(worker):
            os.kill(worker, signal.SIGKILL)
