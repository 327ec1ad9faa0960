"""Replica lag and leader epochs as `raftka cluster status` and `topics describe` show them."""

from __future__ import annotations

from types import SimpleNamespace

from raftka.broker.admin.partitions import (
    PartitionState,
    ReplicaLag,
    format_lag,
    leader_epochs,
    replica_lags,
)


def state(leader: int, isr: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState("orders", 0, leader, (1, 2, 3), isr)


def test_lag_is_measured_from_the_leaders_log_end() -> None:
    assert replica_lags(state(2), {1: 7, 2: 10, 3: 10}) == (
        ReplicaLag(1, 7, 3, True),
        ReplicaLag(2, 10, 0, True),
        ReplicaLag(3, 10, 0, True),
    )


def test_an_unanswered_replica_has_unknown_lag_and_the_others_keep_theirs() -> None:
    lags = replica_lags(state(2, isr=(2, 3)), {1: None, 2: 10, 3: 9})
    assert [(r.node, r.lag, r.in_sync) for r in lags] == [
        (1, None, False),
        (2, 0, True),
        (3, 1, True),
    ]
    assert format_lag(lags) == "1:-,2:0,3:1"


def test_without_the_leaders_log_end_no_lag_is_known() -> None:
    assert all(r.lag is None for r in replica_lags(state(2), {1: 5, 3: 5}))
    assert all(r.lag is None for r in replica_lags(state(-1), {1: 5, 2: 5, 3: 5}))  # offline


def test_a_follower_ahead_of_what_the_leader_reported_is_not_behind() -> None:
    # The brokers are asked one after another while writes go on.
    assert replica_lags(state(1), {1: 10, 2: 12, 3: 10})[1].lag == 0


def test_leader_epochs_from_a_metadata_answer() -> None:
    metadata = SimpleNamespace(
        topics=[
            SimpleNamespace(
                name="orders",
                partitions=[
                    SimpleNamespace(partition_index=0, leader_epoch=4),
                    SimpleNamespace(partition_index=1, leader_epoch=-1),
                ],
            ),
            SimpleNamespace(name="old", partitions=[SimpleNamespace(partition_index=0)]),  # < v7
        ]
    )
    assert leader_epochs(metadata) == {("orders", 0): 4, ("orders", 1): None, ("old", 0): None}
