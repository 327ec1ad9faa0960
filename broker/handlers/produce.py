"""Produce: authorize, check each partition's request, append through the replica manager,
answer per partition.

The append itself (validation by batch headers, the topic's codec, producer state and
duplicates, transaction verification (KIP-890), restore mode, acks and
min.insync.replicas) is the replica manager's (`raftka.broker.replica`). Only the leader
accepts writes: any other broker answers NOT_LEADER_OR_FOLLOWER so the client refreshes its
metadata.

Transactional batches (KIP-98) need the request's transactional id (else every partition
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka) and one producer id across the
request (else INVALID_PRODUCER_ID_MAPPING); restore-mode topics take batches as stored.

With an authorizer (`authorizer.class.name`) the request's ACLs are asked first, as in
Kafka: transactional batches need WRITE on the transactional id (else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE (else its partitions answer
TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists); each once per request, nothing
of a refused partition is written. An acks=0 request has no answer to carry the error, so
the connection is closed after it, as Kafka does. Idempotent batches need nothing more:
InitProducerId checked IDEMPOTENT_WRITE when it handed out the producer id (Kafka dropped the
Produce check with KIP-679).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Final

from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    denied_message,
    response_entity,
    response_module,
)
from raftka.broker.replica import AppendOrigin, AppendResult, PendingAppends, in_restore_mode
from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.broker.services import Deferred, Later, Subscribed
from raftka.log.validation import ATTRIBUTES_LOW_BYTE
from raftka.protocol.api import EncodedResponse, build
from raftka.protocol.produce_codec import (
    FIRST_FLEXIBLE_VERSION,
    LAST_VERSION,
    ProduceData,
    encode_one_partition_response,
    encode_produce_response,
)
from raftka.protocol.records import (
    CONTROL_FLAG_MASK,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    read_batch_header,
)

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Partition
    from raftka.protocol.messages.requests import ProduceRequest as KioProduceRequest

    #: As the connection decodes it (`ProduceData`), or as kio does (in-process callers).
    ProduceRequest = ProduceData | KioProduceRequest
    from raftka.protocol.messages.responses import ProduceResponse


def _append_time(ms: int | None) -> datetime.datetime | None:
    if ms is None or ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


#: Read once: every access to a member of an enum this compiled module does not define
#: (AclOperation's) goes through the metaclass's `__getattr__` hook (Python 3.11).
_WRITE: Final = AclOperation.WRITE

_AUTHORIZATION_ERRORS = frozenset(
    {ErrorCode.topic_authorization_failed, ErrorCode.transactional_id_authorization_failed}
)


def _transactional_error(
    context: RequestContext, request: ProduceRequest
) -> tuple[ErrorCode, str] | None:
    """Kafka's whole-request refusals of transactional batches: no transactional id, no
    WRITE on it, or more than one producer id among them (restore-mode topics take batches
    as stored). Only a batch whose attributes say transactional (and not control) is looked
    at further."""
    producers: set[int] | None = None  # made for the first transactional batch
    for topic_data in request.topic_data or ():
        restore: bool | None = None
        for data in topic_data.partition_data or ():
            records = data.records
            if (
                not records
                or len(records) < RECORD_BATCH_OVERHEAD
                or records[ATTRIBUTES_LOW_BYTE] & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
                != TRANSACTIONAL_FLAG_MASK
                or records[MAGIC_OFFSET] != MAGIC_V2  # other layouts: validation refuses them
            ):
                continue
            if restore is None:
                topic = context.services.topics.get(topic_data.name)
                restore = topic is not None and in_restore_mode(topic)
            if restore:
                break
            producer_id = read_batch_header(records).producer_id
            if producer_id >= 0:
                if producers is None:
                    producers = set()
                producers.add(producer_id)
    if not producers:
        return None
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is None:
        return (
            ErrorCode.transactional_id_authorization_failed,
            "transactional records need the request's transactional id",
        )
    if not context.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return (
            ErrorCode.transactional_id_authorization_failed,
            denied_message(
                context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
            ),
        )
    if len(producers) > 1:
        return (
            ErrorCode.invalid_producer_id_mapping,
            f"transactional records of more than one producer id: {sorted(producers)}",
        )
    return None


def _refusal(
    context: RequestContext,
    request: ProduceRequest,
    name: str,
    partition: Partition | None,
    refused: tuple[ErrorCode, str] | None,
    may_write: TopicAccess,
) -> AppendResult | None:
    """The answer of a partition the request may not append to; None when it may."""
    if refused is not None:
        return AppendResult(refused[0], refused[1])
    if not may_write(name):
        # Asked before existence, so a refused client learns nothing of the topic.
        return AppendResult(
            ErrorCode.topic_authorization_failed,
            denied_message(context, AclOperation.WRITE, ResourceType.TOPIC, name),
        )
    if request.acks not in (-1, 0, 1):
        return AppendResult(ErrorCode.invalid_required_acks)
    if partition is None:
        return AppendResult(ErrorCode.unknown_topic_or_partition)
    if partition.topic.is_internal:
        return AppendResult(
            ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
        )
    return None


async def handle_produce(
    context: RequestContext, request: ProduceRequest
) -> ProduceResponse | None:
    answer = start_produce(context, request)
    assert not isinstance(answer, Deferred), "only group commit defers"
    if isinstance(answer, Later):
        answer = await answer.answer
    return None if answer is None else _response(context, answer.answers)


class ProduceAnswers(EncodedResponse):
    """A Produce response as the partitions' answers, written by the hand-written encoder
    (`protocol/produce_codec.py`) of the request's version."""

    __slots__ = ("version", "answers")

    def __init__(self, version: int, answers: list[tuple[str, list[tuple[int, AppendResult]]]]):
        self.version = version
        self.answers = answers

    def encode(self, correlation_id: int) -> bytes:
        answers = self.answers
        if FIRST_FLEXIBLE_VERSION <= self.version <= LAST_VERSION and len(answers) == 1:
            name, partitions = answers[0]
            if len(partitions) == 1:
                # The common answer, its fields read here where their class is known (the
                # encoder reads them by name).
                index, answer = partitions[0]
                if not answer.record_errors and answer.error_message is None:
                    return encode_one_partition_response(
                        correlation_id,
                        name,
                        index,
                        answer.error_code,
                        answer.base_offset,
                        answer.log_append_time_ms,
                        answer.log_start_offset,
                    )
        return encode_produce_response(correlation_id, self.version, answers)


