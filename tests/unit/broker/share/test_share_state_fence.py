"""The share-state store's fence at the state partition's leader: a write from a former
leader of the data partition (older state epoch) is refused, even when it arrives while a
newer leader's write of the same key is still being appended."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

from raftka.broker.config import BrokerConfig
from raftka.broker.share.manager import PersistedState
from raftka.broker.share.state_store import (
    FencedStateEpoch,
    TopicShareStateStore,
    decode_state,
    encode_key,
    encode_state,
)


class SlowLog:
    """A state partition led here whose appends wait until the test lets them finish."""

    num_partitions = 1

    def __init__(self) -> None:
        self.appended: list[tuple[bytes, bytes | None]] = []
        self.entered = trio.Event()
        self.release = trio.Event()

    def leader_epoch(self, _partition: int) -> int:
        return 3

    async def wait_caught_up(self, _partition: int, _epoch: int) -> bool:
        return True

    def replay(self, _partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(())

    async def append(
        self, _partition: int, records: list[tuple[bytes, bytes | None]], leader_epoch: int
    ) -> None:
        self.appended.extend(records)
        self.entered.set()
        await self.release.wait()


def store_with(log: SlowLog) -> TopicShareStateStore:
    none: Any = None
    store = TopicShareStateStore(1, none, none, BrokerConfig(environ={}), none)
    store.log = log  # type: ignore[assignment]
    return store


def state(epoch: int) -> bytes:
    return encode_state(PersistedState(epoch, 0, ()))


def test_a_stale_write_during_a_newer_ones_append_is_fenced() -> None:
    trio.run(stale_write_during_append)


async def stale_write_during_append() -> None:
    log = SlowLog()
    store = store_with(log)
    key = encode_key(("g", uuid.UUID(int=1), 0))
    outcome: list[BaseException | None] = []

    async def stale_write() -> None:
        try:
            await store.write_local(0, key, state(1))
            outcome.append(None)
        except FencedStateEpoch as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write_local, 0, key, state(2))  # the new leader's
        with trio.fail_after(5):
            await log.entered.wait()
        nursery.start_soon(stale_write)  # the former leader's, during the append
        await trio.testing.wait_all_tasks_blocked()
        log.release.set()
    assert len(outcome) == 1 and isinstance(outcome[0], FencedStateEpoch), outcome
    assert [decode_state(v).state_epoch for _, v in log.appended if v] == [2]
    assert decode_state(await store.read_local(0, key) or b"").state_epoch == 2
    assert store._writing == {}, "the key's lock goes once its writers are done"


def test_equal_and_newer_epochs_pass_and_older_ones_are_fenced() -> None:
    trio.run(writes_in_turn)


async def writes_in_turn() -> None:
    log = SlowLog()
    log.release.set()
    store = store_with(log)
    key = encode_key(("g", uuid.UUID(int=1), 0))
    await store.write_local(0, key, state(2))
    await store.write_local(0, key, state(2))
    await store.write_local(0, key, state(3))
    with pytest.raises(FencedStateEpoch):
        await store.write_local(0, key, state(2))
    assert [decode_state(v).state_epoch for _, v in log.appended if v] == [2, 2, 3]
