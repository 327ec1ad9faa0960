"""Reassignment in the cluster metadata: records, the image, validation, and the leader's
membership plan."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.control.configs import validate_alter_broker_configs
from raftka.broker.cluster.control.reassignment import validate_reassignment
from raftka.broker.cluster.image import (
    BrokerConfigsChanged,
    MetadataImage,
    Reassignment,
    ReplicasChanged,
)
from raftka.broker.cluster.reassign import MembershipStep, next_step
from raftka.broker.cluster.records import (
    AlterBrokerConfigs,
    CompleteReassignment,
    CreateTopic,
    ReassignPartition,
    RegisterBroker,
    decode_record,
)
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict
from raftka.broker.cluster.validation import TopicError
from raftka.broker.config import ConfigError, throttled_replicas, validate_topic_configs
from raftka.consensus.driver import AppendThrottle

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def _image() -> MetadataImage:
    image = MetadataImage()
    for node in (1, 2, 3, 4):
        image.apply(RegisterBroker(node, "127.0.0.1", 9090 + node, None, "i"), node)
    image.apply(CreateTopic("t", TID, ((1, 2, 3), (1, 2, 3))), 10)
    return image


@pytest.mark.parametrize(
    "record",
    [
        ReassignPartition(TID, 0, (2, 3, 4)),
        ReassignPartition(TID, 1, None),
        CompleteReassignment(TID, 0, (2, 3, 4)),
    ],
)
def test_records_round_trip(record: object) -> None:
    assert decode_record(type(record).__name__.encode(), record.to_bytes()) == record  # type: ignore[attr-defined]


def test_a_move_lists_target_first_then_the_replicas_to_remove_until_completed() -> None:
    image = _image()
    changes = image.apply(ReassignPartition(TID, 0, (2, 3, 4)), 11)
    assert changes == [ReplicasChanged("t", TID, 0, (2, 3, 4, 1), (1, 2, 3))]
    topic = image.topics["t"]
    assert topic.reassignments == {0: Reassignment((1, 2, 3), (2, 3, 4))}
    assert topic.raft_voters(0) == (1, 2, 3) and topic.raft_voters(1) == (1, 2, 3)
    move = topic.reassignments[0]
    assert move.adding() == (4,) and move.removing(topic.replicas[0]) == (1,)
    # Snapshots keep the move.
    restored = image_from_dict(image_to_dict(image))
    assert restored == image and restored.topics["t"].reassignments == topic.reassignments
    changes = image.apply(CompleteReassignment(TID, 0, (2, 3, 4)), 12)
    assert changes == [ReplicasChanged("t", TID, 0, (2, 3, 4), (2, 3, 4))]
    assert topic.replicas[0] == (2, 3, 4) and not topic.reassignments


def test_cancel_targets_the_original_replicas_and_keeps_every_copy_listed() -> None:
    image = _image()
    image.apply(ReassignPartition(TID, 0, (1, 2, 4)), 11)
    image.apply(ReassignPartition(TID, 0, None), 12)
    topic = image.topics["t"]
    assert topic.reassignments[0] == Reassignment((1, 2, 3), (1, 2, 3))
    assert topic.replicas[0] == (1, 2, 3, 4)
    image.apply(CompleteReassignment(TID, 0, (1, 2, 3)), 13)
    assert topic.replicas[0] == (1, 2, 3) and not topic.reassignments
    assert image.apply(CompleteReassignment(TID, 0, (1, 2, 3)), 14) == []


def _error(image: MetadataImage, name: str, index: int, target: object) -> TopicError:
    with pytest.raises(TopicError) as info:
        validate_reassignment(image, name, index, target)  # type: ignore[arg-type]
    return info.value


def test_validation_gives_kafkas_errors() -> None:
    image = _image()
    assert _error(image, "nope", 0, (1,)).error_code == ErrorCode.unknown_topic_or_partition
    assert _error(image, "t", 5, (1,)).error_code == ErrorCode.unknown_topic_or_partition
    assert _error(image, "t", 0, None).error_code == ErrorCode.no_reassignment_in_progress
    for bad in ((), (1, 1, 2), (1, 2, 9)):
        assert _error(image, "t", 0, bad).error_code == ErrorCode.invalid_replica_assignment
    assert validate_reassignment(image, "t", 0, (1, 2, 3)) is None, "already there"
    record = validate_reassignment(image, "t", 0, (2, 3, 4))
    assert record == ReassignPartition(TID, 0, (2, 3, 4))
    image.apply(record, 11)
    assert validate_reassignment(image, "t", 0, (2, 3, 4)) is None, "same target again"
    assert _error(image, "t", 0, (1, 3, 4)).error_code == ErrorCode.reassignment_in_progress
    assert validate_reassignment(image, "t", 0, None) == ReassignPartition(TID, 0, None)
    image.apply(ReassignPartition(TID, 0, None), 12)
    assert _error(image, "t", 0, None).error_code == ErrorCode.no_reassignment_in_progress


def _plan(target, voters, learners=(), leader=1, match=None, hw=10) -> MembershipStep:  # type: ignore[no-untyped-def]
    return next_step(target, frozenset(voters), frozenset(learners), leader, match or {}, hw)


def test_the_leader_adds_learners_promotes_caught_up_ones_then_removes() -> None:
    assert _plan((2, 3, 4), (1, 2, 3)) == MembershipStep("add_learner", 4)
    assert _plan((2, 3, 4), (1, 2, 3), (4,), match={4: 3}) == MembershipStep("wait")
    assert _plan((2, 3, 4), (1, 2, 3), (4,), match={4: 10}) == MembershipStep("promote", 4)
    # The leader goes last, after handing leadership to a caught-up target replica.
    assert _plan((2, 3, 4), (1, 2, 3, 4), match={2: 10, 4: 10}) == MembershipStep("transfer", 2)
    assert _plan((2, 3, 4), (1, 2, 3, 4), leader=2) == MembershipStep("remove", 1)
    assert _plan((2, 3, 4), (2, 3, 4), leader=2) == MembershipStep("complete")
    # A cancelled move drops its learner first, and a promoted replica as a voter.
    assert _plan((1, 2, 3), (1, 2, 3), (4,)) == MembershipStep("remove", 4)
    assert _plan((1, 2, 3), (1, 2, 3, 4)) == MembershipStep("remove", 4)


def test_throttled_replicas_format() -> None:
    assert throttled_replicas("*") is None
    assert throttled_replicas("0:1, 1:2") == frozenset({(0, 1), (1, 2)})
    assert throttled_replicas("") == frozenset()
    with pytest.raises(ConfigError, match="PARTITION:BROKER"):
        validate_topic_configs({"leader.replication.throttled.replicas": "0-1"})


def test_append_throttle_is_a_token_bucket() -> None:
    now = [0.0]
    throttle = AppendThrottle(1000, clock=lambda: now[0])
    assert throttle.try_take(600)
    assert not throttle.try_take(600), "only 400 bytes left"
    now[0] = 0.2
    assert throttle.try_take(600)
    assert not throttle.try_take(1)
    # A message above one second's worth leaves once the bucket is full, then owes.
    now[0] = 10.0
    assert throttle.try_take(5000)
    now[0] = 13.0
    assert not throttle.try_take(1)
    now[0] = 14.1
    assert throttle.try_take(1)
    assert throttle.bytes_sent == 6201


def test_a_new_leader_goes_on_from_the_membership_in_its_log() -> None:
    from raft_net import Net

    from raftka.consensus.types import Role

    net = Net([1, 2, 3])
    net.elect(1)
    net.add_node(4)
    net.propose(1, payload=b"a")
    net[1].propose_config_change(add_learner=4)
    net.deliver()
    net.crash(1)
    net.tick(40, only=[2, 3, 4])
    (leader,) = [i for i in (2, 3) if net[i].role is Role.LEADER]
    core = net[leader]
    net.propose(leader, payload=b"b")
    match = {n: pr.match_end for n, pr in core.progress.items()}
    step = next_step((2, 3, 4), core.voters, core.learners, leader, match, core.high_watermark)
    assert step == MembershipStep("promote", 4)


def test_dynamic_broker_configs_are_stored_per_broker_and_as_the_default() -> None:
    image = _image()
    record = validate_alter_broker_configs(image, "", {"leader.replication.throttled.rate": "5000"})
    assert record == AlterBrokerConfigs("", {"leader.replication.throttled.rate": "5000"})
    assert decode_record(b"AlterBrokerConfigs", record.to_bytes()) == record
    assert image.apply(record, 11) == [BrokerConfigsChanged("")]
    assert image.dynamic_broker_config(3, "leader.replication.throttled.rate") == "5000"
    image.apply(AlterBrokerConfigs("3", {"leader.replication.throttled.rate": "70"}), 12)
    assert image.dynamic_broker_config(3, "leader.replication.throttled.rate") == "70"
    assert image.dynamic_broker_config(2, "leader.replication.throttled.rate") == "5000"
    assert image_from_dict(image_to_dict(image)).broker_configs == image.broker_configs
    # None goes back to the static value; an empty set forgets the resource.
    record = validate_alter_broker_configs(image, "3", {"leader.replication.throttled.rate": None})
    image.apply(record, 13)
    assert "3" not in image.broker_configs

    for resource, changes, code in [
        ("", {"log.dirs": "/x"}, ErrorCode.invalid_request),
        ("", {"leader.replication.throttled.rate": "0"}, ErrorCode.invalid_request),
        ("", {"leader.replication.throttled.rate": "fast"}, ErrorCode.invalid_request),
        ("9", {"leader.replication.throttled.rate": "1"}, ErrorCode.invalid_request),
    ]:
        with pytest.raises(TopicError) as info:
            validate_alter_broker_configs(image, resource, changes)  # type: ignore[arg-type]
        assert info.value.error_code == code, (resource, changes)
