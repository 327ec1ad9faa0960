"""Kafka's `__consumer_offsets` records of a consumer group (KIP-848) that raftka writes:

- ConsumerGroupMemberMetadataKey v5 (group, member) → ConsumerGroupMemberMetadataValue v0:
  instance id, rack id, client id, client host, subscribed topic names and regex, rebalance
  timeout, server assignor
- ConsumerGroupCurrentMemberAssignmentKey v8 (group, member) →
  ConsumerGroupCurrentMemberAssignmentValue v0: member epoch, previous member epoch, state,
  assigned partitions and partitions pending revocation (topic id, partitions)

The keys (Kafka's non-flexible formats, int16-length strings) and the group's epoch record
(ConsumerGroupMetadata) are in records.py. These values are flexible: compact strings and
arrays (unsigned varint lengths plus one), an empty tagged-field section after each struct.
A null value deletes the member. Kafka's target-assignment and subscription-metadata records are not
written: a coordinator that loads a group computes its target assignment again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from raftka.broker.groups.records import RecordFormatError

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

PartitionsByTopic = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None

    def encode(self) -> bytes:
        out = bytearray(_I16.pack(0))
        out += _compact(self.instance_id) + _compact(self.rack_id)
        out += _compact(self.client_id) + _compact(self.client_host)
        out += _uvarint(len(self.subscribed_topic_names) + 1)
        for name in self.subscribed_topic_names:
            out += _compact(name)
        out += _compact(self.subscribed_topic_regex)
        out += _I32.pack(self.rebalance_timeout_ms)
        out += _compact(self.server_assignor)
        out += b"\x00"
        return bytes(out)

    @classmethod
    def decode(cls, value: bytes) -> MemberMetadataValue:
        reader = _FlexReader(value)
        reader.version(0)
        instance_id, rack_id = reader.compact(), reader.compact()
        client_id, client_host = reader.compact() or "", reader.compact() or ""
        names = tuple(reader.compact() or "" for _ in range(reader.array_length()))
        regex = reader.compact()
        rebalance_timeout_ms = reader.int32()
        assignor = reader.compact()
        reader.tagged_fields()
        return cls(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            regex,
            rebalance_timeout_ms,
            assignor,
        )


@dataclass(frozen=True, slots=True)
class MemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 stable, 1 unrevoked, 2 unreleased partitions
    assigned: PartitionsByTopic
    pending_revocation: PartitionsByTopic

    def encode(self) -> bytes:
        out = bytearray(_I16.pack(0))
        out += _I32.pack(self.member_epoch) + _I32.pack(self.previous_member_epoch)
        out += struct.pack(">b", self.state)
        for partitions in (self.assigned, self.pending_revocation):
            out += _uvarint(len(partitions) + 1)
            for topic_id, indexes in sorted(partitions.items()):
                out += topic_id.bytes + _uvarint(len(indexes) + 1)
                out += b"".join(_I32.pack(i) for i in sorted(indexes))
                out += b"\x00"
        out += b"\x00"
        return bytes(out)

    @classmethod
    def decode(cls, value: bytes) -> MemberAssignmentValue:
        reader = _FlexReader(value)
        reader.version(0)
        epoch, previous = reader.int32(), reader.int32()
        state = reader.int8()
        both = []
        for _ in range(2):
            partitions: dict[uuid.UUID, frozenset[int]] = {}
            for _ in range(reader.array_length()):
                topic_id = uuid.UUID(bytes=reader.take(16))
                partitions[topic_id] = frozenset(
                    reader.int32() for _ in range(reader.array_length())
                )
                reader.tagged_fields()
            both.append(partitions)
        reader.tagged_fields()
        return cls(epoch, previous, state, both[0], both[1])


# -- flexible encoding -----------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    encoded = text.encode()
    return _uvarint(len(encoded) + 1) + encoded


class _FlexReader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record field runs past the end of its record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def version(self, wanted: int) -> None:
        (version,) = _I16.unpack(self.take(2))
        if version != wanted:
            raise RecordFormatError(f"unknown consumer group record value version {version}")

    def int8(self) -> int:
        return int(struct.unpack(">b", self.take(1))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint longer than 5 bytes")

    def compact(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def array_length(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("a null array where one is required")
        return n - 1

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())
