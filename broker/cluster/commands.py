"""Admin commands the controller executes, and their results.

Handlers build a command and call `Controller.execute`; the controller (the metadata group's
leader) validates it against the image and proposes the metadata records it implies. A broker
that is not the controller forwards the command to it over the peer transport. The wire form
of commands and results is defined here only: a JSON object with the command's `op` name and
its fields (`Command.to_wire` / `Command.from_wire`, `CommandResult.to_wire` / `from_wire`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar, Self

from kio.schema.errors import ErrorCode


class CommandDecodeError(ValueError):
    """A command or result from another broker that cannot be decoded: not a JSON object, an
    unknown op, or a missing or mistyped field."""


class _WireFields:
    """Typed reads of one decoded command or result; a bad field raises CommandDecodeError."""

    def __init__(self, what: str, data: Mapping[str, object]) -> None:
        self.what = what
        self.data = data

    def _bad(self, name: str, expected: str) -> CommandDecodeError:
        return CommandDecodeError(f"{self.what}: field {name!r} must be {expected}")

    def _get(self, name: str) -> object:
        if name not in self.data:
            raise CommandDecodeError(f"{self.what}: field {name!r} is missing")
        return self.data[name]

    def integer(self, name: str) -> int:
        value = self._get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._bad(name, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        if self.data.get(name) is None:
            return None
        return self.integer(name)

    def string(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        return value

    def optional_string(self, name: str) -> str | None:
        """Absent and null both read as None."""
        if self.data.get(name) is None:
            return None
        return self.string(name)

    def optional_uuid(self, name: str) -> uuid.UUID | None:
        """A UUID in its string form; absent and null both read as None."""
        value = self.optional_string(name)
        if value is None:
            return None
        try:
            return uuid.UUID(value)
        except ValueError:
            raise self._bad(name, "a UUID") from None

    def flag(self, name: str) -> bool:
        """Absent and null both read as False."""
        value = self.data.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._bad(name, "a boolean")
        return value

    def configs(self, name: str, *, required: bool) -> dict[str, str | None]:
        """Config name → value (null allowed); when not required, absent and null read as
        no configs."""
        value = self._get(name) if required else self.data.get(name)
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self._bad(name, "an object")
        out: dict[str, str | None] = {}
        for key, raw in value.items():
            if not isinstance(key, str) or not (raw is None or isinstance(raw, str)):
                raise self._bad(name, "an object of strings")
            out[key] = raw
        return out

    def _broker_ids(self, name: str, value: object) -> tuple[int, ...]:
        if not isinstance(value, list | tuple):
            raise self._bad(name, "lists of broker ids")
        ids = []
        for node_id in value:
            if not isinstance(node_id, int) or isinstance(node_id, bool):
                raise self._bad(name, "lists of broker ids")
            ids.append(node_id)
        return tuple(ids)

    def replica_lists(self, name: str) -> tuple[tuple[int, ...], ...] | None:
        """A list of broker-id lists; absent and null read as None."""
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self._bad(name, "a list")
        return tuple(self._broker_ids(name, replicas) for replicas in value)

    def partition_assignments(self, name: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """A list of [partition index, [broker ids]]; absent and null read as none."""
        value = self.data.get(name)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self._bad(name, "a list")
        out = []
        for entry in value:
            if not isinstance(entry, list) or len(entry) != 2:
                raise self._bad(name, "a list of [partition index, broker ids]")
            index, replicas = entry
            if not isinstance(index, int) or isinstance(index, bool):
                raise self._bad(name, "a list of [partition index, broker ids]")
            out.append((index, self._broker_ids(name, replicas)))
        return tuple(out)


def _json_object(what: str, payload: bytes) -> dict[str, object]:
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandDecodeError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CommandDecodeError(f"{what} is not a JSON object: {data!r}")
    return data


@dataclass(frozen=True)
class Command:
    """Base of every controller command. `OP` names it on the wire."""

    OP: ClassVar[str]

    def to_wire(self) -> bytes:
        """JSON: {"op": OP, field: value, ...}; tuples become lists, UUIDs strings."""
        body: dict[str, object] = {"op": self.OP}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, uuid.UUID):
                value = str(value)
            body[f.name] = value
        return json.dumps(body, separators=(",", ":")).encode()

    def identified(self) -> Self:
        """The command as the broker sends it to the controller, as many times as it takes:
        a command run again after its controller lost the role, whose first run may have
        committed, carries what lets the next controller recognise that run's effect. Most
        commands decide from the image alone and are themselves."""
        return self

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        raise NotImplementedError

    @staticmethod
    def from_wire(payload: bytes) -> Command:
        """The command `to_wire` encoded; CommandDecodeError for an unknown op or bad field."""
        data = _json_object("controller command", payload)
        op = data.get("op")
        cls = COMMAND_TYPES.get(op) if isinstance(op, str) else None
        if cls is None:
            raise CommandDecodeError(f"unknown controller operation {data!r}")
        return cls._from_wire_fields(_WireFields(f"controller operation {op}", data))


@dataclass(frozen=True)
class CreateTopicCommand(Command):
    """CreateTopics for one topic. -1 partitions or replication factor: the broker default."""

    OP: ClassVar[str] = "create_topic"

    name: str
    num_partitions: int
    replication_factor: int
    #: Manual placement: (partition index, broker ids); then both counts must be -1.
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()
    configs: Mapping[str, str | None] = field(default_factory=dict)
    validate_only: bool = False
    #: The id to create the topic with, chosen once per request (`identified`): a controller
    #: that finds the topic existing with this id answers as its creation did, not
    #: TOPIC_ALREADY_EXISTS. None: the controller chooses.
    topic_id: uuid.UUID | None = None

    __hash__ = None  # type: ignore[assignment]

    def identified(self) -> Self:
        if self.topic_id is not None or self.validate_only:
            return self
        return replace(self, topic_id=uuid.uuid4())

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            name=wire.string("name"),
            num_partitions=wire.integer("num_partitions"),
            replication_factor=wire.integer("replication_factor"),
            assignments=wire.partition_assignments("assignments"),
            configs=wire.configs("configs", required=False),
            validate_only=wire.flag("validate_only"),
            topic_id=wire.optional_uuid("topic_id"),
        )


@dataclass(frozen=True)
class DeleteTopicCommand(Command):
    OP: ClassVar[str] = "delete_topic"

    name: str

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(name=wire.string("name"))


@dataclass(frozen=True)
class AlterConfigsCommand(Command):
    """Replace a topic's config overrides with `configs` (the complete new set)."""

    OP: ClassVar[str] = "alter_configs"

    name: str
    configs: Mapping[str, str | None]
    validate_only: bool = False

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            name=wire.string("name"),
            configs=wire.configs("configs", required=True),
            validate_only=wire.flag("validate_only"),
        )


