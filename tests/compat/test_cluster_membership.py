"""Growing and shrinking a running cluster with real clients: broker 4 joins a 3-broker
cluster (an observer of the metadata quorum, hosting nothing until asked), a partition is
reassigned onto it, broker 1 is decommissioned (its replicas move off, it leaves the metadata
voters and Metadata) while an idempotent acks=all producer and a group consumer run, losing
and duplicating nothing, and a restarted broker keeps the changed voter set."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import RawConnection, retry_retriable, wait_until
from confluent_kafka.admin import AdminClient, NewTopic
from harness import REPO_ROOT, ClusterNode, ClusterProcess
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.schema.unregister_broker.v0.response import UnregisterBrokerResponse
from test_cluster import ContinuousProducer, check_acked_records, raw_metadata
from test_reassignment import GroupConsumer, create_on, partition_state

# One worker runs the module: its tests share one cluster, in order.
pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("membership")]

CONFIG = {
    "auto.leader.rebalance.enable": "false",
    "log.segment.bytes": "1048576",
    # The metadata log is truncated behind snapshots soon: the joiner starts from one.
    "metadata.log.segment.bytes": "1024",
    "metadata.log.max.snapshot.interval.ms": "200",
    "metadata.log.max.record.bytes.between.snapshots": "1024",
}


@pytest.fixture(scope="module")
def cluster(module_brokers: Brokers) -> ClusterProcess:
    return module_brokers.cluster(3, CONFIG, name="members")


def run_cli(
    cluster: ClusterProcess, *args: str, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    """`raftka cluster ARGS --output json` against the running brokers."""
    bootstrap = ",".join(n.bootstrap for n in cluster.running())
    return subprocess.run(
        [sys.executable, "-m", "raftka.broker", "cluster", *args]
        + ["--bootstrap-servers", bootstrap, "--output", "json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cluster_cli(cluster: ClusterProcess, *args: str, timeout: float = 150) -> Any:
    done = run_cli(cluster, *args, timeout=timeout)
    assert done.returncode == 0, f"raftka cluster {args}: {done.stdout}{done.stderr}"
    return json.loads(done.stdout)


def broker_ids(bootstrap: str) -> list[int]:
    return sorted(int(b.node_id) for b in raw_metadata(bootstrap).brokers)


def hosted_by(cluster: ClusterProcess, node_id: int) -> list[str]:
    md = raw_metadata(cluster.running()[0].bootstrap)
    return [
        f"{t.name}-{p.partition_index}"
        for t in md.topics
        for p in t.partitions
        if node_id in [int(r) for r in p.replica_nodes]
    ]


def metadata_segment_bases(node: ClusterNode) -> list[int]:
    return sorted(int(p.stem) for p in (node.data_dir / "__cluster_metadata-0").glob("*.log"))


def a_broker_joins_and_hosts_nothing_until_asked(cluster: ClusterProcess) -> None:
    topic = create_on(cluster, [1, 2, 3])
    wait_until(
        lambda: all(metadata_segment_bases(n)[0] > 0 for n in cluster.nodes),
        30,
        "the metadata log to be truncated behind a snapshot on every broker",
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    cluster_id = admin.describe_cluster(request_timeout=10).result(timeout=15).cluster_id
    joiner = cluster.add_joiner(4, cluster_id)
    for node in cluster.running():
        wait_until(
            lambda node=node: broker_ids(node.bootstrap) == [1, 2, 3, 4],
            30,
            f"broker {node.node_id}'s Metadata to list brokers 1-4",
        )
    assert hosted_by(cluster, 4) == []
    # Its metadata log starts where the snapshot it was sent ends.
    assert metadata_segment_bases(joiner)[0] > 0
    assert (joiner.data_dir / "meta.properties").read_text().count(f"cluster.id={cluster_id}")
    quorum = cluster_cli(cluster, "quorum")
    assert quorum["voters"] == [1, 2, 3] and quorum["observers"] == [4], quorum
    # It serves clients: Metadata through it names the partition's leader.
    md = raw_metadata(joiner.bootstrap, [topic])
    assert [int(r) for r in md.topics[0].partitions[0].replica_nodes] == [1, 2, 3]


def decommission_moves_replicas_off_under_load(cluster: ClusterProcess) -> None:
    topic = create_on(cluster, [1, 2, 3])
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != 1)
    producer = ContinuousProducer(
        bootstrap, topic, count=2000, rate=200, **{"enable.idempotence": True}
    )
    consumer = GroupConsumer(bootstrap, topic)
    consumer.start()
    producer.start()
    wait_until(lambda: len(producer.acked) > 200, 30, "the producer under way")

    # Not waiting for the moves first: the command says so and a second run goes on.
    first = run_cli(cluster, "decommission", "1", "--wait-timeout", "0")
    done = first
    if first.returncode != 0:
        assert "partitions left to move" in first.stderr
        assert "run the command again to wait" in first.stderr, first.stderr
        done = run_cli(cluster, "decommission", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "partitions left to move" in done.stderr
    assert "warning: the metadata quorum keeps 2 voters" in done.stderr
    document = json.loads(done.stdout)
    assert document["left_voters"] and document["unregistered"]
    assert hosted_by(cluster, 1) == []
    cluster.node(1).stop()
    for node in cluster.running():
        wait_until(
            lambda node=node: broker_ids(node.bootstrap) == [2, 3, 4],
            30,
            f"broker {node.node_id}'s Metadata to drop broker 1",
        )
    quorum = cluster_cli(cluster, "quorum")
    assert quorum["voters"] == [2, 3] and quorum["observers"] == [4], quorum

    producer.finish()
    wait_until(
        lambda: len(set(consumer.values)) >= producer.count, 90, "the group to read every record"
    )
    consumer.stop.set()
    consumer.join(30)
    assert consumer.exc is None, consumer.exc
    records = {offset: producer.value(i) for i, offset in producer.acked.items()}
    check_acked_records(producer, records, expect_no_duplicates=True)
    assert sorted(consumer.values) == sorted(producer.value(i) for i in range(producer.count))
    state = partition_state(cluster, topic)
    assert state["replicas"] == [4, 2, 3], state  # broker 1's place taken by the empty one


def voter_changes_survive_a_restart(cluster: ClusterProcess) -> None:
    unknown = run_cli(cluster, "decommission", "9")
    assert unknown.returncode != 0 and "broker 9 is not registered" in unknown.stderr
    refused = run_cli(cluster, "remove-voter", "4")
    assert refused.returncode != 0 and "not a voter" in refused.stderr

    changed = cluster_cli(cluster, "add-voter", "4")
    assert changed["quorum"]["voters"] == [2, 3, 4], changed
    # UnregisterBroker is refused while the broker hosts replicas.
    with RawConnection(cluster.node(3).bootstrap, timeout=30) as conn:
        conn.send_request(UnregisterBrokerRequest(broker_id=BrokerId(2)))
        answer = conn.recv_response(UnregisterBrokerResponse)
    assert answer.error_code == ErrorCode.invalid_request, answer
    assert "still hosts" in (answer.error_message or ""), answer
    # The controller leaves the voters: it hands the controller role off first.
    controller = changed["quorum"]["leader"]
    demoted = run_cli(cluster, "remove-voter", str(controller))
    assert demoted.returncode == 0, demoted.stdout + demoted.stderr
    assert "warning: the metadata quorum keeps 2 voters" in demoted.stderr
    quorum = json.loads(demoted.stdout)["quorum"]
    assert quorum["observers"] == [controller] and quorum["leader"] != controller, quorum
    assert cluster_cli(cluster, "add-voter", str(controller))["quorum"]["voters"] == [2, 3, 4]
    # Broker 2 restarts with its original --peers (1, 2, 3): the metadata log's voters win.
    cluster.node(2).stop()
    cluster.node(2).start()
    wait_until(
        lambda: broker_ids(cluster.node(2).bootstrap) == [2, 3, 4],
        30,
        "broker 2 back, listing brokers 2-4",
    )
    quorum = cluster_cli(cluster, "quorum")
    assert quorum["voters"] == [2, 3, 4] and quorum["observers"] == [], quorum
    # So does the joiner (started with --join, a voter now): its data dir keeps the cluster id.
    cluster.node(4).stop()
    cluster.node(4).start()
    wait_until(
        lambda: broker_ids(cluster.node(4).bootstrap) == [2, 3, 4],
        30,
        "broker 4 back, listing brokers 2-4",
    )
    quorum = cluster_cli(cluster, "quorum")
    assert quorum["voters"] == [2, 3, 4] and quorum["observers"] == [], quorum
    # The quorum still commits metadata: a new topic is placed on the brokers there are.
    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in cluster.running())})
    topic = f"after-{uuid.uuid4().hex[:8]}"

    def create() -> None:
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)

    retry_retriable(create)
    wait_until(
        lambda: sorted(partition_state(cluster, topic)["isr"]) == [2, 3, 4],
        30,
        f"{topic}-0 in sync on brokers 2-4",
    )


def test_join_decommission_and_voter_changes(cluster: ClusterProcess) -> None:
    """One story on one cluster, in order (each step builds on the one before, so they are
    one test: test workers may not split them): broker 4 joins and hosts nothing; broker 1
    is decommissioned under load; the voter set survives restarts."""
    a_broker_joins_and_hosts_nothing_until_asked(cluster)
    decommission_moves_replicas_off_under_load(cluster)
    voter_changes_survive_a_restart(cluster)
