"""Fetch on the wire without kio's generic walk: the request decoded straight from its frame,
the response written straight into one.

A consumer at the end of its partitions sends a Fetch for about every batch produced, so the
fixed cost of writing a Fetch response counts as much as a Produce's. kio's writer looks up a
writer per field, checks every value against its phantom type and, on flexible versions, opens
a buffer per structure for its tagged fields. This writes the same bytes with one precompiled
`struct` format per partition, from a kio entity (`encode_response` takes it for the versions
served here) or from the plain objects the Fetch handler answers with (`FetchAnswer`: kio's
frozen entities cost more to build than the frame to write; quotas and sendfile placeholders
edit kio's, which `FetchAnswer.entity` gives). The unit tests check both against kio's writer
on every version.

Record bytes are copied once into the frame, as kio's writer copies them; the large ones are
placeholders that `raftka.protocol.splice` swaps for file ranges.

The decoder reads a request with precompiled `struct` formats, every length checked against the
frame (`frame_reading`), so it needs neither kio's reader nor the bounds walk that guards it.
It returns plain mutable classes with kio's field names; a field the version lacks holds the
value that means "not sent" in the versions that have it (no session, no leader epoch, no
rack). The unit tests check that they hold what kio decodes, version by version.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from raftka.protocol.api import EncodedResponse, FrameError, build
from raftka.protocol.api_keys import ApiKey
from raftka.protocol.batch_builder import encode_uvarint
from raftka.protocol.frame_reading import (
    DecodedHeader,
    bad_count,
    bad_length,
    compact_count,
    compact_length,
    read_header,
    skip_tagged_fields,
    text,
    truncated,
    uvarint,
)

#: Fetch v4 (the first with the last stable offset and aborted transactions) to v12 (the last
#: that names topics; v13 names them by id).
FIRST_VERSION: Final = 4
LAST_VERSION: Final = 12
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


def _milliseconds(delta: Any) -> int:
    """A throttle time's int32 milliseconds, rounded as kio rounds them."""
    return round(float(delta.total_seconds()) * 1000)


def encode_fetch_response(correlation_id: int, response: Any) -> bytes | None:
    """The whole frame of a kio FetchResponse (FIRST_VERSION to LAST_VERSION): size prefix,
    response header (v0, or v1 on v12) and body, byte for byte what kio writes. None when
    a v12 partition carries a tagged field (a diverging epoch, current leader or snapshot
    id), which the broker never sets: kio writes those."""
    return _write(
        correlation_id,
        response.__version__,
        _milliseconds(response.throttle_time),
        response.error_code if response.__version__ >= 7 else 0,
        response.session_id if response.__version__ >= 7 else 0,
        response.responses,
        True,
    )


def _write(
    correlation_id: int,
    version: int,
    throttle_ms: int,
    error_code: int,
    session_id: int,
    topics: Any,
    kio_partitions: bool,
) -> bytes | None:
    """The frame of a response of `version` from its fields, its topics and partitions
    kio's or `FetchedTopic` and `FetchedPartition` (with kio's field names).
    `kio_partitions`: v12 partitions may carry tagged fields (then None)."""
    if version >= FIRST_FLEXIBLE_VERSION:
        return _compact(correlation_id, throttle_ms, error_code, session_id, topics, kio_partitions)
    out = bytearray(_SIZE_CORRELATION.size)
    if version >= 7:
        out += _SESSION.pack(throttle_ms, error_code, session_id)
    else:
        out += _INT32.pack(throttle_ms)
    with_log_start = version >= 5
    with_preferred_replica = version >= 11
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


def _compact(
    correlation_id: int,
    throttle_ms: int,
    error_code: int,
    session_id: int,
    topics: Any,
    kio_partitions: bool,
) -> bytes | None:
    """Fetch v12: compact lengths, and an empty tagged-field set after every structure."""
    out = bytearray(_SIZE_CORRELATION.size)
    out += b"\x00"  # the response header's tagged fields
    out += _SESSION.pack(throttle_ms, error_code, session_id)
    out += encode_uvarint(len(topics) + 1)
    for topic in topics:
        name = topic.topic.encode()
        out += encode_uvarint(len(name) + 1)
        out += name
        partitions = topic.partitions
        out += encode_uvarint(len(partitions) + 1)
        for p in partitions:
            if kio_partitions and _has_tagged_fields(p):
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
                out += encode_uvarint(len(aborted) + 1)
                for txn in aborted:
                    out += _ABORTED.pack(txn.producer_id, txn.first_offset)
                    out += b"\x00"  # the aborted transaction's tagged fields
            out += _INT32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\x00"
            else:
                out += encode_uvarint(len(records) + 1)
                out += records
            out += b"\x00"  # the partition's tagged fields
        out += b"\x00"  # the topic's tagged fields
    out += b"\x00"  # the body's tagged fields
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


