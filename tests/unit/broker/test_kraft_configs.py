"""A Kafka KRaft node's configs: what raftka cannot be (a broker-only or controller-only node)
and a quorum that leaves this node out stop the start with a message naming the config; the
controller listener is the Raft listener, not one for clients."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from raftka.broker.cli import _log_dirs, main
from raftka.broker.config import BrokerConfig
from raftka.broker.security.listeners import controller_listener, resolve_listeners


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
