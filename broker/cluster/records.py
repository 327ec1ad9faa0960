"""Cluster metadata records: the entries of the `__cluster_metadata` Raft group.

Each entry of the metadata log is a genuine, uncompressed v2 Kafka record batch; each record in
it carries one metadata record: key = the record type name (ASCII), value = the record as JSON
with a `version` field so the format can evolve. A broker that meets a type it does not know, or
a version newer than it understands, refuses it with `MetadataRecordError` rather than guess.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar, Self, TypeAlias

from raftka.protocol import batch_builder
from raftka.protocol.batch_builder import (
    BatchDecodeError,
    build_batch,
    is_control_batch,
    iter_batches,
)


class MetadataRecordError(ValueError):
    """A metadata record or batch that cannot be decoded: unknown type or version, bad fields."""


def _replica_lists(value: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(node) for node in replicas) for replicas in value)


@dataclass(frozen=True)
class _Record:
    """Base of every metadata record: JSON encoding with a per-type version."""

    #: The newest version of this record type that this code reads and writes.
    VERSION: ClassVar[int] = 1

    @classmethod
    def type_name(cls) -> str:
        return cls.__name__

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"version": self.VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, uuid.UUID):
                value = str(value)
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            elif isinstance(value, Mapping):
                value = dict(sorted(value.items()))
            out[f.name] = value
        return out

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        version = data.get("version")
        if not isinstance(version, int) or version < 1:
            raise MetadataRecordError(f"{cls.type_name()} record has no valid version: {version!r}")
        if version > cls.VERSION:
            raise MetadataRecordError(
                f"{cls.type_name()} record version {version} is newer than the highest "
                f"this broker reads ({cls.VERSION})"
            )
        kwargs: dict[str, object] = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING or f.default_factory is not MISSING:
                    continue  # a field added later: records written before it lack it
                raise MetadataRecordError(f"{cls.type_name()} record lacks field {f.name!r}")
            kwargs[f.name] = data[f.name]
        try:
            return cls(**kwargs)
        except (TypeError, ValueError, AttributeError) as exc:
            raise MetadataRecordError(f"bad {cls.type_name()} record: {exc}") from None

    @classmethod
    def from_bytes(cls, raw: bytes) -> Self:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MetadataRecordError(f"{cls.type_name()} record is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise MetadataRecordError(f"{cls.type_name()} record is not a JSON object")
        return cls.from_dict(data)


def listener_addresses(value: Mapping[str, object]) -> dict[str, tuple[str, int]]:
    """{listener name: (host, port)} from its JSON form {name: [host, port]}."""
    if not isinstance(value, Mapping):
        raise ValueError("listeners must be an object")
    out: dict[str, tuple[str, int]] = {}
    for name, address in value.items():
        if (
            not isinstance(name, str)
            or not isinstance(address, list | tuple)
            or len(address) != 2
            or not isinstance(address[0], str)
            or not isinstance(address[1], int)
            or isinstance(address[1], bool)
        ):
            raise ValueError("listeners must map names to [host, port]")
        out[name] = (address[0], address[1])
    return out


@dataclass(frozen=True)
class RegisterBroker(_Record):
    """A broker joined (or rejoined, with a new incarnation id) the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: str
    #: Listener name -> (host, port) advertised to clients of that listener; absent in
    #: records written before named listeners.
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: (host, port) other brokers reach this one's Raft transport at; absent in records
    #: written before brokers could join a running cluster.
    raft_address: tuple[str, int] | None = None

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", int(self.node_id))
        object.__setattr__(self, "port", int(self.port))
        object.__setattr__(self, "listeners", listener_addresses(self.listeners))
        if self.raft_address is not None:
            found = listener_addresses({"raft": self.raft_address})["raft"]
            object.__setattr__(self, "raft_address", found)
        if not isinstance(self.host, str) or not isinstance(self.incarnation_id, str):
            raise ValueError("host and incarnation_id must be strings")
        if self.rack is not None and not isinstance(self.rack, str):
            raise ValueError("rack must be a string or null")


@dataclass(frozen=True)
class UnregisterBroker(_Record):
    """A broker left the cluster for good."""

    node_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", int(self.node_id))