class FetchedPartition:
    """One partition of a Fetch response as the handler answers it, with kio's field names
    (PartitionData): set field by field as the partition is read, no tagged field."""

    __slots__ = (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "preferred_read_replica",
        "records",
    )

    def __init__(self, partition_index: int) -> None:
        self.partition_index = partition_index
        self.error_code: ErrorCode = _NONE
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        #: kio's AbortedTransaction entities of the response's version, or None.
        self.aborted_transactions: tuple[Any, ...] | None = None
        self.preferred_read_replica = -1
        self.records = b""


class FetchedTopic:
    """One topic of a Fetch response (kio's FetchableTopicResponse)."""

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(
        self, topic: str, topic_id: uuid.UUID | None, partitions: list[FetchedPartition]
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partitions = partitions


class FetchAnswer(EncodedResponse):
    """A Fetch response (FIRST_VERSION to LAST_VERSION, no throttle) as plain objects,
    written by this module's encoder: building kio's entities of a response costs more
    than writing it. `entity` gives the kio response for whatever needs one."""

    __slots__ = ("version", "error_code", "session_id", "responses")

    def __init__(
        self, version: int, error_code: int, session_id: int, responses: list[FetchedTopic]
    ) -> None:
        self.version = version
        self.error_code = error_code
        self.session_id = session_id
        self.responses = responses

    def encode(self, correlation_id: int) -> bytes:
        frame = _write(
            correlation_id,
            self.version,
            0,
            self.error_code,
            self.session_id,
            self.responses,
            False,
        )
        assert frame is not None, "a plain partition carries no tagged field"
        return frame

    def entity(self, module: ModuleType) -> Any:
        """The same response as kio's entity, from the response `module` of its version."""
        topics = tuple(
            build(
                module.FetchableTopicResponse,
                topic=topic.topic,
                topic_id=topic.topic_id,
                partitions=tuple(
                    build(
                        module.PartitionData,
                        partition_index=p.partition_index,
                        error_code=p.error_code,
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=p.aborted_transactions,
                        preferred_read_replica=p.preferred_read_replica,
                        records=p.records,
                    )
                    for p in topic.partitions
                ),
            )
            for topic in self.responses
        )
        return build(
            module.FetchResponse,
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode(self.error_code),
            session_id=self.session_id,
            responses=topics,
        )


#: As a native int: a member of ApiKey (a module that is not compiled) is looked up through
#: EnumType's `__getattr__` hook on every access (Python 3.11).
_API_KEY: Final[int] = int(ApiKey.FETCH)
#: Read once, for the same reason: every partition of a response starts without an error.
_NONE: Final = ErrorCode.none

_NO_THROTTLE: Final = datetime.timedelta(0)


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


# -- requests ---------------------------------------------------------------------------------


@dataclass(slots=True, init=False)
class FetchPartitionData:
    """kio's FetchPartition: -1 for the leader epochs and log start a version lacks."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int

    def __init__(
        self,
        partition: int,
        current_leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        partition_max_bytes: int,
    ) -> None:
        self.partition = partition
        self.current_leader_epoch = current_leader_epoch
        self.fetch_offset = fetch_offset
        self.last_fetched_epoch = last_fetched_epoch
        self.log_start_offset = log_start_offset
        self.partition_max_bytes = partition_max_bytes


@dataclass(slots=True, init=False)
class FetchTopicData:
    """kio's FetchTopic."""

    topic: str
    partitions: tuple[FetchPartitionData, ...]

    def __init__(self, topic: str, partitions: tuple[FetchPartitionData, ...]) -> None:
        self.topic = topic
        self.partitions = partitions


@dataclass(slots=True, init=False)
class ForgottenTopicData:
    """kio's ForgottenTopic (v7+)."""

    topic: str
    partitions: tuple[int, ...]

    def __init__(self, topic: str, partitions: tuple[int, ...]) -> None:
        self.topic = topic
        self.partitions = partitions


@dataclass(slots=True, init=False)
class FetchData:
    """A Fetch request v4-v12 with kio's field names; before v7 no session (id 0, epoch -1,
    nothing forgotten), before v11 no rack (""), before v12 no cluster id (None)."""

    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopicData, ...]
    forgotten_topics_data: tuple[ForgottenTopicData, ...]
    rack_id: str

    def __init__(
        self,
        cluster_id: str | None,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        session_id: int,
        session_epoch: int,
        topics: tuple[FetchTopicData, ...],
        forgotten_topics_data: tuple[ForgottenTopicData, ...],
        rack_id: str,
    ) -> None:
        self.cluster_id = cluster_id
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.session_id = session_id
        self.session_epoch = session_epoch
        self.topics = topics
        self.forgotten_topics_data = forgotten_topics_data
        self.rack_id = rack_id

    @property
    def max_wait(self) -> datetime.timedelta:
        """kio's field: made when asked for (the handler divides the milliseconds)."""
        return _ONE_MS * self.max_wait_ms


