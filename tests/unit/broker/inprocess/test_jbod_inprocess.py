"""A broker with two log directories: new partitions alternate between them (the one with the
fewest first); an I/O error in one takes only that one offline, the partitions in the other
go on writing; DescribeLogDirs and the metrics list both. At the next start a partition found
in both directories stops the start, and one whose log is gone from every directory (a
replaced, empty disk) stays offline instead of coming back empty.

The fault is injected where the log meets the kernel: os.fsync fails for files under the one
directory, on real on-disk partitions of an in-process broker."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from kio.schema.alter_replica_log_dirs.v2 import request as alter_replica_log_dirs
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from running_broker import run_with_broker
from test_authz_admin import call

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.handlers.log_dirs import (
    handle_alter_replica_log_dirs,
    handle_describe_log_dirs,
)
from raftka.broker.log_directories import LogDirectoryError
from raftka.broker.replica import AppendOrigin, AppendResult
from raftka.broker.server import Broker, Listener
from raftka.broker.topics import Partition
from raftka.protocol.batch_builder import build_batch

TOPIC = "spread"
PARTITIONS = 4


def _open(dirs: list[Path]) -> Broker:
    return Broker(
        BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), dirs[0], more_log_dirs=dirs[1:]
    )


def _close(broker: Broker) -> None:
    broker.close()


def _partition(broker: Broker, index: int) -> Partition:
    partition = broker.topics.partition(TOPIC, index)
    assert partition is not None
    return partition


def _wait(broker: Broker, ready: Callable[[], bool]) -> None:
    async def waiting() -> None:
        with trio.fail_after(10):
            while not ready():
                await trio.sleep(0.01)

    run_with_broker(broker, waiting)


def _append(broker: Broker, index: int, value: bytes) -> AppendResult:
    partition = _partition(broker, index)
    (result,) = run_with_broker(
        broker,
        lambda: broker.replica_manager.append_records(
            AppendOrigin.CLIENT, -1, 5.0, [(partition, build_batch([(None, value)], 0))]
        ),
    )
    return result


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "disk-a", tmp_path / "disk-b"]


@pytest.fixture
def broker(dirs: list[Path]) -> Broker:
    instance = _open(dirs)
    run_with_broker(instance, instance.controller.register, "127.0.0.1", 9092, None)
    command = CreateTopicCommand(
        name=TOPIC, num_partitions=PARTITIONS, replication_factor=1, configs={"flush.messages": "1"}
    )
    result = run_with_broker(instance, instance.controller.execute, command)
    assert result.error_code == ErrorCode.none
    _wait(instance, lambda: all(_partition(instance, i).is_leader for i in range(PARTITIONS)))
    return instance


def test_partitions_alternate_between_the_directories(broker: Broker, dirs: list[Path]) -> None:
    a, b = (str(d.absolute()) for d in dirs)
    assert broker.topics.log_dirs == [a, b]
    placed = [broker.topics.log_dir_of(f"{TOPIC}-{i}") for i in range(PARTITIONS)]
    assert placed == [a, b, a, b]
    for i, log_dir in enumerate(placed):
        assert log_dir is not None
        assert (Path(log_dir) / f"{TOPIC}-{i}").is_dir()
    # The metadata log and the Raft state stay in the first directory.
    assert (dirs[0] / "__cluster_metadata-0").is_dir() and (dirs[0] / "raft.lmdb").is_dir()
    assert not (dirs[1] / "raft.lmdb").exists()
    ids = {(d / "meta.properties").read_text().split("directory.id=")[1] for d in dirs}
    assert len(ids) == 2
    _close(broker)


def test_an_io_error_in_one_directory_leaves_the_other_serving(
    broker: Broker, dirs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = (str(d.absolute()) for d in dirs)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(b + os.sep):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert _append(broker, 1, b"on b").error_code == ErrorCode.kafka_storage_error
    assert list(broker.topics.offline_log_dirs) == [b]
    for i in (1, 3):
        partition = _partition(broker, i)
        assert partition.offline and partition.raft is None and partition.log is None
    for i in (0, 2):
        partition = _partition(broker, i)
        assert not partition.offline and partition.is_leader
        assert _append(broker, i, b"on a").error_code == ErrorCode.none
    # A new partition goes to the live directory only.
    grow = CreateTopicCommand(name="later", num_partitions=2, replication_factor=1)
    assert run_with_broker(broker, broker.controller.execute, grow).error_code == ErrorCode.none
    assert {broker.topics.log_dir_of(f"later-{i}") for i in range(2)} == {a}

    everything = describe_log_dirs.DescribeLogDirsRequest(topics=None)
    results = {
        r.log_dir: r for r in call(broker, "admin", handle_describe_log_dirs, everything).results
    }
    assert set(results) == {a, b}
    assert (results[b].error_code, results[b].topics, results[b].total_bytes) == (
        ErrorCode.kafka_storage_error,
        (),
        -1,
    )
    assert results[a].error_code == ErrorCode.none and results[a].total_bytes > 0
    held = {(t.name, p.partition_index) for t in results[a].topics for p in t.partitions}
    assert {(TOPIC, 0), (TOPIC, 2)} <= held and (TOPIC, 1) not in held
    lines = broker.metrics.exposition().decode().splitlines()
    assert "kafka_log_logmanager_offlinelogdirectorycount 1.0" in lines
    assert f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{a}"}} 0.0' in lines
    assert f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{b}"}} 1.0' in lines
    monkeypatch.undo()
    _close(broker)


def test_a_partition_in_both_directories_stops_the_start(broker: Broker, dirs: list[Path]) -> None:
    _close(broker)
    shutil.copytree(dirs[1] / f"{TOPIC}-1", dirs[0] / f"{TOPIC}-1")
    with pytest.raises(LogDirectoryError) as refused:
        _open(dirs)
    assert f"{dirs[0].absolute() / 'spread-1'} and {dirs[1].absolute() / 'spread-1'}" in str(
        refused.value
    )
    # The refusal let go of every directory: the broker starts once the copy is gone.
    shutil.rmtree(dirs[0] / f"{TOPIC}-1")
    _close(_open(dirs))


def test_a_log_lost_with_its_disk_stays_offline(broker: Broker, dirs: list[Path]) -> None:
    # Each append waits for its fsync, and for the Raft state of its partition's election.
    for i in range(PARTITIONS):
        assert _append(broker, i, b"kept" if i % 2 == 0 else b"lost").error_code == ErrorCode.none
    _close(broker)
    shutil.rmtree(dirs[1])  # an empty disk in its place
    dirs[1].mkdir()

    again = _open(dirs)
    _wait(again, lambda: _partition(again, 0).is_leader)
    _wait(again, lambda: _partition(again, 2).is_leader)
    for i in (1, 3):
        partition = _partition(again, i)
        assert partition.offline and partition.log is None and partition.raft is None
        assert again.topics.log_dir_of(partition.name) is None
        assert not (dirs[1] / partition.name).exists(), "an empty log was made in its place"
    assert _append(again, 1, b"x").error_code == ErrorCode.kafka_storage_error
    assert _append(again, 0, b"more").error_code == ErrorCode.none
    again.registered = True  # as after its start, which the test does not run
    assert again.not_ready_reason() == f"partition {TOPIC}-1 is offline here (its log is lost)"
    _close(again)


def test_alter_replica_log_dirs_moves_nothing_and_answers_each_partition(
    broker: Broker, dirs: list[Path]
) -> None:
    a, b = (str(d.absolute()) for d in dirs)
    request = alter_replica_log_dirs.AlterReplicaLogDirsRequest(
        dirs=(
            alter_replica_log_dirs.AlterReplicaLogDir(
                path=a,
                topics=(
                    alter_replica_log_dirs.AlterReplicaLogDirTopic(
                        name=TOPIC, partitions=(i32(0), i32(1), i32(9))
                    ),
                ),
            ),
            alter_replica_log_dirs.AlterReplicaLogDir(
                path="/not/a/log/dir",
                topics=(
                    alter_replica_log_dirs.AlterReplicaLogDirTopic(
                        name=TOPIC, partitions=(i32(2),)
                    ),
                ),
            ),
        )
    )
    (result,) = call(broker, "admin", handle_alter_replica_log_dirs, request).results
    assert result.topic_name == TOPIC
    assert {p.partition_index: p.error_code for p in result.partitions} == {
        0: ErrorCode.none,  # already there
        1: ErrorCode.invalid_request,  # a move, which raftka does not make
        9: ErrorCode.replica_not_available,
        2: ErrorCode.log_dir_not_found,
    }
    assert broker.topics.log_dir_of(f"{TOPIC}-1") == b
    assert (dirs[1] / f"{TOPIC}-1").is_dir() and not (dirs[0] / f"{TOPIC}-1").exists()
    _close(broker)


def test_with_every_directory_offline_the_broker_goes_on_with_its_partitions_offline(
    broker: Broker, dirs: list[Path]
) -> None:
    a, b = (str(d.absolute()) for d in dirs)
    for log_dir in (b, a):
        broker.log_dir_failures.log_dir_failed(log_dir, "a test", OSError(errno.EIO, "EIO"))
    assert set(broker.topics.offline_log_dirs) == {a, b}
    assert all(_partition(broker, i).offline for i in range(PARTITIONS))
    # A replica placed here now has no directory to go to: it is offline from the start.
    late = CreateTopicCommand(name="late", num_partitions=1, replication_factor=1)
    assert run_with_broker(broker, broker.controller.execute, late).error_code == ErrorCode.none
    partition = broker.topics.partition("late", 0)
    assert partition is not None and partition.offline and partition.log is None
    assert broker.topics.log_dir_of("late-0") is None
    assert not (dirs[0] / "late-0").exists() and not (dirs[1] / "late-0").exists()
    everything = describe_log_dirs.DescribeLogDirsRequest(topics=None)
    results = call(broker, "admin", handle_describe_log_dirs, everything).results
    assert {(r.log_dir, r.error_code) for r in results} == {
        (a, ErrorCode.kafka_storage_error),
        (b, ErrorCode.kafka_storage_error),
    }
    _close(broker)
