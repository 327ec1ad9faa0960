"""The `raftka` command's start: kio's optional hypothesis hooks are not loaded by a broker or
a command-line run (they cost most of a second of every start), and are by a test process."""

from __future__ import annotations

import subprocess
import sys

import kio.static._phantom

RUN_A_COMMAND = """
import sys
from raftka.broker.launch import main
sys.argv = ["raftka", "topics", "create"]  # a usage error: parsed, then exit 2
try:
    main()
except SystemExit as exit:
    code = exit.code
import kio.static._phantom as phantom
print(code, phantom.hypothesis is None, "raftka.broker.admin.cli" in sys.modules)
"""


def test_a_raftka_command_does_not_load_hypothesis() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN_A_COMMAND], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "True", "True"], (done.stdout, done.stderr)
    assert "the following arguments are required: TOPIC" in done.stderr


def test_a_test_process_keeps_hypothesis() -> None:
    assert kio.static._phantom.hypothesis is not None
