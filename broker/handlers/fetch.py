"""Fetch: byte ranges of segment files up to the high watermark, with long polling.

A read_committed fetch (isolation level 1) reads only below the last stable offset and lists
the aborted transactions overlapping the batches it returns, from the segments'
aborted-transaction indexes, so the consumer drops their records; every fetch reports the
last stable offset, as Kafka's does.

Record bytes are not read into Python: each partition's answer is a range of a segment file
(held by a duplicated descriptor, so retention deleting the file cannot change it) that the
connection sends with sendfile (see `raftka.protocol.splice`). Ranges under
`INLINE_RECORDS_BYTES_MAX` are read instead, which costs less than a sendfile round.

With an authorizer, a consumer needs READ on each topic it fetches (else its partitions
answer TOPIC_AUTHORIZATION_FAILED and nothing of them is read), asked once per request.

A consumer's Fetch (replica id -1, v7+) goes through the broker's fetch sessions (KIP-227,
`raftka.broker.fetch_sessions`): epoch 0 reads the named partitions and opens a session of
them when a slot is free (its id in the response, else 0); epoch -1 reads them without one;
any other epoch reads every partition of the named session, after applying the request's
added, changed and forgotten partitions, and the response carries only the partitions with
records, an error or a changed high watermark, log start or last stable offset. An unknown
session answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH (also
when a later request of the session was checked while this one long-polled), both top-level
with no partitions. The session is checked and updated before the handler's first await, so
fetches of one session are checked in arrival order. A replica's Fetch (replica id >= 0)
keeps no session: followers replicate by Raft.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, cast

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.fetch_sessions import (
    INVALID_SESSION_ID,
    SESSIONLESS,
    CachedPartition,
    FetchContext,
    FetchSession,
    FetchSessionCache,
    FullFetch,
    IncrementalFetch,
    PartitionKey,
    SessionError,
)
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    led_partition,
    response_entity,
    response_module,
)
from raftka.broker.replica import wait_for_appends
from raftka.broker.replica.manager import READ_COMMITTED
from raftka.broker.security.acl import AclOperation
from raftka.broker.services import Subscribed
from raftka.protocol.api import build
from raftka.protocol.fetch_codec import FetchAnswer, FetchData, FetchedPartition, FetchedTopic
from raftka.protocol.splice import FileRange, SplicedResponse, Splices

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.long_polls import Poll
    from raftka.broker.topics import Partition, Topic
    from raftka.log.segment import LogSegment
    from raftka.protocol.messages.requests import FetchRequest as KioFetchRequest

    #: As the connection decodes it (`FetchData`), or as kio does (in-process callers).
    FetchRequest = FetchData | KioFetchRequest
    from raftka.protocol.messages.responses import FetchResponse

#: Read once: a member of an enum of a module that is not compiled is looked up through
#: EnumType's `__getattr__` hook on every access (Python 3.11).
_READ: Final = AclOperation.READ
_NO_ERROR: Final = ErrorCode.none

#: A partition's answer before its records are placed: its fields, the segment slice
#: (segment, position, length) to send as its records or None for none, and what was asked
#: of it.
_PartitionAnswer: TypeAlias = (
    "tuple[FetchedPartition, tuple[LogSegment, int, int] | None, _Position]"
)
#: (topic name, topic id, its partitions' answers).
_TopicAnswer: TypeAlias = "tuple[str, uuid.UUID | None, list[_PartitionAnswer]]"
#: (topic name, topic id, its partitions) to read: a request's, or a session's in fetch order.
_WantedTopic: TypeAlias = "tuple[str | None, uuid.UUID | None, Sequence[_Position]]"


class _Position(Protocol):
    """Where to read a partition: a request's partition or a session's `CachedPartition`."""

    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...


#: Share fetches long-poll as fetches do (`handlers/share.py`).
_any_appended = wait_for_appends
#: Record ranges up to this size are read into the response rather than sent with sendfile.
INLINE_RECORDS_BYTES_MAX = 32 * 1024


def _read_all(
    context: RequestContext,
    request: FetchRequest,
    wanted_topics: Sequence[_WantedTopic],
    by_id: bool,
    module: ModuleType,
    may_read: TopicAccess,
    incremental: bool = False,
) -> tuple[list[_TopicAnswer], int, list[Partition]]:
    """One pass over the wanted partitions: ((topic, topic id, partition answers) per
    topic, bytes, partitions read). A partition's records are a segment slice or none.
    Partitions of topics `may_read` refuses answer TOPIC_AUTHORIZATION_FAILED.
    `incremental`: the positions are a session's, and a partition with nothing to tell
    (`_has_no_news`) is watched but not read, and has no answer."""
    topics = context.services.topics
    replicas = context.services.replica_manager
    remaining = request.max_bytes if request.max_bytes > 0 else 0
    # KIP-74: the first partition with data returns at least one whole batch.
    min_one_batch = True
    total_bytes = 0
    watched: list[Partition] = []
    responses: list[_TopicAnswer] = []
    for wanted_name, topic_id, wanted_partitions in wanted_topics:
        topic: Topic | None
        if by_id:
            topic = topics.topics_by_id.get(topic_id) if topic_id is not None else None
            name = topic.name if topic is not None else None
        else:
            name = wanted_name
            topic = topics.get(name) if name is not None else None
        partitions: list[_PartitionAnswer] = []
        for p in wanted_partitions:
            partition = (
                topic.partitions[p.partition]
                if topic is not None and 0 <= p.partition < len(topic.partitions)
                else None
            )
            # Consumers read from the leader (no fetch-from-follower, KIP-392).
            led = led_partition(partition, getattr(p, "current_leader_epoch", -1))
            if (
                incremental
                and not isinstance(led, ErrorCode)
                and name is not None
                and may_read(name)
                and _has_no_news(led, cast(CachedPartition, p), request.isolation_level)
                and not (context.api_version < ZSTD_FETCH_MIN_VERSION and _stores_zstd(led))
            ):
                watched.append(led)
                continue
            found_slice: tuple[LogSegment, int, int] | None = None
            fields = FetchedPartition(p.partition)
            if name is not None and not may_read(name):
                # An unknown topic id is answered as such first, as Kafka does; a name is
                # refused before its existence is told.
                fields.error_code = ErrorCode.topic_authorization_failed
            elif isinstance(led, ErrorCode):
                fields.error_code = ErrorCode.unknown_topic_id if by_id and topic is None else led
            elif context.api_version < ZSTD_FETCH_MIN_VERSION and _stores_zstd(led):
                # Kafka's rule: a client too old for zstd (Fetch below v10) is told so for a
                # topic stored in zstd, rather than sent batches it cannot read.
                fields.error_code = ErrorCode.unsupported_compression_type
            else:
                watched.append(led)
                max_bytes = min(p.partition_max_bytes, remaining)
                read = replicas.read(
                    led, p.fetch_offset, max_bytes, request.isolation_level, min_one_batch
                )
                fields.error_code = read.error_code
                fields.high_watermark = read.high_watermark
                fields.last_stable_offset = read.last_stable_offset
                fields.log_start_offset = read.log_start_offset
                found = read.found
                if found is not None:
                    length = found.length
                    min_one_batch = False
                    remaining = max(0, remaining - length)
                    total_bytes += length
                    found_slice = (found.segment, found.position, length)
                if read.aborted is not None:
                    fields.aborted_transactions = tuple(
                        build(
                            module.AbortedTransaction,
                            producer_id=txn.producer_id,
                            first_offset=txn.first_offset,
                        )
                        for txn in read.aborted
                    )
            partitions.append((fields, found_slice, p))
        responses.append((name or "", topic_id, partitions))
    return responses, total_bytes, watched


#: The first Fetch version of clients that read zstd (KIP-110).
ZSTD_FETCH_MIN_VERSION = 10
#: The first Fetch version with sessions (KIP-227).
SESSION_FETCH_MIN_VERSION = 7
#: The first Fetch version that names topics by id (KIP-516).
TOPIC_ID_FETCH_MIN_VERSION = 13


def _has_no_news(partition: Partition, cached: CachedPartition, isolation_level: int) -> bool:
    """Whether reading the partition for a session could tell nothing new: the consumer is
    at the end of what it may read and every offset the session last told is unchanged.
    Skips the read, which for a consumer of many partitions is most of an idle fetch."""
    high_watermark = partition.high_watermark
    if cached.high_watermark != high_watermark:
        return False
    log = partition.hosted_log
    stable = log.last_stable_offset(high_watermark)  # Partition.last_stable_offset, once
    if cached.last_stable_offset != stable:
        return False
    log_start = log.log_start_offset
    limit = stable if isolation_level == READ_COMMITTED else high_watermark
    return (
        cached.fetch_offset == limit
        and cached.local_log_start_offset == log_start
        and log_start <= limit
    )


def _stores_zstd(partition: Partition) -> bool:
    return partition.topic.config.get_str("compression.type") == "zstd"


def _build_topics(
    context: RequestContext, responses: list[_TopicAnswer], splices: Splices
) -> list[FetchedTopic]:
    """The response's topics, each slice made a placeholder for its file range (or read when
    small); counts bytes out and partition errors of the response sent. Must run in the same
    step as the `_read_all` that found the slices: no segment may have gone since."""
    metrics = context.services.metrics
    topics = []
    for name, topic_id, partitions in responses:
        built = []
        for fields, found, _ in partitions:
            # Empty, never null: librdkafka rejects a null MessageSet.
            if found is not None:
                segment, position, length = found
                fields.records = _records(segment, position, length, splices)
                metrics.fetched(name, length)
            error_code = fields.error_code
            if error_code:
                metrics.request_error(context.api_key, error_code)
            built.append(fields)
        topics.append(FetchedTopic(name, topic_id, built))
    return topics


def _records(segment: LogSegment, position: int, length: int, splices: Splices) -> bytes:
    """A placeholder for the range, or its bytes when small or out of descriptors."""
    if length > INLINE_RECORDS_BYTES_MAX:
        try:
            fd = os.dup(segment.fd)
        except OSError:  # EMFILE: the bytes still go out, through Python
            pass
        else:
            return splices.placeholder(FileRange(fd, position, length))
    return segment.pread(length, position)


def _request_topics(request: FetchRequest) -> list[_WantedTopic]:
    return [
        (getattr(t, "topic", None), getattr(t, "topic_id", None), t.partitions)
        for t in request.topics
    ]


def _session_topics(session: FetchSession) -> list[_WantedTopic]:
    """The session's partitions in fetch order, consecutive ones of a topic grouped (a
    topic may appear more than once, as in Kafka's responses)."""
    wanted: list[_WantedTopic] = []
    last: tuple[str | None, uuid.UUID | None] | None = None
    for cached in session.in_order():
        topic = (cached.topic, cached.topic_id)
        if topic != last:
            wanted.append((cached.topic, cached.topic_id, []))
            last = topic
        cast("list[CachedPartition]", wanted[-1][2]).append(cached)
    return wanted


