"""The in-memory view of cluster metadata, built by applying committed metadata records.

Every broker applies the committed records of `__cluster_metadata` in offset order to its
`MetadataImage`; each `apply` returns the `Change`s the broker must reconcile (open or delete
partition logs, update configs, learn a broker's address). Applying must give the same image on
every broker, so a record that does not fit the image (a topic that already exists, an unknown
topic id) is skipped with a warning rather than raising: the controller validates with the
`validate_*` methods before it proposes, so such records only come from races it lost.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.placement import place_replicas
from raftka.broker.cluster.records import (
    AddAclBinding,
    AlterBrokerConfigs,
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
    listener_addresses,
)
from raftka.broker.cluster.validation import (
    CLUSTER_METADATA_TOPIC,
    MAX_PARTITIONS,
    TopicError,
    check_no_null_configs,
    check_not_reserved,
    validate_topic_config_values,
    validate_topic_name,
)
from raftka.broker.config import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, ConfigError
from raftka.broker.quotas import QuotaEntity, quota_entity
from raftka.broker.security.acl import (
    AclBinding,
    AclSet,
    binding_codes,
    binding_from_codes,
    check_new_binding,
)
from raftka.broker.security.scram import ScramCredential, ScramMechanism

logger = logging.getLogger("raftka.cluster")

IMAGE_FORMAT_VERSION = 1


class BrokerSnapshot(TypedDict):
    """One registered broker in the snapshot format (JSON)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: str
    #: Absent in snapshots written before named listeners: none.
    listeners: NotRequired[dict[str, list[object]]]
    #: Absent for brokers registered without one (before brokers could join later).
    raft_address: NotRequired[list[object] | None]


class TopicSnapshot(TypedDict):
    """One topic in the snapshot format (JSON): its id as a string, replica lists as lists."""

    name: str
    topic_id: str
    replicas: list[list[int]]
    configs: dict[str, str]
    #: [partition, original replicas, target replicas]; absent before reassignments: none.
    reassignments: NotRequired[list[list[Any]]]


class ImageSnapshot(TypedDict):
    """The whole image in the snapshot format (JSON), version IMAGE_FORMAT_VERSION."""

    version: int
    applied_offset: int
    brokers: list[BrokerSnapshot]
    topics: list[TopicSnapshot]
    #: Absent in snapshots written before the floor existed: 0.
    producer_id_floor: NotRequired[int]
    #: Absent in snapshots written before dynamic broker configs existed: none.
    broker_configs: NotRequired[dict[str, dict[str, str]]]
    #: Absent in snapshots written before SCRAM credentials existed: none.
    scram_credentials: NotRequired[list[ScramSnapshot]]
    #: Absent in snapshots written before ACLs existed: none.
    acls: NotRequired[list[AclSnapshot]]
    #: Absent in snapshots written before client quotas existed: none.
    client_quotas: NotRequired[list[ClientQuotaSnapshot]]


class AclSnapshot(TypedDict):
    """One ACL binding; resource type, pattern type, operation and permission as Kafka's
    codes."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


class ClientQuotaSnapshot(TypedDict):
    """One quota entity ([type, name or null] pairs) and its quota values."""

    entity: list[list[str | None]]
    values: dict[str, float]


class ScramSnapshot(TypedDict):
    """One user's SCRAM credential for one mechanism; salt and keys in base64."""

    user: str
    mechanism: int
    iterations: int
    salt: str
    stored_key: str
    server_key: str


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

