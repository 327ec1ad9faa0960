"""Shared options and fixtures of the unit tests."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.log.cleaner import CleaningJob
from raftka.log.segment import LogSegment


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


def _open_under(directory: Path) -> list[str]:
    """Paths under `directory` this process holds a descriptor of."""
    prefix = f"{directory}{os.sep}"
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(prefix):
            found.append(target)
    return sorted(found)


def _tracked(init: Any, instances: list[Any]) -> Any:
    def tracked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        instances.append(self)

    return tracked_init


@pytest.fixture(autouse=True)
def no_descriptor_left_open(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses `tmp_path` leaves nothing in it open: every pytest-xdist worker runs
    unit and compat tests in one process, and descriptors left behind by hundreds of tests
    took it past 1,024, where py4j's select() failed and hung a Spark test.

    The segments a test's logs opened in its `tmp_path`, and the source descriptors of its
    cleaning jobs, are released when it ends (tests drop logs, segments and jobs without
    closing them, as a simulated crash does; none is used afterwards); anything
    else still open there (a store, a lock, a file) fails the test, naming the paths."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")
    made: dict[type, list[Any]] = {LogSegment: [], CleaningJob: []}
    with pytest.MonkeyPatch.context() as patch:  # not the test's own: it may undo that one
        for cls, instances in made.items():
            patch.setattr(cls, "__init__", _tracked(cls.__init__, instances))
        yield
    directory = tmp_path.resolve()
    for job in made[CleaningJob]:  # one never finished nor abandoned (a simulated crash)
        for source in job.sources:
            source.close()
    for segment in made[LogSegment]:
        if segment.log_path.resolve().is_relative_to(directory):
            segment.release()
    if _open_under(directory):
        gc.collect()  # what only a collected cycle held is closed then
        left = _open_under(directory)
        assert not left, f"{request.node.nodeid} left open: {left}"