def _cached(
    request: FetchRequest, by_id: bool, context: RequestContext
) -> Iterator[CachedPartition]:
    """The request's partitions as a session keeps them, made as they are iterated."""
    by_topic_id = context.services.topics.topics_by_id
    for t in request.topics:
        topic_id: uuid.UUID | None = getattr(t, "topic_id", None)
        if by_id:
            topic = by_topic_id.get(topic_id) if topic_id is not None else None
            name = topic.name if topic is not None else None
        else:
            name = t.topic
        for p in t.partitions:
            yield CachedPartition(
                topic=name,
                topic_id=topic_id,
                partition=p.partition,
                fetch_offset=p.fetch_offset,
                partition_max_bytes=p.partition_max_bytes,
                current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                log_start_offset=getattr(p, "log_start_offset", -1),
                last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
            )


def _forgotten(request: FetchRequest, by_id: bool) -> list[PartitionKey]:
    forgotten: list[PartitionKey] = []
    for t in getattr(request, "forgotten_topics_data", ()):
        topic: str | uuid.UUID = t.topic_id if by_id else t.topic
        forgotten.extend((topic, partition) for partition in t.partitions)
    return forgotten


def _recorded(answer: _PartitionAnswer, cached: CachedPartition) -> bool:
    """Whether an incremental response carries this answer; the session remembers it."""
    fields, found, _ = answer
    return cached.must_respond(
        fields.error_code,
        fields.high_watermark,
        fields.log_start_offset,
        fields.last_stable_offset,
        found is not None and found[2] > 0,
        fields.preferred_read_replica,
    )


