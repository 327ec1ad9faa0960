"""The replica manager: the data path of the partitions this broker hosts, for clients and
coordinators alike (Kafka's ReplicaManager). Handlers decode, authorize and answer; the
transaction, group and share coordinators write through it too.

- `append_records`: batches of producers (`AppendOrigin.CLIENT`, or RESTORE on a topic in
  restore mode), or of a coordinator (COORDINATOR: trusted, not validated), proposed to
  each partition's Raft group; the answers wait for `required_acks`: acks=1 once the leader
  stored the batch as durably as the flush policy requires (page cache by default; fsynced
  with flush.messages=1), acks=all once a majority of the replicas has (the high watermark
  passed it). Only the leader accepts writes (NOT_LEADER_OR_FOLLOWER otherwise).
- `read` and `wait_for_appends`: a fetch's slice of a led partition's log, below the high
  watermark or, for read_committed, the last stable offset; the aborted transactions it
  overlaps.
- `list_offset`, `end_offset_for_epoch`: ListOffsets' and OffsetForLeaderEpoch's lookups.
- `delete_records`: raise log start offsets and wait for the replicas' low watermark.
- `write_marker`: a transaction's COMMIT or ABORT marker, told to `marker_listeners`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.clock import SYSTEM_CLOCK, Clock
from raftka.broker.cluster.commands import RaiseProducerIdFloorCommand
from raftka.broker.replica.append import (
    AckWait,
    ClientAppends,
    WriteQueues,
    acked_already,
    fail_unwritten,
)
from raftka.broker.replica.restore import append_restore
from raftka.broker.replica.types import (
    AppendOrigin,
    AppendResult,
    MetadataClient,
    PartitionRead,
    PartitionSource,
    TransactionVerifier,
)
from raftka.broker.topics import Partition, now_ms
from raftka.consensus.core import NotLeaderError, StorageError
from raftka.consensus.driver import TIMED_OUT, MarkOutcome
from raftka.consensus.types import Entry
from raftka.log import OffsetOutOfRange, PartitionLog
from raftka.log.partition import LogSlice
from raftka.log.producer_state import ProducerStateError
from raftka.protocol.batch_builder import build_end_txn_marker
from raftka.protocol.records import read_batch_header

logger = logging.getLogger("raftka.replica")

READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
#: How often a DeleteRecords waiting for the replicas' log starts looks again.
LOW_WATERMARK_POLL_S = 0.02

#: Told of every marker written here: (topic, partition, producer id, committed).
MarkerListener = Callable[[str, int, int, bool], None]


class OffsetNotAvailable(Exception):
    """The answer would come from a high watermark the new leader has not caught up yet."""


def replica_partition(
    partition: Partition | None, current_leader_epoch: int
) -> Partition | ErrorCode:
    """`partition` when this broker holds a replica of it and may answer from that replica's
    own log at `current_leader_epoch` (Kafka fences the epoch on followers too); otherwise
    the error Kafka answers."""
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if partition.raft is None or partition.log is None:
        # KAFKA_STORAGE_ERROR when its log directory is offline here.
        return (
            ErrorCode.kafka_storage_error if partition.offline else ErrorCode.not_leader_or_follower
        )
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return partition


async def wait_for_appends(partitions: Sequence[Partition]) -> None:
    """Wait until any of the partitions has an append (or is deleted): a fetch's long poll."""
    woken = trio.Event()
    for partition in partitions:
        partition.waiters.add(woken)
    try:
        await woken.wait()
    finally:
        for partition in partitions:
            partition.waiters.discard(woken)


def lookup_offset(
    partition: Partition, timestamp: int, isolation_level: int | None
) -> tuple[int, int]:
    """(offset, timestamp) per Kafka's ListOffsets rules; (-1, -1) when nothing matches;
    OffsetNotAvailable as for `ReplicaManager.list_offset`."""
    log = partition.hosted_log
    if isolation_level is None:
        last_fetchable = log.log_end_offset
    elif isolation_level == READ_COMMITTED:
        last_fetchable = partition.last_stable_offset
    else:
        last_fetchable = partition.high_watermark
    # Only a consumer waits for a new leader to commit its epoch start (KAFKA-7703).
    behind = isolation_level is not None and partition.high_watermark_behind_epoch_start
    if timestamp == LATEST:
        if behind:
            raise OffsetNotAvailable
        return last_fetchable, -1
    if timestamp == EARLIEST:
        return log.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_and_offset()
        if found is None or found[1] >= last_fetchable:
            return -1, -1
        return found[1], found[0]
    at_timestamp = log.offset_for_timestamp(timestamp)
    if at_timestamp is None or at_timestamp[0] >= last_fetchable:
        if behind:
            raise OffsetNotAvailable
        return -1, -1
    return at_timestamp


