"""Cluster metadata: the `__cluster_metadata` Raft group's records, image and snapshots.

- `records`: metadata record types and their encoding as Kafka v2 record batches.
- `image`: `MetadataImage`, built by applying committed records.
- `validation`: Kafka's rules for topic names, partition counts, assignments and configs.
- `control`: the controller's decisions per area, (image, command) -> ControllerResult.
- `placement`: deterministic, rack-aware replica placement that spreads preferred leaders.
- `commands`: the admin commands the controller executes, typed, and their wire form.

These are pure (no trio, lmdb, Raft or log) and are what this package exports. The parts
with I/O are imported from their modules: `snapshot` (the image's format, saved to and
loaded from lmdb) and `controller` (the metadata Raft group's leader and every broker's apply loop).
"""

from raftka.broker.cluster.image import (
    BrokerInfo,
    BrokerRegistered,
    BrokerUnregistered,
    Change,
    ConfigsChanged,
    MetadataImage,
    PartitionsAdded,
    TopicCreated,
    TopicDeleted,
    TopicImage,
)
from raftka.broker.cluster.placement import PlacementError, place_replicas
from raftka.broker.cluster.records import (
    AlterTopicConfigs,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
    MetadataRecordError,
    RaiseProducerIdFloor,
    RegisterBroker,
    UnregisterBroker,
    decode_metadata_batch,
    decode_metadata_batch_with_offsets,
    encode_batch,
    iter_log_records,
)

__all__ = [
    "AlterTopicConfigs",
    "BrokerInfo",
    "BrokerRegistered",
    "BrokerUnregistered",
    "Change",
    "ConfigsChanged",
    "CreatePartitions",
    "CreateTopic",
    "DeleteTopic",
    "MetadataImage",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionsAdded",
    "PlacementError",
    "RaiseProducerIdFloor",
    "RegisterBroker",
    "TopicCreated",
    "TopicDeleted",
    "TopicImage",
    "UnregisterBroker",
    "decode_metadata_batch",
    "decode_metadata_batch_with_offsets",
    "encode_batch",
    "iter_log_records",
    "place_replicas",
]
