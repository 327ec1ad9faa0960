"""The broker-side share member behind the queue API's dequeues: one per (share group,
queue) on each broker, joined to the group by ShareGroupHeartbeat at the group's
coordinator and fetching and acknowledging by ShareFetch and ShareAcknowledge at each
partition's leader (this broker's own handlers, or another broker's over the peer
connection), as the caller's principal. Its records' delivery state, locks, delivery counts
and order are exactly what a Kafka ShareConsumer in the same group sees; their locks are
the member's. Like a ShareConsumer it has one share session with each leader.

A message id names what acknowledging the message needs: the group, the member holding
its lock and the broker it lives on, the topic, partition and offset."""

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
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.share_acknowledge.v1 import request as share_acknowledge
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.share_group_heartbeat.v1 import request as share_heartbeat
from kio.static.primitive import i8, i32

from raftka.broker.console.records import Record, batch_records
from raftka.broker.queues.problems import Problem
from raftka.broker.queues.remote import LEADER_RETRY_S, LEADER_TRIES, leaders
from raftka.broker.queues.rounds import DequeueRounds
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
#: A group's coordinator is the leader of its offsets partition, which may still be created,
#: elected or loading (the first group of a new cluster creates the offsets topic): asked
#: this many times, this far apart, as long as a step waits for any partition's leader.
COORDINATOR_TRIES = LEADER_TRIES
COORDINATOR_RETRY_S = LEADER_RETRY_S
#: While no leader has a record, one waits this long at a time for one (the others are
#: asked again between: a record at any of them is handed out this soon).
WAIT_SLICE_S = 0.1
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
    #: The broker whose member holds the lock (None: an id of a release before it was named).
    node: int | None = None

    def encode(self) -> str:
        fields = [self.group, self.member_id, self.topic, self.partition, self.offset, self.node]
        raw = json.dumps(fields, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, given: object) -> MessageId:
        """The id a dequeue gave; Problem 400 for anything else."""
        if not isinstance(given, str) or not given or len(given) > 2048:
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-id", "an id is a non-empty string")
        try:
            raw = base64.urlsafe_b64decode(given + "=" * (-len(given) % 4))
            fields = json.loads(raw)
            group, member_id, topic, partition, offset = fields[:5]
            node = fields[5] if len(fields) == 6 else None
            if len(fields) not in (5, 6):
                raise ValueError("five or six fields")
        except (ValueError, TypeError, binascii.Error, KeyError):
            raise Problem(
                HTTPStatus.BAD_REQUEST, "invalid-id", f"{given!r} is not a message id"
            ) from None
        if not (
            isinstance(group, str)
            and isinstance(member_id, str)
            and isinstance(topic, str)
            and type(partition) is int
            and type(offset) is int
            and (node is None or type(node) is int)
        ):
            raise Problem(HTTPStatus.BAD_REQUEST, "invalid-id", f"{given!r} is not a message id")
        return cls(group, member_id, topic, partition, offset, node)


