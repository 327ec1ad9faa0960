"""The transaction coordinator's state machine over an in-memory `__transaction_state`.

Markers go to a fake writer that records each job and answers as the test says; time is
trio's mock clock, so transaction timeouts take no real time.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator, Mapping

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from raftka.broker.groups import MemoryOffsetsLog
from raftka.broker.groups.store import LoggedEntry, NotCoordinatorError
from raftka.broker.txn import MarkerJob, TransactionCoordinator, TxnConfig, TxnState
from raftka.broker.txn.metadata import TopicPartition
from raftka.broker.txn.records import TxnKey, TxnValue, partition_for_transaction

E = ErrorCode
N = 4
T0 = ("t", 0)
T1 = ("t", 1)


class FakeMarkers:
    """Records every marker job; answers NONE unless `answers` holds a list of answers
    (per partition) still to give."""

    def __init__(self) -> None:
        self.jobs: list[MarkerJob] = []
        self.answers: dict[TopicPartition, list[ErrorCode]] = {}
        self.gate: trio.Event | None = None

    async def write(self, job: MarkerJob) -> Mapping[TopicPartition, ErrorCode]:
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        self.jobs.append(job)
        out = {}
        for tp in job.partitions:
            queued = self.answers.get(tp)
            out[tp] = queued.pop(0) if queued else E.none
        return out


class FakeProducerIds:
    def __init__(self) -> None:
        self.ids = itertools.count(1000)

    async def next_producer_id(self) -> int:
        await trio.lowlevel.checkpoint()
        return next(self.ids)


class Remote:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int, TopicPartition]] = []

    async def verify(self, transactional_id: str, pid: int, epoch: int, tp: TopicPartition) -> E:
        self.asked.append((transactional_id, pid, epoch, tp))
        return E.none


class Setup:
    def __init__(self, log: MemoryOffsetsLog | None = None) -> None:
        self.log = log or MemoryOffsetsLog(N)
        self.markers = FakeMarkers()
        self.remote = Remote()
        self.coordinator = TransactionCoordinator(
            self.log,
            FakeProducerIds(),
            self.markers,
            TxnConfig(max_timeout_ms=60_000, abort_check_interval_ms=1000),
            clock_ms=lambda: int(trio.current_time() * 1000),
            remote=self.remote,
        )

    def written(self, transactional_id: str) -> list[TxnValue]:
        """The values written for the id, in log order."""
        key = TxnKey(transactional_id).encode()
        partition = partition_for_transaction(transactional_id, N)
        return [TxnValue.decode(v) for k, v in self.log.replay(partition) if k == key and v]

    def state(self, transactional_id: str) -> TxnState:
        found = self.coordinator.describe(transactional_id)
        assert not isinstance(found, ErrorCode), found
        return found.state


def run(test: Callable[[Setup], Awaitable[None]], setup: Setup | None = None) -> None:
    async def main() -> None:
        s = setup or Setup()
        s.coordinator.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s.coordinator.run)
            await trio.sleep(0.01)  # loads
            await test(s)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def settle() -> None:
    await trio.sleep(1)


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_0_then_epoch_bumps() -> None:
    async def test(s: Setup) -> None:
        first = await s.coordinator.init_producer_id("tx", 30_000)
        assert (first.error, first.producer_epoch) == (E.none, 0)
        second = await s.coordinator.init_producer_id("tx", 30_000)
        assert (second.error, second.producer_id, second.producer_epoch) == (
            E.none,
            first.producer_id,
            1,
        )
        assert [(v.producer_epoch, v.state) for v in s.written("tx")] == [
            (0, TxnState.EMPTY),
            (1, TxnState.EMPTY),
        ]

    run(test)


def test_commit_answers_after_prepare_then_markers_then_complete() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await s.coordinator.add_partitions("tx", pid, epoch, [T0, T1]) == E.none
        assert s.state("tx") == TxnState.ONGOING
        s.markers.gate = trio.Event()
        ended = await s.coordinator.end_transaction("tx", pid, epoch, commit=True)
        assert ended.error == E.none
        assert s.state("tx") == TxnState.PREPARE_COMMIT
        # While markers are pending, the producer waits.
        again = await s.coordinator.add_partitions("tx", pid, epoch, [T0])
        assert again == E.concurrent_transactions
        s.markers.gate.set()
        await settle()
        assert s.state("tx") == TxnState.COMPLETE_COMMIT
        [job] = s.markers.jobs
        assert job.committed and job.partitions == {T0, T1}
        assert (job.producer_id, job.producer_epoch) == (pid, epoch)
        states = [v.state for v in s.written("tx")]
        assert states == [
            TxnState.EMPTY,
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        ]
        assert s.written("tx")[1].partitions == {"t": [0, 1]}
        assert s.written("tx")[-1].partitions == {}
        # A retried EndTxn after completion answers as Kafka: the same outcome is NONE.
        retry = await s.coordinator.end_transaction("tx", pid, epoch, commit=True)
        assert retry.error == E.none
        other = await s.coordinator.end_transaction("tx", pid, epoch, commit=False)
        assert other.error == E.invalid_txn_state
        # The next transaction starts from Complete*.
        assert await s.coordinator.add_partitions("tx", pid, epoch, [T1]) == E.none
        found = s.coordinator.describe("tx")
        assert not isinstance(found, ErrorCode) and found.partitions == {T1}

    run(test)


def test_bad_end_txn_input_is_refused_and_writes_nothing() -> None:
    async def test(s: Setup) -> None:
        unknown = await s.coordinator.end_transaction("nobody", 1, 0, commit=True)
        assert unknown.error == E.invalid_producer_id_mapping
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid = init.producer_id
        assert (await s.coordinator.end_transaction("tx", pid + 1, 0, True)).error == (
            E.invalid_producer_id_mapping
        )
        assert (await s.coordinator.end_transaction("tx", pid, 5, True)).error == E.producer_fenced
        # Empty: nothing to end.
        assert (await s.coordinator.end_transaction("tx", pid, 0, True)).error == (
            E.invalid_txn_state
        )
        assert await s.coordinator.add_partitions("tx", pid, 3, [T0]) == E.producer_fenced
        assert await s.coordinator.add_partitions("nobody", pid, 0, [T0]) == (
            E.invalid_producer_id_mapping
        )
        assert len(s.written("tx")) == 1
        assert s.written("nobody") == []

    run(test)


def test_timeout_above_the_maximum_is_refused() -> None:
    async def test(s: Setup) -> None:
        result = await s.coordinator.init_producer_id("tx", 60_001)
        assert result.error == E.invalid_transaction_timeout
        assert (await s.coordinator.init_producer_id("", 1000)).error == E.invalid_request
        assert s.written("tx") == []

    run(test)


def test_a_new_producer_fences_an_ongoing_transaction() -> None:
    async def test(s: Setup) -> None:
        old = await s.coordinator.init_producer_id("tx", 30_000)
        pid = old.producer_id
        assert await s.coordinator.add_partitions("tx", pid, 0, [T0]) == E.none
        s.markers.gate = trio.Event()
        fencing = await s.coordinator.init_producer_id("tx", 30_000)
        assert fencing.error == E.concurrent_transactions
        assert s.state("tx") == TxnState.PREPARE_ABORT
        # The old producer is fenced at once.
        assert (await s.coordinator.end_transaction("tx", pid, 0, True)).error == (
            E.producer_fenced
        )
        retry = await s.coordinator.init_producer_id("tx", 30_000)
        assert retry.error == E.concurrent_transactions
        s.markers.gate.set()
        await settle()
        [job] = s.markers.jobs
        assert not job.committed and job.producer_epoch == 1 and job.partitions == {T0}
        assert s.state("tx") == TxnState.COMPLETE_ABORT
        new = await s.coordinator.init_producer_id("tx", 30_000)
        assert (new.error, new.producer_id, new.producer_epoch) == (E.none, pid, 2)
        assert await s.coordinator.add_partitions("tx", pid, 0, [T0]) == E.producer_fenced

    run(test)


def test_kip_360_epoch_bump_by_the_producer() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid = init.producer_id
        bumped = await s.coordinator.init_producer_id("tx", 30_000, (pid, 0))
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (E.none, pid, 1)
        # A retry of that bump (its response lost) gets the same epoch.
        retried = await s.coordinator.init_producer_id("tx", 30_000, (pid, 0))
        assert (retried.error, retried.producer_epoch) == (E.none, 1)
        stranger = await s.coordinator.init_producer_id("tx", 30_000, (pid + 7, 0))
        assert stranger.error == E.producer_fenced
        stale = await s.coordinator.init_producer_id("tx", 30_000, (pid, 9))
        assert stale.error == E.producer_fenced

    run(test)


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    log = MemoryOffsetsLog(N)
    partition = partition_for_transaction("tx", N)
    value = TxnValue(77, 32766, 30_000, TxnState.COMPLETE_COMMIT, {}, 0, -1)
    log.batches[partition] = []
    setup = Setup(log)

    async def write_old_state() -> None:
        await log.append(partition, [(TxnKey("tx").encode(), value.encode())])

    trio.run(write_old_state)

    async def test(s: Setup) -> None:
        result = await s.coordinator.init_producer_id("tx", 30_000)
        assert result.error == E.none
        assert result.producer_id != 77 and result.producer_epoch == 0

    run(test, setup)


def test_ongoing_transactions_past_their_timeout_are_aborted_with_a_bumped_epoch() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 5000)
        pid = init.producer_id
        assert await s.coordinator.add_partitions("tx", pid, 0, [T0]) == E.none
        await trio.sleep(3)
        assert s.state("tx") == TxnState.ONGOING
        await trio.sleep(4)
        assert s.state("tx") == TxnState.COMPLETE_ABORT
        [job] = s.markers.jobs
        assert not job.committed and job.producer_epoch == 1
        assert (await s.coordinator.end_transaction("tx", pid, 0, True)).error == (
            E.producer_fenced
        )

    run(test)


def test_markers_are_retried_until_every_partition_answered() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid = init.producer_id
        assert await s.coordinator.add_partitions("tx", pid, 0, [T0, T1, ("gone", 0)]) == E.none
        s.markers.answers = {
            T0: [E.not_leader_or_follower, E.request_timed_out],
            ("gone", 0): [E.unknown_topic_or_partition],
        }
        assert (await s.coordinator.end_transaction("tx", pid, 0, False)).error == E.none
        await settle()
        assert s.state("tx") == TxnState.COMPLETE_ABORT
        assert [sorted(j.partitions) for j in s.markers.jobs] == [
            [("gone", 0), T0, T1],
            [T0],
            [T0],
        ]

    run(test)


def test_loading_replays_the_log_and_resumes_markers_of_prepared_transactions() -> None:
    first = Setup()

    async def before(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        await s.coordinator.add_partitions("tx", init.producer_id, 0, [T0])
        other = await s.coordinator.init_producer_id("other", 30_000)
        await s.coordinator.add_partitions("other", other.producer_id, 0, [T1])
        s.markers.gate = trio.Event()  # the coordinator "dies" before the markers
        await s.coordinator.end_transaction("tx", init.producer_id, 0, True)

    run(before, first)
    assert [v.state for v in first.written("tx")][-1] == TxnState.PREPARE_COMMIT
    second = Setup(first.log)

    async def after(s: Setup) -> None:
        assert s.state("other") == TxnState.ONGOING
        await settle()
        assert s.state("tx") == TxnState.COMPLETE_COMMIT
        [job] = s.markers.jobs
        assert job.committed and job.partitions == {T0}

    run(after, second)


def test_ids_of_partitions_not_led_or_loading_are_refused() -> None:
    log = MemoryOffsetsLog(N)
    led = partition_for_transaction("tx", N)
    log.epochs = {led: 3}
    gate = log.caught_up[led] = trio.Event()
    setup = Setup(log)
    other = next(f"x{i}" for i in range(100) if partition_for_transaction(f"x{i}", N) != led)

    async def test(s: Setup) -> None:
        assert (await s.coordinator.init_producer_id(other, 1000)).error == E.not_coordinator
        assert (await s.coordinator.init_producer_id("tx", 1000)).error == (
            E.coordinator_load_in_progress
        )
        assert s.coordinator.list_transactions() == E.coordinator_load_in_progress
        gate.set()
        await settle()
        assert (await s.coordinator.init_producer_id("tx", 1000)).error == E.none
        log.epochs = {led: 4}  # leadership moved to a newer term unnoticed
        assert (await s.coordinator.init_producer_id("tx", 1000)).error == E.not_coordinator

    run(test, setup)


def test_verify_partition_for_the_produce_path() -> None:
    log = MemoryOffsetsLog(N)
    led = partition_for_transaction("tx", N)
    log.epochs = {led: 0}
    setup = Setup(log)
    elsewhere = next(f"x{i}" for i in range(100) if partition_for_transaction(f"x{i}", N) != led)

    async def test(s: Setup) -> None:
        c = s.coordinator
        init = await c.init_producer_id("tx", 30_000)
        pid = init.producer_id
        assert await c.verify_partition("tx", pid, 0, "t", 0) == E.invalid_txn_state
        await c.add_partitions("tx", pid, 0, [T0])
        assert await c.verify_partition("tx", pid, 0, "t", 0) == E.none
        assert await c.verify_partition("tx", pid, 0, "t", 1) == E.invalid_txn_state
        assert await c.verify_partition("tx", pid, 1, "t", 0) == E.invalid_producer_epoch
        assert await c.verify_partition("tx", pid + 1, 0, "t", 0) == E.invalid_txn_state
        assert await c.verify_partition(elsewhere, 5, 0, "t", 0) == E.none
        assert s.remote.asked == [(elsewhere, 5, 0, T0)]

    run(test, setup)


def test_describe_and_list() -> None:
    async def test(s: Setup) -> None:
        c = s.coordinator
        a = await c.init_producer_id("a", 30_000)
        b = await c.init_producer_id("b", 30_000)
        await c.add_partitions("b", b.producer_id, 0, [T1])
        assert c.describe("nobody") == E.transactional_id_not_found
        found = c.describe("b")
        assert not isinstance(found, ErrorCode)
        assert (found.state, found.partitions, found.timeout_ms) == (
            TxnState.ONGOING,
            {T1},
            30_000,
        )
        listed = c.list_transactions()
        assert not isinstance(listed, ErrorCode)
        assert sorted((e.transactional_id, e.state) for e in listed) == [
            ("a", TxnState.EMPTY),
            ("b", TxnState.ONGOING),
        ]
        ongoing = c.list_transactions([TxnState.ONGOING])
        assert not isinstance(ongoing, ErrorCode)
        assert [e.transactional_id for e in ongoing] == ["b"]
        by_id = c.list_transactions(producer_ids=[a.producer_id])
        assert not isinstance(by_id, ErrorCode)
        assert [e.transactional_id for e in by_id] == ["a"]
        assert c.list_transactions([]) == []  # only unknown state names were asked for
        await trio.sleep(5)
        long_running = c.list_transactions([TxnState.ONGOING], duration_ms=4000)
        assert not isinstance(long_running, ErrorCode)
        assert [e.transactional_id for e in long_running] == ["b"]
        assert c.list_transactions([TxnState.ONGOING], duration_ms=6000) == []

    run(test)


def test_a_failed_write_changes_nothing() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        s.log.fail_appends = True
        error = await s.coordinator.add_partitions("tx", init.producer_id, 0, [T0])
        assert error == E.coordinator_not_available
        assert s.state("tx") == TxnState.EMPTY
        s.log.fail_appends = False
        assert await s.coordinator.add_partitions("tx", init.producer_id, 0, [T0]) == E.none

    run(test)


def test_a_complete_write_not_committed_in_time_is_retried_while_still_coordinator() -> None:
    """The log raises NotCoordinatorError when a write did not commit in time although this
    broker still leads at the same epoch: Complete* is written once appends succeed again."""

    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await s.coordinator.add_partitions("tx", pid, epoch, [T0]) == E.none
        s.markers.gate = trio.Event()
        assert (await s.coordinator.end_transaction("tx", pid, epoch, True)).error == E.none
        s.log.fail_appends = NotCoordinatorError("the records did not commit in time (test)")
        s.markers.gate.set()
        await settle()
        assert s.state("tx") == TxnState.PREPARE_COMMIT
        s.log.fail_appends = False
        await trio.sleep(10)
        assert s.state("tx") == TxnState.COMPLETE_COMMIT
        assert (await s.coordinator.end_transaction("tx", pid, epoch, True)).error == E.none
        assert (await s.coordinator.init_producer_id("tx", 30_000)).error == E.none

    run(test)


def test_markers_resume_when_leadership_is_lost_and_regained_while_they_are_sent() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await s.coordinator.add_partitions("tx", pid, epoch, [T0]) == E.none
        s.markers.gate = trio.Event()
        assert (await s.coordinator.end_transaction("tx", pid, epoch, True)).error == E.none
        await trio.sleep(0.01)  # the job of epoch 0 waits in the marker writer
        index = partition_for_transaction("tx", N)
        s.log.epochs = dict.fromkeys(range(N), 0) | {index: 1}
        s.coordinator.become_leader(index, 1)  # lost and regained: the reload resumes
        await settle()
        assert s.state("tx") == TxnState.PREPARE_COMMIT
        s.markers.gate.set()
        await settle()
        assert s.state("tx") == TxnState.COMPLETE_COMMIT
        assert {j.coordinator_epoch for j in s.markers.jobs} >= {1}

    run(test)


class SlowProducerIds:
    """Allocates after a while (as reserving a block in the allocator's store may)."""

    async def next_producer_id(self) -> int:
        await trio.sleep(1)
        return 2000


def test_a_transaction_started_while_a_producer_id_is_allocated_is_aborted_not_lost() -> None:
    log = MemoryOffsetsLog(N)
    index = partition_for_transaction("tx", N)
    exhausted = TxnValue(1000, 32766, 30_000, TxnState.COMPLETE_COMMIT, {}, 1, 1)

    async def seed() -> None:
        await log.append(index, [(TxnKey("tx").encode(), exhausted.encode())])

    trio.run(seed)
    setup = Setup(log)
    setup.coordinator.producer_ids = SlowProducerIds()

    async def test(s: Setup) -> None:
        results = []

        async def init() -> None:
            results.append(await s.coordinator.init_producer_id("tx", 30_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(init)
            await trio.sleep(0.1)  # the rotation waits for its new producer id
            assert await s.coordinator.add_partitions("tx", 1000, 32766, [T0]) == E.none
        # The old producer's transaction is fenced and aborted, not overwritten.
        assert [r.error for r in results] == [E.concurrent_transactions]
        await settle()
        [job] = s.markers.jobs
        assert (job.producer_id, job.committed, job.partitions) == (1000, False, {T0})
        assert s.state("tx") == TxnState.COMPLETE_ABORT
        assert [(v.producer_id, v.state) for v in s.written("tx")][1:] == [
            (1000, TxnState.ONGOING),
            (1000, TxnState.PREPARE_ABORT),
            (1000, TxnState.COMPLETE_ABORT),
        ]
        again = await s.coordinator.init_producer_id("tx", 30_000)
        assert (again.error, again.producer_id, again.producer_epoch) == (E.none, 2000, 0)

    run(test, setup)


def test_a_write_decided_before_a_new_term_is_not_appended_in_it() -> None:
    async def test(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        pid, epoch = init.producer_id, init.producer_epoch
        s.log.append_gate = trio.Event()
        results = []

        async def add() -> None:
            results.append(await s.coordinator.add_partitions("tx", pid, epoch, [T0]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add)
            await trio.sleep(0.01)  # queued at epoch 0, waiting in the log
            index = partition_for_transaction("tx", N)
            s.log.epochs = dict.fromkeys(range(N), 0) | {index: 1}
            s.coordinator.become_leader(index, 1)
            s.log.append_gate.set()
        assert results == [E.not_coordinator]
        assert [v.state for v in s.written("tx")] == [TxnState.EMPTY]
        await settle()
        assert s.state("tx") == TxnState.EMPTY
        assert await s.coordinator.add_partitions("tx", pid, epoch, [T0]) == E.none

    run(test)


class ReplayLog(MemoryOffsetsLog):
    """Its replay fails `replay_failures` times, then calls `on_entry` with each entry's
    position as it is read."""

    def __init__(self) -> None:
        super().__init__(N)
        self.replay_failures = 0
        self.on_entry: Callable[[int], None] = lambda count: None

    def replay_log(self, partition: int) -> Iterator[LoggedEntry]:
        if self.replay_failures:
            self.replay_failures -= 1
            raise OSError("cannot read the segment (test)")
        for count, entry in enumerate(super().replay_log(partition), 1):
            self.on_entry(count)
            yield entry


def test_a_failed_load_is_retried_while_still_leader_and_the_broker_keeps_running() -> None:
    first = Setup()

    async def before(s: Setup) -> None:
        init = await s.coordinator.init_producer_id("tx", 30_000)
        await s.coordinator.add_partitions("tx", init.producer_id, 0, [T0])
        s.markers.gate = trio.Event()
        await s.coordinator.end_transaction("tx", init.producer_id, 0, True)

    run(before, first)
    log = ReplayLog()
    log.batches = first.log.batches
    log.end_offsets = first.log.end_offsets
    log.replay_failures = 2 * N  # every partition's first two attempts
    index = partition_for_transaction("tx", N)

    async def after(s: Setup) -> None:
        assert (await s.coordinator.init_producer_id("tx", 30_000)).error == (
            E.coordinator_load_in_progress
        )
        await settle()
        assert s.state("tx") == TxnState.COMPLETE_COMMIT
        # A load at an epoch this broker no longer leads at resigns the partition.
        log.epochs = dict.fromkeys(range(N), 0) | {index: 1}
        s.coordinator.become_leader(index, 1)
        log.epochs = dict.fromkeys(range(N), 0)
        await settle()
        assert (await s.coordinator.init_producer_id("tx", 30_000)).error == E.not_coordinator

    run(after, Setup(log))


def test_a_long_replay_lets_other_tasks_run_and_stops_when_leadership_moves() -> None:
    log = ReplayLog()
    index = partition_for_transaction("tx", N)
    records = [
        (
            TxnKey(f"id-{i}").encode(),
            TxnValue(i, 0, 30_000, TxnState.EMPTY, {}, 0, -1).encode(),
        )
        for i in range(5000)
    ]

    async def seed() -> None:
        await log.append(index, records)

    trio.run(seed)
    log.epochs = {index: 0}
    mine = next(f"id-{i}" for i in range(5000) if partition_for_transaction(f"id-{i}", N) == index)
    others_ran: list[int] = []
    seen_during_replay: list[int] = []

    def on_entry(count: int) -> None:
        if count == 1:
            trio.lowlevel.spawn_system_task(_note, others_ran)
        elif count == 4000:
            seen_during_replay.append(len(others_ran))

    log.on_entry = on_entry

    async def test(s: Setup) -> None:
        assert seen_during_replay == [1]
        assert s.state(mine) == TxnState.EMPTY

        # Leadership moves in the middle of a reload: the replay stops and resigns.
        def moved_at_2500(count: int) -> None:
            if count == 2500:
                log.epochs = {index: 2}

        log.on_entry = moved_at_2500
        s.coordinator.become_leader(index, 1)
        log.epochs = {index: 1}
        await settle()
        assert (await s.coordinator.init_producer_id(mine, 30_000)).error == E.not_coordinator
        assert index not in s.coordinator.partitions

    run(test, Setup(log))


async def _note(into: list[int]) -> None:
    into.append(1)


def test_a_transactional_id_too_long_for_a_record_is_refused_before_anything_happens() -> None:
    longest = "x" * 32767
    too_long = "é" * 16384  # 32,768 UTF-8 bytes

    async def test(s: Setup) -> None:
        c = s.coordinator
        assert (await c.init_producer_id(too_long, 30_000)).error == E.invalid_request
        assert await c.add_partitions(too_long, 1000, 0, [T0]) == E.invalid_request
        assert (await c.end_transaction(too_long, 1000, 0, True)).error == E.invalid_request
        assert c.describe(too_long) == E.invalid_request
        assert await c.verify_partition(too_long, 1000, 0, "t", 0) == E.invalid_txn_state
        assert all(list(s.log.replay(p)) == [] for p in range(N))
        fits = await c.init_producer_id(longest, 30_000)
        assert (fits.error, fits.producer_id) == (E.none, 1000)  # no id was used up before

    run(test)
