"""What `raftka cluster` and `topics describe` print, as an operator reads it: `cluster status`
lists the partitions of user topics (internal topics' only with --include-internal), a reader
that closes the pipe early (`| head`) gets no traceback, `cluster quorum` asked through a
broker that is not the controller still shows every voter's log end, and a partition that has
not had its first leader yet is `creating`, not `offline`."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from brokers import Brokers
from clients import make_consumer, make_producer, run_raftka, unique, wait_until
from confluent_kafka.admin import AdminClient, NewTopic
from harness import REPO_ROOT, BrokerProcess, ClusterProcess


@pytest.fixture(scope="module")
def broker(module_brokers: Brokers) -> BrokerProcess:
    broker = module_brokers.broker({"offsets.topic.num.partitions": "3"}, name="cli-output")
    topic = unique("cli-output")
    producer = make_producer(broker.bootstrap)
    producer.produce(topic, b"a")
    assert producer.flush(30) == 0, "the record was not delivered"
    consumer = make_consumer(broker.bootstrap, **{"group.id": unique("cli-output-g")})
    consumer.subscribe([topic])
    try:  # a committed offset: __consumer_offsets exists
        message = wait_until(lambda: consumer.poll(0.5), 60, "the record for the group")
        consumer.commit(message, asynchronous=False)
    finally:
        consumer.close()
    return broker


def status(broker: BrokerProcess, *args: str) -> Any:
    done = run_raftka(
        "cluster", "status", "--bootstrap-servers", broker.bootstrap, "--output", "json", *args
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cluster_status_lists_internal_topics_only_when_asked(broker: BrokerProcess) -> None:
    listed = {p["topic"] for p in status(broker)["partitions"]}
    assert listed and not any(t.startswith("__") for t in listed), listed
    everything = {p["topic"] for p in status(broker, "--include-internal")["partitions"]}
    assert "__consumer_offsets" in everything, everything
    text = run_raftka("cluster", "status", "--bootstrap-servers", broker.bootstrap)
    assert "3 partitions of internal topics not listed: --include-internal" in text.stdout


def test_a_closed_pipe_ends_the_command_without_a_traceback(broker: BrokerProcess) -> None:
    command = [sys.executable, "-m", "raftka.broker", "cluster", "status"]
    reader = subprocess.Popen(
        [*command, "--bootstrap-servers", broker.bootstrap],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # as `| head` does once it has its lines
    errors = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 0, errors
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors


@pytest.fixture(scope="module")
def cluster(module_brokers: Brokers) -> ClusterProcess:
    return module_brokers.cluster(3, name="cli-quorum")


def test_cluster_quorum_through_another_broker_knows_every_log_end(
    cluster: ClusterProcess,
) -> None:
    def quorum(bootstrap: str) -> Any:
        done = run_raftka("cluster", "quorum", "--bootstrap-servers", bootstrap, "--output", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    leader = quorum(cluster.nodes[0].bootstrap)["leader"]
    other = next(n for n in cluster.nodes if n.node_id != leader)
    answer = wait_until(
        lambda: (q := quorum(other.bootstrap))["leader"] == leader and q,
        30,
        "the same controller through another broker",
    )
    ends = answer["log_end_offsets"]
    assert sorted(ends) == ["1", "2", "3"], answer
    assert all(end >= 0 for end in ends.values()), answer
    # And when each last answered the leader and held its whole log, by the leader's clock
    # (its own entry is its now): the followers answer every tick.
    fetched, caught_up = answer["last_fetch_ms"], answer["last_caught_up_ms"]
    assert sorted(fetched) == sorted(caught_up) == ["1", "2", "3"], answer
    now_ms = fetched[str(leader)]
    stamps = [*fetched.values(), *caught_up.values()]
    assert all(0 <= now_ms - stamp < 10_000 for stamp in stamps), answer


def test_a_partition_electing_its_first_leader_is_creating(cluster: ClusterProcess) -> None:
    topic = unique("creating")
    done = run_raftka(
        "cluster", "quorum", "--bootstrap-servers", cluster.nodes[0].bootstrap, "--output", "json"
    )
    controller = json.loads(done.stdout)["leader"]
    # Replicas on the two other brokers, one of them paused: no majority, no leader yet,
    # while the controller and the other keep the metadata quorum.
    node_2, node_3 = [n for n in cluster.nodes if n.node_id != controller]
    node_3.pause()
    try:
        admin = AdminClient({"bootstrap.servers": node_2.bootstrap})
        future = admin.create_topics(
            [NewTopic(topic, 1, -1, replica_assignment=[[node_2.node_id, node_3.node_id]])],
            operation_timeout=10,
        )[topic]
        future.result(timeout=30)

        def described() -> Any:
            done = run_raftka(
                "topics", "describe", topic, "--bootstrap-servers", node_2.bootstrap,
                "--output", "json",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        (partition,) = wait_until(
            lambda: (d := described()["topics"][0]["partitions"]) and d,
            30,
            "the new topic in node 2's metadata",
        )
        assert (partition["leader"], partition["status"]) == (-1, "creating"), partition
    finally:
        node_3.resume()
    wait_until(
        lambda: described()["topics"][0]["partitions"][0]["status"] in ("ok", "under-replicated"),
        60,
        "the partition's first leader",
    )