def _incremental_answers(
    session: FetchSession, responses: list[_TopicAnswer]
) -> list[_TopicAnswer]:
    """Only the answers an incremental response carries; partitions that returned records
    move to the end of the session's fetch order."""
    kept: list[_TopicAnswer] = []
    for name, topic_id, answers in responses:
        chosen = []
        for answer in answers:
            cached = answer[2]
            assert isinstance(cached, CachedPartition)
            if _recorded(answer, cached):
                chosen.append(answer)
                if answer[1] is not None:
                    session.moved_to_end(cached)
        if chosen:
            kept.append((name, topic_id, chosen))
    return kept


def _open_session(
    sessions: FetchSessionCache,
    request: FetchRequest,
    by_id: bool,
    context: RequestContext,
    responses: list[_TopicAnswer],
) -> int:
    """A session of the request's partitions, told what this response says; its id or 0."""
    partitions = list(_cached(request, by_id, context))
    answers = [answer for _, _, topic_answers in responses for answer in topic_answers]
    for cached, answer in zip(partitions, answers, strict=True):
        _recorded(answer, cached)
    return sessions.open_session(partitions, by_id)


class _Fetch:
    """One Fetch request: its fetch session checked and advanced when it is made, its
    partitions read by `read` (again after appends while it long-polls), and its response
    built by `response` from the last read, which must be in the same step: a segment
    found by an earlier read may have been deleted since (retention, DeleteRecords), so a
    wait that ends without a read (its deadline) reads again first, as Kafka's delayed
    fetch does when it completes."""

    __slots__ = (
        "context",
        "request",
        "entity",
        "module",
        "by_id",
        "fetch_context",
        "error",
        "wanted",
        "may_read",
        "incremental",
        "max_wait_s",
        "responses",
        "total_bytes",
        "watched",
    )

    def __init__(self, context: RequestContext, request: FetchRequest) -> None:
        self.context = context
        self.request = request
        self.entity: type[FetchResponse] = response_entity(context)
        self.module = response_module(context)
        session_id = getattr(request, "session_id", INVALID_SESSION_ID)
        self.by_id = by_id = context.api_version >= TOPIC_ID_FETCH_MIN_VERSION
        fetch_context: FetchContext = SESSIONLESS
        if request.replica_id >= 0 or context.api_version < SESSION_FETCH_MIN_VERSION:
            # Followers replicate by Raft, so a replica's Fetch keeps no session.
            if session_id != INVALID_SESSION_ID:
                fetch_context = SessionError(ErrorCode.fetch_session_id_not_found)
        else:
            fetch_context = context.services.fetch_sessions.new_context(
                session_id,
                getattr(request, "session_epoch", 0),
                by_id,
                _cached(request, by_id, context),
                _forgotten(request, by_id),
            )
        self.fetch_context = fetch_context
        #: A top-level session error: the whole answer, with nothing read.
        self.error = (
            _error_response(self.entity, fetch_context.error_code)
            if isinstance(fetch_context, SessionError)
            else None
        )
        self.incremental = isinstance(fetch_context, IncrementalFetch)
        self.wanted = (
            _session_topics(fetch_context.session)
            if isinstance(fetch_context, IncrementalFetch)
            else _request_topics(request)
        )
        # READ on each topic, asked once for the request however often the long poll reads.
        self.may_read = TopicAccess(context, _READ)
        self.max_wait_s = max(
            request.max_wait_ms / 1000
            if isinstance(request, FetchData)
            else request.max_wait.total_seconds(),
            0,
        )
        self.responses: list[_TopicAnswer] = []
        self.total_bytes = 0
        self.watched: list[Partition] = []

    def read(self) -> bool:
        """Read the wanted partitions; whether the response may go now: `min_bytes` were
        found, or no partition can give more."""
        self.responses, self.total_bytes, self.watched = _read_all(
            self.context,
            self.request,
            self.wanted,
            self.by_id,
            self.module,
            self.may_read,
            self.incremental,
        )
        return self.total_bytes >= self.request.min_bytes or not self.watched

    def response(self) -> FetchResponse | SplicedResponse:
        """The response from the last `read` (which must be in this step), kio's entity."""
        answer = self.answer()
        if isinstance(answer, FetchAnswer):
            return cast("FetchResponse", answer.entity(self.module))
        return answer

    def answer(self) -> FetchAnswer | FetchResponse | SplicedResponse:
        """`response`, written by the hand-written encoder where no kio entity is needed:
        kio's only with file ranges to splice in (`SplicedResponse` edits kio's) or for a
        session error."""
        context = self.context
        responses = self.responses
        response_session_id = INVALID_SESSION_ID
        fetch_context = self.fetch_context
        if isinstance(fetch_context, IncrementalFetch):
            session = fetch_context.session
            if session.epoch != fetch_context.response_epoch:
                # A later request of the session came first: this one's answer would be stale.
                return _error_response(
                    self.entity, ErrorCode.invalid_fetch_session_epoch, session.id
                )
            responses = _incremental_answers(session, responses)
            response_session_id = session.id
        elif isinstance(fetch_context, FullFetch):
            response_session_id = _open_session(
                context.services.fetch_sessions, self.request, self.by_id, context, responses
            )
        splices = Splices()
        answer = FetchAnswer(
            context.api_version,
            _NO_ERROR,
            response_session_id,
            _build_topics(context, responses, splices),
        )
        if splices.ranges:
            return SplicedResponse(answer.entity(self.module), splices)
        return answer


