"""One partition's records for a page of the message browser, read where the partition is:
from this broker's replica, or over a peer RPC from the broker that leads it, so a console
browses every partition of a cluster from any broker.

The console checks READ on the topic before asking (ACLs are the cluster's, the same on every
broker); the broker asked only reads its replica. A page reads at most its budget of log
(bytes per read, reads) and answers at most `limit` records, values cut for display.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from raftka.broker.console.records import SHOWN_BYTES_MAX, Record, batch_records
from raftka.broker.console.share_inflight import inflight_cells
from raftka.consensus.transport import ForwardError
from raftka.protocol.record_headers import whole_batches
from raftka.protocol.records import UnsupportedBatch, read_batch_header

if TYPE_CHECKING:
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.replica.manager import ReplicaManager
    from raftka.broker.topics import Partition

PAGE_READ_RPC = "console.page_read"
SHARE_INFLIGHT_RPC = "console.share_inflight"
REPLICA_PROGRESS_RPC = "console.replica_progress"
PAGE_READ_TIMEOUT_S = 10.0
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(frozen=True, slots=True)
class PageQuery:
    """What a page asks of one partition: where to start (`position` of a next page, else
    by `mode`: newest, offset or timestamp), how many records, which (`wanted` in the key
    or value), read_committed or not, and the log it may read (bytes per read, reads)."""

    topic: str
    partition: int
    mode: str
    position: int | None
    offset: int
    timestamp_ms: int
    limit: int
    wanted: bytes
    committed: bool
    read_bytes: int
    reads: int


@dataclass(frozen=True, slots=True)
class PageRead:
    """The records found (values cut to SHOWN_BYTES_MAX + 1), the offset the page started
    at, the offset its scan reached (where a next page starts), and the bytes of log read."""

    records: list[Record]
    start: int
    reached: int
    log_read: int


@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    """What a partition's leader knows of its followers: the offsets each lacks of its log,
    the log's start and end, and its low watermark (the lowest log start of the leader and
    its live followers: a record deletion has reached every replica once it passes it)."""

    lags: dict[int, int]
    log_start: int
    log_end: int
    low_watermark: int


def local_progress(partition: Partition | None) -> ReplicaProgress | None:
    """The followers' progress when this broker leads `partition` (what its Raft group knows
    each follower matches); None when it does not lead it."""
    if partition is None or partition.raft is None or partition.log is None:
        return None
    if not partition.is_leader:
        return None
    matched = partition.raft.follower_match_ends()
    end = partition.log.log_end_offset
    lags = {node: max(0, end - match_end) for node, match_end in sorted(matched.items())}
    start = partition.log.log_start_offset
    low = partition.raft.low_watermark()
    return ReplicaProgress(lags, start, end, start if low is None else low)


def matches(record: Record, wanted: bytes) -> bool:
    """Whether the record's key or value holds `wanted` (empty: every record)."""
    return not wanted or any(
        part is not None and wanted in part for part in (record.key, record.value)
    )


def start_offset(replicas: ReplicaManager, partition: Partition, query: PageQuery) -> int:
    log = partition.hosted_log
    end = partition.last_stable_offset if query.committed else partition.high_watermark
    if query.mode == "offset":
        return min(max(query.offset, log.log_start_offset), end)
    if query.mode == "timestamp":
        isolation = READ_COMMITTED if query.committed else READ_UNCOMMITTED
        offset, _, _ = replicas.list_offset(partition, query.timestamp_ms, isolation)
        return end if offset < 0 else min(max(offset, log.log_start_offset), end)
    return max(log.log_start_offset, end - query.limit)


def read_local(replicas: ReplicaManager, partition: Partition, query: PageQuery) -> PageRead:
    """The page's records of this broker's replica of `partition`: up to `limit` records
    from its start below the high watermark (read_committed: below the last stable offset,
    without aborted transactions' records, as such a consumer sees them)."""
    start = (
        query.position if query.position is not None else start_offset(replicas, partition, query)
    )
    isolation = READ_COMMITTED if query.committed else READ_UNCOMMITTED
    found: list[Record] = []
    # Producers whose open transaction was aborted, until their abort marker.
    aborting: set[int] = set()
    position = start
    taken = 0
    for _ in range(query.reads):
        read = replicas.read(partition, position, query.read_bytes, isolation, True)
        if read.error_code != ErrorCode.none or read.found is None:
            break
        end = read.last_stable_offset if query.committed else read.high_watermark
        aborted = sorted(read.aborted or (), key=lambda txn: txn.first_offset)
        piece = read.found
        chunk = piece.segment.pread(piece.length, piece.position)
        taken += len(chunk)
        for batch in whole_batches(chunk):
            header = read_batch_header(batch, 0)
            while aborted and aborted[0].first_offset <= header.last_offset:
                aborting.add(aborted.pop(0).producer_id)
            if header.is_control:
                aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
            try:
                records = list(batch_records(partition.index, batch))
            except UnsupportedBatch:
                continue
            for record in records:
                if start <= record.offset < end and matches(record, query.wanted):
                    value = None if record.value is None else record.value[: SHOWN_BYTES_MAX + 1]
                    found.append(record._replace(value=value))
                    if len(found) >= query.limit:
                        return PageRead(found, start, record.offset + 1, taken)
        reached = min(piece.next_offset, end)
        if reached <= position:
            break
        position = reached
        if position >= end:
            break
    return PageRead(found, start, position, taken)


# -- over the peer RPC ---------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _encode_query(query: PageQuery) -> bytes:
    fields = {name: getattr(query, name) for name in PageQuery.__slots__}
    fields["wanted"] = _b64(query.wanted)
    return json.dumps(fields).encode()


