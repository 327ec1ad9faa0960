"""Snapshots of the metadata image: its format (JSON) and its store in lmdb, so a restart
does not replay the whole log.

One lmdb environment `<data-dir>/cluster-metadata.lmdb` holds key `image` (the image as JSON)
and `applied-offset` (decimal), written in one transaction: a snapshot is all or nothing.
After loading, the broker replays the metadata log from `applied_offset + 1`.

Keys `retained-image` and `retained-end` hold the snapshot the metadata log is truncated
behind: the image as of offset `retained-end` - 1, the metadata log's start - 1. It is what a
leader sends a broker that needs offsets below its log start, and it is always written
(together with `image`) before the log is truncated.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

import lmdb

from raftka.broker.cluster.image import BrokerInfo, MetadataImage, Reassignment, TopicImage
from raftka.broker.cluster.records import listener_addresses
from raftka.broker.quotas import quota_entity
from raftka.broker.security.acl import AclBinding, binding_codes, binding_from_codes
from raftka.broker.security.scram import ScramCredential, ScramMechanism

SNAPSHOT_DIR_NAME = "cluster-metadata.lmdb"
_IMAGE_KEY = b"image"
_OFFSET_KEY = b"applied-offset"
_RETAINED_IMAGE_KEY = b"retained-image"
_RETAINED_END_KEY = b"retained-end"


# -- the format ---------------------------------------------------------------------------

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
    reassignments: NotRequired[list[tuple[int, list[int], list[int]]]]


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
    #: Absent in snapshots written before group configs existed: none.
    group_configs: NotRequired[dict[str, dict[str, str]]]
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


def image_to_dict(image: MetadataImage) -> ImageSnapshot:
    """The image in the snapshot format (plain JSON values, every list sorted)."""
    return {
        "version": IMAGE_FORMAT_VERSION,
        "applied_offset": image.applied_offset,
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
            for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
        ],
        "topics": [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "replicas": [list(r) for r in t.replicas],
                "configs": dict(sorted(t.configs.items())),
                "reassignments": [
                    (index, list(move.original), list(move.target))
                    for index, move in sorted(t.reassignments.items())
                ],
            }
            for t in sorted(image.topics.values(), key=lambda t: t.name)
        ],
        "producer_id_floor": image.producer_id_floor,
        "broker_configs": {
            r: dict(sorted(c.items())) for r, c in sorted(image.broker_configs.items())
        },
        "group_configs": {
            g: dict(sorted(c.items())) for g, c in sorted(image.group_configs.items())
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
            for (user, mechanism), c in sorted(image.scram_credentials.items())
        ],
        "acls": [_acl_snapshot(b) for b in sorted(image.acls, key=binding_codes)],
        "client_quotas": [
            {
                "entity": [[kind, name] for kind, name in entity],
                "values": dict(sorted(values.items())),
            }
            for entity, values in sorted(
                image.client_quotas.items(), key=lambda item: repr(item[0])
            )
        ],
    }


def image_from_dict(data: ImageSnapshot) -> MetadataImage:
    """The image `image_to_dict` wrote; ValueError, KeyError or TypeError if it is malformed
    or of another format version."""
    version = data.get("version")
    if version != IMAGE_FORMAT_VERSION:
        raise ValueError(f"metadata image format version {version!r} is not supported")
    image = MetadataImage()
    image.applied_offset = int(data["applied_offset"])
    image.producer_id_floor = int(data.get("producer_id_floor", 0))
    image.broker_configs = {
        str(r): {str(k): str(v) for k, v in c.items()}
        for r, c in data.get("broker_configs", {}).items()
    }
    image.group_configs = {
        str(g): {str(k): str(v) for k, v in c.items()}
        for g, c in data.get("group_configs", {}).items()
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


# -- the store ----------------------------------------------------------------------------


class SnapshotError(ValueError):
    """A snapshot that exists but cannot be read back."""


class SnapshotStore:
    """The snapshot environment of one data directory (open once per process)."""

    def __init__(self, data_dir: Path, map_size: int = 1 << 30) -> None:
        self.path = Path(data_dir) / SNAPSHOT_DIR_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(self.path), map_size=map_size, subdir=True)

    def save(self, image: MetadataImage) -> None:
        self.save_job(image)()

    def save_job(self, image: MetadataImage, retained: bool = False) -> Callable[[], None]:
        """The image serialized now; the returned function commits and fsyncs it and may run
        in a worker thread while the image changes. Raises OSError if the write fails.
        `retained`: it also becomes the retained snapshot (see the module docstring)."""
        return self.save_raw_job(serialize(image), image.applied_offset, retained)

    def save_raw_job(self, raw: bytes, applied_offset: int, retained: bool) -> Callable[[], None]:
        offset = str(applied_offset).encode()
        env = self._env

        def save() -> None:
            try:
                with env.begin(write=True) as txn:
                    current = txn.get(_OFFSET_KEY)
                    # A save that lost a race with a newer one (an installed snapshot) must
                    # not put an older image back.
                    if current is None or int(current) <= applied_offset:
                        txn.put(_IMAGE_KEY, raw)
                        txn.put(_OFFSET_KEY, offset)
                    if retained:
                        txn.put(_RETAINED_IMAGE_KEY, raw)
                        txn.put(_RETAINED_END_KEY, str(applied_offset + 1).encode())
                env.sync(True)
            except lmdb.Error as exc:
                raise OSError(f"metadata snapshot not saved: {exc}") from exc

        return save

    def load(self) -> MetadataImage:
        with self._env.begin() as txn:
            raw = txn.get(_IMAGE_KEY)
            offset = txn.get(_OFFSET_KEY)
        if raw is None:
            return MetadataImage()
        try:
            image = image_from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(f"unreadable metadata snapshot in {self.path}: {exc}") from None
        if offset is None or int(offset) != image.applied_offset:
            raise SnapshotError(
                f"metadata snapshot in {self.path}: applied offset {offset!r} does not match "
                f"the image's {image.applied_offset}"
            )
        return image

    def load_retained(self) -> tuple[int, bytes] | None:
        """(end offset, image JSON) of the retained snapshot, if one was taken."""
        with self._env.begin() as txn:
            raw = txn.get(_RETAINED_IMAGE_KEY)
            end = txn.get(_RETAINED_END_KEY)
        if raw is None or end is None:
            return None
        return int(end), bytes(raw)

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serialize(image: MetadataImage) -> bytes:
    return json.dumps(image_to_dict(image), separators=(",", ":")).encode()


def deserialize(raw: bytes, source: str) -> MetadataImage:
    """The image in `raw` (JSON); SnapshotError naming `source` if it cannot be read."""
    try:
        return image_from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"unreadable metadata snapshot from {source}: {exc}") from None


def save_snapshot(data_dir: Path, image: MetadataImage) -> None:
    """Write `image` as the snapshot of `data_dir`, replacing any earlier one atomically."""
    with SnapshotStore(data_dir) as store:
        store.save(image)


def load_snapshot(data_dir: Path) -> MetadataImage:
    """The snapshot of `data_dir`; an empty image when there is none (nothing is created)."""
    if not (Path(data_dir) / SNAPSHOT_DIR_NAME).exists():
        return MetadataImage()
    with SnapshotStore(data_dir) as store:
        return store.load()
