"""Several log directories per broker (JBOD, Kafka's `log.dirs`): one failing disk takes only
its own directory offline. Its partitions move to their other replicas while acks=all
producers go on and lose nothing; the same broker keeps leading and serving the partitions
in its healthy directory; DescribeLogDirs (what `kafka-log-dirs --describe` sends) reports
the failed directory with KAFKA_STORAGE_ERROR and the healthy one as usual; the metrics and
`raftka cluster status` name it; a restart on a working disk brings it back. Asked to move a
replica between directories (AlterReplicaLogDirs), the broker answers each one and moves none.

The fault is real: tests/chaos/fault_shim.c, preloaded into broker 1, makes every write,
pwrite, fsync and fdatasync of a file under one directory fail with EIO once its control
file names that directory, as a disk dying under one mount point would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from clients import produce, run_raftka, wait_until
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from harness import ClusterNode, ClusterProcess, JavaTool, free_port
from required import missing_client
from test_cluster import ContinuousProducer, check_acked_records, read_partition
from test_metrics import scrape

from tests.chaos.cluster import build_fault_shim, fault_shim_unavailable_reason

pytestmark = pytest.mark.timeout(420)

PARTITIONS = 4
KAFKA_STORAGE_ERROR = 56
JBOD_NODE = 1


class JbodNode(ClusterNode):
    """A cluster node that, once `use_log_dirs` is called, keeps its partitions in several
    log directories (`log.dirs` instead of `--data-dir`) with the fault shim preloaded."""

    log_dirs: list[Path] | None = None
    preload: dict[str, str] | None = None

    def use_log_dirs(self, log_dirs: list[Path], shim: Path, control_file: Path) -> None:
        self.log_dirs = log_dirs
        self.data_dir = log_dirs[0]
        self.preload = {"LD_PRELOAD": str(shim), "RAFTKA_FAULT_EIO_PATH_FILE": str(control_file)}

    def command(self) -> list[str]:
        argv = super().command()
        if self.log_dirs is None or self.preload is None:
            return argv
        at = argv.index("--data-dir")
        dirs = ",".join(str(d) for d in self.log_dirs)
        argv[at : at + 2] = ["--config", f"log.dirs={dirs}"]
        return ["env", *(f"{k}={v}" for k, v in self.preload.items()), *argv]


class JbodCluster(ClusterProcess):
    node_class = JbodNode


def _metadata(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader (-1: none) as Metadata reports it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    found = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p: found[p].leader for p in found}


def _describe_log_dirs(java_tool: JavaTool, bootstrap: str) -> dict[str, dict[str, Any]]:
    """Broker 1's log directories as the Java Admin (kafka-log-dirs --describe) reports them:
    dir -> {error, totalBytes, usableBytes, partitions: {(topic, partition)}}."""
    dirs: dict[str, dict[str, Any]] = {}
    for line in java_tool.json("describe-log-dirs", bootstrap, str(JBOD_NODE)):
        entry = dirs.setdefault(line["dir"], {"partitions": set()})
        if "topic" in line:
            entry["partitions"].add((line["topic"], line["partition"]))
        else:
            entry.update(line)
    return dirs


def _write_control_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _fault_shim(tmp_path: Path) -> tuple[Path, Path]:
    """The fault shim built, and its control file naming no failing directory yet."""
    reason = fault_shim_unavailable_reason()
    if reason is not None:
        missing_client(reason)
    shim = build_fault_shim(tmp_path / "shim")
    control_file = tmp_path / "failing-dir"
    _write_control_file(control_file, "")
    return shim, control_file


def _two_disks(
    cluster: ClusterProcess, shim: Path, control_file: Path
) -> tuple[JbodNode, list[Path]]:
    """Broker 1 with two log directories under the fault shim."""
    jbod = cluster.node(JBOD_NODE)
    assert isinstance(jbod, JbodNode)
    disks = [jbod.base_dir / "disk-a", jbod.base_dir / "disk-b"]
    jbod.use_log_dirs(disks, shim, control_file)
    return jbod, disks


def _cluster_status(bootstrap: str) -> dict[str, Any]:
    result = run_raftka(
        "cluster", "status", "--bootstrap-servers", bootstrap, "--output", "json", "--timeout", 10
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _elect_preferred(bootstrap: str, topic: str, partitions: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    tps = [TopicPartition(topic, p) for p in partitions]
    # An error (ELECTION_NOT_NEEDED, or a leader not yet caught up) is checked by the caller
    # through Metadata.
    try:
        admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=30)
    except Exception as exc:  # noqa: BLE001 - see above
        print(f"elect_leaders: {exc}")


def test_a_failed_disk_takes_only_its_log_directory_offline(tmp_path, java_tool) -> None:
    shim, control_file = _fault_shim(tmp_path)
    cluster = JbodCluster(3, {"auto.leader.rebalance.enable": "false"}, base_dir=tmp_path / "c")
    metrics = {}
    for node in cluster.nodes:
        metrics[node.node_id] = f"127.0.0.1:{free_port()}"
        node.config["metrics.listen"] = metrics[node.node_id]
    jbod, disks = _two_disks(cluster, shim, control_file)
    cluster.start()
    try:
        topic = "jbod"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Broker 1 first in every replica list: the preferred leader of every partition.
        new = NewTopic(
            topic,
            PARTITIONS,
            -1,
            replica_assignment=[[1, 2, 3]] * PARTITIONS,
            config={"flush.messages": "1", "min.insync.replicas": "2"},
        )
        admin.create_topics([new])[topic].result(timeout=30)
        wait_until(
            lambda: all(v >= 0 for v in _metadata(cluster.bootstrap, topic).values()),
            60,
            "a leader for every partition",
        )
        everything = list(range(PARTITIONS))
        _elect_preferred(cluster.bootstrap, topic, everything)
        wait_until(
            lambda: set(_metadata(cluster.bootstrap, topic).values()) == {JBOD_NODE},
            60,
            "broker 1 leading every partition",
        )

        # The partitions are spread over both directories, fewest first.
        before = _describe_log_dirs(java_tool, cluster.bootstrap)
        failing, healthy = (str(d.absolute()) for d in disks[::-1])
        assert set(before) == {failing, healthy}, before
        for log_dir in (failing, healthy):
            assert before[log_dir]["error"] is None
            assert before[log_dir]["totalBytes"] >= before[log_dir]["usableBytes"] > 0
        in_failing = sorted(p for t, p in before[failing]["partitions"] if t == topic)
        in_healthy = sorted(p for t, p in before[healthy]["partitions"] if t == topic)
        assert len(in_failing) == len(in_healthy) == PARTITIONS // 2, before
        for p in in_failing:
            assert (Path(failing) / f"{topic}-{p}").is_dir()

        # kafka-reassign-partitions with log directories (Admin.alterReplicaLogDirs): raftka
        # moves nothing, and says so per replica.
        moves = [
            f"{topic}:{in_healthy[0]}={healthy}",  # already there
            f"{topic}:{in_failing[0]}={healthy}",  # a move
            f"{topic}:{in_failing[1]}=/no/such/dir",
        ]
        answers = java_tool.json(
            "alter-replica-log-dirs", cluster.bootstrap, str(JBOD_NODE), ",".join(moves)
        )
        assert {a["partition"]: a["error"] for a in answers} == {
            in_healthy[0]: None,
            in_failing[0]: "InvalidRequestException",
            in_failing[1]: "LogDirNotFoundException",
        }, answers
        assert (Path(failing) / f"{topic}-{in_failing[0]}").is_dir()

        producers = [
            ContinuousProducer(
                cluster.bootstrap,
                topic,
                partition=p,
                count=1500,
                rate=100,
                **{"enable.idempotence": True, "message.timeout.ms": 120_000},
            )
            for p in everything
        ]
        for producer in producers:
            producer.start()
        wait_until(lambda: all(len(p.acked) >= 100 for p in producers), 60, "records acknowledged")

        # The disk under one directory fails.
        _write_control_file(control_file, failing + os.sep)
        wait_until(
            lambda: (
                scrape(metrics[JBOD_NODE])["kafka_log_logmanager_offlinelogdirectorycount", ()] == 1
            ),
            60,
            "the failing log directory offline",
        )
        acked_at_failure = [len(p.acked) for p in producers]
        # Its partitions move to the other replicas ...
        wait_until(
            lambda: all(
                _metadata(cluster.bootstrap, topic)[p] not in (-1, JBOD_NODE) for p in in_failing
            ),
            60,
            "new leaders for the partitions of the failed directory",
        )
        # ... while broker 1 keeps leading those of the healthy one (asked again, in case an
        # election under load moved one meanwhile: it must be able to lead them).
        _elect_preferred(cluster.bootstrap, topic, in_healthy)
        wait_until(
            lambda: all(_metadata(cluster.bootstrap, topic)[p] == JBOD_NODE for p in in_healthy),
            60,
            "broker 1 leading the partitions of its healthy directory",
        )
        # Every producer goes on.
        wait_until(
            lambda: all(
                len(p.acked) >= min(at + 200, p.count)
                for p, at in zip(producers, acked_at_failure, strict=True)
            ),
            120,
            "records acknowledged after the failure",
        )
        for producer in producers:
            producer.finish(timeout=240)
        assert jbod.is_running(), jbod.log_tail()

        # Every acknowledged record is there, each once.
        for producer in producers:
            records = read_partition(cluster.bootstrap, topic, producer.partition)
            check_acked_records(producer, records, expect_no_duplicates=True)

        # Broker 1 reports the failed directory, and only that one, everywhere.
        after = _describe_log_dirs(java_tool, cluster.bootstrap)
        assert after[failing]["error"] == "KafkaStorageException", after
        assert after[failing]["partitions"] == set(), after
        assert after[healthy]["error"] is None, after
        assert {(topic, p) for p in in_healthy} <= after[healthy]["partitions"], after
        assert after[healthy]["totalBytes"] >= after[healthy]["usableBytes"] > 0
        samples = scrape(metrics[JBOD_NODE])
        per_dir = "kafka_log_logmanager_logdirectoryoffline"
        assert samples[per_dir, (("logDirectory", failing),)] == 1
        assert samples[per_dir, (("logDirectory", healthy),)] == 0
        status = _cluster_status(cluster.bootstrap)
        assert status["offline_log_dirs"] == [{"broker": JBOD_NODE, "log_dir": failing}]
        log = jbod.log_path.read_text()
        assert f"log directory {failing} is offline" in log
        assert f"The partitions in {healthy} go on." in log

        # The disk works again: a restart brings the directory back with its partitions.
        _write_control_file(control_file, "")
        jbod.stop()
        jbod.start()
        wait_until(
            lambda: (
                scrape(metrics[JBOD_NODE])["kafka_log_logmanager_offlinelogdirectorycount", ()] == 0
            ),
            60,
            "the log directory back",
        )
        back = _describe_log_dirs(java_tool, cluster.bootstrap)
        assert back[failing]["error"] is None, back
        assert {(topic, p) for p in in_failing} <= back[failing]["partitions"], back
    finally:
        cluster.kill()


def test_a_disk_failing_under_a_scheduled_flush_takes_only_its_directory_offline(
    tmp_path,
) -> None:
    """A disk that fails while nothing is produced is met by the flush that flush.ms
    schedules (its index writes or its fsync), and that takes the directory offline as a
    failed write does, the broker serving on."""
    shim, control_file = _fault_shim(tmp_path)
    metrics = f"127.0.0.1:{free_port()}"
    cluster = JbodCluster(1, {"metrics.listen": metrics}, base_dir=tmp_path / "c")
    jbod, disks = _two_disks(cluster, shim, control_file)
    cluster.start()
    try:
        topic = "flushed"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # The first scheduled flush comes flush.ms after the partitions open: after the
        # records below are appended (an index entry pending for each) and the disk fails.
        config = {"flush.ms": "15000", "index.interval.bytes": "1"}
        new = NewTopic(topic, 2, 1, config=config)
        admin.create_topics([new])[topic].result(timeout=30)
        records = [{"value": b"x" * 100, "partition": p} for p in (0, 1) for _ in range(20)]
        assert not produce(cluster.bootstrap, topic, records, acks="1").errors
        # The second directory: the first also holds the Raft state, whose failure halts.
        failing = str(disks[1].absolute())
        assert any((disks[1] / f"{topic}-{p}").is_dir() for p in (0, 1))
        _write_control_file(control_file, failing + os.sep)
        wait_until(
            lambda: scrape(metrics)["kafka_log_logmanager_offlinelogdirectorycount", ()] == 1,
            60,
            "the failing log directory offline",
        )
        assert jbod.is_running(), jbod.log_tail()
        assert f"log directory {failing} is offline" in jbod.log_path.read_text()
    finally:
        _write_control_file(control_file, "")
        cluster.stop()
