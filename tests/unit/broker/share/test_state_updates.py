"""Incremental share-state writes: a snapshot with the updates written after it folds to the
state a whole snapshot would hold, at every write of random acquire/acknowledge/release/
cancel/priority/delay sequences; the state partition's records replay to that state after
compaction; a state written before updates existed still loads; updates after another
writer's snapshot are fenced."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from raftka.broker.config import BrokerConfig
from raftka.broker.groups.store import read_partition
from raftka.broker.share.manager import (
    MemoryStateStore,
    PersistedState,
    SharePartitionManager,
    StateUpdate,
)
from raftka.broker.share.partition import (
    AckType,
    RecordState,
    SharePartition,
    StateBatch,
    merge_spans,
)
from raftka.broker.share.persisted import fold
from raftka.broker.share.state_store import (
    FencedStateEpoch,
    TopicShareStateStore,
    decode_state,
    encode_key,
    encode_state,
    encode_update,
)
from raftka.log import PartitionLog
from raftka.log.cleaner import CleanRequest
from raftka.protocol.batch_builder import build_batch
from tests.unit.log.test_log_cleaner import T0, append, carry_out, open_log, request_clean

LIMIT = 5
MEMBERS = ("m1", "m2", "m3")


def whole(state: SharePartition, epoch: int = 1, snapshot_id: int = 7) -> PersistedState:
    """What a whole snapshot of `state` holds (the write every acknowledgement made before)."""
    return PersistedState(
        epoch,
        state.start_offset,
        tuple(state.state_batches()),
        tuple(state.kept_priorities()),
        tuple(state.kept_delays()),
        snapshot_id,
    )


def update_of(state: SharePartition, epoch: int = 1, snapshot_id: int = 7) -> StateUpdate:
    changes = state.take_changes()
    return StateUpdate(
        epoch,
        snapshot_id,
        state.start_offset,
        changes.spans,
        changes.batches,
        changes.priorities,
        changes.delays,
    )


def held(state: SharePartition, member: str) -> list[int]:
    return [
        o
        for r in state.ranges
        if r.state == RecordState.ACQUIRED and r.member_id == member
        for o in range(r.first, r.last + 1)
    ]


def random_step(state: SharePartition, rng: random.Random, now: list[float]) -> None:
    """One random change, as fetches, acknowledgements, lock expiry, session ends, retention
    and the queue API make them."""
    member = rng.choice(MEMBERS)
    roll = rng.random()
    end = state.next_offset + 40
    if roll < 0.2:
        state.acquire(member, end, rng.randint(1, 12), 60, now[0], 1000)
    elif roll < 0.4:
        offsets = sorted(rng.sample(range(state.start_offset, end), rng.randint(1, 8)))
        runs: list[tuple[int, int]] = []
        for o in offsets:
            if runs and runs[-1][1] + 1 == o:
                runs[-1] = (runs[-1][0], o)
            else:
                runs.append((o, o))
        state.acquire_offsets(member, runs, now[0], 1000)
    elif roll < 0.7:
        mine = held(state, member)
        if mine:
            first = rng.choice(mine)
            last = first
            while last + 1 in mine and last - first < 6 and rng.random() < 0.7:
                last += 1
            if rng.random() < 0.5:
                types = [int(rng.choice(list(AckType)[1:]))]
            else:
                types = [int(rng.choice(list(AckType)[1:])) for _ in range(last - first + 1)]
            state.acknowledge(member, first, last, types, LIMIT)
    elif roll < 0.75:
        mine = held(state, member)
        if mine:
            offset = rng.choice(mine)
            state.delay_release(member, offset, int(now[0]) + 500)
            if rng.random() < 0.8:
                state.acknowledge(member, offset, offset, [int(AckType.RELEASE)], LIMIT)
            else:
                state.undo_delay(offset)
    elif roll < 0.83:
        offset = rng.randrange(state.start_offset, end)
        if state.is_available(offset):
            if rng.random() < 0.5:
                state.cancel(offset)
            else:
                state.set_priority(offset, rng.randint(-5, 5))
    elif roll < 0.9:
        now[0] += rng.choice((10, 1500))
        state.release_expired(now[0], LIMIT)
    elif roll < 0.95:
        state.release_member(member, LIMIT)
    else:
        state.move_start(state.start_offset + rng.randint(0, 6))


@pytest.mark.parametrize("seed", range(20))
def test_a_snapshot_and_its_updates_fold_to_the_whole_state(seed: int) -> None:
    rng = random.Random(seed)
    state = SharePartition(rng.randint(0, 20))
    now = [1_000_000.0]
    snapshot = whole(state)
    state.clear_changes()
    updates: list[StateUpdate] = []
    checked = 0
    for _ in range(250):
        for _ in range(rng.randint(1, 6)):
            random_step(state, rng, now)
        if rng.random() < 0.08:
            snapshot, updates = whole(state), []
            state.clear_changes()
            continue
        updates.append(update_of(state))
        expected = whole(state)
        folded = fold(snapshot, updates)
        assert folded == expected, f"seed {seed}: after {len(updates)} updates"
        # What a new leader loads from it is the state the whole snapshot gives.
        loaded = SharePartition(
            folded.start_offset, folded.batches, folded.priorities, folded.delays
        )
        assert loaded.state_batches() == list(expected.batches)
        checked += 1
    assert checked > 180


def random_batches(spans: list[tuple[int, int]], rng: random.Random) -> list[StateBatch]:
    """Batches within `spans`, with holes (offsets of a span that no batch holds)."""
    out: list[StateBatch] = []
    for first, last in spans:
        offset = first
        while offset <= last:
            if rng.random() < 0.2:
                offset += rng.randint(1, 3)
                continue
            end = min(last, offset + rng.randint(0, 3))
            out.append(StateBatch(offset, end, rng.choice(list(RecordState)), rng.randint(0, 3)))
            offset = end + 1
    return out


def per_offset(
    snapshot: PersistedState, updates: list[StateUpdate]
) -> tuple[dict[int, tuple[RecordState, int]], dict[int, int], dict[int, int]]:
    """Each offset's batch state, priority and delay after `updates`, one offset at a time:
    an update's spans replace everything in them with what it carries."""
    states = {
        o: (b.state, b.delivery_count) for b in snapshot.batches for o in range(b.first, b.last + 1)
    }
    priorities, delays = dict(snapshot.priorities), dict(snapshot.delays)
    for update in updates:
        for first, last in update.spans:
            for o in range(first, last + 1):
                states.pop(o, None)
                priorities.pop(o, None)
                delays.pop(o, None)
        for b in update.batches:
            states.update((o, (b.state, b.delivery_count)) for o in range(b.first, b.last + 1))
        priorities.update(update.priorities)
        delays.update(update.delays)
    start = updates[-1].start_offset
    return (
        {o: v for o, v in states.items() if o >= start},
        {o: v for o, v in priorities.items() if o >= start},
        {o: v for o, v in delays.items() if o >= start},
    )


