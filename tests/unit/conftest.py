"""Shared options for the unit tests."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raft", "Raft simulation")
    group.addoption(
        "--raft-seeds",
        type=int,
        default=1000,
        help="number of seeds the Raft simulation runs (default 1000; try 100000)",
    )
    group.addoption(
        "--raft-seed-start",
        type=int,
        default=0,
        help="first seed of the Raft simulation (reproduce one failing seed with "
        "--raft-seeds 1 --raft-seed-start N)",
    )