#: Each topic's partitions' answers in request order: (topic, [(partition index, answer)]),
#: the answers of appended partitions None until the replica manager gives them.
_Answers = list[tuple[str, list[tuple[int, AppendResult | None]]]]


def start_produce_together(
    context: RequestContext, request: ProduceRequest
) -> ProduceAnswers | None | Later[ProduceAnswers | None] | Deferred[ProduceAnswers | None]:
    """`start_produce` with group commit: the batches appended at once are written with
    those of the other requests read together (`Deferred`)."""
    return start_produce(context, request, group_commit=True)


def start_produce(
    context: RequestContext, request: ProduceRequest, *, group_commit: bool = False
) -> ProduceAnswers | None | Later[ProduceAnswers | None] | Deferred[ProduceAnswers | None]:
    """Check and append the request's batches now; the response, or `Later` while a
    partition's answer waits for acks, a worker thread or a verification. `group_commit`:
    batches are left unwritten and the answer is `Deferred` (see
    `ReplicaManager.start_append`)."""
    services = context.services
    topics = services.topics
    refused = _transactional_error(context, request)
    may_write = TopicAccess(context, _WRITE)
    results: _Answers = []
    appends: list[tuple[Partition, bytes]] = []
    for topic_data in request.topic_data or ():
        name: str = topic_data.name
        partition_results: list[tuple[int, AppendResult | None]] = []
        for data in topic_data.partition_data or ():
            partition = topics.partition(name, data.index)
            answer = _refusal(context, request, name, partition, refused, may_write)
            if answer is None:
                assert partition is not None, "a refusal answers unknown partitions"
                appends.append((partition, data.records or b""))
            partition_results.append((data.index, answer))
        results.append((name, partition_results))
    if not appends:
        return _answer(context, request, results, [], may_write)
    pending = services.replica_manager.start_append(
        AppendOrigin.CLIENT,
        request.acks,
        request.timeout_ms / 1000
        if isinstance(request, ProduceData)
        else request.timeout.total_seconds(),
        appends,
        produce_version=context.api_version,
        client=context.client_host,
        transactional_id=getattr(request, "transactional_id", None),  # Produce v3+
        verifier=services.transactions,
        group_commit=group_commit,
    )
    if group_commit and pending.waits:
        return Deferred(_Settlement(context, request, results, pending, may_write))
    if pending.complete:
        return _answer(context, request, results, pending.results, may_write)
    return Later(_answer_later(context, request, results, pending, may_write))


