"""`__transaction_state` records in Kafka's TransactionLogKey/TransactionLogValue formats."""

from __future__ import annotations

import struct

import pytest

from raftka.broker.txn.records import (
    RecordFormatError,
    TxnKey,
    TxnState,
    TxnValue,
    partition_for_transaction,
)


def test_key_is_version_0_and_the_id() -> None:
    assert TxnKey("tx").encode() == b"\x00\x00\x00\x02tx"
    assert TxnKey.decode(b"\x00\x00\x00\x02tx") == TxnKey("tx")


def test_value_v0_bytes_as_kafka_writes_them() -> None:
    value = TxnValue(5, 2, 60000, TxnState.ONGOING, {"t": [0, 3]}, 1000, 900)
    expected = (
        struct.pack(">hqhib", 0, 5, 2, 60000, 1)
        + struct.pack(">i", 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">iii", 2, 0, 3)
        + struct.pack(">qq", 1000, 900)
    )
    assert value.encode() == expected
    assert TxnValue.decode(expected) == value


def test_value_v1_flexible_with_tagged_fields_is_read() -> None:
    body = (
        struct.pack(">hqhib", 1, 5, 2, 60000, 4)
        + bytes([2])  # compact array of 1
        + bytes([2])
        + b"t"  # compact string
        + bytes([2])
        + struct.pack(">i", 7)  # compact array of one int32
        + bytes([0])  # topic entry tagged fields
        + struct.pack(">qq", 1000, 900)
        + bytes([1, 2, 2, 0, 2])  # one tagged field (ClientTransactionVersion = 2)
    )
    value = TxnValue.decode(body)
    assert value.state == TxnState.COMPLETE_COMMIT
    assert value.partitions == {"t": [7]}
    assert (value.last_update_ms, value.start_ms) == (1000, 900)


def test_unknown_versions_and_states_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        TxnKey.decode(b"\x00\x01\x00\x02tx")
    with pytest.raises(RecordFormatError):
        TxnValue.decode(struct.pack(">hqhib", 0, 5, 2, 6, 42) + b"\x00" * 20)
    with pytest.raises(RecordFormatError):
        TxnValue.decode(b"\x00\x00\x00")


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in TxnState] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert TxnState.from_kafka_name("Ongoing") == TxnState.ONGOING
    assert TxnState.from_kafka_name("ongoing") is None


def test_partition_is_javas_string_hash_as_kafka() -> None:
    # Java: "tx".hashCode() == 116 * 31 + 120.
    assert partition_for_transaction("tx", 50) == abs(3716) % 50
    assert partition_for_transaction("", 50) == 0
