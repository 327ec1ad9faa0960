"""The delivery index of a fair topic's share-partition: fetches rotate across fairness
keys with available records (one record per key per turn, or as many as the topic allows,
each key's in offset order)
across the whole backlog; released records return at their key's next turn; delayed
records wait; a rebuild from the persisted state hands out nothing done; and a fetch's
records given back leave the rotation as if never taken."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from pathlib import Path

import pytest
import trio
from batches import encode_batch

from raftka.broker.handlers.share_order import acquire_indexed, fill_index
from raftka.broker.share.delivery_index import (
    DeliveryIndex,
    FairKey,
    FairRotation,
    IndexedOrder,
    offset_of,
    runs_of,
)
from raftka.broker.share.manager import LedSharePartition
from raftka.broker.share.partition import AckType, SharePartition
from raftka.log import LogConfig, PartitionLog
from raftka.protocol.records import validate_produce_records

LOCK_MS = 1000
LIMIT = 3
NOW_WALL = 1_700_000_000_000
BY_KEY = IndexedOrder(False, fair=FairKey())


def indexed(
    keys: list[bytes | None], start: int = 0, per_turn: int = 1
) -> tuple[SharePartition, DeliveryIndex]:
    """A share-partition and its fair index over records whose fairness keys are `keys`,
    `per_turn` records per key per turn."""
    state = SharePartition(start)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(False, fair=FairKey(), per_turn=per_turn), start)
    index.add(records(keys, start), start + len(keys))
    return state, index


def records(
    keys: list[bytes | None], start: int = 0, deliver_at: dict[int, int] | None = None
) -> list[tuple[int, tuple[bytes | None, ...]]]:
    """As the log gives them on a topic fair by record key: (priority, deliver-at, key)."""
    due = deliver_at or {}
    return [
        (start + i, (None, str(due[start + i]).encode() if start + i in due else None, key))
        for i, key in enumerate(keys)
    ]


def fetch(
    state: SharePartition, index: DeliveryIndex, n: int, member: str = "m", now: int = NOW_WALL
) -> list[int]:
    """Acquire as a fetch does; the offsets in the order the index gave them."""
    keys = index.take(state, now, n)
    acquired = state.acquire_offsets(member, runs_of(offset_of(k) for k in keys), 0, LOCK_MS)
    index.acquired(keys)
    assert sum(a.last - a.first + 1 for a in acquired) == len(keys)
    return [offset_of(k) for k in keys]


def accept(state: SharePartition, offsets: list[int], member: str = "m") -> None:
    for first, last in runs_of(offsets):
        assert state.acknowledge(member, first, last, [AckType.ACCEPT], LIMIT) == 0


def test_a_small_key_behind_a_big_backlog_is_served_at_once() -> None:
    """1,000 records of key a, then 10 of key b: the fetches alternate a, b until b runs out
    (its 10 records within the first 20), then a alone; each key's records in offset order."""
    keys: list[bytes | None] = [b"a"] * 1000 + [b"b"] * 10
    state, index = indexed(keys)
    delivered: list[int] = []
    while chunk := fetch(state, index, 7):
        delivered.extend(chunk)
        accept(state, chunk)
    assert sorted(delivered) == list(range(1010))
    assert [keys[o] for o in delivered[:20]] == [b"a", b"b"] * 10
    for key in (b"a", b"b"):
        mine = [o for o in delivered if keys[o] == key]
        assert mine == sorted(mine)
    assert state.start_offset == 1010
    assert isinstance(index.ready, FairRotation) and index.ready.groups() == 0


def test_records_without_a_key_form_one_key_of_their_own() -> None:
    keys: list[bytes | None] = [None, None, b"x", None, b"", b"x", b""]
    state, index = indexed(keys)
    assert fetch(state, index, 7) == [0, 2, 4, 1, 5, 6, 3]


def test_every_key_gets_one_record_per_turn_whatever_its_backlog() -> None:
    rng = random.Random(5)
    sizes = {b"big": 3000, b"mid": 300, b"small": 30}
    keys: list[bytes | None] = [k for k, n in sizes.items() for _ in range(n)]
    rng.shuffle(keys)
    state, index = indexed(keys)
    first = fetch(state, index, 90)
    assert Counter(keys[o] for o in first) == {b"big": 30, b"mid": 30, b"small": 30}