def _decode_query(payload: bytes) -> PageQuery:
    fields = json.loads(payload)
    fields["wanted"] = _unb64(fields["wanted"]) or b""
    return PageQuery(**fields)


def _encode_read(read: PageRead) -> bytes:
    records = [
        [
            r.partition,
            r.offset,
            r.timestamp_ms,
            _b64(r.key),
            _b64(r.value),
            [[name, _b64(value)] for name, value in r.headers],
        ]
        for r in read.records
    ]
    answer = {"records": records, "start": read.start, "reached": read.reached}
    return json.dumps(answer | {"log_read": read.log_read}).encode()


def _decode_read(payload: bytes) -> PageRead:
    answer = json.loads(payload)
    records = [
        Record(
            int(partition),
            int(offset),
            int(timestamp_ms),
            _unb64(key),
            _unb64(value),
            tuple((str(name), _unb64(header)) for name, header in headers),
        )
        for partition, offset, timestamp_ms, key, value, headers in answer["records"]
    ]
    return PageRead(records, int(answer["start"]), int(answer["reached"]), int(answer["log_read"]))


#: The peer transport's forward: (broker, rpc, payload, timeout) -> the answer's payload.
Forward = Callable[[int, str, bytes, float], Awaitable[bytes]]


class PageReads:
    """Serves PAGE_READ_RPC on every broker, and asks it of another broker."""

    def __init__(self, services: BrokerServices, forward: Forward) -> None:
        self.services = services
        self.forward = forward

    async def serve(self, payload: bytes) -> tuple[int, bytes]:
        try:
            query = _decode_query(payload)
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad page read: {exc}".encode()
        partition = self.services.topics.partition(query.topic, query.partition)
        if partition is None or partition.log is None or partition.raft is None:
            message = f"{query.topic}-{query.partition} is not hosted here"
            return int(ErrorCode.not_leader_or_follower), message.encode()
        return 0, _encode_read(read_local(self.services.replica_manager, partition, query))

    async def serve_share_inflight(self, payload: bytes) -> tuple[int, bytes]:
        """The in-flight cells of a share-partition this broker leads."""
        try:
            request = json.loads(payload)
            key = (str(request["group"]), uuid.UUID(request["topic_id"]), int(request["partition"]))
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad share read: {exc}".encode()
        led = self.services.groups.share_partitions.partitions.get(key)
        if led is None:
            return int(ErrorCode.not_leader_or_follower), b"share-partition not led here"
        return 0, json.dumps(inflight_cells(led.state)).encode()

    async def share_inflight(
        self, node: int, group_id: str, topic_id: uuid.UUID, partition: int
    ) -> list[int | str]:
        """A share-partition's in-flight cells as broker `node`, its leader, has them;
        OSError naming the broker when it does not answer."""
        request = {"group": group_id, "topic_id": str(topic_id), "partition": partition}
        try:
            raw = await self.forward(
                node, SHARE_INFLIGHT_RPC, json.dumps(request).encode(), PAGE_READ_TIMEOUT_S
            )
        except ForwardError as exc:
            raise OSError(f"broker {node} did not answer: {exc}") from exc
        return list(json.loads(raw))

    async def serve_replica_progress(self, payload: bytes) -> tuple[int, bytes]:
        try:
            request = json.loads(payload)
            topic, index = str(request["topic"]), int(request["partition"])
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad progress read: {exc}".encode()
        progress = local_progress(self.services.topics.partition(topic, index))
        if progress is None:
            return int(ErrorCode.not_leader_or_follower), f"{topic}-{index} not led here".encode()
        answer = {"lags": list(progress.lags.items()), "start": progress.log_start}
        answer |= {"end": progress.log_end, "low": progress.low_watermark}
        return 0, json.dumps(answer).encode()

    async def replica_progress(self, node: int, topic: str, partition: int) -> ReplicaProgress:
        """The followers' progress as broker `node`, the partition's leader, knows it;
        OSError naming the broker when it does not answer (or does not lead it)."""
        request = {"topic": topic, "partition": partition}
        try:
            raw = await self.forward(
                node, REPLICA_PROGRESS_RPC, json.dumps(request).encode(), PAGE_READ_TIMEOUT_S
            )
        except ForwardError as exc:
            raise OSError(f"broker {node} did not answer: {exc}") from exc
        answer = json.loads(raw)
        lags = {int(node_id): int(lag) for node_id, lag in answer["lags"]}
        start = int(answer["start"])
        # A leader older than the low watermark's field does not send it.
        low = int(answer.get("low", start))
        return ReplicaProgress(lags, start, int(answer["end"]), low)

    async def read_remote(self, node: int, query: PageQuery) -> PageRead:
        """The page's records from broker `node`'s replica; OSError naming the broker and
        why when it does not answer or does not host the partition."""
        try:
            raw = await self.forward(node, PAGE_READ_RPC, _encode_query(query), PAGE_READ_TIMEOUT_S)
        except ForwardError as exc:
            raise OSError(f"broker {node} did not answer: {exc}") from exc
        return _decode_read(raw)


def register(
    reads: PageReads,
    register_rpc: Callable[[str, Callable[[bytes], Awaitable[tuple[int, bytes]]]], None],
) -> PageReads:
    register_rpc(PAGE_READ_RPC, reads.serve)
    register_rpc(SHARE_INFLIGHT_RPC, reads.serve_share_inflight)
    register_rpc(REPLICA_PROGRESS_RPC, reads.serve_replica_progress)
    return reads
