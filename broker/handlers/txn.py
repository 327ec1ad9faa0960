"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions (InitProducerId with a transactional id is in `producer_ids`).

Each maps its request (any supported version) onto `broker.txn.TransactionCoordinator`.
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for versions that predate it, as Kafka does.

With an authorizer, Kafka's ACLs apply: AddPartitionsToTxn (v0-3), AddOffsetsToTxn and EndTxn
need WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), AddPartitionsToTxn
WRITE on each topic too (TOPIC_AUTHORIZATION_FAILED, nothing added) and AddOffsetsToTxn READ
on the group (GROUP_AUTHORIZATION_FAILED). AddPartitionsToTxn v4+ is Kafka's broker-to-broker
form and needs CLUSTER_ACTION on the cluster (raftka's own brokers verify over the Raft peer
transport instead). DescribeTransactions needs DESCRIBE on each id and shows only the topics
the principal may DESCRIBE; ListTransactions lists only ids the principal may DESCRIBE;
DescribeProducers needs READ on each topic.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV4,
)
from kio.schema.add_partitions_to_txn.v5.request import (
    AddPartitionsToTxnRequest as AddPartitionsToTxnRequestV5,
)
from kio.schema.errors import ErrorCode

from raftka.broker.groups import OFFSETS_TOPIC
from raftka.broker.groups.records import partition_for_group
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    TopicAccess,
    response_entity,
    response_module,
)
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.txn.coordinator import TRANSACTION_STATE_TOPIC
from raftka.broker.txn.records import TxnState
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.topics import Topic
    from raftka.broker.txn import TransactionCoordinator
    from raftka.broker.txn.metadata import TopicPartition
    from raftka.protocol.messages.requests import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        EndTxnRequest,
        ListTransactionsRequest,
    )
    from raftka.protocol.messages.responses import (
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnResponse,
        DescribeProducersResponse,
        DescribeTransactionsResponse,
        EndTxnResponse,
        ListTransactionsResponse,
    )

ADD_PARTITIONS_MIN_VERSION, ADD_PARTITIONS_MAX_VERSION = 0, 5
ADD_OFFSETS_MIN_VERSION, ADD_OFFSETS_MAX_VERSION = 0, 4
END_TXN_MIN_VERSION, END_TXN_MAX_VERSION = 0, 5
DESCRIBE_TRANSACTIONS_MIN_VERSION, DESCRIBE_TRANSACTIONS_MAX_VERSION = 0, 0
# v2's transactional id pattern (a Java regular expression) is not served.
LIST_TRANSACTIONS_MIN_VERSION, LIST_TRANSACTIONS_MAX_VERSION = 0, 1


def coordinator_of(context: RequestContext) -> TransactionCoordinator:
    return context.services.transactions


async def ensure_transaction_state_topic(context: RequestContext) -> Topic | None:
    """`__transaction_state`, created on first use; None while it cannot be."""
    await coordinator_of(context).log.ensure_created()
    return context.services.topics.get(TRANSACTION_STATE_TOPIC)


