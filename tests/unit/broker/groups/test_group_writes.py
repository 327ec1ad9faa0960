"""The coordinator's write queue: bounded per partition, client writes wait for room, group
metadata never waits and is coalesced per group, appends keep their order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from raftka.broker.groups import CoordinatorConfig, GroupCoordinator, MemoryOffsetsLog
from raftka.broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetKey,
    OffsetValue,
    decode_key,
)
from raftka.broker.groups.store import KeyValue, records_of
from raftka.broker.groups.writes import WRITES_QUEUED_MAX, WriteQueue

E = ErrorCode
N = 1  # one offsets partition: every group shares its queue


def metadata(generation: int) -> GroupMetadataValue:
    return GroupMetadataValue("consumer", generation, None, None, 0, ())


def offset_record(group_id: str, offset: int) -> KeyValue:
    return (OffsetKey(group_id, "t", 0).encode(), OffsetValue(offset, -1, "", 0).encode())


def appended(log: MemoryOffsetsLog) -> list[list[KeyValue]]:
    return [list(records_of(batch)) for batch in log.batches.get(0, [])]


def run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_client_writes_wait_for_room_while_group_metadata_does_not() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    log.append_gate = trio.Event()
    writes = WriteQueue(log, queued_max=3)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writes.run)
            first = writes.append("g", [offset_record("g", 0)])
            await trio.sleep(1)  # the writer took it and waits for the log
            assert writes.queued(0) == 0
            client_appends = []
            for offset in (1, 2, 3):
                await writes.wait_for_room("g")  # room: returns at once
                client_appends.append(writes.append("g", [offset_record("g", offset)]))
            assert writes.queued(0) == 3
            waited = trio.Event()

            async def fourth() -> None:
                await writes.wait_for_room("g")
                client_appends.append(writes.append("g", [offset_record("g", 4)]))
                waited.set()

            nursery.start_soon(fourth)
            await trio.sleep(5)
            assert not waited.is_set() and writes.queued(0) == 3  # back-pressure
            # The machine's writes go in without waiting: one per group, the latest wins.
            for generation in range(1, 100):
                writes.store_group_metadata("a", metadata(generation))
                writes.store_group_metadata("b", metadata(generation))
            assert writes.queued(0) == 5
            log.append_gate.set()
            await waited.wait()
            for append in [first, *client_appends]:
                assert await append.wait() == E.none
            await trio.sleep(1)
            assert writes.queued(0) == 0
            nursery.cancel_scope.cancel()

    run(main)
    batches = appended(log)
    offsets = [
        OffsetValue.decode(v).offset
        for b in batches
        for k, v in b
        if isinstance(decode_key(k), OffsetKey) and v is not None
    ]
    assert offsets == [0, 1, 2, 3, 4]
    stored = [
        (decode_key(k).group_id, GroupMetadataValue.decode(v).generation)
        for b in batches
        for k, v in b
        if isinstance(decode_key(k), GroupMetadataKey) and v is not None
    ]
    assert stored == [("a", 99), ("b", 99)]


def test_a_replaced_metadata_write_reports_the_newer_append() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    log.append_gate = trio.Event()
    writes = WriteQueue(log)
    outcomes: list[tuple[int, ErrorCode]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writes.run)
            writes.append("g", [offset_record("g", 0)])  # keeps the writer busy
            await trio.sleep(1)
            writes.store_group_metadata("g", metadata(1), lambda e: outcomes.append((1, e)))
            writes.store_group_metadata("g", metadata(2), lambda e: outcomes.append((2, e)))
            log.fail_appends = True
            log.append_gate.set()
            await trio.sleep(1)
            nursery.cancel_scope.cancel()

    run(main)
    assert outcomes == [(1, E.coordinator_not_available), (2, E.coordinator_not_available)]


def test_metadata_queued_after_a_tombstone_is_written_after_it() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    log.append_gate = trio.Event()
    writes = WriteQueue(log)
    tombstone: KeyValue = (GroupMetadataKey("g").encode(), None)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writes.run)
            writes.append("x", [offset_record("x", 0)])  # keeps the writer busy
            await trio.sleep(1)
            writes.store_group_metadata("g", metadata(1))
            writes.append("g", [tombstone])  # DeleteGroups
            writes.store_group_metadata("g", metadata(2))  # the group is back
            log.append_gate.set()
            await trio.sleep(1)
            nursery.cancel_scope.cancel()

    run(main)
    values = [v for b in appended(log) for k, v in b if k == GroupMetadataKey("g").encode()]
    assert [None if v is None else GroupMetadataValue.decode(v).generation for v in values] == [
        1,
        None,
        2,
    ]


def test_offset_commits_feel_back_pressure_and_all_complete() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    log.append_gate = trio.Event()
    coordinator = GroupCoordinator(log, CoordinatorConfig())
    commits = 3 * WRITES_QUEUED_MAX
    results: list[ErrorCode] = []
    most_queued = 0

    async def commit(offset: int) -> None:
        value = {("t", offset): OffsetValue(offset, -1, "", 0)}
        results.append(await coordinator.commit_offsets(f"g{offset}", -1, "", None, value))

    async def main() -> None:
        nonlocal most_queued
        coordinator.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            while coordinator.is_loading():
                await trio.sleep(0.01)
            for offset in range(commits):
                nursery.start_soon(commit, offset)
            await trio.sleep(5)
            most_queued = coordinator.writes.queued(0)
            assert most_queued == WRITES_QUEUED_MAX  # the others wait, holding no append
            log.append_gate.set()
            while len(results) < commits:
                most_queued = max(most_queued, coordinator.writes.queued(0))
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()

    run(main)
    assert results == [E.none] * commits
    assert most_queued == WRITES_QUEUED_MAX
    assert len(appended(log)) == commits
    assert all(
        coordinator.fetch_offsets(f"g{o}", [("t", o)])[1][("t", o)] is not None
        for o in range(commits)
    )
