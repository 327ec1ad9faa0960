"""The admin CLI (`raftka topics|groups|cluster`) run as a user runs it: a subprocess
against real broker processes, checked by what its tables and JSON say and by what the
broker then holds (read back with confluent-kafka, not with the CLI)."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from clients import make_producer, run_raftka, unique, wait_until, watermarks
from confluent_kafka import Consumer, TopicPartition
from harness import ClusterProcess, free_port

CLI_TIMEOUT_S = 90


def raftka(*args: object, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return run_raftka(*args, timeout=timeout)


def ok(*args: object) -> str:
    result = raftka(*args)
    assert result.returncode == 0, f"raftka {args} exited {result.returncode}: {result.stderr}"
    return result.stdout


def as_json(*args: object) -> Any:
    return json.loads(ok(*args, "--output", "json"))


def table_rows(text: str, first: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


# -- topics ----------------------------------------------------------------------------------


def test_topic_create_list_describe_alter_delete(bootstrap: str, on_raftka: bool) -> None:
    topic = unique("cli-topic")
    b = ("--bootstrap-servers", bootstrap)
    created = ok("topics", "create", topic, "--partitions", 3, "--replication-factor", 1,
                 "--config", "retention.ms=3600000", *b)  # fmt: skip
    assert f"Created topic {topic}." in created

    again = raftka("topics", "create", topic, "--partitions", 3, *b)
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in again.stderr and topic in again.stderr

    assert table_rows(ok("topics", "list", *b), topic) == [[topic, "3", "1", "false"]]
    listed = {t["name"]: t for t in as_json("topics", "list", *b)["topics"]}
    assert listed[topic]["partitions"] == 3 and listed[topic]["replication_factor"] == 1
    assert not any(t["internal"] for t in listed.values())

    described = ok("topics", "describe", topic, *b)
    assert f"Topic: {topic}  PartitionCount: 3  ReplicationFactor: 1" in described
    assert "retention.ms=3600000" in described
    rows = table_rows(described, "0") + table_rows(described, "1") + table_rows(described, "2")
    assert [r[0] for r in rows] == ["0", "1", "2"]
    # PARTITION LEADER EPOCH REPLICAS ISR STATUS
    assert all(r[1].isdigit() and r[2].isdigit() and r[5] == "ok" for r in rows), rows
    (doc,) = as_json("topics", "describe", topic, *b)["topics"]
    assert doc["partition_count"] == 3 and doc["configs"]["retention.ms"] == "3600000"
    # `topics describe` lists every config not at its default: the topic's overrides and what
    # the broker's own config sets (Kafka's server.properties sets segment.bytes, say).
    if on_raftka:
        assert doc["configs"] == {"retention.ms": "3600000"}
    assert all(p["leader"] >= 0 and p["isr"] == p["replicas"] for p in doc["partitions"])
    assert all(p["leader_epoch"] >= 0 for p in doc["partitions"]), doc["partitions"]

    altered = ok("topics", "alter", topic, "--partitions", 5, "--config", "segment.bytes=1048576",
                 *b)  # fmt: skip
    assert "partitions now 5" in altered

    def grown() -> dict[str, Any] | None:
        (doc,) = as_json("topics", "describe", topic, *b)["topics"]
        led = all(p["leader"] >= 0 for p in doc["partitions"])
        return doc if doc["partition_count"] == 5 and led else None

    doc = wait_until(grown, 30, "5 partitions with leaders")
    assert doc["configs"]["retention.ms"] == "3600000"
    assert doc["configs"]["segment.bytes"] == "1048576"

    ok("topics", "alter", topic, "--delete-config", "retention.ms", *b)
    (doc,) = as_json("topics", "describe", topic, *b)["topics"]
    # The override is gone (a broker that sets retention itself may still show its own value).
    assert doc["configs"].get("retention.ms") != "3600000"
    assert doc["configs"]["segment.bytes"] == "1048576"
    if on_raftka:
        assert doc["configs"] == {"segment.bytes": "1048576"}

    refused = raftka("topics", "alter", topic, "--config", "no.such.config=1", *b)
    assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr, refused.stderr

    assert f"Deleted topic {topic}." in ok("topics", "delete", topic, *b)
    wait_until(
        lambda: topic not in {t["name"] for t in as_json("topics", "list", *b)["topics"]},
        30,
        "the deleted topic to leave the list",
    )


# -- groups ----------------------------------------------------------------------------------


def produce_numbered(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict:
    """`per_partition` records to every partition; {partition: offsets} from the acks."""
    producer = make_producer(bootstrap)
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def acked(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets[msg.partition()].append(msg.offset())

    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=f"v{i}".encode(), partition=p, on_delivery=acked)
    assert producer.flush(30) == 0
    return {p: sorted(o) for p, o in offsets.items()}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def planned(document: dict[str, Any]) -> dict[int, int]:
    return {r["partition"]: r["new_offset"] for r in document["partitions"]}


def test_group_describe_reset_offsets_and_delete(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    b = ("--bootstrap-servers", bootstrap)
    early = produce_numbered(bootstrap, topic, 2, 5)
    time.sleep(0.05)
    boundary = datetime.now(UTC)
    time.sleep(0.05)
    late = produce_numbered(bootstrap, topic, 2, 5)
    group = unique("cli-group")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:
        wait_until(
            lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 2,
            60,
            "an assignment",
        )
        consumer.commit(
            offsets=[TopicPartition(topic, 0, late[0][3]), TopicPartition(topic, 1, late[1][4])],
            asynchronous=False,
        )
        # With a member in the group, --execute is refused and nothing changes.
        active = raftka("groups", "reset-offsets", group, "--topic", topic, "--to-earliest",
                        "--execute", *b)  # fmt: skip
        assert active.returncode == 1
        assert "inactive" in active.stderr and "1 member(s)" in active.stderr, active.stderr
    finally:
        consumer.close()  # leaves the group
    start = committed(bootstrap, group, topic, 2)
    assert start == {0: late[0][3], 1: late[1][4]}
    ends = {p: watermarks(bootstrap, topic, p)[1] for p in range(2)}
    lows = {p: watermarks(bootstrap, topic, p)[0] for p in range(2)}

    described = ok("groups", "describe", group, "--bootstrap", bootstrap)
    assert [r[1:6] for r in table_rows(described, group)] == [
        [topic, str(p), str(start[p]), str(ends[p]), str(ends[p] - start[p])] for p in range(2)
    ]
    doc = as_json("groups", "describe", group, *b)
    assert doc["state"] == "EMPTY" and doc["members"] == []
    assert [r["lag"] for r in doc["partitions"]] == [ends[p] - start[p] for p in range(2)]

    # A dry run prints the plan and commits nothing.
    dry = raftka("groups", "reset-offsets", group, "--topic", topic, "--shift-by", -2, *b)
    assert dry.returncode == 0, dry.stderr
    assert "Dry run" in dry.stderr
    rows = table_rows(dry.stdout, group)
    assert [r[2:] for r in rows] == [[str(p), str(start[p]), str(start[p] - 2)] for p in range(2)]
    assert committed(bootstrap, group, topic, 2) == start

    def reset(*scenario: object) -> dict[int, int]:
        """Dry run, then --execute: what is committed is what the dry run printed."""
        before = committed(bootstrap, group, topic, 2)
        plan = planned(as_json("groups", "reset-offsets", group, "--topic", topic, *scenario, *b))
        assert committed(bootstrap, group, topic, 2) == before
        done = as_json("groups", "reset-offsets", group, "--topic", topic, *scenario,
                       "--execute", *b)  # fmt: skip
        assert done["executed"] is True and planned(done) == plan
        assert committed(bootstrap, group, topic, 2) == plan
        return plan

    assert reset("--shift-by", -2) == {p: start[p] - 2 for p in range(2)}
    assert reset("--to-earliest") == lows
    assert reset("--to-datetime", boundary.isoformat()) == {p: late[p][0] for p in range(2)}
    assert all(early[p][-1] < late[p][0] for p in range(2))
    assert reset("--to-latest") == ends
    assert reset("--shift-by", -1000) == lows  # clamped to the log start, as in Kafka

    assert f"Deleted consumer group '{group}'." in ok("groups", "delete", group, *b)
    assert group not in {g["group"] for g in as_json("groups", "list", *b)["groups"]}
    gone = raftka("groups", "describe", group, *b)
    assert gone.returncode == 1 and "does not exist" in gone.stderr


# -- cluster status --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cluster_status_reports_a_killed_broker(cluster_factory: Any) -> None:
    cluster: ClusterProcess = cluster_factory()
    b = ("--bootstrap-servers", cluster.bootstrap)
    topic = unique("cli-rf3")
    ok("topics", "create", topic, "--partitions", 3, "--replication-factor", 3, *b)

    def topic_partitions(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in doc["partitions"] if p["topic"] == topic]

    def healthy() -> dict[str, Any] | None:
        doc = as_json("cluster", "status", *b)
        parts = topic_partitions(doc)
        return doc if len(parts) == 3 and all(p["status"] == "ok" for p in parts) else None

    wait_until(healthy, 30, "every partition led with an ISR of 3")
    produce_numbered(cluster.bootstrap, topic, 3, 20)
    ends = {p: watermarks(cluster.bootstrap, topic, p)[1] for p in range(3)}
    assert all(end >= 20 for end in ends.values()), ends

    def caught_up() -> dict[str, Any] | None:
        doc = healthy()
        if doc is None:
            return None
        lags = [r for p in topic_partitions(doc) for r in p["replica_lag"]]
        return doc if all(r["lag"] == 0 for r in lags) else None

    doc = wait_until(caught_up, 30, "every replica's lag to reach 0 after the writes")
    assert [(x["id"], x["port"], x["answers"]) for x in doc["brokers"]] == [
        (n.node_id, n.port, True) for n in cluster.nodes
    ]
    assert doc["controller_id"] in (1, 2, 3)
    for p in topic_partitions(doc):
        assert sorted(p["replicas"]) == [1, 2, 3] and p["leader_epoch"] >= 0, p
        # Each replica's own log end (ListOffsets to its broker), the leader's included.
        assert p["replica_lag"] == [
            {"node": n, "log_end_offset": ends[p["partition"]], "lag": 0, "in_sync": True}
            for n in p["replicas"]
        ], p
    described = as_json("topics", "describe", topic, *b)["topics"][0]["partitions"]
    epochs = {p["partition"]: p["leader_epoch"] for p in described}
    leaders = {p["partition"]: p["leader"] for p in described}
    assert all(epoch >= 0 for epoch in epochs.values()), described

    # The victim leads a partition (so an epoch must go up) and, if possible, is not the
    # controller.
    led = sorted(set(leaders.values()), key=lambda n: n == doc["controller_id"])
    victim = cluster.node(led[0])
    victim.kill()

    def shrunk() -> dict[str, Any] | None:
        # Every partition the victim led (this topic's and __consumer_offsets') elects a new
        # leader on its own Raft timer, so the cluster has settled only when none is offline.
        doc = as_json("cluster", "status", *b, "--timeout", 10)
        parts = topic_partitions(doc)
        done = all(p["status"] == "under-replicated" for p in parts)
        return doc if len(parts) == 3 and done and doc["counts"]["offline"] == 0 else None

    doc = wait_until(
        shrunk,
        60,
        f"the ISR to shrink and every partition to be led after node {victim.node_id} died",
    )
    for p in topic_partitions(doc):
        assert p["leader"] != victim.node_id and p["leader"] in (1, 2, 3), p
        assert victim.node_id not in p["isr"] and len(p["isr"]) == 2, p
        if leaders[p["partition"]] == victim.node_id:
            assert p["leader_epoch"] > epochs[p["partition"]], (epochs, p)
        else:
            assert p["leader_epoch"] >= epochs[p["partition"]], (epochs, p)
        lags = {r["node"]: r for r in p["replica_lag"]}
        assert lags[victim.node_id] == {
            "node": victim.node_id,
            "log_end_offset": None,
            "lag": None,
            "in_sync": False,
        }, p
        assert lags[p["leader"]]["lag"] == 0 and lags[p["leader"]]["in_sync"], p
    # raftka keeps a killed broker registered (Kafka would drop it from Metadata once its
    # session lapses): it is listed, but does not answer.
    brokers = {x["id"]: x for x in doc["brokers"]}
    assert sorted(brokers) == [1, 2, 3]
    assert brokers[victim.node_id]["in_metadata"] and not brokers[victim.node_id]["answers"]
    assert all(brokers[n]["answers"] for n in brokers if n != victim.node_id)
    urp = {(p["topic"], p["partition"]) for p in doc["under_replicated_partitions"]}
    assert {(topic, p) for p in range(3)} <= urp
    assert doc["counts"]["under_replicated"] == len(doc["under_replicated_partitions"])
    assert doc["offline_partitions"] == []

    table = ok("cluster", "status", *b, "--timeout", 10)
    print(table)
    assert "not answering" in table
    for p in range(3):
        # TOPIC PARTITION LEADER EPOCH REPLICAS ISR LAG STATUS
        (row,) = [r for r in table_rows(table, topic) if r[1] == str(p)]
        assert row[-1] == "under-replicated" and str(victim.node_id) not in row[5].split(","), row
        assert row[3].isdigit() and f"{victim.node_id}:-" in row[6].split(","), row
    assert f"{topic}[0]" in table.split("Under-replicated partitions")[1]


# -- bad arguments, no broker ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "create"], "the following arguments are required: TOPIC"),
        (["topics", "create", "t", "--partitions", "0"], "--partitions: must be at least 1"),
        (["topics", "list", "--output", "yaml"], "invalid choice: 'yaml'"),
        (["topics", "alter", "t"], "nothing to alter"),
        (["groups", "reset-offsets", "g", "--topic", "t"], "one of the arguments"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"], "ISO 8601"),
        (["topics", "list", "--timeout", "-1"], "--timeout"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args: list[str], message: str) -> None:
    result = raftka(*args, "--bootstrap-servers", "127.0.0.1:1", timeout=30)
    assert result.returncode == 2, result
    assert message in result.stderr and "usage:" in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["topics", "list"], ["groups", "list"], ["cluster", "status"]])
def test_unreachable_bootstrap_exits_1_naming_the_timeout(command: list[str]) -> None:
    # The command gives up after its --timeout rather than waiting on (the 30 s here would
    # raise TimeoutExpired); how long that takes is not asserted on a shared machine.
    address = f"127.0.0.1:{free_port()}"
    result = raftka(*command, "--bootstrap-servers", address, "--timeout", 2, timeout=30)
    assert result.returncode == 1, result
    assert f"no broker answered at {address} within 2 s" in result.stderr, result.stderr