def _configs(value: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("configs must be an object")
    out = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not isinstance(raw, str):
            raise ValueError("config names and values must be strings")
        out[name] = raw
    return out


def _topic_id(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


@dataclass(frozen=True)
class CreateTopic(_Record):
    """A topic with its replica list per partition (first replica = preferred leader)."""

    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]
    configs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError("name must be a string")
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))
        object.__setattr__(self, "replicas", _replica_lists(self.replicas))
        object.__setattr__(self, "configs", _configs(self.configs))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class DeleteTopic(_Record):
    topic_id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))


@dataclass(frozen=True)
class AlterTopicConfigs(_Record):
    """The topic's complete new set of config overrides (not a delta)."""

    topic_id: uuid.UUID
    configs: dict[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))
        object.__setattr__(self, "configs", _configs(self.configs))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CreatePartitions(_Record):
    """Partitions appended to a topic, numbered on from its current count."""

    topic_id: uuid.UUID
    new_replicas: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))
        object.__setattr__(self, "new_replicas", _replica_lists(self.new_replicas))


def _partition_index(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"partition must be a non-negative integer, not {value!r}")


@dataclass(frozen=True)
class ReassignPartition(_Record):
    """A partition's replicas are to move to `target` (first = preferred leader); a null
    target cancels the reassignment in progress: the partition moves back to the replicas it
    had before it. The partition's leader performs the move through Raft membership changes
    and then asks the controller to write `CompleteReassignment`."""

    topic_id: uuid.UUID
    partition: int
    target: tuple[int, ...] | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))
        _partition_index(self.partition)
        if self.target is not None:
            object.__setattr__(self, "target", tuple(int(n) for n in self.target))


@dataclass(frozen=True)
class CompleteReassignment(_Record):
    """The partition's Raft group now has exactly `replicas` as voters: the reassignment is
    over, and brokers not among them drop their copy."""

    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _topic_id(self.topic_id))
        _partition_index(self.partition)
        object.__setattr__(self, "replicas", tuple(int(n) for n in self.replicas))


@dataclass(frozen=True)
class AlterBrokerConfigs(_Record):
    """The complete new set of dynamic configs of broker `resource` (its id as a string, or
    "" for the cluster-wide default), as Kafka's IncrementalAlterConfigs on a BROKER."""

    resource: str
    configs: dict[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.resource, str):
            raise ValueError("resource must be a string")
        object.__setattr__(self, "configs", _configs(self.configs))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class AlterGroupConfigs(_Record):
    """The complete new set of configs of consumer or share group `group` (Kafka 4's GROUP
    config resource); an empty set forgets the group's configs."""

    group: str
    configs: dict[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.group, str):
            raise ValueError("group must be a string")
        object.__setattr__(self, "configs", _configs(self.configs))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class RaiseProducerIdFloor(_Record):
    """Producer ids below `floor` are never handed out again (the image keeps the maximum)."""

    floor: int

    def __post_init__(self) -> None:
        if isinstance(self.floor, bool) or not isinstance(self.floor, int) or self.floor < 0:
            raise ValueError(f"floor must be a non-negative integer, not {self.floor!r}")


