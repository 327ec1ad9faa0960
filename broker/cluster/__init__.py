"""Cluster metadata: the `__cluster_metadata` Raft group's records, image and snapshots.

- `records`: metadata record types and their encoding as Kafka v2 record batches.
- `image`: `MetadataImage`, built by applying committed records; the controller's validation.
- `placement`: deterministic, rack-aware replica placement that spreads preferred leaders.
- `snapshot`: the image saved to and loaded from lmdb.
"""

from broker.cluster.image import (
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
from broker.cluster.placement import PlacementError, place_replicas
from broker.cluster.records import (
    AlterTopicConfigs,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
    MetadataRecordError,
    RegisterBroker,
    UnregisterBroker,
    decode_metadata_batch,
    decode_metadata_batch_with_offsets,
    encode_batch,
    iter_log_records,
)
from broker.cluster.snapshot import SnapshotError, SnapshotStore, load_snapshot, save_snapshot

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
    "RegisterBroker",
    "SnapshotError",
    "SnapshotStore",
    "TopicCreated",
    "TopicDeleted",
    "TopicImage",
    "UnregisterBroker",
    "decode_metadata_batch",
    "decode_metadata_batch_with_offsets",
    "encode_batch",
    "iter_log_records",
    "load_snapshot",
    "place_replicas",
    "save_snapshot",
]