@pytest.mark.parametrize("seed", range(30))
def test_fold_takes_each_offset_from_the_last_update_covering_it(seed: int) -> None:
    """Updates whose spans overlap in every way (nested, shared ends, one covering many),
    folded in one sweep, against the same updates applied one offset at a time."""
    rng = random.Random(seed)
    snapshot = PersistedState(
        1,
        0,
        tuple(random_batches([(0, 80)], rng)),
        tuple((o, rng.randint(-9, 9)) for o in sorted(rng.sample(range(80), 8))),
        tuple((o, rng.randint(0, 9)) for o in sorted(rng.sample(range(80), 4))),
        snapshot_id=5,
    )
    updates: list[StateUpdate] = []
    start = 0
    for _ in range(40):
        wanted = [(a, a + rng.choice((0, 1, 4, 30))) for a in rng.sample(range(100), 3)]
        spans = merge_spans(wanted)
        offsets = [o for first, last in spans for o in range(first, last + 1)]
        start = min(90, start + rng.choice((0, 0, 0, 2)))
        updates.append(
            StateUpdate(
                1,
                5,
                start,
                tuple(spans),
                tuple(random_batches(spans, rng)),
                tuple((o, rng.randint(-9, 9)) for o in offsets if rng.random() < 0.2),
                tuple((o, rng.randint(0, 9)) for o in offsets if rng.random() < 0.1),
            )
        )
        folded = fold(snapshot, updates)
        states, priorities, delays = per_offset(snapshot, updates)
        assert {
            o: (b.state, b.delivery_count)
            for b in folded.batches
            for o in range(b.first, b.last + 1)
        } == states
        assert dict(folded.priorities) == priorities
        assert dict(folded.delays) == delays
        assert folded.start_offset == start
        assert all(
            a.last < b.first for a, b in zip(folded.batches, folded.batches[1:], strict=False)
        )


