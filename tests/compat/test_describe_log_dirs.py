"""DescribeLogDirs, what `kafka-log-dirs --describe` and Admin.describeLogDirs send: each
broker's log directory with its total and usable bytes, and every partition it holds there
with its size on disk. Driven by the Java admin client and kafka-python."""

from __future__ import annotations

import os
from collections.abc import Callable

from clients import create_topic
from confluent_kafka import Producer
from harness import BrokerProcess, ClusterProcess, JavaTool
from kafka.admin import KafkaAdminClient


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(count):
        producer.produce(topic, value=b"v" * 100, partition=partition)
    assert producer.flush(30) == 0


def _bytes_on_disk(directory: str) -> int:
    return sum(
        os.path.getsize(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.endswith(".log")
    )


def test_every_broker_reports_its_partitions_and_their_sizes(
    cluster_factory: Callable[..., ClusterProcess], java_tool: JavaTool
) -> None:
    cluster = cluster_factory()
    create_topic(cluster.bootstrap, "sized", partitions=2, replication_factor=2)
    _produce(cluster.bootstrap, "sized", 0, 50)

    # kafka-log-dirs --describe --broker-list 1,2,3
    lines = java_tool.json("describe-log-dirs", cluster.bootstrap, "1,2,3")
    dirs = [line for line in lines if "totalBytes" in line]
    assert sorted(d["broker"] for d in dirs) == [1, 2, 3]
    for d in dirs:
        node = cluster.node(d["broker"])
        assert d["dir"] == str(node.data_dir.absolute())
        assert d["error"] is None
        assert d["totalBytes"] >= d["usableBytes"] > 0

    replicas = [line for line in lines if line.get("topic") == "sized"]
    # Two partitions of two replicas each, every copy a current (not future) one.
    assert len(replicas) == 4
    assert all(r["isFuture"] is False and r["offsetLag"] >= 0 for r in replicas)
    for r in replicas:
        directory = cluster.node(r["broker"]).data_dir / f"sized-{r['partition']}"
        assert r["size"] == _bytes_on_disk(str(directory))
    assert all(r["size"] > 5000 for r in replicas if r["partition"] == 0)


def test_kafka_python_asks_for_named_partitions(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "named", partitions=3)
    _produce(broker.bootstrap, "named", 1, 10)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs(topic_partitions={"named": [1, 7]}, brokers=[1])
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, str(broker.data_dir.absolute()))
    # Only the partition asked for that the broker holds (there is no partition 7).
    (topic,) = log_dir["topics"]
    (partition,) = topic["partitions"]
    size = _bytes_on_disk(str(broker.data_dir / "named-1"))
    assert (topic["name"], partition["partition_index"], partition["partition_size"]) == (
        "named",
        1,
        size,
    )
    assert partition["is_future_key"] is False
