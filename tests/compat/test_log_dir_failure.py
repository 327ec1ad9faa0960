"""A failing disk takes the broker's log directory offline, as Kafka's does: a failed
fsync is never retried and nothing that waited for it is acknowledged; the broker's
replicas stop (no votes, appends or acknowledgements), the other replicas take its
partitions over while an acks=all producer goes on, and every acknowledged record is
there afterwards. The broker stays up and reports the directory (DescribeLogDirs, the
metrics, `raftka cluster status`); a restart on a disk that works again brings it back.

The fault is real: libfiu's POSIX preload library (Debian's fiu-utils, installed by
scripts/setup) makes the broker process's fsync calls fail with EIO once `fiu-ctrl` enables
it, while the broker runs. Only fsync fails: lmdb (the Raft hard states) syncs with
fdatasync, whose failure halts the broker instead (see broker/log_dir_failure.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from typing import Any

import pytest
from clients import consume, create_topic, make_producer, produce, run_raftka, wait_until
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess, ClusterNode, ClusterProcess, free_port
from kafka.admin import KafkaAdminClient
from required import missing_client
from test_metrics import scrape

#: Every fsync of the process fails with EIO (5); fdatasync and msync still work.
FAIL_FSYNC = "enable name=posix/io/sync/fsync,failinfo=5"
RESTORE_FSYNC = "disable name=posix/io/sync/fsync"
KAFKA_STORAGE_ERROR = 56
OFFLINE_COUNT = "kafka_log_logmanager_offlinelogdirectorycount"


def _require_fiu() -> None:
    if shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None:
        missing_client("fiu-run/fiu-ctrl (Debian's fiu-utils) not installed")


def _fiu_ctrl(pid: int, command: str) -> None:
    subprocess.run(["fiu-ctrl", "-c", command, str(pid)], check=True)


class FaultInjectedBroker(BrokerProcess):
    """A broker started under `fiu-run -x`: its failure points can be enabled while it runs."""

    def command(self) -> list[str]:
        return ["fiu-run", "-x", *super().command()]


class FaultInjectedNode(ClusterNode):
    def command(self) -> list[str]:
        return ["fiu-run", "-x", *super().command()]


class FaultInjectedCluster(ClusterProcess):
    node_class = FaultInjectedNode


def _log_dirs(bootstrap: str, broker_id: int) -> list[dict[str, Any]]:
    """DescribeLogDirs of one broker, as kafka-python's admin client reports it."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (answer,) = admin.describe_log_dirs(brokers=[broker_id])
    finally:
        admin.close()
    return list(answer["log_dirs"])


