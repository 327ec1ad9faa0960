"""`raftka cluster status` adds the brokers up by host: the rack when a broker has one (as
`raftka serve --shards` sets it), else the advertised host; the "Hosts" table is printed only
when some host runs more than one broker."""

from __future__ import annotations

import io

from raftka.broker.admin.cluster import hosts_of, print_status


def _broker(
    node_id: int,
    host: str | None,
    rack: str | None,
    *,
    answers: bool = True,
    leads: int = 0,
    replicas: int = 0,
    offline: list[str] | None = None,
) -> dict[str, object]:
    return {
        "id": node_id,
        "host": host,
        "port": None if host is None else 9092 + node_id,
        "rack": rack,
        "in_metadata": host is not None,
        "answers": answers,
        "metadata_role": None,
        "leads": leads,
        "replicas": replicas,
        "offline_log_dirs": offline or [],
    }


def _document(brokers: list[dict[str, object]]) -> dict[str, object]:
    hosts = hosts_of(brokers)
    return {
        "cluster_id": "c1",
        "controller_id": 1,
        "brokers": brokers,
        "hosts": hosts,
        "partitions": [],
        "under_replicated_partitions": [],
        "offline_partitions": [],
        "offline_log_dirs": [],
        "counts": {
            "brokers": len(brokers),
            "brokers_answering": sum(1 for b in brokers if b["answers"]),
            "hosts": len(hosts),
            "partitions": 0,
            "under_replicated": 0,
            "offline": 0,
            "offline_log_dirs": 0,
        },
    }


def test_shards_are_grouped_by_rack_and_others_by_advertised_host() -> None:
    brokers = [
        _broker(1, "10.0.0.1", "alpha", leads=2, replicas=3),
        _broker(2, "10.0.0.1", "alpha", answers=False, leads=1, replicas=2, offline=["/d/b"]),
        _broker(3, "10.0.0.2", None, leads=4, replicas=4),
        _broker(4, "10.0.0.3", "beta", leads=0, replicas=1),
        _broker(5, "10.0.0.2", None, leads=1, replicas=1),
        _broker(6, None, None, answers=False, replicas=2),  # named in replica sets only
    ]
    assert hosts_of(brokers) == [
        {
            "host": "alpha",
            "by": "rack",
            "brokers": [1, 2],
            "brokers_answering": 1,
            "leads": 3,
            "replicas": 5,
            "offline_log_dirs": [{"broker": 2, "log_dir": "/d/b"}],
        },
        {
            "host": "10.0.0.2",
            "by": "address",
            "brokers": [3, 5],
            "brokers_answering": 2,
            "leads": 5,
            "replicas": 5,
            "offline_log_dirs": [],
        },
        {
            "host": "beta",
            "by": "rack",
            "brokers": [4],
            "brokers_answering": 1,
            "leads": 0,
            "replicas": 1,
            "offline_log_dirs": [],
        },
        {
            "host": None,
            "by": None,
            "brokers": [6],
            "brokers_answering": 0,
            "leads": 0,
            "replicas": 2,
            "offline_log_dirs": [],
        },
    ]


def test_a_rack_and_an_address_of_the_same_name_are_two_hosts() -> None:
    hosts = hosts_of([_broker(1, "h1", "h1"), _broker(2, "h1", None)])
    assert [(h["host"], h["by"], h["brokers"]) for h in hosts] == [
        ("h1", "rack", [1]),
        ("h1", "address", [2]),
    ]


def _printed(brokers: list[dict[str, object]]) -> str:
    out = io.StringIO()
    print_status(_document(brokers), out)
    return out.getvalue()


def test_the_hosts_table_shows_each_host_when_one_runs_several_brokers() -> None:
    text = _printed(
        [
            _broker(1, "127.0.0.1", "node-a", leads=2, replicas=2),
            _broker(2, "127.0.0.1", "node-a", answers=False, leads=1, replicas=1, offline=["/x"]),
            _broker(3, "127.0.0.2", None, leads=3, replicas=3),
        ]
    )
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    assert lines[header].split() == [
        "HOST", "BROKERS", "ANSWERING", "LEADERS", "REPLICAS", "OFFLINE", "LOG", "DIRS"
    ]  # fmt: skip
    assert lines[header + 1].split() == ["node-a", "1,2", "1/2", "3", "3", "1"]
    assert lines[header + 2].split() == ["127.0.0.2", "3", "1/1", "3", "3", "0"]
    assert lines[header + 3] == ""


def test_no_hosts_table_when_every_host_runs_one_broker() -> None:
    text = _printed([_broker(1, "10.0.0.1", None), _broker(2, "10.0.0.2", "r2")])
    assert not any(line.startswith("HOST ") for line in text.splitlines())
    assert "BROKER  HOST:PORT" in text