class _Settlement:
    """A group-committed request's answer once its batches were written (`Deferred.settle`
    calls it): at once if no wait is left, else when the partitions' acks come (by
    callback: no task per request). An object rather than a closure: a closure would make
    every local of `start_produce` a field of its environment when compiled."""

    __slots__ = ("context", "request", "results", "pending", "may_write")

    def __init__(
        self,
        context: RequestContext,
        request: ProduceRequest,
        results: _Answers,
        pending: PendingAppends,
        may_write: TopicAccess,
    ) -> None:
        self.context = context
        self.request = request
        self.results = results
        self.pending = pending
        self.may_write = may_write

    def __call__(
        self,
    ) -> ProduceAnswers | None | Later[ProduceAnswers | None] | Subscribed[ProduceAnswers | None]:
        pending = self.pending
        if pending.settle():
            return self.answer()
        if pending.acks_only:
            return Subscribed(pending.subscribe, self.answer)
        return Later(
            _answer_later(self.context, self.request, self.results, pending, self.may_write)
        )

    def answer(self) -> ProduceAnswers | None:
        return _answer(
            self.context, self.request, self.results, self.pending.results, self.may_write
        )


async def _answer_later(
    context: RequestContext,
    request: ProduceRequest,
    results: _Answers,
    pending: PendingAppends,
    may_write: TopicAccess,
) -> ProduceAnswers | None:
    return _answer(context, request, results, await pending.wait(), may_write)


def _answer(
    context: RequestContext,
    request: ProduceRequest,
    results: _Answers,
    appended_results: list[AppendResult],
    may_write: TopicAccess,
) -> ProduceAnswers | None:
    """Count the answers and build the response (None for acks=0)."""
    appended = iter(appended_results)
    answers = [
        (name, [(index, answer or next(appended)) for index, answer in partition_results])
        for name, partition_results in results
    ]
    metrics = context.services.metrics
    for name, partition_answers in answers:
        for _, answer in partition_answers:
            if answer.appended_bytes:
                metrics.produced(name, answer.appended_bytes, answer.appended_records)
            if answer.error_code:
                metrics.request_error(context.api_key, answer.error_code)
    if request.acks == 0:
        if may_write.enabled and context.session is not None and _refused(answers):
            # No answer can tell the client; Kafka closes the connection instead.
            context.session.close_after_response = True
        return None
    return ProduceAnswers(context.api_version, answers)


def _refused(answers: list[tuple[str, list[tuple[int, AppendResult]]]]) -> bool:
    """Whether an ACL refused any partition of the request."""
    return any(
        answer.error_code in _AUTHORIZATION_ERRORS
        for _, partition_answers in answers
        for _, answer in partition_answers
    )


def _response(
    context: RequestContext, answers: list[tuple[str, list[tuple[int, AppendResult]]]]
) -> ProduceResponse:
    entity: type[ProduceResponse] = response_entity(context)
    module = response_module(context)
    with_record_errors = hasattr(module, "BatchIndexAndErrorMessage")  # Produce v8+
    topic_responses = []
    for name, partition_answers in answers:
        responses = []
        for index, answer in partition_answers:
            # Record errors exist on the wire from v8 (the module has no entity before).
            record_errors = (
                tuple(
                    build(
                        module.BatchIndexAndErrorMessage,
                        batch_index=batch_index,
                        batch_index_error_message=message,
                    )
                    for batch_index, message in answer.record_errors
                )
                if with_record_errors
                else ()
            )
            responses.append(
                build(
                    module.PartitionProduceResponse,
                    index=index,
                    error_code=answer.error_code,
                    error_message=answer.error_message,
                    base_offset=answer.base_offset,
                    log_append_time=_append_time(answer.log_append_time_ms),
                    log_start_offset=answer.log_start_offset,
                    record_errors=record_errors,
                )
            )
        topic_responses.append(
            build(module.TopicProduceResponse, name=name, partition_responses=tuple(responses))
        )
    return build(entity, responses=tuple(topic_responses), throttle_time=NO_THROTTLE)