def _cluster_status(bootstrap: str) -> dict[str, Any]:
    result = run_raftka(
        "cluster", "status", "--bootstrap-servers", bootstrap, "--output", "json", "--timeout", 10
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _offline_count(metrics_address: str) -> float:
    return scrape(metrics_address)[OFFLINE_COUNT, ()]


@pytest.mark.timeout(240)
def test_a_failed_fsync_on_the_only_broker_is_answered_with_a_storage_error(new_topic, tmp_path):
    _require_fiu()
    metrics_address = f"127.0.0.1:{free_port()}"
    broker = FaultInjectedBroker({"metrics.listen": metrics_address}, base_dir=tmp_path / "b")
    try:
        broker.start()
        # flush.messages=1: every acknowledgement waits for the fsync of its batch.
        topic = new_topic(partitions=1, config={"flush.messages": "1"}, bootstrap=broker.bootstrap)
        acknowledged = [{"value": f"synced-{i}".encode()} for i in range(50)]
        assert not produce(broker.bootstrap, topic, acknowledged, acks="all").errors
        assert _offline_count(metrics_address) == 0

        _fiu_ctrl(broker.pid, FAIL_FSYNC)
        unsynced = {"acks": "all", "retries": 0, "enable.idempotence": False}
        held = produce(broker.bootstrap, topic, [{"value": b"never-synced"}], **unsynced)
        (refused,) = held.errors
        assert refused.error is not None
        assert refused.error.code() == KafkaError.KAFKA_STORAGE_ERROR, refused.error
        # The broker stays up and reports the directory; the partition has no leader (its
        # only replica is offline), so a later record is not acknowledged either.
        later = produce(
            broker.bootstrap, topic, [{"value": b"later"}], **unsynced, message_timeout_ms=5000
        )
        assert len(later.errors) == 1, "a record was acknowledged by an offline partition"
        assert broker.is_running()
        (log_dir,) = _log_dirs(broker.bootstrap, 1)
        assert (log_dir["log_dir"], log_dir["error_code"]) == (
            str(broker.data_dir.absolute()),
            KAFKA_STORAGE_ERROR,
        )
        assert _offline_count(metrics_address) == 1
        log = broker.log_tail(40)
        assert f"log directory {broker.data_dir.absolute()} is offline" in log, log
        assert "retrying" not in log

        # The disk works again; a restart brings the directory back, every acknowledged
        # record in it and nothing that was refused.
        _fiu_ctrl(broker.pid, RESTORE_FSYNC)
        broker.stop()
        restarted = BrokerProcess(
            {"metrics.listen": metrics_address}, base_dir=tmp_path / "b", port=broker.port
        )
        restarted.start()
        try:
            assert _offline_count(metrics_address) == 0
            (log_dir,) = _log_dirs(restarted.bootstrap, 1)
            assert log_dir["error_code"] == 0
            got = consume(restarted.bootstrap, topic, [0], start=0, timeout=60)[0]
            values = [m.value() for m in got]
            assert values[: len(acknowledged)] == [r["value"] for r in acknowledged]
            assert b"later" not in values
            assert not produce(restarted.bootstrap, topic, [{"value": b"again"}]).errors
        finally:
            restarted.stop()
    finally:
        broker.kill()


class AcksAllProducer:
    """Produces numbered records with acks=all from a thread until stopped, keeping the
    values the brokers acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = make_producer(
            bootstrap,
            acks="all",
            **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120_000},
        )
        self.acknowledged: list[bytes] = []
        self.errors: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acknowledged.append(msg.value())
        else:
            self.errors.append(err)

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            self.producer.produce(
                self.topic, value=f"record-{sent}".encode(), partition=0, on_delivery=self._report
            )
            sent += 1
            self.producer.poll(0.01)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(120) == 0, "records left undelivered"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("failing_role", ["leader", "follower"])
def test_a_replica_whose_fsync_fails_stops_and_nothing_acked_is_lost(tmp_path, failing_role):
    """The leader's fsync fails: its partition moves to another replica. A follower's
    fails: it stops acknowledging, and the leader commits with the other follower."""
    _require_fiu()
    cluster = FaultInjectedCluster(3, base_dir=tmp_path / "cluster")
    metrics = {}
    for node in cluster.nodes:
        metrics[node.node_id] = f"127.0.0.1:{free_port()}"
        node.config["metrics.listen"] = metrics[node.node_id]
    cluster.start()
    try:
        topic = "fsync-fails"
        create_topic(
            cluster.bootstrap,
            topic,
            partitions=1,
            replication_factor=3,
            config={"flush.messages": "1", "min.insync.replicas": "2"},
        )
        leader_id = _leader(cluster.bootstrap, topic)
        assert leader_id is not None
        failing_id = (
            leader_id
            if failing_role == "leader"
            else next(n.node_id for n in cluster.nodes if n.node_id != leader_id)
        )
        failing = cluster.node(failing_id)
        producer = AcksAllProducer(cluster.bootstrap, topic)
        producer.start()
        wait_until(lambda: len(producer.acknowledged) >= 200, 60, "records acknowledged")

        _fiu_ctrl(failing.pid, FAIL_FSYNC)
        wait_until(lambda: _offline_count(metrics[failing_id]) == 1, 60, "the log dir offline")
        acked_at_failure = len(producer.acknowledged)
        wait_until(
            lambda: _leader(cluster.bootstrap, topic) not in (None, failing_id),
            60,
            "a leader other than the failed broker",
        )
        # The producer goes on (against the new leader when the leader failed).
        wait_until(
            lambda: len(producer.acknowledged) >= acked_at_failure + 200,
            90,
            "records acknowledged after the failure",
        )
        producer.stop()
        assert failing.is_running(), failing.log_tail()
        assert not [e for e in producer.errors if e.fatal()], producer.errors

        # The failed broker reports its directory everywhere an operator looks.
        (log_dir,) = _log_dirs(cluster.bootstrap, failing_id)
        assert log_dir["error_code"] == KAFKA_STORAGE_ERROR
        status = _cluster_status(cluster.bootstrap)
        assert status["offline_log_dirs"] == [
            {"broker": failing_id, "log_dir": str(failing.data_dir.absolute())}
        ]
        for node in cluster.nodes:
            if node.node_id != failing_id:
                assert _offline_count(metrics[node.node_id]) == 0

        # Every acknowledged record is there, read from the brokers that kept working.
        survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != failing_id)
        got = consume(survivors, topic, [0], start=0, timeout=90)[0]
        values = {m.value() for m in got}
        lost = [v for v in producer.acknowledged if v not in values]
        assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"

        # The disk works again: a restart brings the directory back and the replica rejoins.
        _fiu_ctrl(failing.pid, RESTORE_FSYNC)
        failing.stop()
        failing.start()
        wait_until(lambda: _offline_count(metrics[failing_id]) == 0, 30, "the log dir back")
        wait_until(
            lambda: not _cluster_status(cluster.bootstrap)["offline_log_dirs"],
            30,
            "no offline log dir in the cluster status",
        )
    finally:
        cluster.kill()


def _leader(bootstrap: str, topic: str) -> int | None:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    partition = metadata.topics[topic].partitions.get(0)
    return None if partition is None or partition.leader < 0 else partition.leader
