"""The getting-started page's commands, run as written in one fresh shell: every ```bash block
in order, each `text` block right after one being what that block prints on stdout.

Two things differ from what a newcomer types, so the test neither meets a broker someone
else runs on 9092 nor writes into the checkout's ./data: the port 9092 becomes a free one
throughout (commands and expected output alike), and `scripts/serve` is given that port and a
temporary data directory (`raftka serve` takes the last --listen and --data-dir given)."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import REPO_ROOT, free_port
from required import missing_client

PAGE = REPO_ROOT / "docs" / "getting-started.md"
DOC_PORT = 9092
# Bounds on waiting, so a stuck command fails the test with what it printed instead of
# hanging it; nothing is asserted about how long a step takes.
BLOCK_LIMIT_S = 120.0
BROKER_START_LIMIT_S = 60.0

FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    commands: str
    expected: str | None = None


def page_blocks(text: str) -> list[Block]:
    """The page's ```bash blocks in order, each with the ```text block that follows it
    directly (no other fenced block between them), if any."""
    blocks: list[Block] = []
    lines = text.split("\n")
    index = 0
    previous_was_bash = False
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        language = opening.group(1)
        body: list[str] = []
        index += 1
        while not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1
        content = "\n".join(body)
        if language == "bash":
            blocks.append(Block(content))
        elif language == "text" and previous_was_bash:
            blocks[-1].expected = content
        previous_was_bash = language == "bash"
    return blocks


def test_the_page_has_commands_and_outputs() -> None:
    blocks = page_blocks(PAGE.read_text())
    assert any("scripts/serve" in block.commands for block in blocks)
    assert sum(block.expected is not None for block in blocks) >= 3


def fresh_environment() -> dict[str, str]:
    """The caller's environment without this checkout's .venv on PATH or active, as a new
    terminal has it."""
    venv_bin = str(REPO_ROOT / ".venv" / "bin")
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("VIRTUAL_ENV", "PYTEST", "RAFTKA_"))
    }
    path = [part for part in environment.get("PATH", "").split(":") if part != venv_bin]
    environment["PATH"] = ":".join(path) or "/usr/local/bin:/usr/bin:/bin"
    return environment


class Shell:
    """One bash reading commands from a pipe, as a terminal would feed it, with its stdout
    read block by block and its stderr (the broker's log included) kept in a file."""

    def __init__(self, stderr_path: Path) -> None:
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-s"],
            cwd=REPO_ROOT,
            env=fresh_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self._pending = b""
        self._count = 0

    def run(self, commands: str) -> str:
        """Feed `commands` and return what they printed on stdout."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self._count += 1
        marker = f"@@quickstart block {self._count} done@@"
        self.process.stdin.write(f"{commands}\nprintf '\\n%s\\n' '{marker}'\n".encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + BLOCK_LIMIT_S
        end = f"\n{marker}\n".encode()
        while end not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                raise AssertionError(
                    f"the block did not finish; it printed so far:\n{self._pending.decode()}"
                )
            ready, _, _ = select.select([self.process.stdout], [], [], min(remaining, 1.0))
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    continue
                self._pending += chunk
        output, _, self._pending = self._pending.partition(end)
        return output.decode()

    def close(self) -> None:
        """End the shell (stdin closed) and whatever it left running."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=BLOCK_LIMIT_S)
        # The shell's own process group: a broker started with `&` is in it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._stderr.close()


def wait_for_port(port: int, shell: Shell, stderr_path: Path) -> None:
    """Until something accepts connections on the port (the broker the block started)."""
    deadline = time.monotonic() + BROKER_START_LIMIT_S
    while time.monotonic() < deadline:
        if shell.process.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no broker answered on {port}; its log:\n{stderr_path.read_text()}")


def adapt(text: str, port: int, data_dir: Path) -> str:
    text = text.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{port}")
    return text.replace(
        "scripts/serve", f"scripts/serve --listen 127.0.0.1:{port} --data-dir {data_dir}"
    )


def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").split("\n")]


@pytest.mark.timeout(600)
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("kcat") is None:
        missing_client("kcat is not installed (the quick start produces and consumes with it)")
    port = free_port()
    data_dir = tmp_path / "data"
    stderr_path = tmp_path / "shell-stderr.log"
    shell = Shell(stderr_path)
    try:
        for block in page_blocks(PAGE.read_text()):
            commands = adapt(block.commands, port, data_dir)
            output = shell.run(commands)
            if "scripts/serve" in block.commands:
                wait_for_port(port, shell, stderr_path)
            if block.expected is not None:
                expected = adapt(block.expected, port, data_dir)
                assert lines_of(output) == lines_of(expected), (
                    f"{block.commands}\nprinted:\n{output}\nthe page says:\n{block.expected}\n"
                    f"stderr:\n{stderr_path.read_text()[-4000:]}"
                )
        # The page's last block stopped the broker and waited for it: it is gone, and it
        # stopped on the signal, not by a failure.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        log = stderr_path.read_text()
        assert "SIGTERM received, shutting down" in log, log[-4000:]
        assert "Traceback" not in log, log[-4000:]
    finally:
        shell.close()
