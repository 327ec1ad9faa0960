"""Kafka's `__consumer_offsets` record formats (keys and values), and the group → partition rule.

Keys and values are Kafka's own (GroupCoordinator record schemas), so the topic's contents
read the same as Kafka's:

- OffsetCommitKey v1: group string, topic string, partition int32
  → OffsetCommitValue v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
- GroupMetadataKey v2: group string
  → GroupMetadataValue v3: protocolType, generation, protocol, leader, currentStateTimestamp,
    members[memberId, groupInstanceId, clientId, clientHost, rebalanceTimeout, sessionTimeout,
    subscription, assignment]

- ConsumerGroupMetadataKey v3: group string → ConsumerGroupMetadataValue v0 (flexible):
  epoch int32, tagged fields -- a consumer group (KIP-848) and its group epoch
- ConsumerGroupMemberMetadataKey v5 and ConsumerGroupCurrentMemberAssignmentKey v8: group
  string, member string (`MemberKey`; their values are in consumer_records.py)

A null value (tombstone) deletes what its key names. Strings are int16-length prefixed
(-1 is null), bytes int32-length prefixed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
CONSUMER_GROUP_METADATA_KEY_VERSION = 3
CONSUMER_GROUP_METADATA_VALUE_VERSION = 0
MEMBER_METADATA_KEY_VERSION = 5
MEMBER_ASSIGNMENT_KEY_VERSION = 8
STRING_LENGTH_MAX = 32767

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that is not one of Kafka's group coordinator record formats."""


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode: UTF-16 code units, 32-bit signed overflow."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`."""
    h = java_string_hashcode(group_id)
    # Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == -(2**31) else abs(h)) % num_partitions


# -- writing ---------------------------------------------------------------------------------


def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    encoded = text.encode()
    if len(encoded) > STRING_LENGTH_MAX:
        raise RecordFormatError(f"string of {len(encoded)} bytes is too long for a record")
    return _I16.pack(len(encoded)) + encoded


def _bytes(blob: bytes | None) -> bytes:
    if blob is None:
        return _I32.pack(-1)
    return _I32.pack(len(blob)) + blob


# -- reading ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record field runs past the end of its record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._take(n)


# -- keys ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return (
            _I16.pack(OFFSET_COMMIT_KEY_VERSION)
            + _string(self.group_id)
            + _string(self.topic)
            + _I32.pack(self.partition)
        )


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str

    def encode(self) -> bytes:
        return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(self.group_id)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str

    def encode(self) -> bytes:
        return _I16.pack(CONSUMER_GROUP_METADATA_KEY_VERSION) + _string(self.group_id)


@dataclass(frozen=True, slots=True)
class MemberKey:
    """A consumer group member's metadata (`assignment` False) or current assignment
    (`assignment` True)."""

    group_id: str
    member_id: str
    assignment: bool

    def encode(self) -> bytes:
        version = MEMBER_ASSIGNMENT_KEY_VERSION if self.assignment else MEMBER_METADATA_KEY_VERSION
        return _I16.pack(version) + _string(self.group_id) + _string(self.member_id)


def decode_key(
    key: bytes,
) -> OffsetKey | GroupMetadataKey | ConsumerGroupMetadataKey | MemberKey:
    reader = _Reader(key)
    version = reader.int16()
    if version in (0, 1):
        group, topic = reader.string(), reader.string()
        return OffsetKey(group or "", topic or "", reader.int32())
    if version == 2:
        return GroupMetadataKey(reader.string() or "")
    if version == CONSUMER_GROUP_METADATA_KEY_VERSION:
        return ConsumerGroupMetadataKey(reader.string() or "")
    if version in (MEMBER_METADATA_KEY_VERSION, MEMBER_ASSIGNMENT_KEY_VERSION):
        group = reader.string() or ""
        member = reader.string() or ""
        return MemberKey(group, member, version == MEMBER_ASSIGNMENT_KEY_VERSION)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int

    def encode(self) -> bytes:
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
            + _I64.pack(self.offset)
            + _I32.pack(self.leader_epoch)
            + _string(self.metadata)
            + _I64.pack(self.commit_timestamp_ms)
        )

    @classmethod
    def decode(cls, value: bytes) -> OffsetValue:
        reader = _Reader(value)
        version = reader.int16()
        if not 0 <= version <= 4:
            raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
        offset = reader.int64()
        leader_epoch = reader.int32() if version >= 3 else -1
        metadata = reader.string() or ""
        commit_timestamp_ms = reader.int64()
        return cls(offset, leader_epoch, metadata, commit_timestamp_ms)


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = field(default=())

    def encode(self) -> bytes:
        parts = [
            _I16.pack(GROUP_METADATA_VALUE_VERSION),
            _string(self.protocol_type),
            _I32.pack(self.generation),
            _string(self.protocol),
            _string(self.leader),
            _I64.pack(self.current_state_timestamp_ms),
            _I32.pack(len(self.members)),
        ]
        for m in self.members:
            parts += [
                _string(m.member_id),
                _string(m.group_instance_id),
                _string(m.client_id),
                _string(m.client_host),
                _I32.pack(m.rebalance_timeout_ms),
                _I32.pack(m.session_timeout_ms),
                _bytes(m.subscription),
                _bytes(m.assignment),
            ]
        return b"".join(parts)

    @classmethod
    def decode(cls, value: bytes) -> GroupMetadataValue:
        reader = _Reader(value)
        version = reader.int16()
        if not 0 <= version <= 3:
            raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
        protocol_type = reader.string() or ""
        generation = reader.int32()
        protocol = reader.string()
        leader = reader.string()
        timestamp = reader.int64() if version >= 2 else -1
        members = []
        for _ in range(reader.int32()):
            member_id = reader.string() or ""
            instance_id = reader.string() if version >= 3 else None
            client_id = reader.string() or ""
            client_host = reader.string() or ""
            session_timeout = reader.int32()
            rebalance_timeout = session_timeout
            if version >= 1:
                # Stored order is rebalanceTimeout, sessionTimeout from v1 on.
                rebalance_timeout, session_timeout = session_timeout, reader.int32()
            members.append(
                MemberRecord(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout,
                    session_timeout,
                    reader.bytes_() or b"",
                    reader.bytes_() or b"",
                )
            )
        return cls(protocol_type, generation, protocol, leader, timestamp, tuple(members))


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int

    def encode(self) -> bytes:
        # A flexible version: the fields, then an empty tagged-field section.
        return _I16.pack(CONSUMER_GROUP_METADATA_VALUE_VERSION) + _I32.pack(self.epoch) + b"\x00"

    @classmethod
    def decode(cls, value: bytes) -> ConsumerGroupMetadataValue:
        reader = _Reader(value)
        version = reader.int16()
        if version != CONSUMER_GROUP_METADATA_VALUE_VERSION:
            raise RecordFormatError(f"unknown ConsumerGroupMetadataValue version {version}")
        return cls(reader.int32())
