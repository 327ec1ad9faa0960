"""One transactional id's state, and Kafka's transitions of it as pure functions.

A transition returns the next `TxnMetadata` (or the Kafka error that refuses it) without
touching the current one: the coordinator writes the next state to `__transaction_state`
first and adopts it only once the write committed, as Kafka's TransactionMetadata does with
its "transit" metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from raftka.broker.txn.records import TxnState, TxnValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
PRODUCER_EPOCH_MAX = 32767  # Short.MaxValue

TopicPartition = tuple[str, int]


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: at `PRODUCER_EPOCH_MAX - 1` an id is used up
    and the next InitProducerId gets a new producer id."""
    return epoch >= PRODUCER_EPOCH_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    # The id used before a rotation (epoch exhaustion), for a retried InitProducerId.
    previous_producer_id: int = NO_PRODUCER_ID
    # The epoch before the last bump, so a retried InitProducerId (KIP-360) is recognised.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = 0

    def to_value(self) -> TxnValue:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(index)
        return TxnValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=by_topic,
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
        )

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnValue) -> TxnMetadata:
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            timeout_ms=value.timeout_ms,
            state=value.state,
            partitions=frozenset(
                (topic, index) for topic, indexes in value.partitions.items() for index in indexes
            ),
            start_ms=value.start_ms,
            last_update_ms=value.last_update_ms,
        )


def init_error(meta: TxnMetadata, expected: tuple[int, int] | None) -> ErrorCode | None:
    """What InitProducerId gets before any transition (None: go on). `expected` is the
    (producer id, epoch) a KIP-360 client sends to bump its own epoch."""
    if expected is not None:
        producer_id, epoch = expected
        known = (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id and epoch_exhausted(epoch))
        )
        if not known:
            return ErrorCode.producer_fenced
    if meta.state.is_prepare:
        return ErrorCode.concurrent_transactions
    return None


def needs_new_producer_id(meta: TxnMetadata, expected: tuple[int, int] | None) -> bool:
    """True when InitProducerId must rotate to a new producer id: the epoch is used up (and
    the client, if it says, is at that epoch)."""
    return epoch_exhausted(meta.producer_epoch) and (
        expected is None or expected[1] == meta.producer_epoch
    )


def bump_epoch(
    meta: TxnMetadata, timeout_ms: int, expected_epoch: int | None, now_ms: int
) -> TxnMetadata | ErrorCode:
    """InitProducerId on an Empty or Complete* id: the next epoch, an empty transaction."""
    bumped = meta.producer_epoch + 1
    if expected_epoch is None:
        epochs = (bumped, NO_PRODUCER_EPOCH)
    elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
        epochs = (bumped, meta.producer_epoch)
    elif expected_epoch == meta.last_producer_epoch:
        epochs = (meta.producer_epoch, meta.last_producer_epoch)  # a retry of the last bump
    else:
        return ErrorCode.producer_fenced
    return replace(
        meta,
        producer_epoch=epochs[0],
        last_producer_epoch=epochs[1],
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
    )


def rotate_producer_id(
    meta: TxnMetadata, producer_id: int, timeout_ms: int, now_ms: int, keep_last: bool
) -> TxnMetadata:
    """InitProducerId when the epoch is used up: a new producer id at epoch 0."""
    return replace(
        meta,
        producer_id=producer_id,
        previous_producer_id=meta.producer_id if keep_last else NO_PRODUCER_ID,
        producer_epoch=0,
        last_producer_epoch=meta.producer_epoch if keep_last else NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
    )


def fence_epoch(meta: TxnMetadata) -> TxnMetadata:
    """The epoch an Ongoing transaction is aborted with when it is fenced (a new
    InitProducerId, or its timeout): one above the producer's, so that producer's next
    request is refused. An exhausted epoch stays (the id rotates on the next init)."""
    epoch = (
        meta.producer_epoch
        if meta.producer_epoch >= PRODUCER_EPOCH_MAX
        else meta.producer_epoch + 1
    )
    return replace(meta, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)


def add_partitions(
    meta: TxnMetadata, partitions: frozenset[TopicPartition], now_ms: int
) -> TxnMetadata:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is Ongoing and includes them."""
    starting = meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    return replace(
        meta,
        state=TxnState.ONGOING,
        partitions=(frozenset() if starting else meta.partitions) | partitions,
        start_ms=now_ms if starting else meta.start_ms,
        last_update_ms=now_ms,
    )


def prepare_end(meta: TxnMetadata, commit: bool, now_ms: int) -> TxnMetadata:
    """EndTxn (or an abort by the coordinator) of an Ongoing transaction."""
    return replace(
        meta,
        state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
        last_update_ms=now_ms,
    )


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every partition has its marker: Complete*, with no partitions left."""
    state = (
        TxnState.COMPLETE_COMMIT
        if meta.state == TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    return replace(meta, state=state, partitions=frozenset(), last_update_ms=now_ms)


def end_error(meta: TxnMetadata, producer_id: int, epoch: int, commit: bool) -> ErrorCode | None:
    """What EndTxn from a client gets before any transition (None: the transaction ends
    now). A retry after the transaction completed the same way gets NONE, as in Kafka."""
    if meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    same_way = {
        TxnState.COMPLETE_COMMIT: commit,
        TxnState.COMPLETE_ABORT: not commit,
        TxnState.PREPARE_COMMIT: commit,
        TxnState.PREPARE_ABORT: not commit,
    }
    if meta.state == TxnState.ONGOING:
        return None
    if meta.state.is_complete and same_way[meta.state]:
        return ErrorCode.none
    if meta.state.is_prepare and same_way[meta.state]:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state