def test_an_update_carries_only_what_changed() -> None:
    state = SharePartition(0)
    acquired = state.acquire_offsets("m", [(i, i) for i in range(0, 20_000, 2)], 0.0, 1000)
    assert len(acquired) == 10_000
    for a in acquired[::2]:
        state.acknowledge("m", a.first, a.last, [int(AckType.ACCEPT)], LIMIT)
    state.clear_changes()
    state.acknowledge("m", 10_002, 10_002, [int(AckType.ACCEPT)], LIMIT)
    update = update_of(state)
    assert update.spans == ((10_002, 10_002),)
    assert update.batches == (StateBatch(10_002, 10_002, RecordState.ACKNOWLEDGED, 1),)
    assert update_of(state).spans == (), "nothing changed since"


def test_the_manager_writes_updates_between_snapshots_and_the_store_holds_the_state() -> None:
    trio.run(manager_writes_updates)


class CountingStore(MemoryStateStore):
    def __init__(self) -> None:
        super().__init__()
        self.snapshots = 0
        self.updates = 0
        self.fail_next = False

    async def write(self, key: Any, state: PersistedState) -> None:
        self.snapshots += 1
        await super().write(key, state)

    async def write_update(self, key: Any, update: StateUpdate) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("the state partition has no leader now")
        self.updates += 1
        await super().write_update(key, update)


async def manager_writes_updates() -> None:
    store = CountingStore()
    manager = SharePartitionManager(store, updates_per_snapshot=3)
    key = ("g", uuid.UUID(int=1), 0)
    led = await manager.get(key, 1, 0, 1000, "earliest")
    assert (store.snapshots, store.updates) == (1, 0)
    rng = random.Random(5)
    for i in range(10):
        acquired = led.state.acquire_offsets("m", [(i * 10 + 5, i * 10 + 6)], 0.0, 1000)
        led.state.acknowledge(
            "m", acquired[0].first, acquired[0].last, [int(rng.choice((1, 2, 3)))], LIMIT
        )
        await manager.persist(led)
        assert store.states[key] == whole(led.state, led.state_epoch, led.snapshot_id)
    # Snapshot at load, then three updates to a snapshot.
    assert (store.snapshots, store.updates) == (3, 8)
    # A write that failed may or may not be stored: the share-partition is reloaded from
    # what is, with a new state epoch, and writes a snapshot first.
    led.state.acquire_offsets("m", [(200, 200)], 0.0, 1000)
    store.fail_next = True
    with pytest.raises(OSError):
        await manager.persist(led)
    assert key not in manager.partitions
    reloaded = await manager.get(key, 1, 0, 1000, "earliest")
    assert reloaded.state_epoch == led.state_epoch + 1
    assert store.states[key] == whole(reloaded.state, reloaded.state_epoch, reloaded.snapshot_id)


# -- the state partition: replay, compaction, old records, fencing ---------------------------


