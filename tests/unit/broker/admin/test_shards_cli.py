"""`raftka serve --shards N`: the command line each shard is started with (no processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from raftka.broker.cli import main, shard_commands
from raftka.broker.config import BrokerConfig
from raftka.broker.server import Listener


def commands(
    shards: int = 2,
    raft: Listener | None = None,
    log_dirs: tuple[str, ...] = ("/d",),
    **configs: str,
) -> list[list[str]]:
    config = BrokerConfig({k.replace("_", "."): v for k, v in configs.items()}, environ={})
    built = shard_commands(
        shards,
        Listener("127.0.0.1", 9092),
        raft,
        config.get_int("node.id"),
        [Path(d) for d in log_dirs],
        config,
        ["--log-level", "INFO"],
        "host-a",
    )
    assert [node_id for node_id, _ in built] == [
        config.get_int("node.id") + i for i in range(shards)
    ]
    return [argv for _, argv in built]


def option(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == name]


def test_with_several_log_dirs_each_shard_has_its_own_folder_in_each() -> None:
    first, second = commands(log_dirs=("/disk1", "/disk2"))
    assert option(first, "--data-dir") == []
    assert "log.dirs=/disk1/shard-1,/disk2/shard-1" in option(first, "--config")
    assert "log.dirs=/disk1/shard-2,/disk2/shard-2" in option(second, "--config")


def test_each_shard_is_a_node_with_its_own_ports_and_data_dir_all_in_peers() -> None:
    first, second = commands()
    assert first[:4] == [sys.executable, "-m", "raftka.broker", "serve"]
    assert option(first, "--log-level") == ["INFO"]
    peers = "1@127.0.0.1:19092,2@127.0.0.1:19093"
    for node_id, argv in ((1, first), (2, second)):
        assert option(argv, "--node-id") == [str(node_id)]
        assert option(argv, "--peers") == [peers]
        assert option(argv, "--listen") == [f"127.0.0.1:{9091 + node_id}"]
        assert option(argv, "--raft-listen") == [f"127.0.0.1:{19091 + node_id}"]
        assert option(argv, "--data-dir") == [f"/d/shard-{node_id}"]
        assert option(argv, "--config") == [
            "controller.quorum.voters=1@127.0.0.1:19092",  # the first shard votes; others observe
            "broker.rack=host-a",
        ]


def test_node_ids_raft_ports_rack_and_metrics_ports_follow_what_is_configured() -> None:
    argvs = commands(
        3, Listener("10.0.0.1", 7000), node_id="5", broker_rack="r1", metrics_listen=":9100"
    )
    assert [option(a, "--node-id") for a in argvs] == [["5"], ["6"], ["7"]]
    assert option(argvs[2], "--raft-listen") == ["10.0.0.1:7002"]
    assert option(argvs[0], "--peers") == ["5@10.0.0.1:7000,6@10.0.0.1:7001,7@10.0.0.1:7002"]
    # broker.rack as configured (not added); metrics.listen counted up like the other ports
    assert [option(a, "--config") for a in argvs] == [
        ["controller.quorum.voters=5@10.0.0.1:7000", "metrics.listen=0.0.0.0:9100"],
        ["controller.quorum.voters=5@10.0.0.1:7000", "metrics.listen=0.0.0.0:9101"],
        ["controller.quorum.voters=5@10.0.0.1:7000", "metrics.listen=0.0.0.0:9102"],
    ]


@pytest.mark.parametrize(
    ("shards", "raft", "configs", "message"),
    [
        (0, None, {}, "--shards must be at least 1"),
        (
            2,
            None,
            {"advertised_listeners": "PLAINTEXT://h:1,SSL://h:2"},
            "with --shards give one address",
        ),
        (
            2,
            None,
            {"controller_quorum_voters": "1@127.0.0.1:19092"},
            "controller.quorum.voters cannot be given with --shards",
        ),
        (2, Listener("127.0.0.1", 9093), {}, "would both use port 9093"),
        (2, Listener("127.0.0.1", 65535), {}, "needs ports 65535 to 65536"),
        (2, None, {"metrics_listen": "127.0.0.1:19093"}, "would both use port 19093"),
    ],
)
def test_what_cannot_be_split_across_shards_is_refused(
    shards: int, raft: Listener | None, configs: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        commands(shards, raft, **configs)


def test_shards_with_peers_exits_2_naming_both(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--shards", "2", "--peers", "1@h:1,2@h:2"]) == 2
    assert "--peers cannot be combined with --shards" in capsys.readouterr().err


def test_a_cluster_id_starting_with_a_dash_is_taken_as_the_value() -> None:
    from raftka.broker.cli import _attach_cluster_id, _parser

    argv = ["serve", "--join", "--cluster-id", "-TvHikygvkwmeD11dBwecw", "--node-id", "4"]
    args = _parser().parse_args(_attach_cluster_id(argv))
    assert (args.cluster_id, args.join, args.node_id) == ("-TvHikygvkwmeD11dBwecw", True, 4)


def test_console_ports_are_counted_up_too_or_share_the_metrics_port() -> None:
    apart = commands(2, console_listen="127.0.0.1:9480", metrics_listen="127.0.0.1:9100")
    assert [option(a, "--config")[2:] for a in apart] == [
        ["metrics.listen=127.0.0.1:9100", "console.listen=127.0.0.1:9480"],
        ["metrics.listen=127.0.0.1:9101", "console.listen=127.0.0.1:9481"],
    ]
    shared = commands(2, console_listen="127.0.0.1:9100", metrics_listen="127.0.0.1:9100")
    assert [option(a, "--config")[2:] for a in shared] == [
        ["metrics.listen=127.0.0.1:9100", "console.listen=127.0.0.1:9100"],
        ["metrics.listen=127.0.0.1:9101", "console.listen=127.0.0.1:9101"],
    ]
    with pytest.raises(ValueError, match="would both use port 19093"):
        commands(2, console_listen="127.0.0.1:19093")


def across_hosts(
    this: Listener, hosts: list[Listener], shards: int = 2, **configs: str
) -> list[tuple[int, list[str]]]:
    """`raftka serve --shards N --listen THIS --hosts ...` on the host whose first Raft
    address is `this` + 10000 (the default Raft port)."""
    config = BrokerConfig({k.replace("_", "."): v for k, v in configs.items()}, environ={})
    return shard_commands(
        shards,
        this,
        None,
        config.get_int("node.id"),
        [Path("/d")],
        config,
        [],
        "host-x",
        hosts,
    )


def test_across_hosts_every_host_has_its_own_node_ids_and_its_first_shard_votes() -> None:
    hosts = [Listener("10.0.0.1", 19092), Listener("10.0.0.2", 19092), Listener("10.0.0.3", 19092)]
    everyone = (
        "1@10.0.0.1:19092,2@10.0.0.1:19093,3@10.0.0.2:19092,"
        "4@10.0.0.2:19093,5@10.0.0.3:19092,6@10.0.0.3:19093"
    )
    for j, address in enumerate(("10.0.0.1", "10.0.0.2", "10.0.0.3")):
        built = across_hosts(Listener(address, 9092), hosts)
        assert [node_id for node_id, _ in built] == [1 + 2 * j, 2 + 2 * j]
        for i, (node_id, argv) in enumerate(built):
            assert option(argv, "--peers") == [everyone]  # the same on every host
            assert option(argv, "--listen") == [f"{address}:{9092 + i}"]
            assert option(argv, "--raft-listen") == [f"{address}:{19092 + i}"]
            assert option(argv, "--data-dir") == [f"/d/shard-{node_id}"]
            assert option(argv, "--config") == [
                "controller.quorum.voters=1@10.0.0.1:19092,3@10.0.0.2:19092,5@10.0.0.3:19092",
                "broker.rack=host-x",
            ]
    # node ids counted from --node-id; hosts on one address told apart by their ports
    same_address = [Listener("127.0.0.1", 20000), Listener("127.0.0.1", 30000)]
    built = across_hosts(Listener("127.0.0.1", 20000 - 10000), same_address, 3, node_id="11")
    assert [node_id for node_id, _ in built] == [11, 12, 13]
    built = across_hosts(Listener("127.0.0.1", 30000 - 10000), same_address, 3, node_id="11")
    assert [node_id for node_id, _ in built] == [14, 15, 16]
    assert option(built[0][1], "--peers") == [
        "11@127.0.0.1:20000,12@127.0.0.1:20001,13@127.0.0.1:20002,"
        "14@127.0.0.1:30000,15@127.0.0.1:30001,16@127.0.0.1:30002"
    ]


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (["10.0.0.2:19092", "10.0.0.3:19092"], r"10.0.0.1:19092 \(--raft-listen, else"),
        (["10.0.0.1:19092", "10.0.0.1:19093"], "would share Raft ports with --shards 2"),
        (["10.0.0.1:19092", "10.0.0.2:65535"], "needs Raft ports 65535 to 65536"),
    ],
)
def test_hosts_that_do_not_name_this_one_or_overlap_are_refused(
    hosts: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        across_hosts(Listener("10.0.0.1", 9092), [Listener.parse(h) for h in hosts])


def test_hosts_without_shards_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--hosts", "h:1,h:2"]) == 2
    assert "--hosts needs --shards" in capsys.readouterr().err


def test_an_advertised_address_is_counted_up_per_shard_like_the_listen_port() -> None:
    first, second = commands(advertised_listeners="PLAINTEXT://broker.example.com:29092")
    assert (
        option(first, "--config")[-1] == "advertised.listeners=PLAINTEXT://broker.example.com:29092"
    )
    assert (
        option(second, "--config")[-1]
        == "advertised.listeners=PLAINTEXT://broker.example.com:29093"
    )
    (only,) = commands(1, advertised_listeners="10.1.2.3:9092")
    assert option(only, "--config")[-1] == "advertised.listeners=10.1.2.3:9092"