def _committed_already(partition: Partition, entry: Entry, result: AppendResult) -> bool:
    """Whether a coordinator's batch committed as it was written (an only voter): its
    answer need not wait. A replaced batch fails `result` as `_await_commit` would."""
    raft = partition.raft
    if raft is None:
        return False
    try:
        return raft.reached(entry.end_offset, entry.epoch)
    except NotLeaderError as exc:
        result.fail(ErrorCode.not_leader_or_follower, f"{partition.name}: {exc}")
        return True


def leads(partition: Partition) -> bool:
    """Whether this broker leads the partition and hosts its log."""
    return partition.is_leader and partition.log is not None


class PendingAppends:
    """The answers of `ReplicaManager.start_append`: final when `complete`, else once `wait`
    returns (on time out a partition answers REQUEST_TIMED_OUT, on lost leadership
    NOT_LEADER_OR_FOLLOWER)."""

    __slots__ = (
        "manager",
        "required_acks",
        "timeout_s",
        "results",
        "waits",
        "commits",
        "floors",
        "client_appends",
    )

    def __init__(self, manager: ReplicaManager, required_acks: int, timeout_s: float) -> None:
        self.manager = manager
        self.required_acks = required_acks
        self.timeout_s = timeout_s
        self.results: list[AppendResult] = []
        self.waits: list[AckWait] = []
        self.commits: list[tuple[Partition, Entry, AppendResult]] = []
        self.floors: list[tuple[Partition, int, AppendResult]] = []
        self.client_appends: ClientAppends | None = None

    @property
    def complete(self) -> bool:
        return self.acks_only and not self.waits

    def settle(self) -> bool:
        """Drop the waits for acks that are over now (after `ReplicaManager.write_proposed`
        an only voter's batches are committed); whether the answers are final."""
        acks = self.required_acks
        failures = self.manager.queues.write_failures
        waits: list[AckWait] = []
        for wait in self.waits:
            partition, waiting, result = wait
            failure = failures.get(partition) if failures else None
            if failure is not None:
                fail_unwritten(partition, result, failure)
            elif not acked_already(partition, acks, waiting, result):
                waits.append(wait)
        self.waits = waits
        return self.complete

    @property
    def acks_only(self) -> bool:
        """Whether all that is left is waiting for acks (no queued write, transaction
        commit or producer id floor): then `subscribe` can replace `wait`."""
        queued = self.client_appends is not None and self.client_appends.queued
        return not (queued or self.commits or self.floors)

    def subscribe(self, done: Callable[[], None]) -> None:
        """`wait` without a task, when `acks_only`: `done()` is called once every answer is
        final (at once if none waits)."""
        assert self.acks_only, "queued writes, commits and floors need `wait`"
        waits, self.waits = self.waits, []
        left = len(waits)
        if not left:
            done()
            return

        def one_done() -> None:
            nonlocal left
            left -= 1
            if not left:
                done()

        for partition, waiting, result in waits:
            self.manager._subscribe_ack(
                partition, self.required_acks, waiting, self.timeout_s, result, one_done
            )

    async def wait(self) -> list[AppendResult]:
        """Append the queued writes, then wait for every answer's acks."""
        if self.client_appends is not None and self.client_appends.queued:
            await self.client_appends.finish()
            self.waits += self.client_appends.take_waits()
        manager, acks, timeout_s = self.manager, self.required_acks, self.timeout_s
        if len(self.waits) == 1 and not self.commits and not self.floors:
            # One partition to wait for (the usual request): no nursery, no task.
            partition, waiting, result = self.waits[0]
            await manager._await_ack(partition, acks, waiting, timeout_s, result)
        elif self.waits or self.commits or self.floors:
            async with trio.open_nursery() as nursery:
                for partition, waiting, result in self.waits:
                    nursery.start_soon(
                        manager._await_ack, partition, acks, waiting, timeout_s, result
                    )
                for partition, entry, result in self.commits:
                    nursery.start_soon(manager._await_commit, partition, entry, timeout_s, result)
                if self.floors:
                    nursery.start_soon(manager._raise_producer_id_floor, self.floors)
        return self.results


