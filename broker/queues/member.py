"""The broker-side share member behind the queue API's dequeues: one per (share group,
queue), joined to the group by ShareGroupHeartbeat and fetching and acknowledging through
the broker's own ShareFetch and ShareAcknowledge handlers, as the caller's principal. Its
records' delivery state, locks, delivery counts and order are exactly what a Kafka
ShareConsumer in the same group sees; their locks are the member's.

A message id names what acknowledging the message needs: the group, the member holding
its lock, the topic, partition and offset."""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as share_acknowledge
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.share_group_heartbeat.v1 import request as share_heartbeat
from kio.static.primitive import i8, i32

from raftka.broker.console.records import Record, batch_records
from raftka.broker.queues.problems import Problem
from raftka.protocol.api import build
from raftka.protocol.record_headers import whole_batches
from raftka.protocol.splice import SplicedResponse

if TYPE_CHECKING:
    from raftka.broker.console.calls import Caller

#: ShareAcknowledge's acknowledgement types.
ACCEPT = 1
RELEASE = 2
REJECT = 3
#: The bytes one dequeue reads at most.
FETCH_BYTES_MAX = 1 << 20
#: Heartbeats keep the member in its group at least this often (the session timeout is longer).
HEARTBEAT_EVERY_S = 5.0
#: A group's coordinator may still be loading: asked this many times, this far apart.
COORDINATOR_TRIES = 8
COORDINATOR_RETRY_S = 0.25
NOT_READY = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)


@dataclass(frozen=True, slots=True)
class MessageId:
    group: str
    member_id: str
    topic: str
    partition: int
    offset: int

    def encode(self) -> str:
        fields = [self.group, self.member_id, self.topic, self.partition, self.offset]
        raw = json.dumps(fields, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, given: object) -> MessageId:
        """The id a dequeue gave; Problem 400 for anything else."""
        if not isinstance(given, str) or not given or len(given) > 2048:
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-id", "an id is a non-empty string")
        try:
            raw = base64.urlsafe_b64decode(given + "=" * (-len(given) % 4))
            group, member_id, topic, partition, offset = json.loads(raw)
        except (ValueError, TypeError, binascii.Error):
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-id", f"{given!r} is not a message id"
            ) from None
        if not (
            isinstance(group, str)
            and isinstance(member_id, str)
            and isinstance(topic, str)
            and type(partition) is int
            and type(offset) is int
        ):
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-id", f"{given!r} is not a message id")
        return cls(group, member_id, topic, partition, offset)


@dataclass(frozen=True, slots=True)
class Delivered:
    """A dequeued record and its delivery count."""

    record: Record
    delivery_count: int


def _records_bytes(field: bytes | None, spliced: SplicedResponse | None) -> bytes:
    if not field:
        return b""
    if spliced is not None and field in spliced.splices.ranges:
        return spliced.splices.ranges[field].read()
    return field