@dataclass(frozen=True)
class CreatePartitionsCommand(Command):
    """Grow a topic to `count` partitions."""

    OP: ClassVar[str] = "create_partitions"

    name: str
    count: int
    #: Broker ids of each new partition; None places them automatically.
    assignments: tuple[tuple[int, ...], ...] | None = None
    validate_only: bool = False

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            name=wire.string("name"),
            count=wire.integer("count"),
            assignments=wire.replica_lists("assignments"),
            validate_only=wire.flag("validate_only"),
        )


@dataclass(frozen=True)
class RegisterBrokerCommand(Command):
    """A broker's client address; a new `incarnation_id` per start."""

    OP: ClassVar[str] = "register_broker"

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: str
    #: Listener name -> (host, port) advertised to clients of that listener.
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: Where other brokers reach this one's Raft transport.
    raft_address: tuple[str, int] | None = None

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        raw = wire.data.get("listeners") or {}
        listeners: dict[str, tuple[str, int]] = {}
        if not isinstance(raw, dict):
            raise CommandDecodeError(f"{wire.what}: field 'listeners' must be an object")
        for name, address in raw.items():
            if (
                not isinstance(address, list)
                or len(address) != 2
                or not isinstance(address[0], str)
                or not isinstance(address[1], int)
            ):
                raise CommandDecodeError(
                    f"{wire.what}: field 'listeners' must map names to [host, port]"
                )
            listeners[name] = (address[0], address[1])
        raft = wire.data.get("raft_address")
        raft_address: tuple[str, int] | None = None
        if raft is not None:
            if (
                not isinstance(raft, list)
                or len(raft) != 2
                or not isinstance(raft[0], str)
                or not isinstance(raft[1], int)
            ):
                raise CommandDecodeError(f"{wire.what}: field 'raft_address' must be [host, port]")
            raft_address = (raft[0], raft[1])
        return cls(
            node_id=wire.integer("node_id"),
            host=wire.string("host"),
            port=wire.integer("port"),
            rack=wire.optional_string("rack"),
            incarnation_id=wire.string("incarnation_id"),
            listeners=listeners,
            raft_address=raft_address,
        )