def test_a_released_record_comes_back_at_its_keys_next_turn() -> None:
    keys: list[bytes | None] = [b"a"] * 10 + [b"b"] * 10
    state, index = indexed(keys)
    assert fetch(state, index, 4) == [0, 10, 1, 11]
    assert state.acknowledge("m", 0, 0, [AckType.RELEASE], LIMIT) == 0
    accept(state, [1, 10, 11])
    # a's turn: its released record, lowest of its offsets; then b's.
    assert fetch(state, index, 4) == [0, 12, 2, 13]


def test_a_key_that_ran_out_rejoins_at_the_back_when_a_record_is_released() -> None:
    keys: list[bytes | None] = [b"a", b"b", b"c", b"a", b"b", b"a", b"b"]
    state, index = indexed(keys)
    assert fetch(state, index, 3) == [0, 1, 2]  # c has no more records
    assert state.acknowledge("m", 2, 2, [AckType.RELEASE], LIMIT) == 0
    accept(state, [0, 1])
    assert fetch(state, index, 10) == [3, 4, 2, 5, 6]


def test_expired_locks_and_the_delivery_limit_keep_working() -> None:
    keys: list[bytes | None] = [b"a", b"a", b"b"]
    state, index = indexed(keys)
    for delivery in range(1, LIMIT + 1):
        assert fetch(state, index, 2) == [0, 2]
        assert state.release_expired(delivery * LOCK_MS, LIMIT) == 2
    assert fetch(state, index, 5) == [1], "0 and 2 archived at the delivery limit"
    accept(state, [1])
    assert state.start_offset == 3


def test_a_key_takes_up_to_its_records_per_turn_and_a_turn_spans_fetches() -> None:
    keys: list[bytes | None] = [b"a"] * 10 + [b"b"] * 10 + [b"c"] * 2
    state, index = indexed(keys, per_turn=3)
    assert fetch(state, index, 8) == [0, 1, 2, 10, 11, 12, 20, 21]  # c ran out at 2
    assert fetch(state, index, 2) == [3, 4], "a's turn goes on in the next fetch"
    assert fetch(state, index, 4) == [5, 13, 14, 15]
    assert state.acknowledge("m", 20, 20, [AckType.RELEASE], LIMIT) == 0
    accept(state, list(range(6)) + [10, 11, 12, 13, 14, 15, 21])
    # c rejoins at the back with its released record, behind b and a.
    assert fetch(state, index, 20) == [6, 7, 8, 16, 17, 18, 20, 9, 19]


def test_every_key_gets_its_records_per_turn_whatever_its_backlog() -> None:
    rng = random.Random(6)
    sizes = {b"big": 3000, b"mid": 300, b"small": 30}
    keys: list[bytes | None] = [k for k, n in sizes.items() for _ in range(n)]
    rng.shuffle(keys)
    state, index = indexed(keys, per_turn=5)
    first = fetch(state, index, 90)
    assert Counter(keys[o] for o in first) == {b"big": 30, b"mid": 30, b"small": 30}
    assert [keys[o] for o in first[:15]] == [keys[first[0]]] * 5 + [keys[first[5]]] * 5 + [
        keys[first[10]]
    ] * 5


@pytest.mark.parametrize("per_turn", [1, 2, 3, 7])
def test_given_back_records_leave_the_rotation_as_if_never_taken(per_turn: int) -> None:
    rng = random.Random(17 + per_turn)
    for _ in range(200):
        keys: list[bytes | None] = [rng.choice([b"a", b"b", b"c", None]) for _ in range(40)]
        whole_state, whole = indexed(keys, per_turn=per_turn)
        expected = fetch(whole_state, whole, 25)
        state, index = indexed(keys, per_turn=per_turn)
        first = fetch(state, index, rng.randrange(0, 5))  # the rotation is somewhere
        taken = index.take(state, NOW_WALL, rng.randrange(1, 15))
        kept = rng.randrange(0, len(taken) + 1)
        index.give_back(taken[kept:])
        index.acquired(taken[:kept])
        state.acquire_offsets("m", runs_of(offset_of(k) for k in taken[:kept]), 0, LOCK_MS)
        rest = fetch(state, index, 25 - len(first) - kept)
        assert first + [offset_of(k) for k in taken[:kept]] + rest == expected


