"""Markers and verification across brokers: `PeerTxnLink` over an in-memory transport.

Each broker's link writes the markers of the partitions it leads
(`ReplicaManager.write_marker`, replaced by a recorder) and forwards the others to their
leaders, one RPC per leader.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from raftka.broker.txn import MarkerJob
from raftka.broker.txn.peers import TXN_MARKERS_RPC, TXN_VERIFY_RPC, PeerTxnLink
from raftka.consensus.transport import ForwardError

E = ErrorCode

# topic-partition -> leader (None: unknown)
LEADERS: dict[tuple[str, int], int | None] = {
    ("a", 0): 1,
    ("a", 1): 2,
    ("b", 0): 2,
    ("c", 0): None,
    ("__transaction_state", 0): 2,
}


class Topics:
    def partition(self, name: str, index: int) -> Any:
        if (name, index) not in LEADERS:
            return None
        return SimpleNamespace(
            name=f"{name}-{index}", raft=object(), leader_id=LEADERS[(name, index)]
        )


class Network:
    """Forwards go straight to the addressed broker's RPC handlers."""

    def __init__(self) -> None:
        self.handlers: dict[int, dict[str, Any]] = {}
        self.sent: list[tuple[int, str]] = []
        self.down: set[int] = set()

    def transport(self, node_id: int) -> Any:
        network = self

        class Transport:
            async def forward(self, to: int, rpc: str, payload: bytes, timeout_s: float) -> bytes:
                network.sent.append((to, rpc))
                if to in network.down:
                    raise ForwardError(f"node {to} is unreachable")
                code, answer = await network.handlers[to][rpc](payload)
                assert code == 0, answer
                return bytes(answer)

        return Transport()


def links(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Network, dict[int, PeerTxnLink], list[tuple[Any, ...]]]:
    written: list[tuple[Any, ...]] = []

    class Replicas:
        def __init__(self, node_id: int) -> None:
            self.name = f"replicas of {node_id}"

        async def write_marker(self, topic: str, partition: int, *args: Any) -> E:
            await trio.lowlevel.checkpoint()
            written.append((self.name, topic, partition, *args))
            return E.none

    network = Network()
    by_node = {}
    for node_id in (1, 2):
        link = PeerTxnLink(
            node_id,
            Topics(),  # type: ignore[arg-type]
            SimpleNamespace(leader_hints={}),  # type: ignore[arg-type]
            network.transport(node_id),
            Replicas(node_id),
        )
        network.handlers[node_id] = {
            TXN_MARKERS_RPC: link.serve_markers,
            TXN_VERIFY_RPC: link.serve_verify,
        }
        by_node[node_id] = link
    return network, by_node, written


JOB = MarkerJob(
    "tx",
    producer_id=9,
    producer_epoch=3,
    coordinator_epoch=5,
    committed=True,
    partitions=frozenset({("a", 0), ("a", 1), ("b", 0), ("c", 0), ("gone", 0)}),
)


def test_markers_are_written_by_each_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    network, by_node, written = links(monkeypatch)

    async def main() -> dict[tuple[str, int], E]:
        return dict(await by_node[1].write(JOB))

    answers = trio.run(main)
    assert answers == {
        ("a", 0): E.none,
        ("a", 1): E.none,
        ("b", 0): E.none,
        ("c", 0): E.not_leader_or_follower,
        ("gone", 0): E.unknown_topic_or_partition,
    }
    assert network.sent == [(2, TXN_MARKERS_RPC)]  # one RPC for both of node 2's partitions
    assert sorted(written) == [
        ("replicas of 1", "a", 0, 9, 3, 5, True, 10.0),
        ("replicas of 2", "a", 1, 9, 3, 5, True, 10.0),
        ("replicas of 2", "b", 0, 9, 3, 5, True, 10.0),
    ]


def test_an_unreachable_leader_answers_not_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    network, by_node, _written = links(monkeypatch)
    network.down.add(2)

    async def main() -> dict[tuple[str, int], E]:
        return dict(await by_node[1].write(JOB))

    answers = trio.run(main)
    assert answers[("a", 1)] == answers[("b", 0)] == E.not_leader_or_follower
    assert answers[("a", 0)] == E.none


def test_a_failing_write_marker_is_an_error_to_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    _network, by_node, _written = links(monkeypatch)

    async def broken(*args: Any) -> E:
        raise NotImplementedError("write_marker")

    by_node[1].replica_manager = SimpleNamespace(write_marker=broken)

    async def main() -> dict[tuple[str, int], E]:
        return dict(await by_node[1].write(JOB))

    assert trio.run(main)[("a", 0)] == E.unknown_server_error


def test_verification_is_asked_of_the_ids_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    network, by_node, _written = links(monkeypatch)
    asked = []

    def verify(transactional_id: str, pid: int, epoch: int, tp: tuple[str, int]) -> E:
        asked.append((transactional_id, pid, epoch, tp))
        return E.producer_fenced

    by_node[1].coordinator = SimpleNamespace(partition_for=lambda t: 0)  # type: ignore[assignment]
    by_node[2].coordinator = SimpleNamespace(verify=verify)  # type: ignore[assignment]

    async def main() -> E:
        return await by_node[1].verify("tx", 9, 3, ("a", 0))

    assert trio.run(main) == E.producer_fenced
    assert asked == [("tx", 9, 3, ("a", 0))]
    assert network.sent == [(2, TXN_VERIFY_RPC)]