class ReplicaManager:
    """The partitions' data path; `topics` finds them, `controller` raises the producer id
    floor after a restore. Built before the coordinators that write through it."""

    def __init__(
        self, topics: PartitionSource, controller: MetadataClient, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.topics = topics
        self.controller = controller
        self.clock = clock
        self.queues = WriteQueues()
        #: Told of an I/O error reading a partition's files: the broker takes the log
        #: directory offline (None: the error propagates).
        self.on_log_dir_failure: Callable[[str, OSError], None] | None = None
        self.marker_listeners: list[MarkerListener] = []

    # -- appends -----------------------------------------------------------------------------

    async def append_records(
        self,
        origin: AppendOrigin,
        required_acks: int,
        timeout_s: float,
        entries: Sequence[tuple[Partition, bytes]],
        *,
        produce_version: int = 9,
        client: str = "",
        transactional_id: str | None = None,
        verifier: TransactionVerifier | None = None,
        leader_epoch: int | None = None,
    ) -> list[AppendResult]:
        """Append each partition's records; the answers in the order of `entries`
        (`start_append` and its `PendingAppends.wait`, which says more)."""
        return await self.start_append(
            origin,
            required_acks,
            timeout_s,
            entries,
            produce_version=produce_version,
            client=client,
            transactional_id=transactional_id,
            verifier=verifier,
            leader_epoch=leader_epoch,
        ).wait()

    def start_append(
        self,
        origin: AppendOrigin,
        required_acks: int,
        timeout_s: float,
        entries: Sequence[tuple[Partition, bytes]],
        *,
        produce_version: int = 9,
        client: str = "",
        transactional_id: str | None = None,
        verifier: TransactionVerifier | None = None,
        leader_epoch: int | None = None,
        group_commit: bool = False,
    ) -> PendingAppends:
        """Append each partition's records now, or queue them; the answers, in the order of
        `entries`, are final once the result is `complete` (else after its `wait`).

        Every append that needs no worker thread or verification is proposed before this
        returns, so requests handled in order keep their order on each partition. A
        CLIENT append to a topic in restore mode is a RESTORE append. COORDINATOR records
        are one batch per entry, appended unless this broker does not lead the partition at
        `leader_epoch` (None: any; else NOT_LEADER_OR_FOLLOWER) or a transactional batch's
        producer epoch is older than the partition's (INVALID_PRODUCER_EPOCH); their answers
        wait until the batch is committed, whatever `required_acks`.
        `transactional_id` and `verifier` serve KIP-890's verification of CLIENT batches.
        Waits that are over before they start (an only voter commits as it writes) are
        left out, so a request on such partitions is complete at once.
        `group_commit`: CLIENT batches appended at once are left unwritten, to be written
        with others by `write_proposed`, which the caller must call before it lets other
        tasks run; the answers are then final if `PendingAppends.settle` says so."""
        pending = PendingAppends(self, required_acks, max(timeout_s, 0.001))
        waits = pending.waits
        client_appends = pending.client_appends = ClientAppends(
            self.queues,
            required_acks,
            produce_version,
            client,
            transactional_id,
            verifier,
            group_commit,
        )
        results = pending.results
        for partition, records in entries:
            if origin is AppendOrigin.COORDINATOR:
                result = self._append_coordinator(partition, records, leader_epoch, pending.commits)
            elif origin is AppendOrigin.RESTORE or partition.topic.config.restore_in_progress:
                restore_waits: list[AckWait] = []
                result, floor = append_restore(
                    partition, records, required_acks, client, restore_waits
                )
                waits += (
                    w for w in restore_waits if not acked_already(w[0], required_acks, w[1], w[2])
                )
                if floor is not None:
                    pending.floors.append((partition, floor, result))
            else:
                result = client_appends.start(partition, records)
            results.append(result)
        waits += client_appends.take_waits()
        if pending.commits:
            pending.commits = [c for c in pending.commits if not _committed_already(*c)]
        return pending

    def write_proposed(self) -> None:
        """Write (and send to the followers) every batch `start_append` left unwritten:
        one write and one round of messages per partition for requests that came together.
        A partition whose log could not be written stops leading it; the answers waiting
        for those batches say so."""
        queues = self.queues
        unwritten = queues.unwritten
        if not unwritten:
            return
        queues.unwritten = []
        for partition in unwritten:
            try:
                partition.write_proposed()
            except NotLeaderError as exc:  # logged by the Raft group
                queues.write_failures[partition] = exc

    @staticmethod
    def _append_coordinator(
        partition: Partition,
        batch: bytes,
        leader_epoch: int | None,
        commits: list[tuple[Partition, Entry, AppendResult]],
    ) -> AppendResult:
        """A coordinator's batch, proposed as is; its entry goes to `commits`, whose answers
        wait until it is committed."""
        result = AppendResult()
        log = partition.log
        header = read_batch_header(batch)
        if header.is_transactional and header.producer_id >= 0 and log is not None:
            # Checked right before the propose (no await between): a fenced producer's
            # records must not reach the log, as Kafka's producer state refuses them.
            known = log.producer_state.get(header.producer_id)
            if known is not None and header.producer_epoch < known.epoch:
                result.fail(
                    ErrorCode.invalid_producer_epoch,
                    f"{partition.name}: epoch {header.producer_epoch} of producer "
                    f"{header.producer_id} is older than the epoch {known.epoch} seen last; "
                    "the producer was fenced by a newer instance",
                )
                return result
        # A write decided in an earlier term of this broker must not land in a later one
        # (Kafka checks the coordinator epoch).
        current = partition.leader_epoch if log is not None and partition.is_leader else None
        if leader_epoch is not None and current != leader_epoch:
            where = "no longer leads it" if current is None else f"leads it at epoch {current}"
            result.fail(
                ErrorCode.not_leader_or_follower,
                f"{partition.name}: the write was decided at leader epoch {leader_epoch}, "
                f"this broker {where}",
            )
            return result
        record_count = header.last_offset_delta + 1
        try:
            entry = partition.propose(batch, record_count)
        except NotLeaderError as exc:
            result.fail(ErrorCode.not_leader_or_follower, f"{partition.name}: {exc}")
            return result
        result.base_offset = entry.end_offset - record_count
        result.appended_bytes = len(batch)
        result.appended_records = record_count
        commits.append((partition, entry, result))
        return result

    @staticmethod
    async def _await_commit(
        partition: Partition, entry: Entry, timeout_s: float, result: AppendResult
    ) -> None:
        try:
            if not await partition.wait_committed(entry, timeout_s):
                result.fail(ErrorCode.request_timed_out, f"{partition.name}: not committed in time")
        except NotLeaderError as exc:
            result.fail(ErrorCode.not_leader_or_follower, f"{partition.name}: {exc}")

    @staticmethod
    async def _await_ack(
        partition: Partition,
        acks: int,
        waiting: tuple[int, int | None],
        timeout_s: float,
        result: AppendResult,
    ) -> None:
        """`_subscribe_ack` for a task: returns once `result` is filled in."""
        answered = trio.Event()
        ReplicaManager._subscribe_ack(partition, acks, waiting, timeout_s, result, answered.set)
        await answered.wait()

    @staticmethod
    def _subscribe_ack(
        partition: Partition,
        acks: int,
        waiting: tuple[int, int | None],
        timeout_s: float,
        result: AppendResult,
        done: Callable[[], None],
    ) -> None:
        """Wait for the acks of the batch ending at `waiting` (its end offset and epoch) as a
        callback of the partition's Raft group: `result` is filled in (REQUEST_TIMED_OUT
        after `timeout_s`, at most a node tick late; NOT_LEADER_OR_FOLLOWER or
        KAFKA_STORAGE_ERROR when the batch was replaced or its log went offline), then
        `done()` called."""
        end_offset, epoch = waiting

        def outcome(reached: MarkOutcome) -> None:
            if isinstance(reached, NotLeaderError):
                fail_unwritten(partition, result, reached)
            elif reached == TIMED_OUT:
                missed = (
                    "not replicated to a majority in time"
                    if acks == -1
                    else "not synced to disk in time"
                )
                result.fail(ErrorCode.request_timed_out, f"{partition.name}: {missed}")
            done()

        raft = partition.raft
        try:
            if raft is None:
                raise NotLeaderError(None, f"{partition.name} is no longer hosted on this broker")
            if acks == -1:
                raft.on_committed(end_offset, timeout_s, epoch, outcome)
            else:
                raft.on_durable(end_offset, timeout_s, epoch, outcome)
        except NotLeaderError as exc:
            outcome(exc)

    async def _raise_producer_id_floor(
        self, floors: list[tuple[Partition, int, AppendResult]]
    ) -> None:
        """Raise the floor past every producer id the request restored (one command: the
        floor is a maximum); on failure every partition that needed it answers the error."""
        floor = max(floor for _, floor, _ in floors)
        if floor <= self.controller.image.producer_id_floor:
            return
        answer = await self.controller.execute(RaiseProducerIdFloorCommand(floor))
        if answer.error_code == ErrorCode.none:
            return
        for partition, _, result in floors:
            if not result.error_code:
                result.fail(
                    answer.error_code,
                    f"{partition.name}: the producer id floor was not raised to {floor}: "
                    f"{answer.error_message}",
                )

    # -- markers -----------------------------------------------------------------------------

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        timeout_s: float,
    ) -> ErrorCode:
        """Append one COMMIT (`committed`) or ABORT marker of `producer_id` at
        `producer_epoch` to topic-partition, which this broker must lead, and return once it
        is committed (the high watermark passed it): ErrorCode.none, or Kafka's error
        (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for an
        epoch older than the partition's, REQUEST_TIMED_OUT after `timeout_s`). Once it is
        committed, `marker_listeners` are told."""
        target = self.topics.partition(topic, partition)
        if target is None:
            return ErrorCode.unknown_topic_or_partition
        log = target.log
        if not target.is_leader or log is None:
            return ErrorCode.not_leader_or_follower
        # Checked and proposed with no await in between: no other append can come first.
        try:
            log.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        except ProducerStateError as exc:
            logger.info(
                "refused a %s marker on %s: %s",
                "COMMIT" if committed else "ABORT",
                target.name,
                exc.message,
                extra={"partition": target.name, "topic": topic},
            )
            return ErrorCode(exc.error_code)
        batch = build_end_txn_marker(
            producer_id, producer_epoch, coordinator_epoch, committed, now_ms()
        )
        try:
            entry = target.propose(batch, 1)
        except StorageError:
            return ErrorCode.kafka_storage_error
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower
        try:
            done = await target.wait_committed(entry, timeout_s)
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower
        if not done:
            return ErrorCode.request_timed_out
        for listener in self.marker_listeners:
            listener(topic, partition, producer_id, committed)
        return ErrorCode.none

    # -- reads -------------------------------------------------------------------------------

    @staticmethod
    def get_log(partition: Partition) -> PartitionLog | None:
        """The partition's log when this broker hosts a replica of it, else None (Kafka's
        getLog: what a coordinator loads its state from)."""
        return partition.log if partition.is_local else None

    def read(
        self,
        partition: Partition,
        fetch_offset: int,
        max_bytes: int,
        isolation_level: int,
        min_one_batch: bool,
    ) -> PartitionRead:
        """A fetch's read of a partition this broker leads: whole batches from the one
        holding `fetch_offset`, below the high watermark (read_committed: the last stable
        offset), at most `max_bytes` unless `min_one_batch` (KIP-74); nothing is read when
        `max_bytes` is 0 without it. OFFSET_OUT_OF_RANGE outside the log."""
        log = partition.hosted_log
        high_watermark = partition.high_watermark
        stable = log.last_stable_offset(high_watermark)  # Partition.last_stable_offset, once
        limit = high_watermark if isolation_level != READ_COMMITTED else stable
        error = ErrorCode.none
        found: LogSlice | None = None
        try:
            if max_bytes > 0 or min_one_batch:
                found = log.fetch_slice(fetch_offset, max_bytes, limit, min_one_batch)
        except OffsetOutOfRange:
            error = ErrorCode.offset_out_of_range
        except OSError as exc:
            if self.on_log_dir_failure is None:
                raise
            self.on_log_dir_failure(partition.name, exc)
            return PartitionRead(ErrorCode.kafka_storage_error, -1, -1, -1, None, None)
        aborted = None
        if isolation_level == READ_COMMITTED:
            aborted = (
                tuple(log.collect_aborted(fetch_offset, found.next_offset))
                if found is not None
                else ()
            )
        return PartitionRead(error, high_watermark, stable, log.log_start_offset, found, aborted)

    def list_offset(
        self, partition: Partition, timestamp: int, isolation_level: int | None
    ) -> tuple[int, int, int]:
        """(offset, timestamp, leader epoch of the offset or -1) per Kafka's ListOffsets
        rules; (-1, -1, -1) when nothing matches. `isolation_level` None: a replica or
        debugging client, answered up to the log end offset. Raises OffsetNotAvailable where
        Kafka answers a consumer OFFSET_NOT_AVAILABLE (retriable)."""
        offset, found_timestamp = lookup_offset(partition, timestamp, isolation_level)
        if offset < 0:
            return offset, found_timestamp, -1
        # Kafka reports the epoch that wrote the offset, or -1 when none is known.
        epoch = partition.hosted_log.epoch_for_offset(offset)
        return offset, found_timestamp, -1 if epoch is None else epoch

    def end_offset_for_epoch(self, partition: Partition, leader_epoch: int) -> tuple[int, int]:
        """KIP-101: (the largest epoch <= `leader_epoch`, the end offset of that epoch)."""
        return partition.hosted_log.end_offset_for_epoch(leader_epoch)

    # -- DeleteRecords -----------------------------------------------------------------------

    async def delete_records(
        self, requests: Sequence[tuple[Partition, int]], timeout_s: float
    ) -> list[tuple[ErrorCode, int]]:
        """Advance each partition's log start offset to its offset (-1: the high watermark)
        and answer (error, low watermark) per request, in order.

        As in Kafka (DelayedDeleteRecords), a partition answers once its low watermark (the
        lowest log start of the leader and every live replica, which raise theirs to the
        leader's through Raft appends and heartbeats) reached the requested offset; past
        `timeout_s` it answers REQUEST_TIMED_OUT (the deletion still proceeds)."""
        answers: list[tuple[ErrorCode, int]] = []
        waiting: list[tuple[int, Partition, int]] = []
        for slot, (partition, wanted) in enumerate(requests):
            answers.append((ErrorCode.none, -1))
            if not leads(partition):
                answers[slot] = (ErrorCode.not_leader_or_follower, -1)
                continue
            offset = partition.high_watermark if wanted == -1 else wanted
            if offset < 0 or offset > partition.high_watermark:
                answers[slot] = (ErrorCode.offset_out_of_range, -1)
                continue
            # Committed data only; followers that lack it are sent a snapshot.
            required = min(offset, partition.hosted_raft.deletable_end())
            partition.hosted_log.delete_records_before(required)
            waiting.append((slot, partition, required))
        await self._await_low_watermarks(answers, waiting, timeout_s)
        return answers

    async def _await_low_watermarks(
        self,
        answers: list[tuple[ErrorCode, int]],
        waiting: list[tuple[int, Partition, int]],
        timeout_s: float,
    ) -> None:
        deadline = self.clock.now_s() + timeout_s
        while True:
            pending = []
            for slot, partition, required in waiting:
                raft = partition.raft
                low_watermark = raft.low_watermark() if raft is not None else None
                if low_watermark is None or not partition.is_leader:
                    answers[slot] = (ErrorCode.not_leader_or_follower, -1)
                elif low_watermark >= required:
                    answers[slot] = (ErrorCode.none, low_watermark)
                else:
                    pending.append((slot, partition, required))
            waiting = pending
            if not waiting:
                return
            if self.clock.now_s() >= deadline:
                for slot, _, _ in waiting:
                    answers[slot] = (ErrorCode.request_timed_out, -1)
                return
            await trio.sleep(min(LOW_WATERMARK_POLL_S, max(deadline - self.clock.now_s(), 0)))


__all__ = [
    "AppendOrigin",
    "AppendResult",
    "OffsetNotAvailable",
    "ReplicaManager",
    "leads",
    "lookup_offset",
    "replica_partition",
    "wait_for_appends",
]
