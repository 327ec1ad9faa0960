"""Every in-process `Broker` a test builds is closed when the test ends.

A test drives a broker's parts (its Raft node, controller, replica manager) without its
`run`, which is what closes the logs, stores and data-directory lock; each broker left open
kept a dozen or more descriptors (a lock, lmdb files, a segment per partition) in the pytest
process for the rest of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from raftka.broker.server import Broker


@pytest.fixture(autouse=True)
def close_brokers() -> Iterator[None]:
    built: list[Broker] = []
    init = Broker.__init__

    def tracked_init(self: Broker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        built.append(self)

    with pytest.MonkeyPatch.context() as patch:  # not the test's own: it may undo that one
        patch.setattr(Broker, "__init__", tracked_init)
        yield
    for broker in built:
        broker.close()