async def handle_fetch(
    context: RequestContext, request: FetchRequest
) -> FetchResponse | SplicedResponse:
    fetch = _Fetch(context, request)
    if fetch.error is not None:
        return fetch.error
    if not fetch.read() and fetch.max_wait_s > 0:
        with trio.move_on_after(fetch.max_wait_s) as wait:
            while True:
                await wait_for_appends(fetch.watched)
                if fetch.read():
                    break
        if wait.cancelled_caught:
            fetch.read()
    return fetch.response()


def start_fetch(
    context: RequestContext, request: FetchRequest
) -> (
    FetchAnswer
    | FetchResponse
    | SplicedResponse
    | Subscribed[FetchAnswer | FetchResponse | SplicedResponse]
):
    """`handle_fetch` without a task: the response at once, or, while it long-polls,
    `Subscribed` to the broker's `LongPolls`, which calls back after an append to one of
    its partitions (it reads again, and answers if it has enough) or at its deadline."""
    fetch = _Fetch(context, request)
    if fetch.error is not None:
        return fetch.error
    if fetch.read() or fetch.max_wait_s <= 0:
        return fetch.answer()
    return Subscribed(
        functools.partial(_long_poll, fetch, trio.current_time() + fetch.max_wait_s),
        fetch.answer,
    )