class ShareMember:
    """The member of `group` dequeuing `topic`; calls are serialized (a share session's
    epoch counts them)."""

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.member_id = uuid.uuid4().hex
        self.session_epoch = 0
        self.last_heartbeat_s = -HEARTBEAT_EVERY_S
        #: When a request last named this member (the loop's clock).
        self.last_used_s = 0.0
        self.lock = trio.Lock()

    async def _heartbeat(self, caller: Caller, now_s: float) -> None:
        """Join (or stay in) the group, subscribed to the queue, at the group's coordinator
        (looked up first, as a client does: the first lookup creates the offsets topic);
        Problem when refused, or when another broker coordinates the group."""
        if now_s - self.last_heartbeat_s < HEARTBEAT_EVERY_S:
            return
        here = caller.services.identity.node_id
        answer: Any = None
        for _ in range(COORDINATOR_TRIES):
            coordinator = await caller.group_coordinator(self.group)
            if coordinator == here:
                answer = await caller.call(
                    build(
                        share_heartbeat.ShareGroupHeartbeatRequest,
                        group_id=self.group,
                        member_id=self.member_id,
                        member_epoch=i32(0),
                        rack_id=None,
                        subscribed_topic_names=(self.topic,),
                    )
                )
                if answer.error_code not in NOT_READY:
                    break
            elif coordinator >= 0:
                raise Problem(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "not-coordinator",
                    f"broker {coordinator} coordinates share group {self.group}: ask its "
                    "HTTP endpoint",
                )
            await trio.sleep(COORDINATOR_RETRY_S)
        if answer is None:
            raise Problem(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "unavailable",
                f"share group {self.group} has no coordinator yet",
            )
        refuse_on(answer.error_code, answer.error_message, f"share group {self.group}")
        self.last_heartbeat_s = now_s

    async def fetch(
        self,
        caller: Caller,
        topic_id: uuid.UUID,
        partitions: int,
        max_records: int,
        wait_ms: int,
        now_s: float,
    ) -> list[Delivered]:
        """Up to `max_records` records acquired for this member (waiting up to `wait_ms`
        for one), in the order the share-partitions handed them out."""
        await self._heartbeat(caller, now_s)
        for attempt in range(2):
            request = build(
                share_fetch.ShareFetchRequest,
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=i32(self.session_epoch),
                max_wait=datetime.timedelta(milliseconds=wait_ms),
                min_bytes=i32(1),
                max_bytes=i32(FETCH_BYTES_MAX),
                max_records=i32(max_records),
                batch_size=i32(max_records),
                topics=(
                    build(
                        share_fetch.FetchTopic,
                        topic_id=topic_id,
                        partitions=tuple(
                            build(
                                share_fetch.FetchPartition,
                                partition_index=i32(index),
                                acknowledgement_batches=(),
                            )
                            for index in range(partitions)
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
            answer: Any = await caller.call(request)
            spliced = answer if isinstance(answer, SplicedResponse) else None
            response = answer.response if spliced is not None else answer
            try:
                if (
                    response.error_code
                    in (
                        ErrorCode.share_session_not_found,
                        ErrorCode.invalid_share_session_epoch,
                    )
                    and attempt == 0
                ):
                    self.session_epoch = 0  # the session was evicted: open a new one
                    continue
                refuse_on(response.error_code, response.error_message, f"queue {self.topic}")
                self.session_epoch += 1
                return self._delivered(response, spliced)
            finally:
                if spliced is not None:
                    spliced.splices.close()
        raise Problem(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", "no share session opened")

    def _delivered(self, response: Any, spliced: SplicedResponse | None) -> list[Delivered]:
        delivered: list[Delivered] = []
        for topic in response.responses:
            for partition in topic.partitions:
                if partition.error_code != ErrorCode.none and not partition.acquired_records:
                    continue
                counts: dict[int, int] = {}
                for acquired in partition.acquired_records:
                    for offset in range(acquired.first_offset, acquired.last_offset + 1):
                        counts[offset] = int(acquired.delivery_count)
                if not counts:
                    continue
                data = _records_bytes(partition.records, spliced)
                index = int(partition.partition_index)
                for batch in whole_batches(data):
                    for record in batch_records(index, batch):
                        if record.offset in counts:
                            delivered.append(Delivered(record, counts[record.offset]))
        return delivered

    async def acknowledge(
        self, caller: Caller, topic_id: uuid.UUID, offsets: Sequence[tuple[int, int]], kind: int
    ) -> list[tuple[int, int]]:
        """Acknowledge (partition, offset) pairs as `kind`; those the broker refused (lock
        expired, already acknowledged, not this member's)."""
        by_partition: dict[int, list[int]] = {}
        for partition, offset in offsets:
            by_partition.setdefault(partition, []).append(offset)
        request = build(
            share_acknowledge.ShareAcknowledgeRequest,
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=i32(self.session_epoch),
            topics=(
                build(
                    share_acknowledge.AcknowledgeTopic,
                    topic_id=topic_id,
                    partitions=tuple(
                        build(
                            share_acknowledge.AcknowledgePartition,
                            partition_index=i32(partition),
                            acknowledgement_batches=tuple(
                                build(
                                    share_acknowledge.AcknowledgementBatch,
                                    first_offset=offset,
                                    last_offset=offset,
                                    acknowledge_types=(i8(kind),),
                                )
                                for offset in sorted(set(wanted))
                            ),
                        )
                        for partition, wanted in sorted(by_partition.items())
                    ),
                ),
            ),
        )
        response = await caller.call(request)
        if response.error_code in (
            ErrorCode.share_session_not_found,
            ErrorCode.invalid_share_session_epoch,
        ):
            self.session_epoch = 0
            raise Problem(
                HTTPStatus.CONFLICT,
                "stale-id",
                "the share session holding these messages ended; their locks are released",
            )
        refuse_on(response.error_code, response.error_message, f"queue {self.topic}")
        self.session_epoch += 1
        refused_partitions = {
            int(p.partition_index)
            for t in response.responses
            for p in t.partitions
            if p.error_code != ErrorCode.none
        }
        return [(p, o) for p, o in offsets if p in refused_partitions]


def refuse_on(error: ErrorCode, message: str | None, what: str) -> None:
    """Problem for a Kafka error of a whole request (nothing when none)."""
    if error == ErrorCode.none:
        return
    detail = f"{what}: {error.name}" + (f": {message}" if message else "")
    if error in (ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed):
        raise Problem(HTTPStatus.FORBIDDEN, "forbidden", detail)
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
        raise Problem(HTTPStatus.NOT_FOUND, "unknown-queue", detail)
    if error in (
        ErrorCode.invalid_group_id,
        ErrorCode.invalid_request,
        ErrorCode.group_id_not_found,
    ):
        raise Problem(HTTPStatus.BAD_REQUEST, "invalid-group", detail)
    raise Problem(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", detail)
