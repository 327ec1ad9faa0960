"""An I/O error on a partition's files takes the log directory offline: a failed fsync is
never retried, nothing that waited for it is acknowledged, the partitions stop (no Raft
group here) and answer KAFKA_STORAGE_ERROR, and DescribeLogDirs and the metrics report the
directory. A full disk's refused write is not such an error (the partition stays), but an
fsync failing for space is.

The faults are injected where the log meets the kernel (os.fsync, os.write raise), on a
real on-disk partition of an in-process broker."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs
from kio.schema.errors import ErrorCode
from running_broker import run_with_broker
from test_authz_admin import call

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.handlers.log_dirs import handle_describe_log_dirs
from raftka.broker.replica import AppendOrigin, AppendResult
from raftka.broker.server import Broker, Listener
from raftka.broker.topics import Partition
from raftka.protocol.batch_builder import build_batch

TOPIC = "synced"
_run = run_with_broker


class FailingCalls:
    """Stands in for os.fsync or os.write: fails with `code`, counting the calls."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls = 0

    def __call__(self, fd: int, *args: object) -> int:
        self.calls += 1
        raise OSError(self.code, os.strerror(self.code))


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    instance = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path / "data")
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    for name in (TOPIC, "other"):
        # flush.messages=1: every acknowledgement waits for the fsync of its batch.
        command = CreateTopicCommand(
            name=name, num_partitions=1, replication_factor=1, configs={"flush.messages": "1"}
        )
        assert _run(instance, instance.controller.execute, command).error_code == ErrorCode.none

    async def led() -> None:
        with trio.fail_after(10):
            while not all(_partition(instance, n).is_leader for n in (TOPIC, "other")):
                await trio.sleep(0.01)

    _run(instance, led)
    return instance


def _partition(broker: Broker, name: str = TOPIC) -> Partition:
    partition = broker.topics.partition(name, 0)
    assert partition is not None
    return partition


def _append(broker: Broker, value: bytes, name: str = TOPIC, acks: int = -1) -> AppendResult:
    partition = _partition(broker, name)
    (result,) = _run(
        broker,
        lambda: broker.replica_manager.append_records(
            AppendOrigin.CLIENT, acks, 5.0, [(partition, build_batch([(None, value)], 0))]
        ),
    )
    return result


def _settle(broker: Broker) -> None:
    """Let the broker's sync task run whatever is queued (a retry would show here)."""
    _run(broker, trio.sleep, 0.3)


def _metric(broker: Broker, name: str) -> str:
    lines = broker.metrics.exposition().decode().splitlines()
    return "\n".join(line for line in lines if line.startswith(name))


def _assert_offline(broker: Broker) -> None:
    log_dir = str((broker.data_dir).absolute())
    assert list(broker.topics.offline_log_dirs) == [log_dir]
    for name in (TOPIC, "other"):
        partition = _partition(broker, name)
        assert partition.offline and partition.raft is None and partition.log is None
        assert broker.node.raft_group(partition.name) is None, "its Raft group still runs"
    # Later requests are refused without touching the disk.
    assert _append(broker, b"later", name="other").error_code == ErrorCode.kafka_storage_error
    everything = describe_log_dirs.DescribeLogDirsRequest(topics=None)
    (result,) = call(broker, "admin", handle_describe_log_dirs, everything).results
    assert (result.error_code, result.log_dir, result.topics) == (
        ErrorCode.kafka_storage_error,
        log_dir,
        (),
    )
    assert _metric(broker, "kafka_log_logmanager_offlinelogdirectorycount") == (
        "kafka_log_logmanager_offlinelogdirectorycount 1.0"
    )
    assert f'logDirectory="{log_dir}"}} 1.0' in _metric(
        broker, "kafka_log_logmanager_logdirectoryoffline"
    )
    broker.registered = True  # as after its start, which the test does not run
    assert broker.not_ready_reason() == (
        f"log directory {log_dir} is offline after an I/O error (restart to recover)"
    )


@pytest.mark.parametrize("acks", [1, -1])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=errno.errorcode.get)
def test_a_failed_fsync_is_not_retried_and_takes_the_log_dir_offline(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, acks: int, code: int
) -> None:
    # ENOSPC too: from an fsync (not a write) it can mean written pages were dropped.
    assert _append(broker, b"synced", acks=acks).error_code == ErrorCode.none
    synced_end = _partition(broker).hosted_log.recovery_point
    assert synced_end == 1

    fsync = FailingCalls(code)
    monkeypatch.setattr(os, "fsync", fsync)
    held = _append(broker, b"never synced", acks=acks)
    assert held.error_code == ErrorCode.kafka_storage_error, "acknowledged though its fsync failed"
    assert fsync.calls == 1
    _settle(broker)
    assert fsync.calls == 1, "the failed fsync was tried again"
    _assert_offline(broker)
    assert fsync.calls == 1
    # Nothing recorded the unsynced batch as durable.
    recovery_point = broker.data_dir / f"{TOPIC}-0" / "recovery-point-offset-checkpoint"
    if recovery_point.exists():
        assert int(recovery_point.read_text()) <= synced_end


def test_a_failed_write_takes_the_log_dir_offline(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = FailingCalls(errno.EIO)
    monkeypatch.setattr(os, "write", write)
    refused = _append(broker, b"not written")
    assert refused.error_code == ErrorCode.kafka_storage_error
    monkeypatch.undo()
    _settle(broker)
    _assert_offline(broker)


def test_a_full_disk_refuses_the_write_and_keeps_the_log_dir_online(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = FailingCalls(errno.ENOSPC)
    monkeypatch.setattr(os, "write", write)
    refused = _append(broker, b"no space")
    assert refused.error_code == ErrorCode.kafka_storage_error
    monkeypatch.undo()
    assert broker.topics.offline_log_dirs == {}
    assert not _partition(broker).offline

    async def writes_again() -> AppendResult:
        # The replica restarted as a follower; a single voter elects itself again once its
        # election timer runs out (the test drives the ticks the broker's node would).
        with trio.fail_after(30):
            while not _partition(broker).is_leader:
                broker.node.tick()
                await trio.sleep(0.01)
        partition = _partition(broker)
        (result,) = await broker.replica_manager.append_records(
            AppendOrigin.CLIENT, -1, 5.0, [(partition, build_batch([(None, b"space")], 0))]
        )
        return result

    assert _run(broker, writes_again).error_code == ErrorCode.none
    assert _metric(broker, "kafka_log_logmanager_offlinelogdirectorycount") == (
        "kafka_log_logmanager_offlinelogdirectorycount 0.0"
    )