class _LongPoll:
    """A fetch waiting in the broker's long polls until `deadline`, reading after each append
    to its partitions, then calling `done` (after a read in the same step). No reference
    cycle outlives the wait (a closure that re-watched itself was one, and the broker's
    collector, tuned for few full collections, kept every finished fetch it held)."""

    __slots__ = ("fetch", "deadline", "done", "poll")

    def __init__(self, fetch: _Fetch, deadline: float, done: Callable[[], None]) -> None:
        self.fetch = fetch
        self.deadline = deadline
        self.done = done
        self.poll: Poll | None = fetch.context.services.long_polls.watch(
            fetch.watched, deadline, self.on_wake
        )

    def on_wake(self, timed_out: bool) -> None:
        fetch = self.fetch
        enough = fetch.read()  # also at the deadline: the response needs a read of this step
        if enough or timed_out:
            self.poll = None
            self.done()
        else:
            self.poll = fetch.context.services.long_polls.watch(
                fetch.watched, self.deadline, self.on_wake
            )

    def cancel(self) -> None:
        poll, self.poll = self.poll, None
        if poll is not None:
            poll.cancel()


def _long_poll(fetch: _Fetch, deadline: float, done: Callable[[], None]) -> Callable[[], None]:
    """Wait for records as `_LongPoll` does; the returned function cancels the wait."""
    return _LongPoll(fetch, deadline, done).cancel


def _error_response(
    entity: type[FetchResponse], error_code: ErrorCode, session_id: int = INVALID_SESSION_ID
) -> FetchResponse:
    """A top-level session error: no partitions."""
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=error_code,
        session_id=session_id,
        responses=(),
    )