_ONE_MS = datetime.timedelta(milliseconds=1)  # a product of it is exact, unlike a float
# replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
_LIMITS = struct.Struct(">iiiib")
_SESSION_REQUEST = struct.Struct(">ii")  # session_id, session_epoch (v7+)
_LIMITS_BYTES: Final[int] = _LIMITS.size
_SESSION_REQUEST_BYTES: Final[int] = _SESSION_REQUEST.size
# partition, [current_leader_epoch (v9+)], fetch_offset, [last_fetched_epoch (v12)],
# [log_start_offset (v5+)], partition_max_bytes
_FETCH_PARTITION_V4 = struct.Struct(">iqi")
_FETCH_PARTITION_V5 = struct.Struct(">iqqi")
_FETCH_PARTITION_V9 = struct.Struct(">iiqqi")
_FETCH_PARTITION_V12 = struct.Struct(">iiqiqi")
# The fewest bytes an array element takes (a count is refused before any loop): a legacy
# topic is a name length and a count, a compact one those and its tagged fields.
_LEGACY_TOPIC_BYTES = 6
_COMPACT_TOPIC_BYTES = 3
_PARTITION_ID_BYTES = 4
#: v12's request tag for the cluster id (KIP-595).
_CLUSTER_ID_TAG = 0


def decode_fetch_request(frame: bytes, version: int) -> tuple[DecodedHeader, FetchData]:
    """The request header and the Fetch request of a frame (without its size prefix),
    holding what kio decodes from it. Unknown tagged fields are skipped and trailing bytes
    after the body ignored, as Kafka does (kio refuses unknown tagged fields). Raises
    FrameError for anything malformed, and for a frame that is not a Fetch request of
    `version` (FIRST_VERSION to LAST_VERSION).
    """
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise FrameError(f"Fetch v{version} is not decoded here")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    header, pos = read_header(frame, _API_KEY, "Fetch", version, flexible)
    end = len(frame)
    if pos + _LIMITS_BYTES > end:
        raise truncated("replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level", pos, end)
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level = _LIMITS.unpack_from(frame, pos)
    pos += _LIMITS_BYTES
    session_id, session_epoch = 0, -1
    if version >= 7:
        if pos + _SESSION_REQUEST_BYTES > end:
            raise truncated("session_id and session_epoch", pos, end)
        session_id, session_epoch = _SESSION_REQUEST.unpack_from(frame, pos)
        pos += _SESSION_REQUEST_BYTES
    if flexible:
        topics, pos = _compact_topics(frame, pos, end)
    else:
        topics, pos = _legacy_topics(frame, pos, end, version)
    forgotten: tuple[ForgottenTopicData, ...] = ()
    if version >= 7:
        forgotten, pos = _forgotten(frame, pos, end, flexible)
    rack_id = ""
    if version >= 11:
        rack_id, pos = _string(frame, pos, end, flexible, "rack_id")
    cluster_id = None
    if flexible:
        cluster_id, pos = _body_tagged_fields(frame, pos, end)
    request = FetchData(
        cluster_id,
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
    )
    return header, request


def _string(frame: bytes, pos: int, end: int, flexible: bool, field: str) -> tuple[str, int]:
    """A non-nullable string: a compact (uvarint length + 1) or int16 length, then UTF-8."""
    if flexible:
        length, pos = compact_length(frame, pos, end, field)
    else:
        if pos + 2 > end:
            raise truncated(field, pos, end)
        (length,) = _INT16.unpack_from(frame, pos)
        pos += 2
    if not 0 <= length <= end - pos:
        raise bad_length(field, length, pos, end)
    return text(frame, pos, pos + length, field), pos + length


def _legacy_count(frame: bytes, pos: int, end: int, field: str, least: int) -> tuple[int, int]:
    """(element count, position after it) of an int32-counted array whose elements take at
    least `least` bytes each."""
    if pos + 4 > end:
        raise truncated(field, pos, end)
    (count,) = _INT32.unpack_from(frame, pos)
    pos += 4
    if not 0 <= count <= (end - pos) // least:
        raise bad_count(field, count, pos, end)
    return count, pos


