"""`scripts/cluster` with its own node count, base port and data directory: a second cluster
beside the default one's ports, which a client uses, and `status` and `stop` that find it
from its data directory alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clients import make_consumer, make_producer, unique, wait_until
from harness import REPO_ROOT, free_port_pair

TIMEOUT_S = 180


def cluster_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO_ROOT / "scripts" / "cluster"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_a_two_node_cluster_on_chosen_ports_and_folder(tmp_path: Path) -> None:
    # Both pairs from this worker's block: the default Raft ports (base + 10000) may lie in
    # the kernel's ephemeral range, where any outgoing connection can hold them.
    base, raft_base = free_port_pair(), free_port_pair()
    data = tmp_path / "second-cluster"
    ports = ["--base-port", str(base), "--raft-base-port", str(raft_base)]
    started = cluster_script("--nodes", "2", *ports, "--data-dir", str(data), "start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        assert f"bootstrap {bootstrap}" in started.stdout, started.stdout
        assert sorted(p.name for p in data.glob("node-*.log")) == ["node-1.log", "node-2.log"]

        topic = unique("script-cluster")
        producer = make_producer(bootstrap)
        producer.produce(topic, b"hello")
        assert producer.flush(30) == 0, "the record was not delivered"
        consumer = make_consumer(bootstrap)
        consumer.subscribe([topic])
        try:
            message = wait_until(
                lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m,
                60,
                "the record back",
            )
            assert message.value() == b"hello"
        finally:
            consumer.close()

        status = cluster_script("--data-dir", str(data), "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"127.0.0.1:{base + 1}" in status.stdout
        assert f"127.0.0.1:{raft_base + 1}" in status.stdout, status.stdout
        assert "ids=1,2 " in status.stdout, status.stdout
    finally:
        stopped = cluster_script("--data-dir", str(data), "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "node 2 stopped" in stopped.stdout, stopped.stdout


def test_bad_options_are_named() -> None:
    refused = cluster_script("--nodes", "zero", "status")
    assert refused.returncode == 2 and "--nodes must be a positive number" in refused.stderr
    refused = cluster_script("--base-port", "60000", "status")
    assert refused.returncode == 2 and "--base-port" in refused.stderr
    refused = cluster_script("--raft-base-port", "65535", "status")
    assert refused.returncode == 2 and "--raft-base-port" in refused.stderr
    refused = cluster_script("restart")
    assert refused.returncode == 2 and "usage: scripts/cluster" in refused.stderr
