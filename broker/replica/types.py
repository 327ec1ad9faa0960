"""What callers of the replica manager hand it and get back: the origin of an append, each
partition's answer, and the narrow views of the broker the manager needs."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from raftka.broker.cluster.commands import Command, CommandResult
    from raftka.broker.topics import Partition, Topic
    from raftka.log.partition import LogSlice
    from raftka.log.txn_index import AbortedTxn


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's AppendOrigin): a producer's batches, validated and checked
    against the partition's producer state; a coordinator's own records (groups,
    transactions, share state), trusted; or `raftka restore` writing stored batches back
    at the offsets they had."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    RESTORE = "restore"


@dataclass(slots=True, init=False)
class AppendResult:
    """One partition's answer to an append (Produce's PartitionProduceResponse fields).
    `appended_bytes` and `appended_records` count what this append wrote (0 for a refused
    batch or a retried duplicate), for the caller's metrics. (Its constructor is written
    out: compiled, the dataclass's generated one would run as Python, once per append.)"""

    error_code: ErrorCode
    error_message: str | None
    base_offset: int
    #: The time the leader stamped on a LogAppendTime topic's batch; None otherwise.
    log_append_time_ms: int | None
    log_start_offset: int
    #: (index of the record in its batch, message) of each record refused.
    record_errors: tuple[tuple[int, str], ...]
    appended_bytes: int
    appended_records: int

    def __init__(
        self,
        error_code: ErrorCode = ErrorCode.none,
        error_message: str | None = None,
        base_offset: int = -1,
        log_append_time_ms: int | None = None,
        log_start_offset: int = -1,
        record_errors: tuple[tuple[int, str], ...] = (),
        appended_bytes: int = 0,
        appended_records: int = 0,
    ) -> None:
        self.error_code = error_code
        self.error_message = error_message
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.record_errors = record_errors
        self.appended_bytes = appended_bytes
        self.appended_records = appended_records

    def fail(self, error_code: ErrorCode, error_message: str | None = None) -> None:
        self.error_code = error_code
        self.error_message = error_message

    def copy_from(self, other: AppendResult) -> None:
        """Take every field of `other`."""
        self.error_code = other.error_code
        self.error_message = other.error_message
        self.base_offset = other.base_offset
        self.log_append_time_ms = other.log_append_time_ms
        self.log_start_offset = other.log_start_offset
        self.record_errors = other.record_errors
        self.appended_bytes = other.appended_bytes
        self.appended_records = other.appended_records


@dataclass(slots=True, init=False)
class PartitionRead:
    """What a fetch found in one partition the broker leads: its offsets, the slice of a
    segment to send (None: nothing, or `error_code` says why) and, for read_committed, the
    aborted transactions overlapping the slice. Read only (not frozen, and its constructor
    written out: one is made per partition a fetch reads)."""

    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    found: LogSlice | None
    aborted: tuple[AbortedTxn, ...] | None

    def __init__(
        self,
        error_code: ErrorCode,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        found: LogSlice | None,
        aborted: tuple[AbortedTxn, ...] | None,
    ) -> None:
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.found = found
        self.aborted = aborted


class PartitionSource(Protocol):
    """The topics the manager appends to and reads from (`TopicManager`)."""

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    def get(self, name: str) -> Topic | None: ...

    def partition(self, name: str, index: int) -> Partition | None: ...


class ProducerIdFloorView(Protocol):
    @property
    def producer_id_floor(self) -> int: ...


class MetadataClient(Protocol):
    """What a restore needs of the controller: the cluster's producer id floor, raised by a
    command."""

    @property
    def image(self) -> ProducerIdFloorView: ...

    async def execute(self, command: Command) -> CommandResult: ...


class CoordinatorController(MetadataClient, Protocol):
    """What a coordinator's internal topic needs of the controller: the live brokers (its
    replication factor) and the command that creates it; and what a replica manager of its
    own needs (`MetadataClient`)."""

    def live_brokers(self) -> list[int]: ...


class TransactionVerifier(Protocol):
    """KIP-890's question to the transaction coordinator before a producer's first
    transactional batch on a partition is appended (`TransactionCoordinator`)."""

    async def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> ErrorCode: ...
