"""The coordinator's reach into the cluster: markers written by each partition's leader, and
verification questions answered by the coordinator of a transactional id elsewhere.

Both travel over the Raft peer transport as forwarded RPCs (`TXN_MARKERS_RPC`,
`TXN_VERIFY_RPC`, served through the controller's RPC registry) with JSON payloads. A marker
for a partition this broker leads is written here (`ReplicaManager.write_marker`); the others
are grouped by leader, one RPC per leader.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.txn.coordinator import (
    TRANSACTION_STATE_TOPIC,
    MarkerJob,
    TransactionCoordinator,
)
from raftka.broker.txn.metadata import TopicPartition
from raftka.consensus.transport import ForwardError, PeerTransport

if TYPE_CHECKING:
    from raftka.broker.topics import Partition

logger = logging.getLogger("raftka.txn")

TXN_MARKERS_RPC = "__txn_markers"
TXN_VERIFY_RPC = "__txn_verify"
VERIFY_TIMEOUT_S = 5.0


class PartitionsView(Protocol):
    """The topics this broker knows of (`TopicManager`)."""

    def partition(self, name: str, index: int) -> Partition | None: ...


class LeaderHints(Protocol):
    """Where partitions hosted elsewhere are led, as the controller last heard."""

    @property
    def leader_hints(self) -> Mapping[str, tuple[int, int]]: ...


class MarkerAppender(Protocol):
    """Writes a marker to a partition this broker leads (`ReplicaManager.write_marker`)."""

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        timeout_s: float,
    ) -> ErrorCode: ...


def _leader(controller: LeaderHints, partition: Partition) -> int:
    """The partition's leader as this broker knows it; -1 while unknown."""
    if partition.raft is not None:
        leader = partition.leader_id
        return -1 if leader is None else leader
    return controller.leader_hints.get(partition.name, (-1, -1))[0]


class PeerTxnLink:
    """A `MarkerWriter` and `RemoteVerifier` over the peer transport, and the server side of
    both RPCs. Markers of partitions this broker leads are written by `replica_manager`."""

    def __init__(
        self,
        node_id: int,
        topics: PartitionsView,
        controller: LeaderHints,
        transport: PeerTransport,
        replica_manager: MarkerAppender,
        marker_timeout_s: float = 10.0,
    ) -> None:
        self.node_id = node_id
        self.topics = topics
        self.controller = controller
        self.transport = transport
        self.replica_manager = replica_manager
        self.marker_timeout_s = marker_timeout_s
        self.coordinator: TransactionCoordinator | None = None

    # -- markers -----------------------------------------------------------------------------

    async def write(self, job: MarkerJob) -> Mapping[TopicPartition, ErrorCode]:
        answers: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(job.partitions):
            partition = self.topics.partition(tp[0], tp[1])
            if partition is None:
                answers[tp] = ErrorCode.unknown_topic_or_partition
                continue
            leader = _leader(self.controller, partition)
            if leader < 0:
                answers[tp] = ErrorCode.not_leader_or_follower
                continue
            by_leader.setdefault(leader, []).append(tp)
        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                if leader == self.node_id:
                    for tp in tps:
                        nursery.start_soon(self._write_here, job, tp, answers)
                else:
                    nursery.start_soon(self._write_at, leader, job, tps, answers)
        return answers

    async def _write_here(
        self, job: MarkerJob, tp: TopicPartition, answers: dict[TopicPartition, ErrorCode]
    ) -> None:
        answers[tp] = await self.write_local(job, tp)

    async def write_local(self, job: MarkerJob, tp: TopicPartition) -> ErrorCode:
        try:
            return await self.replica_manager.write_marker(
                tp[0],
                tp[1],
                job.producer_id,
                job.producer_epoch,
                job.coordinator_epoch,
                job.committed,
                self.marker_timeout_s,
            )
        except Exception as exc:
            logger.warning(
                "cannot write the %s marker of %r to %s-%d: %r",
                "COMMIT" if job.committed else "ABORT",
                job.transactional_id,
                tp[0],
                tp[1],
                exc,
            )
            return ErrorCode.unknown_server_error

    async def _write_at(
        self,
        leader: int,
        job: MarkerJob,
        tps: list[TopicPartition],
        answers: dict[TopicPartition, ErrorCode],
    ) -> None:
        payload = json.dumps(
            {
                "transactional_id": job.transactional_id,
                "producer_id": job.producer_id,
                "producer_epoch": job.producer_epoch,
                "coordinator_epoch": job.coordinator_epoch,
                "committed": job.committed,
                "partitions": [list(tp) for tp in tps],
            }
        ).encode()
        try:
            raw = await self.transport.forward(
                leader, TXN_MARKERS_RPC, payload, self.marker_timeout_s + 5.0
            )
            results = json.loads(raw)
            for topic, index, code in results:
                answers[(topic, index)] = ErrorCode(code)
        except (ForwardError, ValueError, TypeError) as exc:
            logger.info("cannot send markers to broker %d: %s", leader, exc)
            for tp in tps:
                answers[tp] = ErrorCode.not_leader_or_follower

    async def serve_markers(self, payload: bytes) -> tuple[int, bytes]:
        """TXN_MARKERS_RPC: write the markers asked for; [[topic, partition, error]...]."""
        try:
            # A peer's JSON object; each field is converted as read, and a bad one refused.
            request: dict[str, Any] = json.loads(payload)
            job = MarkerJob(
                transactional_id=str(request["transactional_id"]),
                producer_id=int(request["producer_id"]),
                producer_epoch=int(request["producer_epoch"]),
                coordinator_epoch=int(request["coordinator_epoch"]),
                committed=bool(request["committed"]),
                partitions=frozenset((str(t), int(p)) for t, p in request["partitions"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad marker request: {exc}".encode()
        answers: dict[TopicPartition, ErrorCode] = {}
        async with trio.open_nursery() as nursery:
            for tp in job.partitions:
                nursery.start_soon(self._write_here, job, tp, answers)
        return 0, json.dumps([[t, p, int(e)] for (t, p), e in answers.items()]).encode()

    # -- verification ------------------------------------------------------------------------

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """Ask the coordinator of `transactional_id` (the leader of its partition)."""
        coordinator = self.coordinator
        if coordinator is None:
            return ErrorCode.coordinator_not_available
        state = self.topics.partition(
            TRANSACTION_STATE_TOPIC, coordinator.partition_for(transactional_id)
        )
        leader = -1 if state is None else _leader(self.controller, state)
        if leader < 0 or leader == self.node_id:
            return ErrorCode.coordinator_not_available
        payload = json.dumps([transactional_id, producer_id, producer_epoch, tp[0], tp[1]])
        try:
            raw = await self.transport.forward(
                leader, TXN_VERIFY_RPC, payload.encode(), VERIFY_TIMEOUT_S
            )
            return ErrorCode(int(raw))
        except (ForwardError, ValueError) as exc:
            logger.info("cannot ask broker %d to verify %r: %s", leader, transactional_id, exc)
            return ErrorCode.coordinator_not_available

    async def serve_verify(self, payload: bytes) -> tuple[int, bytes]:
        """TXN_VERIFY_RPC: this coordinator's verification answer, as a number."""
        coordinator = self.coordinator
        if coordinator is None:
            return 0, str(int(ErrorCode.coordinator_not_available)).encode()
        try:
            transactional_id, producer_id, producer_epoch, topic, index = json.loads(payload)
            error = coordinator.verify(
                str(transactional_id),
                int(producer_id),
                int(producer_epoch),
                (str(topic), int(index)),
            )
        except (ValueError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad verify request: {exc}".encode()
        return 0, str(int(error)).encode()