class RealLog:
    """A state partition led here, backed by a real log that compaction can clean."""

    num_partitions = 1

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def leader_epoch(self, _partition: int) -> int:
        return 3

    async def ensure_topic(self) -> Any:
        led_here = SimpleNamespace(is_leader=True, name="__share_group_state-0")
        return SimpleNamespace(partitions=[led_here])

    async def wait_caught_up(self, _partition: int, _epoch: int) -> bool:
        return True

    def replay(self, _partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for key, value in read_partition(self.log):
            assert key is not None
            yield bytes(key), None if value is None else bytes(value)

    async def append(
        self, _partition: int, records: list[tuple[bytes, bytes | None]], leader_epoch: int
    ) -> None:
        append(self.log, build_batch(records, T0))


def store_on(log: PartitionLog) -> TopicShareStateStore:
    none: Any = None
    store = TopicShareStateStore(1, none, none, BrokerConfig(environ={}), none)
    store.log = RealLog(log)  # type: ignore[assignment]
    return store


def compact(log: PartitionLog) -> None:
    """Clean the whole log with tombstones past their horizon (delete.retention.ms 0)."""
    dirty = 0 if log.cleaner_checkpoint is None else log.cleaner_checkpoint.cleaned_end
    request_clean(log, CleanRequest(dirty, log.log_end_offset, T0, 0, 1 << 20))
    carry_out(log)
    dirty = log.cleaner_checkpoint.cleaned_end  # type: ignore[union-attr]
    request_clean(log, CleanRequest(dirty, dirty, T0, 0, 1 << 20))
    carry_out(log)


def test_compaction_keeps_what_replays_to_the_current_state(tmp_path: Path) -> None:
    trio.run(compaction_replay, tmp_path)


async def compaction_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path / "__share_group_state-0", segment_bytes=4000)
    store = store_on(log)
    manager = SharePartitionManager(store, updates_per_snapshot=4)
    keys = [("g", uuid.UUID(int=1), 0), ("g", uuid.UUID(int=1), 1), ("h", uuid.UUID(int=2), 0)]
    leds = [await manager.get(key, 1, 0, 10_000, "earliest") for key in keys]
    rng = random.Random(11)
    now = [1_000_000.0]
    for round_ in range(60):
        led = rng.choice(leds)
        for _ in range(rng.randint(1, 4)):
            random_step(led.state, rng, now)
        await manager.persist(led)
        if round_ % 15 == 14:
            compact(log)
        # A new state leader (failover, restart) replays the compacted log to each
        # share-partition's current state.
        replayed = store_on(log)
        for each in leds:
            raw = await replayed.read_local(0, encode_key(each.key))
            assert raw is not None
            assert decode_state(raw) == whole(each.state, each.state_epoch, each.snapshot_id)
    compact(log)
    keys_left = [json_key(key) for key, _ in read_partition(log) if key is not None]
    assert len(keys_left) == len(set(keys_left)), "one record per key after compaction"
    # Only the current snapshots' updates are left (older ones were tombstoned).
    current = {json_key(encode_key(led.key)): led.snapshot_id for led in leds}
    updates_left = [fields for fields in keys_left if len(fields) == 5]
    assert updates_left, "the test needs updates of current snapshots"
    assert all(fields[3] == current[fields[:3]] for fields in updates_left)
    # Deleting a share-partition's state removes its updates with it.
    await store.delete_local(0, encode_key(keys[0]))
    compact(log)
    deleted = json_key(encode_key(keys[0]))
    assert all(json_key(k)[:3] != deleted for k, _ in read_partition(log) if k is not None)
    assert await store_on(log).read_local(0, encode_key(keys[0])) is None


def json_key(raw: bytes | memoryview) -> tuple[Any, ...]:
    return tuple(json.loads(bytes(raw)))


def test_a_state_written_before_updates_still_loads(tmp_path: Path) -> None:
    trio.run(old_record_loads, tmp_path)


