"""A Kafka KRaft node's configs: what raftka cannot be (a broker-only or controller-only node)
and a quorum that leaves this node out stop the start with a message naming the config; the
controller listener is the Raft listener, not one for clients."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from raftka.broker.cli import _log_dirs, _metadata_voters, main
from raftka.broker.config import BrokerConfig
from raftka.broker.security.listeners import controller_listener, resolve_listeners
from raftka.broker.server import ClusterSpec


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        ("process.roles=broker", "process.roles=broker: raftka's nodes are broker and controller"),
        ("controller.quorum.voters=2@127.0.0.1:1", "node.id 1 is not one of the voters (2)"),
        ("controller.quorum.voters=nonsense", "controller.quorum.voters: expected ID@HOST:PORT"),
        ("log.dirs=/a,/b,/b/../a", "log.dirs=/a,/b,/b/../a: /a and /b/../a are the same"),
        ("log.dirs= , ", "at least one log directory is needed"),
    ],
)
def test_what_raftka_cannot_do_stops_the_start(
    config: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--config", config]) == 2
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize(
    ("voters", "complaint"),
    [
        (
            "3@127.0.0.1:19003",
            "controller.quorum.voters: voter 3 is not one of the --peers (1, 2); every voter "
            "must be a peer",
        ),
        (
            "1@127.0.0.1:19009",
            "controller.quorum.voters: voter 1 is at 127.0.0.1:19009 but --peers has it at "
            "127.0.0.1:19001",
        ),
        ("1@nonsense", "controller.quorum.voters: expected ID@HOST:PORT"),
    ],
)
def test_metadata_voters_outside_the_peers_stop_the_start_naming_them(
    voters: str, complaint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["serve", "--node-id", "2", "--peers", "1@127.0.0.1:19001,2@127.0.0.1:19002"]
    argv += ["--config", f"controller.quorum.voters={voters}", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    assert complaint in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_with_peers_controller_quorum_voters_names_the_voters_the_rest_observe() -> None:
    peers = ClusterSpec.parse_peers("1@127.0.0.1:19001,2@127.0.0.1:19002,3@127.0.0.1:19003")
    config = BrokerConfig({"controller.quorum.voters": "1@127.0.0.1:19001"}, environ={})
    voters = _metadata_voters(config, peers)
    assert voters == {1}
    # Every node is given the same voters, an observer (2, 3) as the voter (1) is.
    for node in (1, 2, 3):
        assert ClusterSpec(peers=peers, metadata_voters=voters).voters(node) == {1}
    assert _metadata_voters(BrokerConfig({}, environ={}), peers) is None
    assert ClusterSpec(peers=peers).voters(2) == {1, 2, 3}


def test_the_controller_listener_is_the_raft_listener_not_a_client_one() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        },
        environ={},
    )
    assert [spec.name for spec in resolve_listeners(config, None)] == ["PLAINTEXT"]
    assert controller_listener(config) == ("127.0.0.1", 9093)


def test_log_dirs_is_the_data_directory_unless_data_dir_is_given() -> None:
    config = BrokerConfig({"log.dirs": "/var/lib/kafka"}, environ={})
    assert _log_dirs(argparse.Namespace(data_dir=None), config) == [Path("/var/lib/kafka")]
    given = argparse.Namespace(data_dir=Path("/srv/raftka"))
    assert _log_dirs(given, config) == [Path("/srv/raftka")]


def test_log_dirs_lists_several_directories_and_log_dir_is_its_fallback() -> None:
    no_data_dir = argparse.Namespace(data_dir=None)
    several = BrokerConfig({"log.dirs": "/disk1/kafka, /disk2/kafka", "log.dir": "/x"}, environ={})
    assert _log_dirs(no_data_dir, several) == [Path("/disk1/kafka"), Path("/disk2/kafka")]
    fallback = BrokerConfig({"log.dir": "/var/lib/raftka"}, environ={})
    assert _log_dirs(no_data_dir, fallback) == [Path("/var/lib/raftka")]
    assert _log_dirs(no_data_dir, BrokerConfig({}, environ={})) == [Path("./data")]
