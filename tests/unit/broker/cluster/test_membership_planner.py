"""Membership pieces without a cluster: the decommission planner, the voter-removal rules,
the registration record's Raft address (record, command, snapshot) and `--join`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from raftka.broker.admin.membership import print_decommissioned, print_quorum, print_voter_change
from raftka.broker.cluster.commands import (
    ChangeMetadataVotersCommand,
    Command,
    CommandDecodeError,
    RegisterBrokerCommand,
    UnregisterBrokerCommand,
)
from raftka.broker.cluster.control.voters import voter_removal_problem, voter_removal_warning
from raftka.broker.cluster.decommission import plan_decommission
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.placement import PlacementError
from raftka.broker.cluster.records import RegisterBroker, decode_metadata_batch, encode_batch
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict
from raftka.broker.server import ClusterSpec, Listener, read_or_create_cluster_id


def test_each_replica_on_the_leaving_broker_is_replaced_in_place() -> None:
    partitions = {("a", 0): (1, 2, 3), ("a", 1): (2, 3, 1), ("b", 0): (2, 3, 4)}
    brokers = {1: None, 2: None, 3: None, 4: None, 5: None}
    plan = plan_decommission(1, partitions, brokers)
    # The least loaded free broker first (5 holds nothing), then the next least loaded.
    assert plan == {("a", 0): (5, 2, 3), ("a", 1): (2, 3, 4)}


def test_the_plan_keeps_replicas_on_distinct_racks() -> None:
    partitions = {("t", 0): (1, 2)}
    brokers = {1: "r1", 2: "r2", 3: "r2", 4: "r1"}
    assert plan_decommission(1, partitions, brokers) == {("t", 0): (4, 2)}


def test_refusals_name_the_fix() -> None:
    with pytest.raises(PlacementError, match="broker 9 is not registered"):
        plan_decommission(9, {}, {1: None})
    with pytest.raises(PlacementError, match=r"t-0 has 3 replicas.*--join"):
        plan_decommission(1, {("t", 0): (1, 2, 3)}, {1: None, 2: None, 3: None})
    assert plan_decommission(1, {("t", 0): (2, 3)}, {1: None, 2: None, 3: None}) == {}


def test_voter_removal_rules() -> None:
    assert voter_removal_problem(frozenset({1}), 1) is not None
    assert voter_removal_problem(frozenset({1, 2}), 1) is None
    warning = voter_removal_warning(frozenset({1, 2, 3}), 1)
    assert warning is not None and "2 voters" in warning and "survives 0" in warning
    assert voter_removal_warning(frozenset({1, 2, 3, 4}), 1) is None  # 3 left: still 1
    assert voter_removal_warning(frozenset({1, 2, 3, 4, 5}), 1) is not None  # 2 -> 1


def test_the_raft_address_travels_in_record_command_and_snapshot() -> None:
    record = RegisterBroker(4, "h", 9092, None, "inc", {}, ("10.0.0.4", 19092))
    (decoded,) = decode_metadata_batch(encode_batch([record]))
    assert decoded == record
    assert isinstance(decoded, RegisterBroker) and decoded.raft_address == ("10.0.0.4", 19092)
    old = RegisterBroker.from_bytes(
        b'{"version":1,"node_id":1,"host":"h","port":1,"rack":null,"incarnation_id":"i"}'
    )
    assert old.raft_address is None

    command = RegisterBrokerCommand(4, "h", 9092, None, "inc", {}, ("10.0.0.4", 19092))
    assert Command.from_wire(command.to_wire()) == command
    for other in (ChangeMetadataVotersCommand("add", 4), UnregisterBrokerCommand(4)):
        assert Command.from_wire(other.to_wire()) == other
    with pytest.raises(CommandDecodeError, match="add or remove"):
        Command.from_wire(b'{"op":"change_metadata_voters","action":"drop","node_id":4}')

    image = MetadataImage()
    image.apply(record, 0)
    image.apply(RegisterBroker(1, "h", 9091, None, "i"), 1)
    restored = image_from_dict(image_to_dict(image))
    assert restored.brokers[4].raft_address == ("10.0.0.4", 19092)
    assert restored.brokers[1].raft_address is None


def test_a_joiner_is_not_a_voter_and_takes_the_given_cluster_id(tmp_path: Path) -> None:
    peers = {1: Listener("h", 1), 2: Listener("h", 2), 4: Listener("h", 4)}
    joining = ClusterSpec(peers=peers, join=True, given_cluster_id="abc")
    assert joining.voters(4) == {1, 2}
    assert joining.cluster_id() == "abc"
    assert ClusterSpec(peers=peers).voters(4) == {1, 2, 4}
    assert read_or_create_cluster_id(tmp_path, 4, "abc") == "abc"
    with pytest.raises(ValueError, match="belongs to cluster abc"):
        read_or_create_cluster_id(tmp_path, 4, "other")


def test_the_cli_tables() -> None:
    quorum = {
        "leader": 2,
        "epoch": 3,
        "high_watermark": 40,
        "voters": [2, 3],
        "observers": [4],
        "log_end_offsets": {"2": 40, "3": 40},
        "last_fetch_ms": {"2": 5_000, "3": 4_900, "4": -1},
        "last_caught_up_ms": {"2": 5_000, "3": 3_800, "4": -1},
    }
    out = io.StringIO()
    print_quorum(quorum, out)
    rows = {line.split()[0]: line.split()[1:] for line in out.getvalue().splitlines()[2:]}
    assert rows["2"] == ["voter", "40", "0", "ms", "ago", "0", "ms", "ago"]
    assert rows["3"] == ["voter", "40", "100", "ms", "ago", "1200", "ms", "ago"]
    assert rows["4"] == ["observer", "-1", "-", "-"]
    print_voter_change({"broker": 4, "voter": True, "quorum": quorum}, out)
    print_decommissioned(
        {"broker": 1, "moved": [{"topic": "t", "partition": 0}], "left_voters": True}, out
    )
    text = out.getvalue()
    assert "leader (controller) 2, epoch 3, high watermark 40" in text
    assert "observer" in text and "-1" in text  # broker 4's log end is unknown
    assert "Broker 4 is a voter of the metadata quorum." in text
    assert "Broker 1 decommissioned: 1 partitions moved, removed from the metadata voters" in text