@dataclass(frozen=True)
class RaiseProducerIdFloorCommand(Command):
    """No broker may hand out a producer id below `floor` from now on (restored data
    carries ids from another cluster). The floor only rises: a lower one changes nothing."""

    OP: ClassVar[str] = "raise_producer_id_floor"

    floor: int

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(floor=wire.integer("floor"))


@dataclass(frozen=True)
class AlterScramCredentialsCommand(Command):
    """One user's SCRAM credential changes (AlterUserScramCredentials): mechanisms to
    delete, and credentials to store as (mechanism, iterations, salt, stored key, server
    key), the last three base64. The broker that received the request derived the keys
    from the salted password, which goes no further."""

    OP: ClassVar[str] = "alter_scram_credentials"

    user: str
    deletions: tuple[int, ...] = ()
    upsertions: tuple[tuple[int, int, str, str, str], ...] = ()

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        deletions = wire.data.get("deletions") or []
        upsertions = wire.data.get("upsertions") or []
        if not isinstance(deletions, list) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in deletions
        ):
            raise CommandDecodeError(f"{wire.what}: field 'deletions' must be mechanism numbers")
        shape = (int, int, str, str, str)
        if not isinstance(upsertions, list) or not all(
            isinstance(u, list)
            and len(u) == len(shape)
            and all(
                isinstance(v, t) and not isinstance(v, bool) for v, t in zip(u, shape, strict=True)
            )
            for u in upsertions
        ):
            raise CommandDecodeError(
                f"{wire.what}: field 'upsertions' must be [mechanism, iterations, salt, "
                "stored key, server key] lists"
            )
        return cls(
            user=wire.string("user"),
            deletions=tuple(deletions),
            upsertions=tuple(
                (int(u[0]), int(u[1]), str(u[2]), str(u[3]), str(u[4])) for u in upsertions
            ),
        )


#: One ACL binding as Kafka's codes and strings: (resource type, resource name, pattern
#: type, principal, host, operation, permission).
AclCodes = tuple[int, str, int, str, str, int, int]
#: One ACL filter in the same order; a None name, principal or host matches any.
AclFilterCodes = tuple[int, str | None, int, str | None, str | None, int, int]

_ACL_SHAPE = (int, str, int, str, str, int, int)


def _acl_tuple(what: str, value: object, *, nullable: bool) -> tuple[object, ...]:
    if not isinstance(value, list) or len(value) != len(_ACL_SHAPE):
        raise CommandDecodeError(f"{what}: an ACL must be a list of {len(_ACL_SHAPE)} values")
    for v, kind in zip(value, _ACL_SHAPE, strict=True):
        if nullable and kind is str and v is None:
            continue
        if not isinstance(v, kind) or isinstance(v, bool):
            raise CommandDecodeError(
                f"{what}: an ACL must be [resource type, resource name, pattern type, "
                f"principal, host, operation, permission], not {value!r}"
            )
    return tuple(value)


def _acl_list(wire: _WireFields, name: str, *, nullable: bool) -> list[tuple[object, ...]]:
    value = wire.data.get(name) or []
    if not isinstance(value, list):
        raise CommandDecodeError(f"{wire.what}: field {name!r} must be a list")
    return [_acl_tuple(wire.what, v, nullable=nullable) for v in value]


