"""Kafka's transaction coordinator (KIP-98): transactional ids, their producer ids and epochs,
the partitions of each ongoing transaction, and the markers that end it.

`TransactionCoordinator.verify_partition` is what a partition leader asks before it appends
the first transactional batch of a producer's transaction (KIP-890's verification).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from raftka.broker.groups.store import TopicOffsetsLog
from raftka.broker.replica.types import CoordinatorController
from raftka.broker.txn.coordinator import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_CONFIGS,
    InitResult,
    MarkerJob,
    MarkerWriter,
    TransactionCoordinator,
    TxnConfig,
)
from raftka.broker.txn.peers import TXN_MARKERS_RPC, TXN_VERIFY_RPC, PeerTxnLink
from raftka.broker.txn.records import TxnState

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig
    from raftka.broker.replica import ReplicaManager
    from raftka.broker.topics import TopicManager
    from raftka.broker.txn.coordinator import ProducerIdSource
    from raftka.consensus.transport import PeerTransport

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TXN_MARKERS_RPC",
    "TXN_VERIFY_RPC",
    "InitResult",
    "MarkerJob",
    "MarkerWriter",
    "TransactionCoordinator",
    "TxnConfig",
    "TxnState",
    "transaction_coordinator_for",
]


class TxnController(CoordinatorController, Protocol):
    """What the coordinator needs of the cluster controller (`Controller`): its internal
    topic's creation, where partitions are led, and the peer RPCs it serves."""

    @property
    def leader_hints(self) -> Mapping[str, tuple[int, int]]: ...

    def register_rpc(
        self, rpc: str, handler: Callable[[bytes], Awaitable[tuple[int, bytes]]]
    ) -> None: ...


def transaction_coordinator_for(
    node_id: int,
    topics: TopicManager,
    controller: TxnController,
    transport: PeerTransport,
    config: BrokerConfig,
    producer_ids: ProducerIdSource,
    replica_manager: ReplicaManager,
) -> TransactionCoordinator:
    """The coordinator of a broker: its state lives in the cluster's `__transaction_state`,
    written through `replica_manager`, as are the markers of partitions this broker leads;
    markers elsewhere and verification questions travel over the peer transport."""
    log = TopicOffsetsLog(
        topics,
        controller,
        config,
        topic_name=TRANSACTION_STATE_TOPIC,
        config_prefix="transaction.state.log",
        topic_configs=TRANSACTION_STATE_TOPIC_CONFIGS,
        replica_manager=replica_manager,
    )
    txn_config = TxnConfig.from_broker_config(config)
    link = PeerTxnLink(
        node_id, topics, controller, transport, replica_manager, txn_config.marker_timeout_s
    )
    coordinator = TransactionCoordinator(log, producer_ids, link, txn_config, remote=link)
    link.coordinator = coordinator
    controller.register_rpc(TXN_MARKERS_RPC, link.serve_markers)
    controller.register_rpc(TXN_VERIFY_RPC, link.serve_verify)
    topics.leadership_listeners.append(coordinator.on_partition_leadership)
    return coordinator