async def old_record_loads(tmp_path: Path) -> None:
    log = open_log(tmp_path / "__share_group_state-0")
    key = ("g", uuid.UUID(int=1), 0)
    # The record main wrote for every write: the whole state, no snapshot id, no updates.
    old = (
        b'{"state_epoch": 4, "start_offset": 10, "batches": [[10, 11, 0, 2], [12, 12, 2, 1], '
        b'[13, 13, 4, 1]], "priorities": [[11, -3]]}'
    )
    append(log, build_batch([(encode_key(key), old)], T0))
    store = store_on(log)
    manager = SharePartitionManager(store)
    led = await manager.get(key, 1, 0, 100, "earliest")
    assert led.state_epoch == 5
    assert led.state.start_offset == 10
    assert led.state.state_batches() == [
        StateBatch(10, 11, RecordState.AVAILABLE, 2),
        StateBatch(12, 12, RecordState.ACKNOWLEDGED, 1),
        StateBatch(13, 13, RecordState.ARCHIVED, 1),
    ]
    assert led.state.priorities == {11: -3}
    # It then writes updates over its own snapshot, which a replay folds.
    acquired = led.state.acquire("m", 100, 1, 500, 0.0, 1000)
    led.state.acknowledge("m", acquired[0].first, acquired[0].last, [1], LIMIT)
    await manager.persist(led)
    raw = await store_on(log).read_local(0, encode_key(key))
    assert raw is not None
    assert decode_state(raw) == whole(led.state, 5, led.snapshot_id)


def test_updates_after_another_writers_snapshot_or_epoch_are_fenced(tmp_path: Path) -> None:
    trio.run(updates_fenced, tmp_path)


async def updates_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path / "__share_group_state-0")
    store = store_on(log)
    raw_key = encode_key(("g", uuid.UUID(int=1), 0))
    snapshot = PersistedState(2, 0, (StateBatch(0, 3, RecordState.AVAILABLE, 1),), snapshot_id=9)
    await store.write_local(0, raw_key, encode_state(snapshot))
    good = StateUpdate(2, 9, 2, ((0, 1),), (StateBatch(0, 1, RecordState.ACKNOWLEDGED, 1),))
    await store.write_update_local(0, raw_key, encode_update(good))
    for stale in (
        StateUpdate(2, 8, 2, (), ()),  # after a snapshot that is not the stored one
        StateUpdate(1, 9, 2, (), ()),  # from a former leader
    ):
        with pytest.raises(FencedStateEpoch):
            await store.write_update_local(0, raw_key, encode_update(stale))
    # A newer leader's snapshot: the old one's updates are fenced, and replay ignores them.
    await store.write_local(0, raw_key, encode_state(PersistedState(3, 2, (), snapshot_id=10)))
    with pytest.raises(FencedStateEpoch):
        await store.write_update_local(0, raw_key, encode_update(good))
    raw = await store_on(log).read_local(0, raw_key)
    assert raw is not None and decode_state(raw) == PersistedState(3, 2, (), snapshot_id=10)


def test_a_forwarded_write_is_fenced_by_the_epoch_and_snapshot_it_carries(tmp_path: Path) -> None:
    trio.run(forwarded_fence, tmp_path)


