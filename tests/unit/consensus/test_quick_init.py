"""`quick_init` replaces only a frozen dataclass's constructor: the values it builds are the
dataclass's own (fields, defaults, equality, hashing, immutability, `replace`)."""

from __future__ import annotations

import dataclasses

import pytest

from raftka.consensus.core import SoftState
from raftka.consensus.driver import RaftGroupUpdate
from raftka.consensus.types import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    Role,
    Snapshot,
    quick_init,
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: bytes = b"x"
    c: frozenset[int] = dataclasses.field(default=frozenset({1}))


_Quick = quick_init(
    dataclasses.make_dataclass(
        "_Quick",
        [
            ("a", int),
            ("b", bytes, b"x"),
            ("c", frozenset, dataclasses.field(default=frozenset({1}))),
        ],
        frozen=True,
        slots=True,
    )
)


def test_values_match_the_dataclass_constructor() -> None:
    for args, kwargs in [((1,), {}), ((1, b"y"), {}), ((), {"a": 2, "c": frozenset()})]:
        plain, quick = _Plain(*args, **kwargs), _Quick(*args, **kwargs)
        assert dataclasses.astuple(plain) == dataclasses.astuple(quick)
    with pytest.raises(TypeError):
        _Quick()
    with pytest.raises(TypeError):
        _Quick(1, b"y", frozenset(), 4)
    with pytest.raises(TypeError):
        _Quick(1, d=2)


def test_the_raft_values_stay_frozen_hashable_and_replaceable() -> None:
    entry = Entry(3, 5, 2, b"batch")
    assert entry.kind is EntryKind.DATA and entry.record_count == 3
    assert entry == Entry(3, 5, 2, b"batch", EntryKind.DATA)
    assert hash(entry) == hash(Entry(3, 5, 2, b"batch"))
    assert entry != Entry(3, 5, 3, b"batch")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.epoch = 4  # type: ignore[misc]
    assert dataclasses.replace(entry, epoch=7) == Entry(3, 5, 7, b"batch")
    message = Message("t-0", MessageType.APPEND, 1, 2, 9, entries=(entry,), high_watermark=3)
    assert (message.prev_offset, message.reject, message.snapshot_voters) == (
        -1,
        False,
        frozenset(),
    )
    assert message.log_start_offset == -1 and message.entries == (entry,)
    assert dataclasses.replace(message, log_start_offset=4).log_start_offset == 4
    assert HardState() == HardState(0, None)
    assert Snapshot(10, 2, frozenset({1})).learners == frozenset()
    assert SoftState(Role.LEADER, 1, 3) == SoftState(role=Role.LEADER, leader_id=1, term=3)
    assert RaftGroupUpdate("t-0", 5, None).high_watermark == 5
    for value in (message, HardState(1, 2), SoftState(Role.FOLLOWER, None, 1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.term = 5  # type: ignore[misc]
