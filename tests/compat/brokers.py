"""The broker processes and clusters a compat test (or module) starts, torn down one way.

The conftest's fixtures (`brokers`, `module_brokers`, `broker_factory`, `cluster_factory`)
hand these out and show every broker's log tail when a test that used it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import BrokerProcess, BrokerStopError, ClusterProcess
from pytest import TempPathFactory


class Brokers:
    """Starts the broker processes and clusters of one fixture and tears them all down one
    way: each is stopped with SIGTERM and must exit 0 (a clean shutdown), and whatever is
    still running afterwards is killed, even when the test or a stop failed."""

    def __init__(
        self,
        tmp_path_factory: TempPathFactory,
        track: Callable[[BrokerProcess | ClusterProcess], None],
    ) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.track = track
        self.started: list[BrokerProcess | ClusterProcess] = []

    def broker(
        self,
        config: dict[str, str] | None = None,
        *,
        name: str = "broker",
        start: bool = True,
        **kwargs: Any,
    ) -> BrokerProcess:
        """A `BrokerProcess` in a fresh folder `name`-N, started unless `start=False`."""
        broker = BrokerProcess(config, base_dir=self.tmp_path_factory.mktemp(name), **kwargs)
        self.started.append(broker)
        self.track(broker)
        return broker.start() if start else broker

    def cluster(
        self,
        size: int = 3,
        config: dict[str, str] | None = None,
        *,
        name: str = "cluster",
        start: bool = True,
        **kwargs: Any,
    ) -> ClusterProcess:
        """A `ClusterProcess` of `size` nodes (every one listing all voters) in a fresh
        folder `name`-N, started unless `start=False`."""
        cluster = ClusterProcess(
            size, config, base_dir=self.tmp_path_factory.mktemp(name), **kwargs
        )
        self.started.append(cluster)
        self.track(cluster)  # its nodes as they are when a report is made (joiners too)
        return cluster.start() if start else cluster

    def close(self) -> None:
        """Stop everything cleanly, then kill what is left; raises `BrokerStopError` if
        any broker did not shut down cleanly."""
        errors = []
        try:
            for process in self.started:
                try:
                    process.stop()
                except AssertionError as exc:
                    errors.append(str(exc))
        finally:
            for process in self.started:
                process.kill()
        if errors:
            raise BrokerStopError("broker did not shut down cleanly:\n" + "\n".join(errors))
