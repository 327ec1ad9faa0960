"""`raftka serve --shards N`: N broker processes on one host as one cluster, reached by a
real client, partitions led by all of them, stopped together by one SIGTERM; the first shard
the only voter of the cluster metadata, the others its observers, which keep it going when one
of them dies and catch up when it returns."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brokers import Brokers
from clients import consume, create_topic, produce, wait_until
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from harness import (
    REPO_ROOT,
    BrokerProcess,
    ClusterProcess,
    free_port_pair,
    free_port_run,
    metadata_brokers,
)
from test_cluster import raw_metadata
from test_metrics import scrape

pytestmark = pytest.mark.timeout(180)


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def running(pid: int) -> bool:
    """Whether process `pid` has not exited yet (a zombie has: its sockets are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_two_shards_serve_one_topic_across_both_and_stop_on_sigterm(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    kafka_port, raft_port, metrics_port = free_port_pair(), free_port_pair(), free_port_pair()
    launcher = broker_factory(
        port=kafka_port,
        extra_args=[
            "--shards",
            "2",
            "--raft-listen",
            f"127.0.0.1:{raft_port}",
            "--config",
            f"metrics.listen=127.0.0.1:{metrics_port}",
        ],
        startup_timeout_s=60,
    )
    shard_pids = wait_until(
        lambda: len(pids := children(launcher.pid)) == 2 and pids, 30, "two shard processes"
    )
    bootstrap = f"127.0.0.1:{kafka_port},127.0.0.1:{kafka_port + 1}"
    for port in (kafka_port, kafka_port + 1):
        wait_until(
            lambda port=port: metadata_brokers(f"127.0.0.1:{port}")[0] == [1, 2],
            60,
            f"the shard on port {port} to list brokers 1 and 2",
        )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    nodes = admin.describe_cluster().result(10).nodes
    assert {(n.id, n.port, n.rack) for n in nodes} == {
        (1, kafka_port, socket.gethostname()),
        (2, kafka_port + 1, socket.gethostname()),
    }

    topic = f"shards-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=4, replication_factor=1)
    partitions = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
    leaders = {p.id: p.leader for p in partitions.values()}
    assert sorted(leaders.values()) == [1, 1, 2, 2], f"leaders not spread: {leaders}"
    # `cluster status` adds the two shards up as one host (their rack, the host name).
    status = cluster_cli(bootstrap, "status")
    assert status["counts"]["hosts"] == 1, status["hosts"]
    (host,) = status["hosts"]
    assert (host["host"], host["by"], host["brokers"]) == (socket.gethostname(), "rack", [1, 2])
    assert host["brokers_answering"] == 2
    assert host["leads"] == sum(b["leads"] for b in status["brokers"])
    assert host["leads"] == status["counts"]["partitions"], status
    assert host["replicas"] == status["counts"]["partitions"]  # replication factor 1
    text = cluster_text(bootstrap, "status").splitlines()
    header = next(i for i, line in enumerate(text) if line.startswith("HOST "))
    row = text[header + 1].split()
    assert row[:3] == [socket.gethostname(), "1,2", "2/2"], text
    assert int(row[3]) == host["leads"], text
    # Each shard's own /metrics names it and its host, for adding a host's shards up there.
    host_name = socket.gethostname()
    for node_id, port in ((1, metrics_port), (2, metrics_port + 1)):
        info = [
            labels for (name, labels) in scrape(f"127.0.0.1:{port}") if name == "raftka_broker_info"
        ]
        assert info == [(("host", host_name), ("node_id", str(node_id)), ("rack", host_name))]
    records = [{"partition": i % 4, "value": f"v{i}".encode()} for i in range(400)]
    result = produce(bootstrap, topic, records, acks="all")
    assert all(r.error is None for r in result.reports)
    read = consume(bootstrap, topic, partitions=4)
    for partition, messages in read.items():
        assert [m.value() for m in messages] == [f"v{i}".encode() for i in range(partition, 400, 4)]

    launcher.stop(timeout=60)  # SIGTERM; asserts exit code 0
    for pid in shard_pids:  # the launcher waited for (reaped) each shard before exiting
        assert not Path(f"/proc/{pid}").exists(), f"shard process {pid} outlived the launcher"
    assert sorted(p.name for p in launcher.data_dir.iterdir()) == ["shard-1", "shard-2"]


def test_a_shard_that_cannot_start_stops_the_others_and_the_launcher_fails(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if request.config.getoption("--bootstrap-servers"):
        pytest.skip("needs its own raftka processes; not available with --bootstrap-servers")
    kafka_port, raft_port = free_port_pair(), free_port_pair()
    argv = [sys.executable, "-m", "raftka.broker", "serve", "--shards", "2"]
    argv += ["--listen", f"127.0.0.1:{kafka_port}", "--raft-listen", f"127.0.0.1:{raft_port}"]
    argv += ["--data-dir", str(tmp_path / "data")]
    with socket.socket() as taken:  # the second shard's Kafka port is in use
        taken.bind(("127.0.0.1", kafka_port + 1))
        taken.listen()
        done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"cannot serve on 127.0.0.1:{kafka_port + 1}" in done.stderr
    assert "shard node 2 exited with code 1; stopping the other shards" in done.stderr


def quorum(bootstrap: str) -> dict[str, object]:
    """`raftka cluster quorum` (DescribeQuorum of the metadata log) as its JSON document."""
    return cluster_cli(bootstrap, "quorum")


def cluster_cli(bootstrap: str, action: str) -> dict[str, Any]:
    """`raftka cluster ACTION --output json` as its JSON document."""
    done = subprocess.run(
        [sys.executable, "-m", "raftka.broker", "cluster", action]
        + ["--bootstrap-servers", bootstrap, "--output", "json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def cluster_text(bootstrap: str, action: str) -> str:
    """`raftka cluster ACTION` as the text it prints."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftka.broker",
            "cluster",
            action,
            "--bootstrap-servers",
            bootstrap,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def topic_names(bootstrap: str) -> set[str]:
    return {t.name for t in raw_metadata(bootstrap).topics}


def test_three_shards_one_metadata_voter_two_observers_topics_through_any_shard(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    kafka_port, raft_port = free_port_run(3), free_port_run(3)
    launcher = broker_factory(
        port=kafka_port,
        extra_args=["--shards", "3", "--raft-listen", f"127.0.0.1:{raft_port}"],
        startup_timeout_s=60,
    )
    ports = [kafka_port, kafka_port + 1, kafka_port + 2]
    for port in ports:
        wait_until(
            lambda port=port: metadata_brokers(f"127.0.0.1:{port}")[0] == [1, 2, 3],
            60,
            f"the shard on port {port} to list brokers 1-3",
        )
    for port in ports:  # every shard answers it alike (it asks the controller)
        seen = quorum(f"127.0.0.1:{port}")
        assert (seen["leader"], seen["voters"], seen["observers"]) == (1, [1], [2, 3]), seen
    status = cluster_cli(f"127.0.0.1:{ports[1]}", "status")
    roles = {b["id"]: b["metadata_role"] for b in status["brokers"]}
    assert roles == {1: "voter", 2: "observer", 3: "observer"}, status["brokers"]
    # Created through an observer shard alone (forwarded to the controller, shard 1), seen
    # by every shard's Metadata.
    made = []
    for port in ports[1:]:
        topic = f"via-{port}-{uuid.uuid4().hex[:6]}"
        create_topic(f"127.0.0.1:{port}", topic, partitions=3, replication_factor=1)
        made.append(topic)
        for other in ports:
            wait_until(
                lambda other=other, topic=topic: topic in topic_names(f"127.0.0.1:{other}"),
                30,
                f"{topic} in the Metadata of the shard on port {other}",
            )
    leaders = {
        p.leader
        for p in AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[2]}"})
        .list_topics(topic=made[0], timeout=10)
        .topics[made[0]]
        .partitions.values()
    }
    assert leaders == {1, 2, 3}, f"the 3 partitions are not led by one shard each: {leaders}"
    launcher.stop(timeout=60)


def test_an_observer_shard_killed_does_not_stop_metadata_changes_and_catches_up(
    brokers: Brokers,
) -> None:
    """The shards as `--shards 3` starts them (one process each here, as when they are
    started one by one, so one can die alone): shard 1 the only metadata voter."""
    cluster: ClusterProcess = brokers.cluster(3, name="shards", start=False)
    voter = f"1@127.0.0.1:{cluster.nodes[0].raft_port}"
    for node in cluster.nodes:
        node.extra_args += ["--config", f"controller.quorum.voters={voter}"]
    cluster.start()
    seen = quorum(cluster.bootstrap)
    assert (seen["voters"], seen["observers"]) == ([1], [2, 3]), seen

    observer = cluster.node(3)
    observer.kill()  # SIGKILL
    alive = ",".join(n.bootstrap for n in (cluster.node(1), cluster.node(2)))
    during = f"during-{uuid.uuid4().hex[:6]}"
    # Committed by the voter alone (placement may put a partition on the dead shard, which
    # is still registered, so its leaders are not waited for here).
    admin = AdminClient({"bootstrap.servers": cluster.node(2).bootstrap})
    created = admin.create_topics(
        [NewTopic(during, num_partitions=2, replication_factor=1)], request_timeout=30
    )
    created[during].result(timeout=60)
    wait_until(
        lambda: during in topic_names(cluster.node(1).bootstrap),
        30,
        f"{during} in shard 1's Metadata",
    )
    seen = quorum(alive)
    assert (seen["voters"], seen["observers"]) == ([1], [2, 3]), seen

    observer.start()  # comes back from its own data directory
    wait_until(
        lambda: during in topic_names(observer.bootstrap),
        60,
        f"the restarted shard 3 to list {during} (it caught up with the metadata log)",
    )
    ends = wait_until(
        lambda: (
            (q := quorum(cluster.bootstrap))["log_end_offsets"]["3"]  # type: ignore[index]
            == q["log_end_offsets"]["1"]  # type: ignore[index]
            and q
        ),
        60,
        "shard 3's metadata log end to reach the voter's",
    )
    assert (ends["voters"], ends["observers"]) == ([1], [2, 3]), ends


@pytest.mark.parametrize("shards", [2, 3])
def test_preferred_leader_election_spreads_leaders_evenly_over_the_shards(
    broker_factory: Callable[..., BrokerProcess], shards: int
) -> None:
    """Six partitions of RF 1 and of RF 2: placement makes each shard the preferred leader of
    6 / N of them, and the controller's preferred-leader election (checked every second
    here) moves any leadership Raft gave another replica back, so each shard leads 6 / N."""
    kafka_port, raft_port = free_port_run(shards), free_port_run(shards)
    launcher = broker_factory(
        port=kafka_port,
        extra_args=["--shards", str(shards), "--raft-listen", f"127.0.0.1:{raft_port}"]
        + ["--config", "leader.imbalance.check.interval.seconds=1"],
        startup_timeout_s=60,
    )
    ids = list(range(1, shards + 1))
    bootstrap = ",".join(f"127.0.0.1:{kafka_port + i}" for i in range(shards))
    for i in range(shards):
        wait_until(
            lambda i=i: metadata_brokers(f"127.0.0.1:{kafka_port + i}")[0] == ids,
            60,
            f"shard {i + 1} to list brokers {ids}",
        )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for replication_factor in (1, 2):
        topic = f"spread-rf{replication_factor}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions=6, replication_factor=replication_factor)

        def leaders(topic: str = topic) -> dict[int, int] | None:
            parts = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
            if any(p.leader != p.replicas[0] for p in parts.values()):
                return None  # not every partition is led by its preferred replica yet
            return {p.id: p.leader for p in parts.values()}

        led = wait_until(leaders, 60, f"every partition of {topic} led by its preferred replica")
        per_shard = {node: list(led.values()).count(node) for node in ids}
        assert per_shard == dict.fromkeys(ids, 6 // shards), f"{topic}: {led}"
    launcher.stop(timeout=60)


def test_while_the_voting_shard_is_down_metadata_cannot_change_but_data_flows(
    brokers: Brokers,
) -> None:
    """Shard 1, the only metadata voter, killed: the other shards' partitions still take
    and serve records, a new topic cannot be made (no controller), and once shard 1 is back
    one can."""
    cluster: ClusterProcess = brokers.cluster(3, name="voterdown", start=False)
    voter = f"1@127.0.0.1:{cluster.nodes[0].raft_port}"
    for node in cluster.nodes:
        node.extra_args += ["--config", f"controller.quorum.voters={voter}"]
    cluster.start()
    topic = f"data-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    parts = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
    led_elsewhere = sorted(p.id for p in parts.values() if p.leader != 1)
    assert len(led_elsewhere) == 2, {p.id: p.leader for p in parts.values()}

    cluster.node(1).kill()  # SIGKILL
    others = ",".join(n.bootstrap for n in (cluster.node(2), cluster.node(3)))
    records = [
        {"partition": p, "value": f"v{p}-{i}".encode()} for p in led_elsewhere for i in range(20)
    ]
    result = produce(others, topic, records, acks="all")
    assert all(r.error is None for r in result.reports), [r.error for r in result.reports]
    read = consume(others, topic, partitions=led_elsewhere, count=40)
    for p in led_elsewhere:
        assert [m.value() for m in read[p]] == [f"v{p}-{i}".encode() for i in range(20)]
    blocked = f"blocked-{uuid.uuid4().hex[:6]}"
    other_admin = AdminClient({"bootstrap.servers": others})
    futures = other_admin.create_topics([NewTopic(blocked, 1, 1)], request_timeout=20)
    with pytest.raises(KafkaException):
        futures[blocked].result(timeout=60)

    cluster.node(1).start()
    after = f"after-{uuid.uuid4().hex[:6]}"
    create_topic(others, after, partitions=1, replication_factor=1)
    wait_until(lambda: after in topic_names(cluster.node(3).bootstrap), 30, f"{after} on shard 3")


@pytest.mark.timeout(300)
def test_shards_of_three_hosts_are_one_cluster_that_loses_a_whole_host_and_nothing_acknowledged(
    brokers: Brokers,
) -> None:
    """Three `raftka serve --shards 2 --hosts ...` launchers, as on three hosts (here told
    apart by their ports and `broker.rack`): six brokers, one metadata voter per host, the
    replicas of each partition on three hosts; the host of the controller killed -9 whole,
    and the cluster goes on taking records and metadata changes (an admin request sent at
    once included) without losing an acknowledged record."""
    kafka_ports = [free_port_pair() for _ in range(3)]
    raft_ports = [free_port_pair() for _ in range(3)]
    hosts = ",".join(f"127.0.0.1:{port}" for port in raft_ports)
    racks = ["host-a", "host-b", "host-c"]
    launchers = [
        brokers.broker(
            name=racks[j],
            port=kafka_ports[j],
            start=False,
            startup_timeout_s=120,
            extra_args=["--shards", "2", "--raft-listen", f"127.0.0.1:{raft_ports[j]}"]
            + ["--hosts", hosts, "--config", f"broker.rack={racks[j]}"],
        )
        for j in range(3)
    ]
    for launcher in launchers:  # no host serves before a majority of the voters is up
        launcher.spawn()
    for launcher in launchers:
        launcher.wait_ready()
    ports = [port + i for port in kafka_ports for i in range(2)]
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
    for port in ports:
        wait_until(
            lambda port=port: metadata_brokers(f"127.0.0.1:{port}")[0] == [1, 2, 3, 4, 5, 6],
            90,
            f"the shard on port {port} to list brokers 1-6",
        )
    seen = quorum(bootstrap)
    assert (seen["voters"], seen["observers"]) == ([1, 3, 5], [2, 4, 6]), seen
    status = cluster_cli(bootstrap, "status")
    assert sorted((h["host"], h["brokers"]) for h in status["hosts"]) == [
        ("host-a", [1, 2]),
        ("host-b", [3, 4]),
        ("host-c", [5, 6]),
    ], status["hosts"]

    topic = f"hosts-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=6, replication_factor=3)
    rack_of = {1: "host-a", 2: "host-a", 3: "host-b", 4: "host-b", 5: "host-c", 6: "host-c"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
    for partition in partitions.values():  # rack-aware placement: one replica per host
        assert sorted(rack_of[r] for r in partition.replicas) == racks, partition.replicas
    before = [{"partition": i % 6, "value": f"before-{i}".encode()} for i in range(600)]
    result = produce(bootstrap, topic, before, acks="all", **{"enable.idempotence": True})
    assert [r.error for r in result.reports if r.error is not None] == []

    # The host of the metadata quorum's leader (the controller): both shards and the
    # launcher, killed -9.
    host = (int(quorum(bootstrap)["leader"]) - 1) // 2
    lost = launchers[host]
    shards_lost = children(lost.pid)
    for pid in shards_lost:
        os.kill(pid, signal.SIGKILL)
    lost.kill()
    wait_until(lambda: not any(map(running, shards_lost)), 30, f"{racks[host]}'s shards to exit")
    lost_ports = (kafka_ports[host], kafka_ports[host] + 1)
    alive = ",".join(f"127.0.0.1:{port}" for port in ports if port not in lost_ports)
    survivors = [b for b, rack in rack_of.items() if rack != racks[host]]
    # The metadata still commits (the two voters left of three), and an admin request sent
    # at once completes: no survivor names the dead controller as the controller (librdkafka
    # would wait on it for the request's whole timeout) ...
    later = f"later-{uuid.uuid4().hex[:6]}"
    create_topic(alive, later, partitions=2, replication_factor=3, timeout_s=90)
    # ... and every partition of the first topic has a leader on another host again.
    wait_until(
        lambda: all(
            p.leader in survivors
            for p in AdminClient({"bootstrap.servers": alive})
            .list_topics(topic=topic, timeout=10)
            .topics[topic]
            .partitions.values()
        ),
        60,
        f"every partition of {topic} led by a shard of the two hosts left",
    )
    after = [{"partition": i % 6, "value": f"after-{i}".encode()} for i in range(600)]
    result = produce(alive, topic, after, acks="all", timeout=90, **{"enable.idempotence": True})
    assert [r.error for r in result.reports if r.error is not None] == []
    read = consume(alive, topic, partitions=6)
    for p in range(6):
        assert [m.value() for m in read[p]] == [
            f"before-{i}".encode() for i in range(p, 600, 6)
        ] + [f"after-{i}".encode() for i in range(p, 600, 6)], f"partition {p}"
    for launcher in launchers:
        if launcher is not lost:
            launcher.stop(timeout=60)