@dataclass(frozen=True)
class CreateAclsCommand(Command):
    """CreateAcls: the bindings to create. Each is validated on its own; the valid ones are
    stored in one metadata batch (a binding stored already stays once)."""

    OP: ClassVar[str] = "create_acls"

    bindings: tuple[AclCodes, ...] = ()

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(bindings=tuple(_acl_list(wire, "bindings", nullable=False)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class DeleteAclsCommand(Command):
    """DeleteAcls: filters; every binding any of them matches is removed in one metadata
    batch, and each filter's result lists the bindings it matched."""

    OP: ClassVar[str] = "delete_acls"

    filters: tuple[AclFilterCodes, ...] = ()

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(filters=tuple(_acl_list(wire, "filters", nullable=True)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class AclOutcome:
    """The result of one ACL creation or one deletion filter; for a filter, the bindings it
    matched (and removed)."""

    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    bindings: tuple[AclCodes, ...] = ()


@dataclass(frozen=True)
class AlterClientQuotaCommand(Command):
    """One quota entity's changes (AlterClientQuotas): quota key -> new value, or None to
    remove it. The entity is (entity type, name or None for the default) pairs."""

    OP: ClassVar[str] = "alter_client_quota"

    entity: tuple[tuple[str, str | None], ...]
    changes: tuple[tuple[str, float | None], ...]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        entity = wire.data.get("entity")
        changes = wire.data.get("changes")
        if not isinstance(entity, list) or not all(
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and (pair[1] is None or isinstance(pair[1], str))
            for pair in entity
        ):
            raise CommandDecodeError(f"{wire.what}: field 'entity' must be [type, name] pairs")
        if not isinstance(changes, list) or not all(
            isinstance(change, list)
            and len(change) == 2
            and isinstance(change[0], str)
            and (
                change[1] is None
                or (isinstance(change[1], int | float) and not isinstance(change[1], bool))
            )
            for change in changes
        ):
            raise CommandDecodeError(f"{wire.what}: field 'changes' must be [key, value] pairs")
        return cls(
            entity=tuple((str(kind), name) for kind, name in entity),
            changes=tuple(
                (str(key), None if value is None else float(value)) for key, value in changes
            ),
        )


@dataclass(frozen=True)
class ReassignPartitionCommand(Command):
    """AlterPartitionReassignments for one partition: move it to `replicas`, or with None
    cancel its reassignment in progress."""

    OP: ClassVar[str] = "reassign_partition"

    topic: str
    partition: int
    replicas: tuple[int, ...] | None

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        value = wire.data.get("replicas")
        return cls(
            topic=wire.string("topic"),
            partition=wire.integer("partition"),
            replicas=None if value is None else wire._broker_ids("replicas", value),
        )


@dataclass(frozen=True)
class CompleteReassignmentCommand(Command):
    """A partition's leader moved its Raft voters to `replicas`, the target of the
    reassignment in progress: the controller records the move as complete."""

    OP: ClassVar[str] = "complete_reassignment"

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            topic=wire.string("topic"),
            partition=wire.integer("partition"),
            replicas=wire._broker_ids("replicas", wire.data.get("replicas")),
        )


@dataclass(frozen=True)
class AlterBrokerConfigsCommand(Command):
    """IncrementalAlterConfigs on a BROKER resource (its id, or "" for the cluster-wide
    default): each dynamic config set to a value or, with None, back to the static one."""

    OP: ClassVar[str] = "alter_broker_configs"

    resource: str
    changes: Mapping[str, str | None]
    validate_only: bool = False

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            resource=wire.string("resource"),
            changes=wire.configs("changes", required=True),
            validate_only=wire.flag("validate_only"),
        )


@dataclass(frozen=True)
class ChangeMetadataVotersCommand(Command):
    """Promote an observer of the metadata quorum to voter (`add`) or demote a voter to
    observer (`remove`): one single-server change of `__cluster_metadata`'s voter set."""

    OP: ClassVar[str] = "change_metadata_voters"

    action: str  # "add" or "remove"
    node_id: int

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        action = wire.string("action")
        if action not in ("add", "remove"):
            raise CommandDecodeError(f"{wire.what}: action must be add or remove, not {action!r}")
        return cls(action=action, node_id=wire.integer("node_id"))


@dataclass(frozen=True)
class UnregisterBrokerCommand(Command):
    """A broker leaves the cluster for good (Kafka's UnregisterBroker): refused while it
    hosts replicas or votes in the metadata quorum."""

    OP: ClassVar[str] = "unregister_broker"

    node_id: int

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(node_id=wire.integer("node_id"))


@dataclass(frozen=True)
class AlterGroupConfigsCommand(Command):
    """IncrementalAlterConfigs or AlterConfigs on a GROUP resource: `configs` becomes the
    group's complete set of configs (checked against the broker's bounds by the broker
    that took the request)."""

    OP: ClassVar[str] = "alter_group_configs"

    group: str
    configs: Mapping[str, str | None]
    validate_only: bool = False

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_wire_fields(cls, wire: _WireFields) -> Self:
        return cls(
            group=wire.string("group"),
            configs=wire.configs("configs", required=True),
            validate_only=wire.flag("validate_only"),
        )


#: Every command type by its wire name.
COMMAND_TYPES: dict[str, type[Command]] = {
    cls.OP: cls
    for cls in (
        CreateTopicCommand,
        DeleteTopicCommand,
        AlterConfigsCommand,
        CreatePartitionsCommand,
        RegisterBrokerCommand,
        RaiseProducerIdFloorCommand,
        AlterScramCredentialsCommand,
        CreateAclsCommand,
        DeleteAclsCommand,
        AlterClientQuotaCommand,
        ReassignPartitionCommand,
        CompleteReassignmentCommand,
        AlterBrokerConfigsCommand,
        AlterGroupConfigsCommand,
        ChangeMetadataVotersCommand,
        UnregisterBrokerCommand,
    )
}


@dataclass(frozen=True)
class CommandResult:
    """The outcome of a command: an error code and Kafka's message, and for a created topic
    its id, partition count and replication factor."""

    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int | None = None
    replication_factor: int | None = None
    #: Per ACL creation or deletion filter, in the command's order.
    acl_outcomes: tuple[AclOutcome, ...] | None = None

    @classmethod
    def error(cls, error_code: ErrorCode, message: str) -> CommandResult:
        return cls(error_code=error_code, error_message=message)

    def to_wire(self) -> bytes:
        """JSON with `error_code` and `error_message`, and each other field that is set."""
        body: dict[str, object] = {
            "error_code": int(self.error_code),
            "error_message": self.error_message,
        }
        if self.topic_id is not None:
            body["topic_id"] = str(self.topic_id)
        if self.num_partitions is not None:
            body["num_partitions"] = self.num_partitions
        if self.replication_factor is not None:
            body["replication_factor"] = self.replication_factor
        if self.acl_outcomes is not None:
            body["acl_outcomes"] = [
                [int(o.error_code), o.error_message, [list(b) for b in o.bindings]]
                for o in self.acl_outcomes
            ]
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_wire(cls, payload: bytes) -> CommandResult:
        """The result `to_wire` encoded; CommandDecodeError if it is malformed."""
        wire = _WireFields("controller result", _json_object("controller result", payload))
        try:
            error_code = ErrorCode(wire.integer("error_code"))
            topic_id = wire.optional_string("topic_id")
            return cls(
                error_code=error_code,
                error_message=wire.optional_string("error_message"),
                topic_id=None if topic_id is None else uuid.UUID(topic_id),
                num_partitions=wire.optional_integer("num_partitions"),
                replication_factor=wire.optional_integer("replication_factor"),
                acl_outcomes=_acl_outcomes(wire),
            )
        except CommandDecodeError:
            raise
        except ValueError as exc:  # an unknown error code or a malformed topic id
            raise CommandDecodeError(f"controller result: {exc}") from None


def _acl_outcomes(wire: _WireFields) -> tuple[AclOutcome, ...] | None:
    value = wire.data.get("acl_outcomes")
    if value is None:
        return None
    if not isinstance(value, list):
        raise CommandDecodeError(f"{wire.what}: field 'acl_outcomes' must be a list")
    outcomes = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not isinstance(entry[0], int)
            or isinstance(entry[0], bool)
            or not (entry[1] is None or isinstance(entry[1], str))
            or not isinstance(entry[2], list)
        ):
            raise CommandDecodeError(
                f"{wire.what}: an ACL outcome must be [error code, message, bindings]"
            )
        bindings = tuple(_acl_tuple(wire.what, b, nullable=False) for b in entry[2])
        outcomes.append(AclOutcome(ErrorCode(entry[0]), entry[1], bindings))  # type: ignore[arg-type]
    return tuple(outcomes)