async def forwarded_fence(tmp_path: Path) -> None:
    """A write forwarded to the state partition's leader carries its state epoch and
    snapshot id beside the value, and the leader checks those without decoding the value; a
    request without them (from an older broker) is checked by decoding it."""
    log = open_log(tmp_path / "__share_group_state-0")
    store = store_on(log)
    raw_key = encode_key(("g", uuid.UUID(int=1), 0))

    def request(value: bytes, **fence: int) -> bytes:
        return json.dumps(
            {"partition": 0, "key": raw_key.decode(), "value": value.decode(), **fence}
        ).encode()

    snapshot = PersistedState(2, 0, (StateBatch(0, 3, RecordState.AVAILABLE, 1),), snapshot_id=9)
    assert await store.serve_write(
        request(encode_state(snapshot), state_epoch=2, snapshot_id=9)
    ) == (0, b"null")
    good = StateUpdate(2, 9, 2, ((0, 1),), (StateBatch(0, 1, RecordState.ACKNOWLEDGED, 1),))
    assert await store.serve_update(request(encode_update(good), state_epoch=2, snapshot_id=9)) == (
        0,
        b"null",
    )
    # The fence it carries is what is checked: here a former leader's epoch.
    code, _ = await store.serve_update(request(encode_update(good), state_epoch=1, snapshot_id=9))
    assert code == int(ErrorCode.fenced_state_epoch)
    code, _ = await store.serve_write(request(encode_state(snapshot), state_epoch=1, snapshot_id=9))
    assert code == int(ErrorCode.fenced_state_epoch)
    # Without one, the value's own fields are.
    stale = StateUpdate(2, 8, 2, (), ())
    code, _ = await store.serve_update(request(encode_update(stale)))
    assert code == int(ErrorCode.fenced_state_epoch)
    assert await store.serve_update(request(encode_update(good))) == (0, b"null")
    raw = await store_on(log).read_local(0, raw_key)
    assert raw is not None and decode_state(raw) == fold(snapshot, [good, good])


class FailingLog(RealLog):
    """Its next append reaches the log but is not known to have committed."""

    fail_next = False

    async def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], leader_epoch: int
    ) -> None:
        await super().append(partition, records, leader_epoch)
        if self.fail_next:
            self.fail_next = False
            raise OSError("the records did not commit in time")


def test_no_update_follows_one_whose_append_failed(tmp_path: Path) -> None:
    trio.run(update_after_failed_append, tmp_path)


async def update_after_failed_append(tmp_path: Path) -> None:
    log = FailingLog(open_log(tmp_path / "__share_group_state-0"))
    store = store_on(log.log)
    store.log = log  # type: ignore[assignment]
    raw_key = encode_key(("g", uuid.UUID(int=1), 0))
    await store.write_local(0, raw_key, encode_state(PersistedState(2, 0, (), snapshot_id=9)))
    first = StateUpdate(2, 9, 0, ((0, 0),), (StateBatch(0, 0, RecordState.ARCHIVED, 1),))
    log.fail_next = True
    with pytest.raises(OSError):
        await store.write_update_local(0, raw_key, encode_update(first))
    # The writer's next update would have the failed one's sequence number: refused.
    with pytest.raises(FencedStateEpoch):
        await store.write_update_local(0, raw_key, encode_update(first))
    # Its next snapshot is taken, and a replay reads that snapshot, not the update before.
    await store.write_local(0, raw_key, encode_state(PersistedState(2, 1, (), snapshot_id=10)))
    raw = await store_on(log.log).read_local(0, raw_key)
    assert raw is not None and decode_state(raw) == PersistedState(2, 1, (), snapshot_id=10)


@pytest.mark.parametrize("seed", range(10))
def test_lock_expiry_finds_every_expired_lock_without_walking_the_ranges(seed: int) -> None:
    """`release_expired` and `next_lock_deadline_ms` keep a heap of acquisitions; they must
    answer what a walk of every range would."""
    rng = random.Random(seed)
    state = SharePartition(0)
    now = [1_000_000.0]
    for _ in range(600):
        random_step(state, rng, now)
        acquired = [r for r in state.ranges if r.state == RecordState.ACQUIRED]
        expected = min((r.lock_deadline_ms for r in acquired), default=None)
        assert state.next_lock_deadline_ms() == expected
        if rng.random() < 0.2:
            now[0] += rng.choice((200, 700, 1200))
            due = sum(r.last - r.first + 1 for r in acquired if r.lock_deadline_ms <= now[0])
            assert state.release_expired(now[0], LIMIT) == due
            assert not [
                r
                for r in state.ranges
                if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now[0]
            ]
