"""Publishing metadata changes to this broker's parts (Kafka's BrokerMetadataPublisher):
each `Change` the image's `apply` returns brings TopicManager (partition logs and Raft
groups), the peer transport (where registered brokers are) and the replication throttle in
line with the image."""

from __future__ import annotations

import logging
from collections.abc import Callable

from raftka.broker.cluster.image import (
    BrokerConfigsChanged,
    BrokerInfo,
    BrokerRegistered,
    Change,
    ConfigsChanged,
    MetadataImage,
    PartitionsAdded,
    ReplicasChanged,
    TopicCreated,
    TopicDeleted,
)
from raftka.broker.config import LONG_MAX, BrokerConfig
from raftka.broker.topics import TopicManager
from raftka.consensus.driver import AppendThrottle, RaftNode

# The controller's logger: these lines are part of applying the metadata log.
logger = logging.getLogger("raftka.controller")


class MetadataPublisher:
    """Applies the changes of the image returned by `image` to this broker."""

    def __init__(
        self,
        node: RaftNode,
        topics: TopicManager,
        broker_config: BrokerConfig,
        image: Callable[[], MetadataImage],
    ) -> None:
        self.node = node
        self.node_id = node.node_id
        self.topics = topics
        self.broker_config = broker_config
        self._image = image
        #: Called after the dynamic broker configs changed, for the parts that keep what
        #: they read from the broker config (the connection limits).
        self.config_listeners: list[Callable[[], None]] = []

    async def publish(self, change: Change) -> None:
        """Bring this broker in line with one change. Conditions it can recover from (a log
        that cannot be opened yet) it retries itself; anything it raises is unexpected."""
        if isinstance(change, TopicCreated):
            await self.topics.add_topic(
                change.name, change.topic_id, change.replicas, change.configs, change.raft_voters
            )
        elif isinstance(change, ReplicasChanged):
            await self.topics.set_replicas(
                change.name, change.index, change.replicas, change.raft_voters
            )
        elif isinstance(change, PartitionsAdded):
            await self.topics.add_partitions(change.name, change.new_replicas)
        elif isinstance(change, ConfigsChanged):
            self.topics.alter_configs(change.name, change.configs)
        elif isinstance(change, TopicDeleted):
            await self.topics.remove_topic(change.topic_id)
        elif isinstance(change, BrokerConfigsChanged):
            self.apply_broker_configs()
        elif isinstance(change, BrokerRegistered):
            broker = change.broker
            self.reach(broker)
            logger.info(
                "broker %d registered at %s:%d (rack %s)",
                broker.node_id,
                broker.host,
                broker.port,
                broker.rack,
                extra={"peer": broker.node_id},
            )

    def reach(self, broker: BrokerInfo) -> None:
        """Let the transport reach a registered broker at its Raft address (one that joined
        after this broker started is not in its --peers)."""
        if broker.raft_address is not None and broker.node_id != self.node_id:
            self.node.transport.add_peer(broker.node_id, broker.raft_address)

    def apply_broker_configs(self) -> None:
        """Bring this broker in line with the image's dynamic broker configs (its own, then
        the cluster-wide default, over the static ones): the broker config every part reads,
        the topics' configs that fall back to them, and the replication throttle."""
        dynamic = self._image().broker_configs
        self.broker_config.set_dynamic(dynamic.get(str(self.node_id), {}), dynamic.get("", {}))
        self.topics.refresh_broker_defaults()
        self.apply_replication_throttle()
        for listener in self.config_listeners:
            listener()

    def apply_replication_throttle(self) -> None:
        """The Raft node's append throttle at this broker's current rate (none: unlimited)."""
        rate = self.broker_config.get_int("leader.replication.throttled.rate")
        if rate >= LONG_MAX:
            self.node.append_throttle = None
        elif self.node.append_throttle is None:
            self.node.append_throttle = AppendThrottle(rate)
        else:
            self.node.append_throttle.set_rate(rate)