def test_delayed_records_wait_until_due_and_hold_their_key_back_no_further() -> None:
    keys: list[bytes | None] = [b"a", b"a", b"b", b"b"]
    state = SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(BY_KEY, 0)
    index.add(records(keys, deliver_at={0: NOW_WALL + 500, 2: NOW_WALL + 100}), 4)
    assert fetch(state, index, 10) == [1, 3]
    assert index.next_due_ms() == NOW_WALL + 100
    assert fetch(state, index, 10, now=NOW_WALL + 100) == [2]
    assert fetch(state, index, 10, now=NOW_WALL + 500) == [0]


def test_a_take_costs_the_records_taken_not_the_backlog() -> None:
    state, index = indexed([b"a"] * 100_000 + [b"b"] * 100)
    assert index.counts() == (100_100, 0)
    fetch(state, index, 10)
    assert index.counts() == (100_090, 0), "only the records taken left the queues"


def test_out_of_order_acknowledgements_survive_a_rebuild_from_the_persisted_state() -> None:
    keys: list[bytes | None] = [b"a"] * 400 + [b"b"] * 50 + [None] * 50
    state, index = indexed(keys)
    taken = fetch(state, index, 120)
    accept(state, taken[:100])  # the rest stay acquired: persisted as AVAILABLE
    assert state.start_offset < 100, "acknowledged out of offset order, the start stays low"
    reloaded = SharePartition(state.start_offset, state.state_batches())
    reloaded.left_acquired = []
    rebuilt = DeliveryIndex(BY_KEY, reloaded.start_offset)
    rebuilt.add(records(keys)[reloaded.start_offset :], 500, reloaded)
    assert rebuilt.counts() == (400, 0), "the 100 accepted are not indexed again"
    delivered: list[int] = []
    while chunk := fetch(reloaded, rebuilt, 30):
        delivered.extend(chunk)
        accept(reloaded, chunk)
    assert not set(delivered) & set(taken[:100])
    assert sorted(delivered + taken[:100]) == list(range(500))
    # The rebuilt rotation serves the keys left evenly again: b and None run out together.
    last_small = max(i for i, o in enumerate(delivered) if keys[o] != b"a")
    assert last_small == 3 * 17 - 1


# -- filled from a real log ------------------------------------------------------------------


def test_a_log_fair_by_header_is_acquired_in_rotation(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "t-0", LogConfig(segment_bytes=4000, index_interval_bytes=200), NOW_WALL
    )
    tenants = [b"big"] * 300 + [b"small"] * 20 + [None] * 10
    for first in range(0, len(tenants), 30):
        chunk = tenants[first : first + 30]
        batch = encode_batch(
            [(b"same-key", b"x" * 20)] * len(chunk),
            headers=[[] if t is None else [("tenant", t)] for t in chunk],
        )
        log.append(batch, validate_produce_records(batch, 1 << 20), 0, NOW_WALL)
    assert len(log.segments) > 2
    state = SharePartition(0)
    state.left_acquired = []
    order = IndexedOrder(False, fair=FairKey.parse("header:tenant"))
    led = LedSharePartition(("g", uuid.uuid4(), 0), 0, state, 0, index=DeliveryIndex(order, 0))

    class Hosted:
        hosted_log = log
        high_watermark = log.log_end_offset
        name = "t-0"

    trio.run(fill_index, Hosted, led)  # type: ignore[arg-type]
    delivered: list[int] = []
    while True:
        acquired, _records, _length = acquire_indexed(
            Hosted,  # type: ignore[arg-type]
            led,
            "m",
            max_records=9,
            max_bytes=1 << 20,
            max_in_flight=100,
            now_ms=0,
            wall_ms=NOW_WALL,
            lock_ms=LOCK_MS,
        )
        if not acquired:
            break
        offsets = [o for a in acquired for o in range(a.first, a.last + 1)]
        delivered.extend(offsets)
        for a in acquired:
            assert state.acknowledge("m", a.first, a.last, [AckType.ACCEPT], LIMIT) == 0
    assert sorted(delivered) == list(range(330))
    # Three keys in turn: every small and keyless record within the first 60 delivered.
    assert {tenants[o] for o in delivered[:60]} == {b"big", b"small", None}
    assert all(tenants[o] == b"big" for o in delivered[60:])
    assert FairKey.parse("key") == FairKey() and FairKey.parse("header:t").header == b"t"
