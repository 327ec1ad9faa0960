"""The Raft values (entries, messages, states) keep what a dataclass gives: their fields,
defaults, equality, hashing and `replace`, with constructors of their own (consensus/types.py
says why)."""

from __future__ import annotations

import dataclasses
from typing import Final, get_args, get_origin, get_type_hints

import pytest

from raftka.consensus.core import Ready, SoftState
from raftka.consensus.driver import RaftGroupUpdate
from raftka.consensus.types import (
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    Role,
    Snapshot,
)

VALUES = (Entry, HardState, Message, Snapshot, SoftState, RaftGroupUpdate)


def test_the_raft_values_compare_hash_and_replace_by_their_fields() -> None:
    entry = Entry(3, 5, 2, b"batch")
    assert entry.kind is EntryKind.DATA and entry.record_count == 3
    assert entry == Entry(3, 5, 2, b"batch", EntryKind.DATA)
    assert entry == Entry(base_offset=3, last_offset=5, epoch=2, payload=b"batch")
    assert hash(entry) == hash(Entry(3, 5, 2, b"batch"))
    assert entry != Entry(3, 5, 3, b"batch")
    assert len({entry, Entry(3, 5, 2, b"batch"), Entry(3, 5, 3, b"batch")}) == 2
    assert dataclasses.replace(entry, epoch=7) == Entry(3, 5, 7, b"batch")
    assert repr(entry) == (
        "Entry(base_offset=3, last_offset=5, epoch=2, payload=b'batch', kind=<EntryKind.DATA: 0>)"
    )
    message = Message("t-0", MessageType.APPEND, 1, 2, 9, entries=(entry,), high_watermark=3)
    assert (message.prev_offset, message.reject, message.snapshot_voters) == (
        -1,
        False,
        frozenset(),
    )
    assert message.log_start_offset == -1 and message.entries == (entry,)
    replaced = dataclasses.replace(message, log_start_offset=4)
    assert replaced.log_start_offset == 4 and replaced.entries == (entry,)
    assert replaced != message and hash(message) == hash(dataclasses.replace(message))
    assert HardState() == HardState(0, None)
    assert Snapshot(10, 2, frozenset({1})).learners == frozenset()
    assert SoftState(Role.LEADER, 1, 3) == SoftState(role=Role.LEADER, leader_id=1, term=3)
    assert RaftGroupUpdate("t-0", 5, None).high_watermark == 5
    with pytest.raises(TypeError):
        Entry(3, 5, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        HardState(1, 2, 3)  # type: ignore[call-arg]


def test_every_field_of_a_raft_value_is_final_and_set_by_its_constructor() -> None:
    """`Final` is what keeps them immutable: mypy refuses an assignment after `__init__`."""
    for cls in VALUES:
        hints = get_type_hints(cls, include_extras=True)
        names = [f.name for f in dataclasses.fields(cls)]
        assert names and all(get_origin(hints[n]) is Final for n in names), cls
        assert all(get_args(hints[n]) for n in names), cls
    # The constructor takes every field, by name, and sets it.
    assert dataclasses.astuple(Snapshot(end_offset=1, epoch=2, voters=frozenset({3}))) == (
        1,
        2,
        frozenset({3}),
        b"",
        frozenset(),
    )


def test_a_ready_is_made_with_its_optional_fields_empty() -> None:
    ready = Ready(None, None, (), (), None, None)
    assert ready.snapshot is None and ready.log_start_offset is None
    assert ready == Ready(None, None, (), (), None, None, None, None)