#: One (partition index, broker ids) manual assignment, as CreateTopics carries them.
Assignment = tuple[int, Sequence[int]]


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def _unable_to_replicate(replication_factor: int, brokers: int) -> TopicError:
    return TopicError(
        ErrorCode.invalid_replication_factor,
        f"Unable to replicate the partition {replication_factor} time(s): The target "
        f"replication factor of {replication_factor} cannot be reached because only "
        f"{brokers} broker(s) are registered.",
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

    def validate_alter_broker_configs(
        self, resource: str, changes: Mapping[str, str | None]
    ) -> AlterBrokerConfigs:
        """The record giving broker `resource` ("" for all) `changes` (None: back to the
        static value); INVALID_CONFIG for a config that is not dynamic or a bad value."""
        if resource != "" and not (resource.isdigit() and int(resource) in self.brokers):
            raise TopicError(
                ErrorCode.invalid_request,
                f"Broker {resource!r} is not registered; name a broker id, or the empty name "
                "for the cluster-wide default.",
            )
        configs = dict(self.broker_configs.get(resource, {}))
        for name, value in changes.items():
            if name not in DYNAMIC_BROKER_CONFIGS:
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Broker config {name} cannot be changed at run time; of the broker "
                    f"configs only {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))} are dynamic. "
                    "Set the others at start-up with --config NAME=VALUE or --config-file.",
                )
            if value is None:
                configs.pop(name, None)
                continue
            try:
                BROKER_CONFIGS[name].parse(value)
            except ConfigError as exc:
                raise TopicError(ErrorCode.invalid_config, str(exc)) from None
            configs[name] = value
        return AlterBrokerConfigs(resource, configs)

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

    def validate_reassignment(
        self, name: str, index: int, target: Sequence[int] | None
    ) -> ReassignPartition | None:
        """The record starting (or, with a null target, cancelling) a reassignment of
        partition `index` of `name`, as Kafka's controller checks it; None when there is
        nothing to do. Raises TopicError."""
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < topic.num_partitions:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        move = topic.reassignments.get(index)
        if target is None:
            if move is None or move.target == move.original:
                raise TopicError(
                    ErrorCode.no_reassignment_in_progress,
                    f"No reassignment of partition {index} of topic {name} is in progress.",
                )
            return ReassignPartition(topic.topic_id, index, None)
        self._validate_assignment(target, None)
        if move is not None:
            if tuple(target) == move.target:
                return None
            raise TopicError(
                ErrorCode.reassignment_in_progress,
                f"Partition {index} of topic {name} is already moving to "
                f"{list(move.target)}; cancel that reassignment first.",
            )
        if tuple(target) == topic.replicas[index]:
            return None
        return ReassignPartition(topic.topic_id, index, tuple(target))

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

    # -- validation before proposing (controller) ----------------------------------------

    def _live(self, live_brokers: Collection[int] | None) -> list[int]:
        if live_brokers is None:
            return sorted(self.brokers)
        return sorted(b for b in live_brokers if b in self.brokers)

    def _validate_assignment(self, replicas: Sequence[int], replication_factor: int | None) -> None:
        """Kafka's ReplicationControlManager.validateManualPartitionAssignment."""
        if not replicas:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        previous = None
        for node_id in sorted(replicas):
            if node_id not in self.brokers:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {node_id}, but no such "
                    "broker is registered.",
                )
            if node_id == previous:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes the broker {node_id} more than "
                    "once.",
                )
            previous = node_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s).",
            )

    def _place(
        self, count: int, replication_factor: int, live: Sequence[int], first_partition: int = 0
    ) -> list[list[int]]:
        if replication_factor > len(live):
            raise _unable_to_replicate(replication_factor, len(live))
        brokers = [(node_id, self.brokers[node_id].rack) for node_id in live]
        return place_replicas(
            count,
            replication_factor,
            brokers,
            self.leader_counts(),
            first_partition=first_partition,
        )

    def validate_create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[Assignment] | None = None,
        configs: Mapping[str, str | None] | None = None,
        live_brokers: Collection[int] | None = None,
        *,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
    ) -> list[list[int]]:
        """Check a CreateTopics entry as Kafka's KRaft controller does and return the replica
        list of each partition (the manual assignment, or placed on `live_brokers`).

        Raises TopicError(error code, Kafka's message). -1 for num_partitions or
        replication_factor means the default (KIP-464). `live_brokers` defaults to every
        registered broker. Checks in Kafka's order: name, existence, configs, then the
        assignment or partition count and replication factor.
        """
        validate_topic_name(name)
        check_not_reserved(name)
        key = _collision_key(name)
        for existing in self.topics:
            if existing != name and _collision_key(existing) == key:
                raise TopicError(
                    ErrorCode.invalid_topic_exception,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        configs = configs or {}
        check_no_null_configs(configs)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        validate_topic_config_values(configs)
        live = self._live(live_brokers)
        if assignments:
            if replication_factor != -1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was "
                    "not set to -1.",
                )
            if num_partitions != -1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not "
                    "set to -1.",
                )
            by_index: dict[int, list[int]] = {}
            rf: int | None = None
            for index, replicas in assignments:
                if index in by_index:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"Found multiple manual partition assignments for partition {index}",
                    )
                self._validate_assignment(replicas, rf)
                rf = len(replicas)
                if not any(node_id in live for node_id in replicas):
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        "All brokers specified in the manual partition assignment for "
                        f"partition {index} are fenced or in controlled shutdown.",
                    )
                by_index[index] = list(replicas)
            if sorted(by_index) != list(range(len(by_index))):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            if len(by_index) > MAX_PARTITIONS:
                raise TopicError(
                    ErrorCode.invalid_partitions,
                    f"Number of partitions {len(by_index)} is above the limit of {MAX_PARTITIONS}.",
                )
            return [by_index[i] for i in range(len(by_index))]
        if replication_factor < -1 or replication_factor == 0:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if num_partitions < -1 or num_partitions == 0:
            raise TopicError(
                ErrorCode.invalid_partitions,
                "Number of partitions was set to an invalid non-positive value.",
            )
        if num_partitions == -1:
            num_partitions = default_num_partitions
        if replication_factor == -1:
            replication_factor = default_replication_factor
        if num_partitions > MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Number of partitions {num_partitions} is above the limit of {MAX_PARTITIONS}.",
            )
        return self._place(num_partitions, replication_factor, live)

    def plan_create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[Assignment] | None = None,
        configs: Mapping[str, str | None] | None = None,
        live_brokers: Collection[int] | None = None,
        *,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
    ) -> CreateTopic:
        """validate_create_topic, then the record to propose (configs in Kafka's string form)."""
        replicas = self.validate_create_topic(
            name,
            num_partitions,
            replication_factor,
            assignments,
            configs,
            live_brokers,
            default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor,
        )
        return CreateTopic(
            name, topic_id, tuple(map(tuple, replicas)), _render_configs(configs or {})
        )

    def _existing(self, name: str) -> TopicImage:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        return topic

    def validate_create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        live_brokers: Collection[int] | None = None,
    ) -> CreatePartitions:
        """Check a CreatePartitions entry (grow `name` to `count` partitions) as Kafka's
        controller does; returns the record to propose. Raises TopicError."""
        topic = self._existing(name)
        current = topic.num_partitions
        if count == current:
            raise TopicError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
            )
        if count < current:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"The topic {name} currently has {current} partition(s); {count} would not be "
                "an increase.",
            )
        if count > MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"Number of partitions {count} is above the limit of {MAX_PARTITIONS}.",
            )
        additional = count - current
        live = self._live(live_brokers)
        if assignments is not None:
            if len(assignments) != additional:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.",
                )
            for i, replicas in enumerate(assignments):
                self._validate_assignment(replicas, topic.replication_factor)
                if not any(node_id in live for node_id in replicas):
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        "All brokers specified in the manual partition assignment for "
                        f"partition {current + i} are fenced or in controlled shutdown.",
                    )
            new_replicas = [list(r) for r in assignments]
        else:
            new_replicas = self._place(additional, topic.replication_factor, live, current)
        return CreatePartitions(topic.topic_id, tuple(map(tuple, new_replicas)))

    def validate_delete_topic(self, name: str) -> DeleteTopic:
        """The record deleting `name`; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        return DeleteTopic(self._existing(name).topic_id)

    def validate_alter_configs(
        self, name: str, configs: Mapping[str, str | None]
    ) -> AlterTopicConfigs:
        """The record replacing `name`'s overrides with `configs`; INVALID_CONFIG if bad."""
        topic = self._existing(name)
        check_no_null_configs(configs)
        validate_topic_config_values(configs)
        return AlterTopicConfigs(topic.topic_id, _render_configs(configs))

    # -- snapshots -------------------------------------------------------------------------

    def to_dict(self) -> ImageSnapshot:
        return {
            "version": IMAGE_FORMAT_VERSION,
            "applied_offset": self.applied_offset,
            "brokers": [
                {
                    "node_id": b.node_id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "incarnation_id": b.incarnation_id,
                    "listeners": {n: [h, p] for n, (h, p) in sorted(b.listeners.items())},
                    "raft_address": None if b.raft_address is None else list(b.raft_address),
                }
                for b in sorted(self.brokers.values(), key=lambda b: b.node_id)
            ],
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "replicas": [list(r) for r in t.replicas],
                    "configs": dict(sorted(t.configs.items())),
                    "reassignments": [
                        [index, list(move.original), list(move.target)]
                        for index, move in sorted(t.reassignments.items())
                    ],
                }
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
            "producer_id_floor": self.producer_id_floor,
            "broker_configs": {
                r: dict(sorted(c.items())) for r, c in sorted(self.broker_configs.items())
            },
            "scram_credentials": [
                {
                    "user": user,
                    "mechanism": mechanism,
                    "iterations": c.iterations,
                    "salt": base64.b64encode(c.salt).decode(),
                    "stored_key": base64.b64encode(c.stored_key).decode(),
                    "server_key": base64.b64encode(c.server_key).decode(),
                }
                for (user, mechanism), c in sorted(self.scram_credentials.items())
            ],
            "acls": [_acl_snapshot(b) for b in sorted(self.acls, key=binding_codes)],
            "client_quotas": [
                {
                    "entity": [[kind, name] for kind, name in entity],
                    "values": dict(sorted(values.items())),
                }
                for entity, values in sorted(
                    self.client_quotas.items(), key=lambda item: repr(item[0])
                )
            ],
        }

    @classmethod
    def from_dict(cls, data: ImageSnapshot) -> MetadataImage:
        version = data.get("version")
        if version != IMAGE_FORMAT_VERSION:
            raise ValueError(f"metadata image format version {version!r} is not supported")
        image = cls()
        image.applied_offset = int(data["applied_offset"])
        image.producer_id_floor = int(data.get("producer_id_floor", 0))
        image.broker_configs = {
            str(r): {str(k): str(v) for k, v in c.items()}
            for r, c in data.get("broker_configs", {}).items()
        }
        for c in data.get("scram_credentials", []):
            image.scram_credentials[c["user"], int(c["mechanism"])] = ScramCredential(
                ScramMechanism(int(c["mechanism"])),
                base64.b64decode(c["salt"]),
                int(c["iterations"]),
                base64.b64decode(c["stored_key"]),
                base64.b64decode(c["server_key"]),
            )
        for a in data.get("acls", []):
            image.acls.add(
                binding_from_codes(
                    int(a["resource_type"]),
                    str(a["resource_name"]),
                    int(a["pattern_type"]),
                    str(a["principal"]),
                    str(a["host"]),
                    int(a["operation"]),
                    int(a["permission"]),
                )
            )
        image.client_quotas = {
            quota_entity((str(kind), name) for kind, name in q["entity"]): {
                str(key): float(value) for key, value in q["values"].items()
            }
            for q in data.get("client_quotas", [])
        }
        for b in data["brokers"]:
            broker = BrokerInfo(
                int(b["node_id"]),
                b["host"],
                int(b["port"]),
                b["rack"],
                b["incarnation_id"],
                listener_addresses(b.get("listeners", {})),
                (
                    None
                    if b.get("raft_address") is None
                    else listener_addresses({"raft": b["raft_address"]})["raft"]
                ),
            )
            image.brokers[broker.node_id] = broker
        for t in data["topics"]:
            topic = TopicImage(
                t["name"],
                uuid.UUID(t["topic_id"]),
                [tuple(int(n) for n in r) for r in t["replicas"]],
                dict(t["configs"]),
                {
                    int(index): Reassignment(
                        tuple(int(n) for n in original), tuple(int(n) for n in target)
                    )
                    for index, original, target in t.get("reassignments", [])
                },
            )
            image.topics[topic.name] = topic
            image.topics_by_id[topic.topic_id] = topic
        return image

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetadataImage) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


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


def _acl_snapshot(binding: AclBinding) -> AclSnapshot:
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission": int(binding.permission),
    }


def _render_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    return {name: value for name, value in configs.items() if value is not None}
