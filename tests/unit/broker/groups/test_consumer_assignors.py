"""The consumer group protocol's server-side assignors: every partition once, balanced, sticky."""

from __future__ import annotations

import uuid

import pytest

from raftka.broker.groups.assignors import (
    MemberSubscription,
    RangeAssignor,
    UniformAssignor,
    assignors_named,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def _counts(assignment: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in assignment.items()}


def _all(assignment: dict[str, dict[uuid.UUID, set[int]]]) -> list[tuple[uuid.UUID, int]]:
    return sorted((t, p) for a in assignment.values() for t, ps in a.items() for p in ps)


def test_uniform_assigns_every_partition_once_and_balanced() -> None:
    members = {m: MemberSubscription(frozenset({T1, T2})) for m in ("a", "b", "c")}
    result = UniformAssignor().assign(members, {T1: 6, T2: 1})
    assert _all(result) == sorted([(T1, p) for p in range(6)] + [(T2, 0)])
    counts = sorted(_counts(result).values())
    assert counts[-1] - counts[0] <= 1, result


def test_uniform_is_sticky_when_a_member_leaves() -> None:
    members = {m: MemberSubscription(frozenset({T1})) for m in ("a", "b", "c")}
    first = UniformAssignor().assign(members, {T1: 6})
    survivors = {
        m: MemberSubscription(frozenset({T1}), {t: frozenset(p) for t, p in first[m].items()})
        for m in ("a", "b")
    }
    second = UniformAssignor().assign(survivors, {T1: 6})
    for m in ("a", "b"):
        assert first[m][T1] <= second[m][T1], (first, second)
    assert _counts(second) == {"a": 3, "b": 3}


def test_uniform_is_sticky_when_a_member_joins() -> None:
    members = {m: MemberSubscription(frozenset({T1})) for m in ("a", "b")}
    first = UniformAssignor().assign(members, {T1: 6})
    grown = {
        m: MemberSubscription(frozenset({T1}), {t: frozenset(p) for t, p in first[m].items()})
        for m in ("a", "b")
    }
    grown["c"] = MemberSubscription(frozenset({T1}))
    second = UniformAssignor().assign(grown, {T1: 6})
    assert _counts(second) == {"a": 2, "b": 2, "c": 2}
    for m in ("a", "b"):
        assert second[m][T1] <= first[m][T1], "a member only gives up partitions"


def test_uniform_heterogeneous_subscriptions_only_assign_subscribed_topics() -> None:
    members = {
        "a": MemberSubscription(frozenset({T1})),
        "b": MemberSubscription(frozenset({T1, T2})),
        "c": MemberSubscription(frozenset({T2})),
    }
    result = UniformAssignor().assign(members, {T1: 4, T2: 4})
    assert _all(result) == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(4)])
    assert T2 not in result["a"] and T1 not in result["c"]
    counts = sorted(_counts(result).values())
    assert counts[-1] - counts[0] <= 1, result


def test_uniform_drops_unsubscribed_and_vanished_partitions() -> None:
    members = {
        "a": MemberSubscription(frozenset({T1}), {T1: frozenset({0, 1, 5}), T2: frozenset({0})})
    }
    assert UniformAssignor().assign(members, {T1: 3}) == {"a": {T1: {0, 1, 2}}}


def test_range_gives_consecutive_ranges_per_topic() -> None:
    members = {m: MemberSubscription(frozenset({T1, T2})) for m in ("b", "a")}
    result = RangeAssignor().assign(members, {T1: 5, T2: 2})
    assert result == {"a": {T1: {0, 1, 2}, T2: {0}}, "b": {T1: {3, 4}, T2: {1}}}


def test_assignors_named_refuses_unknown_names() -> None:
    assert list(assignors_named(["range", "uniform"])) == ["range", "uniform"]
    with pytest.raises(ValueError, match="unknown consumer group assignor 'sticky'"):
        assignors_named(["sticky"])