@dataclass(frozen=True, slots=True)
class Leaders:
    """The leaders a `ShareMember.poll` asked: leader -> its partitions (-1: those without
    one), and the leaders in the order asked."""

    by_leader: dict[int, list[int]]
    nodes: list[int]


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
    """The member of `group` dequeuing `topic`; calls are serialized under `lock` (a share
    session's epoch counts them), and its dequeues are served in rounds (`rounds`)."""

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.member_id = uuid.uuid4().hex
        #: Leader -> the epoch of this member's share session there (none: not open).
        self.epochs: dict[int, int] = {}
        self.last_heartbeat_s = -HEARTBEAT_EVERY_S
        #: When a request last named this member (the loop's clock).
        self.last_used_s = 0.0
        #: Which leader a dequeue asks first (they take turns).
        self.turn = 0
        self.lock = trio.Lock()
        self.rounds = DequeueRounds()

    async def _heartbeat(self, caller: Caller, now_s: float) -> None:
        """Join (or stay in) the group, subscribed to the queue, at the group's coordinator
        (looked up first, as a client does: the first lookup creates the offsets topic);
        Problem when refused."""
        if now_s - self.last_heartbeat_s < HEARTBEAT_EVERY_S:
            return
        answer: Any = None
        reason = "it has no coordinator yet"
        for _ in range(COORDINATOR_TRIES):
            coordinator = await self._coordinator(caller)
            if coordinator >= 0:
                try:
                    answer = await caller.at(coordinator).call(
                        build(
                            share_heartbeat.ShareGroupHeartbeatRequest,
                            group_id=self.group,
                            member_id=self.member_id,
                            member_epoch=i32(0),
                            rack_id=None,
                            subscribed_topic_names=(self.topic,),
                        )
                    )
                except OSError as exc:
                    answer, reason = None, str(exc)
                if answer is not None and answer.error_code not in NOT_READY:
                    break
            await trio.sleep(COORDINATOR_RETRY_S)
        if answer is None:
            raise Problem(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "unavailable",
                f"share group {self.group} cannot be joined now: {reason}",
            )
        refuse_on(answer.error_code, answer.error_message, f"share group {self.group}")
        self.last_heartbeat_s = now_s

    async def _coordinator(self, caller: Caller) -> int:
        """The group's coordinator (-1: none yet); 403 when the caller may not see it."""
        response = await caller.call(
            build(
                find_coordinator.FindCoordinatorRequest,
                key_type=i8(0),
                coordinator_keys=(self.group,),
            )
        )
        (found,) = response.coordinators
        if found.error_code == ErrorCode.group_authorization_failed:
            refuse_on(found.error_code, found.error_message, f"share group {self.group}")
        return int(found.node_id) if found.error_code == ErrorCode.none else -1

    async def poll(
        self,
        caller: Caller,
        topic_id: uuid.UUID,
        partitions: int,
        max_records: int,
        now_s: float,
    ) -> tuple[list[Delivered], Leaders]:
        """Up to `max_records` records acquired for this member from the leaders of the
        queue's partitions without waiting, each leader's in the order its share-partitions
        handed them out; and the leaders asked, for `wait`.

        Every leader is asked, the leaders taking turns to be asked first. Leadership is
        read again on each call, so a partition whose leader moved is asked at the new one."""
        await self._heartbeat(caller, now_s)
        by_leader = leaders(caller, self.topic, range(partitions))
        nodes = sorted(node for node in by_leader if node >= 0)
        if nodes:
            start = self.turn % len(nodes)
            nodes = nodes[start:] + nodes[:start]
            self.turn += 1
        delivered: list[Delivered] = []
        for node in nodes:
            if len(delivered) >= max_records:
                break
            delivered += await self._fetch_at(
                caller, node, topic_id, by_leader[node], max_records - len(delivered), 0
            )
        return delivered, Leaders(by_leader, nodes)

    async def wait(
        self,
        caller: Caller,
        topic_id: uuid.UUID,
        asked: Leaders,
        max_records: int,
        wait_s: float,
    ) -> list[Delivered]:
        """After a `poll` that found nothing: up to `max_records` records from the leader
        asked first, waiting there for one for a slice of `wait_s` (all of it when one
        broker leads every partition); nothing when none came (the caller polls again)."""
        if not asked.nodes:
            await trio.sleep(min(wait_s, WAIT_SLICE_S))
            return []
        whole = len(asked.by_leader) == 1
        wait_s = wait_s if whole else min(wait_s, WAIT_SLICE_S)
        node = asked.nodes[0]
        return await self._fetch_at(
            caller, node, topic_id, asked.by_leader[node], max_records, max(1, int(wait_s * 1000))
        )

    async def _fetch_at(
        self,
        caller: Caller,
        node: int,
        topic_id: uuid.UUID,
        indexes: Sequence[int],
        max_records: int,
        wait_ms: int,
    ) -> list[Delivered]:
        """A ShareFetch of `indexes` in this member's session with leader `node`; nothing
        when `node` does not answer (its session is forgotten: the next opens a new one)."""
        for attempt in range(2):
            epoch = self.epochs.get(node, 0)
            request = build(
                share_fetch.ShareFetchRequest,
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=i32(epoch),
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
                            for index in indexes
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
            try:
                answer: Any = await caller.at(node).call(request)
            except OSError:
                self.epochs.pop(node, None)
                return []
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
                    self.epochs.pop(node, None)  # the session was evicted: open a new one
                    continue
                refuse_on(response.error_code, response.error_message, f"queue {self.topic}")
                self.epochs[node] = epoch + 1
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
        self, caller: Caller, topic_id: uuid.UUID, records: Sequence[tuple[int, int, int]]
    ) -> list[tuple[int, int]]:
        """Acknowledge (partition, offset, acknowledgement type) triples at their
        partitions' leaders, one ShareAcknowledge each; the (partition, offset) pairs refused
        (lock expired, already acknowledged, not this member's, or held at a leader that no
        longer leads the partition or does not answer: its locks are gone)."""
        refused: list[tuple[int, int]] = []
        by_partition: dict[int, dict[int, int]] = {}
        for partition, offset, kind in records:
            by_partition.setdefault(partition, {})[offset] = kind
        offsets = [(partition, offset) for partition, offset, _ in records]
        for node, indexes in sorted(leaders(caller, self.topic, by_partition).items()):
            wanted = [(p, o) for p, o in offsets if p in set(indexes)]
            epoch = self.epochs.get(node, 0)
            if node < 0 or epoch == 0:
                refused += wanted  # no session there: the member holds no lock there
                continue
            request = build(
                share_acknowledge.ShareAcknowledgeRequest,
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=i32(epoch),
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
                                    for offset, kind in sorted(by_partition[partition].items())
                                ),
                            )
                            for partition in sorted(indexes)
                        ),
                    ),
                ),
            )
            try:
                response = await caller.at(node).call(request)
            except OSError:
                self.epochs.pop(node, None)
                refused += wanted
                continue
            if response.error_code in (
                ErrorCode.share_session_not_found,
                ErrorCode.invalid_share_session_epoch,
            ):
                # The session holding these messages ended: their locks are released.
                self.epochs.pop(node, None)
                refused += wanted
                continue
            refuse_on(response.error_code, response.error_message, f"queue {self.topic}")
            self.epochs[node] = epoch + 1
            refused_partitions = {
                int(p.partition_index)
                for t in response.responses
                for p in t.partitions
                if p.error_code != ErrorCode.none
            }
            refused += [(p, o) for p, o in wanted if p in refused_partitions]
        return refused


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
