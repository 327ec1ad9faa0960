"""`raftka serve --shards 2`: two broker processes on one host as one cluster, reached by a
real client, partitions led by both, stopped together by one SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from clients import consume, create_topic, produce, wait_until
from confluent_kafka.admin import AdminClient
from harness import REPO_ROOT, BrokerProcess, free_port_pair, metadata_brokers

pytestmark = pytest.mark.timeout(180)


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def test_two_shards_serve_one_topic_across_both_and_stop_on_sigterm(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    kafka_port, raft_port = free_port_pair(), free_port_pair()
    launcher = broker_factory(
        port=kafka_port,
        extra_args=["--shards", "2", "--raft-listen", f"127.0.0.1:{raft_port}"],
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
