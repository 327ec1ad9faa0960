"""Fetch responses written straight into a frame, without kio's generic walk.

A consumer at the end of its partitions sends a Fetch for about every batch produced, so the
fixed cost of writing a Fetch response counts as much as a Produce's. kio's writer looks up a
writer per field, checks every value against its phantom type and, on flexible versions, opens
a buffer per structure for its tagged fields. This writes the same bytes from the same kio
entity (the Fetch handler, quotas and sendfile placeholders keep building and editing those)
with one precompiled `struct` format per partition; `encode_response` takes it for the
versions served here. The unit tests check it against kio's writer on every version.

Record bytes are copied once into the frame, as kio's writer copies them; the large ones are
placeholders that `raftka.protocol.splice` swaps for file ranges.
"""

from __future__ import annotations

import struct
from typing import Any

from raftka.protocol.batch_builder import encode_uvarint

#: Fetch v4 (the first with the last stable offset and aborted transactions) to v12 (the last
#: that names topics; v13 names them by id).
FIRST_VERSION = 4
LAST_VERSION = 12
#: Fetch v12 uses compact lengths and tagged fields (KIP-482).
FIRST_FLEXIBLE_VERSION = 12

_SIZE_CORRELATION = struct.Struct(">ii")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_SESSION = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset (v5+)
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
_NULL_INT32 = _INT32.pack(-1)
_SMALL_UVARINTS = tuple(bytes((value,)) for value in range(0x80))


def _uvarint(value: int) -> bytes:
    return _SMALL_UVARINTS[value] if value < 0x80 else encode_uvarint(value)


def _milliseconds(delta: Any) -> int:
    """A throttle time's int32 milliseconds, rounded as kio rounds them."""
    return round(float(delta.total_seconds()) * 1000)


def encode_fetch_response(correlation_id: int, response: Any) -> bytes | None:
    """The whole frame of a kio FetchResponse (FIRST_VERSION to LAST_VERSION): size prefix,
    response header (v0, or v1 on v12) and body, byte for byte what kio writes. None when
    a v12 partition carries a tagged field (a diverging epoch, current leader or snapshot
    id), which the broker never sets: kio writes those."""
    version = response.__version__
    if version >= FIRST_FLEXIBLE_VERSION:
        return _compact(correlation_id, response)
    out = bytearray(_SIZE_CORRELATION.size)
    throttle_ms = _milliseconds(response.throttle_time)
    if version >= 7:
        out += _SESSION.pack(throttle_ms, response.error_code, response.session_id)
    else:
        out += _INT32.pack(throttle_ms)
    with_log_start = version >= 5
    with_preferred_replica = version >= 11
    topics = response.responses
    out += _INT32.pack(len(topics))
    for topic in topics:
        name = topic.topic.encode()
        out += _INT16.pack(len(name))
        out += name
        partitions = topic.partitions
        out += _INT32.pack(len(partitions))
        for p in partitions:
            if with_log_start:
                out += _PARTITION_V5.pack(
                    p.partition_index,
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                )
            else:
                out += _PARTITION_V4.pack(
                    p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
                )
            aborted = p.aborted_transactions
            if aborted is None:
                out += _NULL_INT32
            else:
                out += _INT32.pack(len(aborted))
                for txn in aborted:
                    out += _ABORTED.pack(txn.producer_id, txn.first_offset)
            if with_preferred_replica:
                out += _INT32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += _NULL_INT32
            else:
                out += _INT32.pack(len(records))
                out += records
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


def _compact(correlation_id: int, response: Any) -> bytes | None:
    """Fetch v12: compact lengths, and an empty tagged-field set after every structure."""
    out = bytearray(_SIZE_CORRELATION.size)
    out += b"\x00"  # the response header's tagged fields
    out += _SESSION.pack(
        _milliseconds(response.throttle_time), response.error_code, response.session_id
    )
    topics = response.responses
    out += _uvarint(len(topics) + 1)
    for topic in topics:
        name = topic.topic.encode()
        out += _uvarint(len(name) + 1)
        out += name
        partitions = topic.partitions
        out += _uvarint(len(partitions) + 1)
        for p in partitions:
            if _has_tagged_fields(p):
                return None
            out += _PARTITION_V5.pack(
                p.partition_index,
                p.error_code,
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
            )
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00"
            else:
                out += _uvarint(len(aborted) + 1)
                for txn in aborted:
                    out += _ABORTED.pack(txn.producer_id, txn.first_offset)
                    out += b"\x00"  # the aborted transaction's tagged fields
            out += _INT32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\x00"
            else:
                out += _uvarint(len(records) + 1)
                out += records
            out += b"\x00"  # the partition's tagged fields
        out += b"\x00"  # the topic's tagged fields
    out += b"\x00"  # the body's tagged fields
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


def _has_tagged_fields(partition: Any) -> bool:
    """Whether kio would write any of a v12 partition's tagged fields (it leaves out those
    equal to their defaults, -1 throughout)."""
    epoch = partition.diverging_epoch
    leader = partition.current_leader
    snapshot = partition.snapshot_id
    return bool(
        epoch.epoch != -1
        or epoch.end_offset != -1
        or leader.leader_id != -1
        or leader.leader_epoch != -1
        or snapshot.end_offset != -1
        or snapshot.epoch != -1
    )
