"""The in-memory view of cluster metadata, built by applying committed metadata records.

Every broker applies the committed records of `__cluster_metadata` in offset order to its
`MetadataImage`; each `apply` returns the `Change`s the broker must reconcile (open or delete
partition logs, update configs, learn a broker's address). Applying must give the same image on
every broker, so a record that does not fit the image (a topic that already exists, an unknown
topic id) is skipped with a warning rather than raising: the controller's per-area modules
(`cluster/control/`) validate a command against the image before it proposes records, so such
records only come from races it lost. The snapshot format is in `cluster/snapshot.py`.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raftka.broker.cluster.records import (
    AddAclBinding,
    AlterBrokerConfigs,
    AlterGroupConfigs,
    AlterTopicConfigs,
    ClientQuota,
    CompleteReassignment,
    CreatePartitions,
    CreateTopic,
    DeleteScramCredential,
    DeleteTopic,
    MetadataRecord,
    RaiseProducerIdFloor,
    ReassignPartition,
    RegisterBroker,
    RemoveAclBinding,
    UnregisterBroker,
    UpsertScramCredential,
)
from raftka.broker.cluster.validation import CLUSTER_METADATA_TOPIC
from raftka.broker.quotas import QuotaEntity
from raftka.broker.security.acl import (
    AclBinding,
    AclSet,
    binding_from_codes,
    check_new_binding,
)
from raftka.broker.security.scram import ScramCredential, ScramMechanism

logger = logging.getLogger("raftka.cluster")


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: str
    #: Listener name -> (host, port) for clients of that listener; (host, port) above is
    #: the first listener's.
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: Where other brokers reach its Raft transport (None: registered before brokers could
    #: join a running cluster; its address is in every broker's --peers).
    raft_address: tuple[str, int] | None = None

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Reassignment:
    """A partition's move in progress: from `original` to `target` (a cancelled move has
    target == original until its leader has moved the replicas back)."""

    original: tuple[int, ...]
    target: tuple[int, ...]

    def adding(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.target) - set(self.original)))

    def removing(self, replicas: Sequence[int]) -> tuple[int, ...]:
        return tuple(sorted(set(replicas) - set(self.target)))


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    #: Replica list per partition; the first replica is the preferred leader. During a
    #: reassignment: the target replicas first, then those still to be removed (Kafka's
    #: order), so every broker that may hold a copy is listed.
    replicas: list[tuple[int, ...]]
    #: Config overrides as strings (parse with broker.config.validate_topic_configs).
    configs: dict[str, str] = field(default_factory=dict)
    #: Partition index -> its reassignment in progress.
    reassignments: dict[int, Reassignment] = field(default_factory=dict)

    def raft_voters(self, index: int) -> tuple[int, ...]:
        """The partition's Raft voters before any membership change in its log: the
        replicas it had before a reassignment in progress started."""
        move = self.reassignments.get(index)
        return move.original if move is not None else self.replicas[index]

    @property
    def num_partitions(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas[0]) if self.replicas else 0


# -- changes the broker reconciles --------------------------------------------------------


@dataclass(frozen=True)
class BrokerRegistered:
    broker: BrokerInfo
    #: The registration this one replaces (a restart with a new incarnation), if any.
    previous: BrokerInfo | None = None


@dataclass(frozen=True)
class BrokerUnregistered:
    node_id: int


@dataclass(frozen=True)
class TopicCreated:
    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str]
    #: Per partition, its Raft voters before any membership change (`raft_voters`) when a
    #: snapshot restores a topic with reassignments in progress; None: the replicas.
    raft_voters: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class TopicDeleted:
    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class PartitionsAdded:
    name: str
    topic_id: uuid.UUID
    #: Index of the first new partition; new_replicas[i] is partition first_index + i.
    first_index: int
    new_replicas: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ConfigsChanged:
    name: str
    topic_id: uuid.UUID
    #: The topic's complete new override set.
    configs: Mapping[str, str]


@dataclass(frozen=True)
class ReplicasChanged:
    """A partition's replica list changed (a reassignment started, was cancelled or
    completed): brokers newly listed host a copy, brokers no longer listed drop theirs."""

    name: str
    topic_id: uuid.UUID
    index: int
    replicas: tuple[int, ...]
    #: Voters before any CONFIG entry of the partition's log (`TopicImage.raft_voters`).
    raft_voters: tuple[int, ...]


@dataclass(frozen=True)
class BrokerConfigsChanged:
    """The dynamic configs of broker `resource` ("": the cluster-wide default) changed."""

    resource: str


Change = (
    BrokerConfigsChanged
    | ReplicasChanged
    | BrokerRegistered
    | BrokerUnregistered
    | TopicCreated
    | TopicDeleted
    | PartitionsAdded
    | ConfigsChanged
)


class MetadataImage:
    """Brokers and topics as of `applied_offset` of the metadata log."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        #: Offset of the last applied record; -1 for an empty image.
        self.applied_offset = -1
        #: No broker hands out a producer id below this (raised by `raftka restore`).
        self.producer_id_floor = 0
        #: (user, SCRAM mechanism number) -> the user's credential (never a password).
        self.scram_credentials: dict[tuple[str, int], ScramCredential] = {}
        #: The cluster's ACL bindings.
        self.acls = AclSet()
        #: Dynamic broker configs: broker id as a string ("" for the cluster-wide default)
        #: -> name -> value.
        self.broker_configs: dict[str, dict[str, str]] = {}
        #: Group configs: group id -> name -> value.
        self.group_configs: dict[str, dict[str, str]] = {}
        #: Client quotas: entity -> quota key -> value. Replaced, never changed in place,
        #: when a quota changes (quota enforcement notices a new mapping).
        self.client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = {}

    # -- queries -----------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def leader_counts(self) -> dict[int, int]:
        """Partitions each broker is the preferred leader (first replica) of."""
        counts = dict.fromkeys(self.brokers, 0)
        for topic in self.topics.values():
            for replicas in topic.replicas:
                if replicas:
                    counts[replicas[0]] = counts.get(replicas[0], 0) + 1
        return counts

    def partitions_of(self, node_id: int) -> list[tuple[str, int]]:
        """(topic, partition) of every replica placed on `node_id`."""
        return [
            (topic.name, index)
            for topic in self.topics.values()
            for index, replicas in enumerate(topic.replicas)
            if node_id in replicas
        ]

    # -- applying committed records ------------------------------------------------------

    def apply(self, record: MetadataRecord, offset: int) -> list[Change]:
        """Apply the committed record at `offset`; a record at or below applied_offset is a
        no-op (re-delivery after a snapshot or restart)."""
        if offset <= self.applied_offset:
            return []
        self.applied_offset = offset
        match record:
            case RegisterBroker():
                return self._register(record)
            case UnregisterBroker():
                previous = self.brokers.pop(record.node_id, None)
                return [BrokerUnregistered(record.node_id)] if previous else []
            case CreateTopic():
                return self._create_topic(record, offset)
            case DeleteTopic():
                topic = self.topics_by_id.pop(record.topic_id, None)
                if topic is None:
                    logger.warning("offset %d deletes unknown topic id %s", offset, record.topic_id)
                    return []
                del self.topics[topic.name]
                return [TopicDeleted(topic.name, topic.topic_id, tuple(topic.replicas))]
            case AlterTopicConfigs():
                topic = self.topics_by_id.get(record.topic_id)
                if topic is None:
                    logger.warning("offset %d alters unknown topic id %s", offset, record.topic_id)
                    return []
                topic.configs = dict(record.configs)
                return [ConfigsChanged(topic.name, topic.topic_id, dict(record.configs))]
            case CreatePartitions():
                topic = self.topics_by_id.get(record.topic_id)
                if topic is None:
                    logger.warning(
                        "offset %d adds partitions to unknown topic id %s", offset, record.topic_id
                    )
                    return []
                first = topic.num_partitions
                topic.replicas.extend(record.new_replicas)
                return [PartitionsAdded(topic.name, topic.topic_id, first, record.new_replicas)]
            case ReassignPartition():
                return self._reassign(record, offset)
            case AlterBrokerConfigs():
                if record.configs:
                    self.broker_configs[record.resource] = dict(record.configs)
                else:
                    self.broker_configs.pop(record.resource, None)
                return [BrokerConfigsChanged(record.resource)]
            case AlterGroupConfigs():
                # The group coordinators read them per request: nothing to reconcile.
                if record.configs:
                    self.group_configs[record.group] = dict(record.configs)
                else:
                    self.group_configs.pop(record.group, None)
                return []
            case CompleteReassignment():
                topic = self.topics_by_id.get(record.topic_id)
                if topic is None or record.partition not in topic.reassignments:
                    logger.warning("offset %d completes no reassignment in progress", offset)
                    return []
                del topic.reassignments[record.partition]
                topic.replicas[record.partition] = record.replicas
                return [
                    ReplicasChanged(
                        topic.name,
                        topic.topic_id,
                        record.partition,
                        record.replicas,
                        record.replicas,
                    )
                ]
            case UpsertScramCredential():
                # Authentication reads credentials when a client logs in: nothing to reconcile.
                if record.mechanism not in set(ScramMechanism):
                    logger.warning(
                        "offset %d stores a credential of unknown SCRAM mechanism %d",
                        offset,
                        record.mechanism,
                    )
                    return []
                mechanism = ScramMechanism(record.mechanism)
                self.scram_credentials[record.user, int(mechanism)] = ScramCredential(
                    mechanism,
                    base64.b64decode(record.salt),
                    record.iterations,
                    base64.b64decode(record.stored_key),
                    base64.b64decode(record.server_key),
                )
                return []
            case DeleteScramCredential():
                self.scram_credentials.pop((record.user, record.mechanism), None)
                return []
            case AddAclBinding() | RemoveAclBinding():
                # The authorizer reads the image on each check: nothing to reconcile.
                binding = _acl_binding(record, offset)
                if binding is not None:
                    if isinstance(record, AddAclBinding):
                        self.acls.add(binding)
                    else:
                        self.acls.remove(binding)
                return []
            case ClientQuota():
                # Quota enforcement reads the mapping per request: nothing to reconcile.
                self._apply_client_quota(record)
                return []
            case RaiseProducerIdFloor():
                # Allocators read the floor when they hand out an id: nothing to reconcile.
                self.producer_id_floor = max(self.producer_id_floor, record.floor)
                return []
        raise TypeError(f"not a metadata record: {record!r}")

    def dynamic_broker_config(self, node_id: int, name: str) -> str | None:
        """A dynamic broker config of `node_id`: its own value, else the cluster-wide
        default, else None (the static config applies)."""
        own = self.broker_configs.get(str(node_id), {})
        if name in own:
            return own[name]
        return self.broker_configs.get("", {}).get(name)

    def _reassign(self, record: ReassignPartition, offset: int) -> list[Change]:
        topic = self.topics_by_id.get(record.topic_id)
        if topic is None or not 0 <= record.partition < topic.num_partitions:
            logger.warning("offset %d reassigns an unknown partition", offset)
            return []
        index = record.partition
        current = topic.replicas[index]
        move = topic.reassignments.get(index)
        if record.target is None:
            if move is None:
                return []
            target = move.original
        else:
            target = record.target
        original = move.original if move is not None else current
        topic.reassignments[index] = Reassignment(original, target)
        # Every broker that may be a member of the Raft group stays listed until completion:
        # the target, then the others ascending (Kafka's PartitionReassignmentReplicas).
        topic.replicas[index] = target + tuple(sorted(set(current) - set(target)))
        return [ReplicasChanged(topic.name, topic.topic_id, index, topic.replicas[index], original)]

    def _apply_client_quota(self, record: ClientQuota) -> None:
        quotas = dict(self.client_quotas)
        values = dict(quotas.get(record.entity, {}))
        if record.value is None:
            values.pop(record.key, None)
        else:
            values[record.key] = record.value
        if values:
            quotas[record.entity] = values
        else:
            quotas.pop(record.entity, None)
        self.client_quotas = quotas

    def _register(self, record: RegisterBroker) -> list[Change]:
        broker = BrokerInfo(
            record.node_id,
            record.host,
            record.port,
            record.rack,
            record.incarnation_id,
            dict(record.listeners),
            record.raft_address,
        )
        previous = self.brokers.get(record.node_id)
        self.brokers[record.node_id] = broker
        if previous == broker:
            return []
        return [BrokerRegistered(broker, previous)]

    def _create_topic(self, record: CreateTopic, offset: int) -> list[Change]:
        if record.name == CLUSTER_METADATA_TOPIC:
            # Written by a broker before the name was refused: hosting it would collide
            # with the metadata Raft group, so the record is skipped.
            logger.warning(
                "offset %d creates topic %s, which is the metadata log's name: skipped",
                offset,
                record.name,
            )
            return []
        if record.name in self.topics or record.topic_id in self.topics_by_id:
            logger.warning(
                "offset %d creates topic %s that exists",
                offset,
                record.name,
                extra={"topic": record.name},
            )
            return []
        topic = TopicImage(
            record.name, record.topic_id, list(record.replicas), dict(record.configs)
        )
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic
        return [TopicCreated(topic.name, topic.topic_id, record.replicas, dict(record.configs))]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetadataImage) and self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]

    def _state(self) -> tuple[object, ...]:
        """Everything a snapshot holds (topics_by_id follows from topics)."""
        return (
            self.applied_offset,
            self.brokers,
            self.topics,
            self.producer_id_floor,
            self.scram_credentials,
            set(self.acls),
            self.broker_configs,
            dict(self.client_quotas),
        )


def _acl_binding(record: AddAclBinding | RemoveAclBinding, offset: int) -> AclBinding | None:
    """The binding a record names; None (after a warning) if it is not a valid one."""
    binding = binding_from_codes(
        record.resource_type,
        record.resource_name,
        record.pattern_type,
        record.principal,
        record.host,
        record.operation,
        record.permission,
    )
    problem = check_new_binding(binding)
    if problem is not None:
        logger.warning("offset %d: %s names no valid ACL (%s)", offset, record.type_name(), problem)
        return None
    return binding