def _legacy_topics(
    frame: bytes, pos: int, end: int, version: int
) -> tuple[tuple[FetchTopicData, ...], int]:
    """v4-v11 topics: int16 names, int32 counts, the partition fields of the version."""
    if version >= 9:
        layout = _FETCH_PARTITION_V9
    elif version >= 5:
        layout = _FETCH_PARTITION_V5
    else:
        layout = _FETCH_PARTITION_V4
    count, pos = _legacy_count(frame, pos, end, "topics", _LEGACY_TOPIC_BYTES)
    topics: list[FetchTopicData] = []
    for _ in range(count):
        name, pos = _string(frame, pos, end, False, "topic")
        partition_count, pos = _legacy_count(frame, pos, end, "partitions", layout.size)
        partitions: list[FetchPartitionData] = []
        for _ in range(partition_count):
            fields = layout.unpack_from(frame, pos)
            pos += layout.size
            if version >= 9:
                index, leader_epoch, fetch_offset, log_start, max_bytes = fields
            elif version >= 5:
                index, fetch_offset, log_start, max_bytes = fields
                leader_epoch = -1
            else:
                index, fetch_offset, max_bytes = fields
                leader_epoch = log_start = -1
            partitions.append(
                FetchPartitionData(index, leader_epoch, fetch_offset, -1, log_start, max_bytes)
            )
        topics.append(FetchTopicData(name, tuple(partitions)))
    return tuple(topics), pos


def _compact_topics(frame: bytes, pos: int, end: int) -> tuple[tuple[FetchTopicData, ...], int]:
    """v12 topics: compact lengths, a tagged field set after every topic and partition."""
    layout = _FETCH_PARTITION_V12
    count, pos = compact_count(frame, pos, end, "topics", _COMPACT_TOPIC_BYTES)
    topics: list[FetchTopicData] = []
    for _ in range(count):
        name, pos = _string(frame, pos, end, True, "topic")
        partition_count, pos = compact_count(frame, pos, end, "partitions", layout.size + 1)
        partitions: list[FetchPartitionData] = []
        for _ in range(partition_count):
            index, leader_epoch, fetch_offset, last_epoch, log_start, max_bytes = (
                layout.unpack_from(frame, pos)
            )
            pos += layout.size
            if pos < end and frame[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(frame, pos, end, "partitions")
            partitions.append(
                FetchPartitionData(
                    index, leader_epoch, fetch_offset, last_epoch, log_start, max_bytes
                )
            )
        if pos < end and frame[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos, end, "topics")
        topics.append(FetchTopicData(name, tuple(partitions)))
    return tuple(topics), pos


def _forgotten(
    frame: bytes, pos: int, end: int, flexible: bool
) -> tuple[tuple[ForgottenTopicData, ...], int]:
    """forgotten_topics_data (v7+): topic names, each with its partitions' int32 ids."""
    if flexible:
        count, pos = compact_count(frame, pos, end, "forgotten_topics_data", _COMPACT_TOPIC_BYTES)
    else:
        count, pos = _legacy_count(frame, pos, end, "forgotten_topics_data", _LEGACY_TOPIC_BYTES)
    topics: list[ForgottenTopicData] = []
    for _ in range(count):
        name, pos = _string(frame, pos, end, flexible, "forgotten topic")
        if flexible:
            ids, pos = compact_count(frame, pos, end, "forgotten partitions", _PARTITION_ID_BYTES)
        else:
            ids, pos = _legacy_count(frame, pos, end, "forgotten partitions", _PARTITION_ID_BYTES)
        partitions = struct.unpack_from(f">{ids}i", frame, pos)
        pos += ids * _PARTITION_ID_BYTES
        if flexible:
            if pos < end and frame[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(frame, pos, end, "forgotten_topics_data")
        topics.append(ForgottenTopicData(name, partitions))
    return tuple(topics), pos


def _body_tagged_fields(frame: bytes, pos: int, end: int) -> tuple[str | None, int]:
    """(cluster_id, position after) of v12's body tagged fields: tag 0 is the cluster id (a
    compact nullable string); any other tag is skipped by its size."""
    if pos < end and frame[pos] == 0:
        return None, pos + 1
    where = "FetchRequest"
    count, pos = uvarint(frame, pos, end, f"tagged fields of {where}")
    if count > (end - pos) // 2:  # a tag and a size take a byte each at least
        raise bad_count(f"tagged fields of {where}", count, pos, end)
    cluster_id = None
    for _ in range(count):
        tag, pos = uvarint(frame, pos, end, f"a tag of {where}")
        size, pos = uvarint(frame, pos, end, f"a tagged field size of {where}")
        if size > end - pos:
            raise bad_length(f"a tagged field of {where}", size, pos, end)
        if tag == _CLUSTER_ID_TAG:
            length, start = compact_length(frame, pos, pos + size, "cluster_id")
            if length == -1:
                cluster_id = None
            elif start + length == pos + size:
                cluster_id = text(frame, start, start + length, "cluster_id")
            else:
                raise bad_length("cluster_id", length, start, pos + size)
        pos += size
    return cluster_id, pos
