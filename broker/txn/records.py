"""Kafka's `__transaction_state` record formats and the transaction states.

- TransactionLogKey v0: transactional id (string)
- TransactionLogValue v0: producerId int64, producerEpoch int16, transactionTimeoutMs int32,
  transactionStatus int8, transactionPartitions [topic string, partitionIds [int32]] (nullable),
  transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64

A null value (tombstone) deletes the transactional id. Version 1 values (flexible, tagged
fields) are read too; raftka writes version 0, which every Kafka version reads.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from raftka.broker.groups.records import RecordFormatError, partition_for_group

TXN_KEY_VERSION = 0
TXN_VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

__all__ = [
    "RecordFormatError",
    "TxnKey",
    "TxnState",
    "TxnValue",
    "partition_for_transaction",
]


def partition_for_transaction(transactional_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`."""
    return partition_for_group(transactional_id, num_partitions)


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, by the id it has in TransactionLogValue.transactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.kafka_name == name:
                return state
        return None

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


# A record's strings carry an int16 length.
STRING_BYTES_MAX = 32767


def fits_in_record(text: str) -> bool:
    """Whether `text` can be written as a string of a `__transaction_state` record."""
    return len(text.encode()) <= STRING_BYTES_MAX


def _string(text: str) -> bytes:
    encoded = text.encode()
    if len(encoded) > STRING_BYTES_MAX:
        raise RecordFormatError(f"string of {len(encoded)} bytes is too long for a record")
    return _I16.pack(len(encoded)) + encoded


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record field runs past the end of its record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise RecordFormatError("varint too long")

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            raise RecordFormatError("null string where Kafka requires one")
        return self.take(n).decode()

    def array_length(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


@dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str

    def encode(self) -> bytes:
        return _I16.pack(TXN_KEY_VERSION) + _string(self.transactional_id)

    @classmethod
    def decode(cls, key: bytes) -> TxnKey:
        reader = _Reader(key)
        version = reader.int16()
        if version != TXN_KEY_VERSION:
            raise RecordFormatError(f"unknown TransactionLogKey version {version}")
        return cls(reader.string(flexible=False))


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    # topic -> partition indexes (sorted), of the transaction's partitions.
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = 0
    start_ms: int = -1

    def encode(self) -> bytes:
        parts = [
            _I16.pack(TXN_VALUE_VERSION),
            _I64.pack(self.producer_id),
            _I16.pack(self.producer_epoch),
            _I32.pack(self.timeout_ms),
            _I8.pack(int(self.state)),
            _I32.pack(len(self.partitions)),
        ]
        for topic, indexes in sorted(self.partitions.items()):
            parts.append(_string(topic))
            parts.append(_I32.pack(len(indexes)))
            parts.extend(_I32.pack(i) for i in indexes)
        parts.append(_I64.pack(self.last_update_ms))
        parts.append(_I64.pack(self.start_ms))
        return b"".join(parts)

    @classmethod
    def decode(cls, value: bytes) -> TxnValue:
        reader = _Reader(value)
        version = reader.int16()
        if version not in (0, 1):
            raise RecordFormatError(f"unknown TransactionLogValue version {version}")
        flexible = version >= 1
        producer_id = reader.int64()
        producer_epoch = reader.int16()
        timeout_ms = reader.int32()
        status = reader.int8()
        try:
            state = TxnState(status)
        except ValueError:
            raise RecordFormatError(f"unknown transaction status {status}") from None
        partitions: dict[str, list[int]] = {}
        for _ in range(max(0, reader.array_length(flexible))):
            topic = reader.string(flexible)
            count = reader.array_length(flexible)
            partitions[topic] = [reader.int32() for _ in range(max(0, count))]
            if flexible:
                reader.skip_tagged_fields()
        last_update_ms = reader.int64()
        start_ms = reader.int64()
        if flexible:
            reader.skip_tagged_fields()
        return cls(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timeout_ms=timeout_ms,
            state=state,
            partitions=partitions,
            last_update_ms=last_update_ms,
            start_ms=start_ms,
        )