def may_write_transaction(context: RequestContext, transactional_id: str) -> bool:
    """May the request's principal act as the producer of `transactional_id`?"""
    return context.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def fenced_for_version(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """Clients before `first_fenced_version` do not know PRODUCER_FENCED."""
    if error == ErrorCode.producer_fenced and version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error


# -- AddPartitionsToTxn ---------------------------------------------------------------------


class NamedPartitions(Protocol):
    """A topic's name and partition indexes, as AddPartitionsToTxn names them."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[int]: ...


async def _add_one(
    context: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Iterable[NamedPartitions],
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    """Per-partition errors for one transaction of the request."""
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    if context.api_version < 4 and not may_write_transaction(context, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    # v4+ comes from brokers (CLUSTER_ACTION, checked for the whole request): no topic ACLs.
    may_write = TopicAccess(context, AclOperation.WRITE)
    if context.api_version >= 4:
        may_write.enabled = False
    refused: dict[TopicPartition, ErrorCode] = {}
    topics_view = context.services.topics
    for tp in wanted:
        topic = topics_view.get(tp[0])
        if not may_write(tp[0]) or (
            # Clients add internal partitions only through AddOffsetsToTxn (as in Kafka,
            # which refuses them here whatever the ACLs).
            context.api_version < 4 and topic is not None and topic.is_internal
        ):
            refused[tp] = ErrorCode.topic_authorization_failed
        elif topics_view.partition(*tp) is None:
            refused[tp] = ErrorCode.unknown_topic_or_partition
    if refused:
        # Nothing is added when any partition is refused (Kafka's all-or-nothing).
        return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    coordinator = coordinator_of(context)
    if verify_only:
        return {
            tp: coordinator.verify(transactional_id, producer_id, producer_epoch, tp)
            for tp in wanted
        }
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, fenced_for_version(error, context.api_version, 2))


def _topic_results(
    module: ModuleType, errors: dict[TopicPartition, ErrorCode]
) -> tuple[object, ...]:
    by_topic: dict[str, list[object]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            build(
                module.AddPartitionsToTxnPartitionResult,
                partition_index=index,
                partition_error_code=error,
            )
        )
    return tuple(
        build(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(rs))
        for topic, rs in by_topic.items()
    )


async def handle_add_partitions_to_txn(
    context: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    entity: type[AddPartitionsToTxnResponse] = response_entity(context)
    module = response_module(context)
    if not isinstance(request, AddPartitionsToTxnRequestV4 | AddPartitionsToTxnRequestV5):
        errors = await _add_one(
            context,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(module, errors),
        )
    if not context.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in request.transactions:
        errors = await _add_one(
            context,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=txn.verify_only,
        )
        results.append(
            build(
                module.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(module, errors),
            )
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )


# -- AddOffsetsToTxn ------------------------------------------------------------------------


async def handle_add_offsets_to_txn(
    context: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    entity: type[AddOffsetsToTxnResponse] = response_entity(context)
    services = context.services
    if not may_write_transaction(context, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
        return build(entity, throttle_time=NO_THROTTLE, error_code=error)
    if not context.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
        return build(entity, throttle_time=NO_THROTTLE, error_code=error)
    await services.groups.ensure_offsets_topic()
    topic = services.topics.get(OFFSETS_TOPIC)
    if topic is None:
        error = ErrorCode.coordinator_not_available
    else:
        offsets_partition = partition_for_group(request.group_id, len(topic.partitions))
        error = await coordinator_of(context).add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [(OFFSETS_TOPIC, offsets_partition)],
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=fenced_for_version(error, context.api_version, 2),
    )


# -- EndTxn ---------------------------------------------------------------------------------


async def handle_end_txn(context: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    entity: type[EndTxnResponse] = response_entity(context)
    if not may_write_transaction(context, request.transactional_id):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    result = await coordinator_of(context).end_transaction(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
    )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=fenced_for_version(result.error, context.api_version, 2),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


# -- DescribeTransactions / ListTransactions --------------------------------------------------


async def handle_describe_transactions(
    context: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    entity: type[DescribeTransactionsResponse] = response_entity(context)
    module = response_module(context)
    coordinator = coordinator_of(context)
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)
    states = []
    for transactional_id in request.transactional_ids:
        found = (
            coordinator.describe(transactional_id)
            if context.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
            )
            else ErrorCode.transactional_id_authorization_failed
        )
        if isinstance(found, ErrorCode):
            states.append(
                build(
                    module.TransactionState,
                    error_code=found,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_datetime(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(found.partitions):
            if may_describe(topic):  # Kafka shows only the topics the principal may see
                by_topic.setdefault(topic, []).append(index)
        states.append(
            build(
                module.TransactionState,
                error_code=ErrorCode.none,
                transactional_id=transactional_id,
                transaction_state=found.state.kafka_name,
                transaction_timeout=datetime.timedelta(milliseconds=found.timeout_ms),
                transaction_start_time=_datetime(found.start_ms),
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                topics=tuple(
                    build(module.TopicData, topic=topic, partitions=tuple(indexes))
                    for topic, indexes in by_topic.items()
                ),
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle_list_transactions(
    context: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    entity: type[ListTransactionsResponse] = response_entity(context)
    module = response_module(context)
    states: list[TxnState] = []
    unknown: list[str] = []
    for name in request.state_filters:
        state = TxnState.from_kafka_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.append(state)
    listed = coordinator_of(context).list_transactions(
        states if request.state_filters else None,
        request.producer_id_filters,
        int(getattr(request, "duration_filter", -1)),
    )
    if isinstance(listed, ErrorCode):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=listed,
            unknown_state_filters=tuple(unknown),
            transaction_states=(),
        )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            build(
                module.TransactionState,
                transactional_id=entry.transactional_id,
                producer_id=entry.producer_id,
                transaction_state=entry.state.kafka_name,
            )
            for entry in sorted(listed, key=lambda e: e.transactional_id)
            if context.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, entry.transactional_id
            )
        ),
    )


DESCRIBE_PRODUCERS_MIN_VERSION, DESCRIBE_PRODUCERS_MAX_VERSION = 0, 0


async def handle_describe_producers(
    context: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    """DescribeProducers (KIP-664): the producers a partition's leader tracks, with the
    first offset of each one's ongoing transaction, which is how `kafka-transactions.sh
    find-hanging` finds a transaction that holds the last stable offset back."""
    entity: type[DescribeProducersResponse] = response_entity(context)
    module = response_module(context)
    topics = context.services.topics
    may_read = TopicAccess(context, AclOperation.READ)

    def partition_answer(name: str, index: int) -> object:
        partition = topics.partition(name, index)
        if not may_read(name):
            error, message = ErrorCode.topic_authorization_failed, None
        elif partition is None:
            error, message = ErrorCode.unknown_topic_or_partition, None
        elif not partition.is_leader or partition.log is None:
            error, message = ErrorCode.not_leader_or_follower, None
        else:
            producers = partition.log.producer_state.producers.values()
            return build(
                module.PartitionResponse,
                partition_index=index,
                error_code=ErrorCode.none,
                error_message=None,
                active_producers=tuple(
                    build(
                        module.ProducerState,
                        producer_id=entry.producer_id,
                        producer_epoch=entry.epoch,
                        last_sequence=entry.last_sequence,
                        last_timestamp=entry.last_timestamp_ms,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset,
                    )
                    for entry in sorted(producers, key=lambda e: e.producer_id)
                ),
            )
        return build(
            module.PartitionResponse,
            partition_index=index,
            error_code=error,
            error_message=message,
            active_producers=(),
        )

    return build(
        entity,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                module.TopicResponse,
                name=topic.name,
                partitions=tuple(
                    partition_answer(topic.name, index) for index in topic.partition_indexes
                ),
            )
            for topic in request.topics
        ),
    )