def _base64_field(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a base64 string")
    try:
        base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError(f"{name} must be a base64 string") from None


@dataclass(frozen=True)
class UpsertScramCredential(_Record):
    """A user's SCRAM credential for one mechanism (1: SCRAM-SHA-256, 2: SCRAM-SHA-512),
    created or replaced. Salt and keys are base64; the password is never stored."""

    user: str
    mechanism: int
    iterations: int
    salt: str
    stored_key: str
    server_key: str

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user:
            raise ValueError("user must be a non-empty string")
        object.__setattr__(self, "mechanism", int(self.mechanism))
        object.__setattr__(self, "iterations", int(self.iterations))
        for name in ("salt", "stored_key", "server_key"):
            _base64_field(name, getattr(self, name))


@dataclass(frozen=True)
class DeleteScramCredential(_Record):
    """A user's SCRAM credential for one mechanism removed."""

    user: str
    mechanism: int

    def __post_init__(self) -> None:
        if not isinstance(self.user, str):
            raise ValueError("user must be a string")
        object.__setattr__(self, "mechanism", int(self.mechanism))


def _acl_fields(record: _AclBindingRecord) -> None:
    for name in ("resource_type", "pattern_type", "operation", "permission"):
        value = getattr(record, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer code, not {value!r}")
    for name in ("resource_name", "principal", "host"):
        if not isinstance(getattr(record, name), str):
            raise ValueError(f"{name} must be a string")


@dataclass(frozen=True)
class _AclBindingRecord(_Record):
    """One ACL binding: Kafka's codes for resource type, pattern type, operation and
    permission, and the resource name, principal and host."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def __post_init__(self) -> None:
        _acl_fields(self)


@dataclass(frozen=True)
class AddAclBinding(_AclBindingRecord):
    """One ACL binding created; creating a stored binding again changes nothing."""


@dataclass(frozen=True)
class RemoveAclBinding(_AclBindingRecord):
    """One ACL binding removed (the same fields as the AddAclBinding that created it)."""


@dataclass(frozen=True)
class ClientQuota(_Record):
    """One client quota key of one entity set to `value`, or removed (`value` null). The
    entity is [entity type, name] pairs (`user`, `client-id`); a null name is the default."""

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float | None

    def __post_init__(self) -> None:
        pairs = []
        for pair in self.entity:
            kind, name = pair
            if not isinstance(kind, str) or not (name is None or isinstance(name, str)):
                raise ValueError("entity must be [type, name or null] pairs")
            pairs.append((kind, name))
        object.__setattr__(self, "entity", tuple(sorted(pairs)))
        if not isinstance(self.key, str):
            raise ValueError("key must be a string")
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, int | float):
                raise ValueError("value must be a number or null")
            object.__setattr__(self, "value", float(self.value))


MetadataRecord: TypeAlias = (
    RegisterBroker
    | UnregisterBroker
    | CreateTopic
    | DeleteTopic
    | AlterTopicConfigs
    | CreatePartitions
    | ReassignPartition
    | CompleteReassignment
    | AlterBrokerConfigs
    | AlterGroupConfigs
    | RaiseProducerIdFloor
    | UpsertScramCredential
    | DeleteScramCredential
    | AddAclBinding
    | RemoveAclBinding
    | ClientQuota
)

RECORD_TYPES: dict[str, type[MetadataRecord]] = {
    cls.type_name(): cls
    for cls in (
        RegisterBroker,
        UnregisterBroker,
        CreateTopic,
        DeleteTopic,
        AlterTopicConfigs,
        CreatePartitions,
        ReassignPartition,
        CompleteReassignment,
        AlterBrokerConfigs,
        AlterGroupConfigs,
        RaiseProducerIdFloor,
        UpsertScramCredential,
        DeleteScramCredential,
        AddAclBinding,
        RemoveAclBinding,
        ClientQuota,
    )
}


def decode_record(key: bytes | None, value: bytes | None) -> MetadataRecord:
    """One metadata record from its Kafka record's key (type name) and value (JSON)."""
    if key is None or value is None:
        raise MetadataRecordError("metadata record with a null key or value")
    name = key.decode(errors="replace")
    cls = RECORD_TYPES.get(name)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {name!r}")
    return cls.from_bytes(value)


def encode_batch(
    records: Sequence[MetadataRecord], *, timestamp_ms: int = 0, base_offset: int = 0
) -> bytes:
    """One uncompressed v2 batch, one Kafka record per metadata record (key = type name)."""
    if not records:
        raise ValueError("a metadata batch needs at least one record")
    return build_batch(
        [(r.type_name().encode(), r.to_bytes()) for r in records],
        timestamp_ms,
        base_offset=base_offset,
    )


def decode_metadata_batch_with_offsets(
    batch: bytes | memoryview,
) -> list[tuple[int, MetadataRecord]]:
    """(offset, record) for each record of one batch; raises MetadataRecordError."""
    try:
        kafka_records = batch_builder.decode_batch(batch)
    except BatchDecodeError as exc:
        raise MetadataRecordError(f"bad metadata batch: {exc}") from None
    return [(r.offset, decode_record(r.key, r.value)) for r in kafka_records]


def decode_metadata_batch(batch: bytes | memoryview) -> list[MetadataRecord]:
    """The metadata records of one batch (exactly one batch, header included)."""
    return [record for _, record in decode_metadata_batch_with_offsets(batch)]


def iter_log_records(buf: bytes | memoryview) -> Iterator[tuple[int, MetadataRecord]]:
    """(offset, record) over a run of whole batches, e.g. read from the metadata log.

    Control batches (the Raft no-op a new leader appends) are skipped; a truncated tail is
    ignored, as `protocol.batch_builder.iter_batches` does.
    """
    for attributes, batch in iter_batches(buf):
        if is_control_batch(attributes):
            continue
        yield from decode_metadata_batch_with_offsets(batch)
