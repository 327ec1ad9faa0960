"""The `raftka` command's entry point (and `python -m raftka.broker`'s).

kio registers hypothesis strategies for its types whenever hypothesis is importable, and the
development environment has it (a test dependency): a broker or a command-line run never uses
them, yet importing hypothesis (and the pytest parts it loads) adds most of a second of CPU to
every start. So a process started here declines it before anything imports kio. A process
that has already imported hypothesis (pytest's) keeps it.

It also loads the request path's modules compiled with mypyc when they are built and
current (broker/compiled.py), and, for `serve`, first of all defers a SIGTERM that comes
while the broker starts (broker/startup_signals.py).
"""

from __future__ import annotations

import sys


def main() -> int:
    if sys.argv[1:2] == ["serve"]:
        from raftka.broker import startup_signals

        startup_signals.defer()
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    # Before anything imports the modules it may replace.
    from raftka.broker import compiled

    compiled.install()
    from raftka.broker.cli import main as cli_main

    return cli_main()
