"""The HTTP queue API's member joins its share group once the group has a coordinator, waiting
for it as long as any step waits for a partition's leader: the first group of a new cluster
creates the offsets topic, whose partitions must then be created and elected."""

from __future__ import annotations

from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from trio.testing import MockClock

from raftka.broker.queues.member import ShareMember
from raftka.broker.queues.problems import Problem
from raftka.broker.queues.remote import LEADER_RETRY_S, LEADER_TRIES


class Cluster:
    """Answers FindCoordinator with COORDINATOR_NOT_AVAILABLE until `ready_s` (trio's
    clock), then with broker 1, which takes the member's heartbeat."""

    def __init__(self, ready_s: float) -> None:
        self.ready_s = ready_s
        self.heartbeats = 0

    def at(self, node: int) -> Cluster:
        assert node == 1
        return self

    async def call(self, request: Any) -> Any:
        if isinstance(request, FindCoordinatorRequest):
            ready = trio.current_time() >= self.ready_s
            found = SimpleNamespace(
                node_id=1 if ready else -1,
                error_code=ErrorCode.none if ready else ErrorCode.coordinator_not_available,
                error_message=None,
            )
            return SimpleNamespace(coordinators=(found,))
        self.heartbeats += 1
        return SimpleNamespace(error_code=ErrorCode.none, error_message=None)


def join(ready_s: float) -> tuple[Cluster, float]:
    """(the cluster, seconds the join took) for a coordinator found `ready_s` from now."""
    cluster = Cluster(ready_s)
    member = ShareMember("orders-readers", "orders")

    async def main() -> float:
        start = trio.current_time()
        await member._heartbeat(cluster, now_s=100.0)  # type: ignore[arg-type]
        return trio.current_time() - start

    return cluster, trio.run(main, clock=MockClock(autojump_threshold=0))


def test_a_coordinator_elected_seconds_later_is_joined() -> None:
    # Seen on a loaded machine: the offsets topic created and its leader elected more than
    # 2 s after the first lookup, which answered 503 before.
    cluster, took = join(ready_s=4.0)
    assert cluster.heartbeats == 1
    assert 4.0 <= took < 4.0 + 2 * LEADER_RETRY_S


def test_no_coordinator_for_as_long_as_a_leader_is_waited_for_is_503() -> None:
    with pytest.raises(Problem) as refused:
        join(ready_s=LEADER_TRIES * LEADER_RETRY_S + 1)
    assert refused.value.status == HTTPStatus.SERVICE_UNAVAILABLE
    assert refused.value.detail == (
        "share group orders-readers cannot be joined now: it has no coordinator yet"
    )
