"""The replica manager on a real on-disk partition of an in-process broker (no sockets):
appends by origin, reads, list offsets, DeleteRecords and markers."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from kio.schema.errors import ErrorCode
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.replica import AppendOrigin, AppendResult, ReplicaManager
from raftka.broker.replica.manager import EARLIEST, LATEST, READ_COMMITTED
from raftka.broker.server import Broker, Listener
from raftka.broker.topics import Partition
from raftka.protocol.batch_builder import build_batch

TOPIC = "replicas"
PID = 700
_run = run_with_broker


def _create(broker: Broker, name: str, configs: dict[str, str] | None = None) -> None:
    created = _run(
        broker,
        broker.controller.execute,
        CreateTopicCommand(
            name=name, num_partitions=1, replication_factor=1, configs=configs or {}
        ),
    )
    assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        with trio.fail_after(10):
            while True:
                partition = broker.topics.partition(name, 0)
                if partition is not None and partition.is_leader:
                    return
                await trio.sleep(0.01)

    _run(broker, led)


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    instance = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path / "data")
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    _create(instance, TOPIC)
    return instance


def _partition(broker: Broker, name: str = TOPIC) -> Partition:
    partition = broker.topics.partition(name, 0)
    assert partition is not None
    return partition


def _append(
    broker: Broker,
    origin: AppendOrigin,
    batches: list[bytes],
    *,
    name: str = TOPIC,
    acks: int = -1,
    leader_epoch: int | None = None,
) -> list[AppendResult]:
    partition = _partition(broker, name)
    results: list[AppendResult] = _run(
        broker,
        lambda: broker.replica_manager.append_records(
            origin,
            acks,
            5.0,
            [(partition, batch) for batch in batches],
            leader_epoch=leader_epoch,
        ),
    )
    return results


def _records(count: int, key: bytes | None = b"k") -> list[tuple[bytes | None, bytes]]:
    return [(key, b"v%d" % i) for i in range(count)]


def test_client_appends_land_in_order_and_are_counted(broker: Broker) -> None:
    first, second = _append(
        broker,
        AppendOrigin.CLIENT,
        [build_batch(_records(2), 0), build_batch(_records(3), 0)],
    )
    assert (first.error_code, first.base_offset, first.appended_records) == (ErrorCode.none, 0, 2)
    assert (second.error_code, second.base_offset, second.appended_records) == (
        ErrorCode.none,
        2,
        3,
    )
    assert first.appended_bytes > 0 and first.log_start_offset == 0
    assert _partition(broker).high_watermark == 5


def test_a_client_batch_with_a_keyless_record_is_refused_on_a_compacted_topic(
    broker: Broker,
) -> None:
    _create(broker, "compacted", {"cleanup.policy": "compact"})
    batch = build_batch([(b"k", b"v"), (None, b"no key")], 0)
    (result,) = _append(broker, AppendOrigin.CLIENT, [batch], name="compacted")
    assert result.error_code == ErrorCode.invalid_record
    assert [index for index, _ in result.record_errors] == [1]
    assert result.appended_records == 0
    assert _partition(broker, "compacted").hosted_log.log_end_offset == 0


def test_a_retried_idempotent_batch_answers_its_first_offset(broker: Broker) -> None:
    batch = build_batch(_records(2), 0, producer_id=PID, producer_epoch=0, base_sequence=0)
    (first,) = _append(broker, AppendOrigin.CLIENT, [batch])
    (retried,) = _append(broker, AppendOrigin.CLIENT, [batch])
    assert first.base_offset == retried.base_offset == 0
    assert retried.error_code == ErrorCode.none and retried.appended_records == 0
    assert _partition(broker).hosted_log.log_end_offset == 2


def test_a_coordinator_append_decided_in_another_leader_epoch_is_refused(broker: Broker) -> None:
    epoch = _partition(broker).leader_epoch
    (stale,) = _append(
        broker, AppendOrigin.COORDINATOR, [build_batch(_records(1), 0)], leader_epoch=epoch + 1
    )
    assert stale.error_code == ErrorCode.not_leader_or_follower
    assert _partition(broker).hosted_log.log_end_offset == 0
    (current,) = _append(
        broker, AppendOrigin.COORDINATOR, [build_batch(_records(1), 0)], leader_epoch=epoch
    )
    assert (current.error_code, current.base_offset) == (ErrorCode.none, 0)


def test_a_coordinator_append_of_a_fenced_producer_is_refused(broker: Broker) -> None:
    def txn_batch(epoch: int) -> bytes:
        return build_batch(
            _records(1),
            0,
            producer_id=PID,
            producer_epoch=epoch,
            base_sequence=0,
            transactional=True,
        )

    (newer,) = _append(broker, AppendOrigin.COORDINATOR, [txn_batch(3)])
    assert newer.error_code == ErrorCode.none
    (older,) = _append(broker, AppendOrigin.COORDINATOR, [txn_batch(2)])
    assert older.error_code == ErrorCode.invalid_producer_epoch
    assert _partition(broker).hosted_log.log_end_offset == 1


def test_a_read_stops_at_the_last_stable_offset_for_read_committed(broker: Broker) -> None:
    _append(broker, AppendOrigin.CLIENT, [build_batch(_records(2), 0)])
    open_txn = build_batch(
        _records(1), 0, producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True
    )
    # The coordinator's path: no verification for its own transactional batch.
    _append(broker, AppendOrigin.COORDINATOR, [open_txn])
    partition = _partition(broker)
    replicas = broker.replica_manager
    uncommitted = replicas.read(partition, 0, 1 << 20, 0, True)
    committed = replicas.read(partition, 0, 1 << 20, READ_COMMITTED, True)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (3, 2)
    assert uncommitted.found is not None and uncommitted.found.next_offset == 3
    assert uncommitted.aborted is None
    assert committed.found is not None and committed.found.next_offset == 2
    assert committed.aborted == ()
    beyond = replicas.read(partition, 10, 1 << 20, 0, True)
    assert beyond.error_code == ErrorCode.offset_out_of_range and beyond.found is None


def test_a_marker_ends_the_transaction_and_tells_the_listeners(broker: Broker) -> None:
    told: list[tuple[str, int, int, bool]] = []
    replicas: ReplicaManager = broker.replica_manager
    replicas.marker_listeners.append(lambda *marker: told.append(marker))
    open_txn = build_batch(
        _records(1), 0, producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True
    )
    _append(broker, AppendOrigin.COORDINATOR, [open_txn])
    written = _run(broker, replicas.write_marker, TOPIC, 0, PID, 0, 0, True, 5.0)
    assert written == ErrorCode.none
    assert told == [(TOPIC, 0, PID, True)]
    assert _partition(broker).last_stable_offset == 2
    missing = _run(broker, replicas.write_marker, "missing", 0, PID, 0, 0, True, 5.0)
    assert missing == ErrorCode.unknown_topic_or_partition


def test_list_offsets_and_delete_records(broker: Broker) -> None:
    _append(broker, AppendOrigin.CLIENT, [build_batch(_records(4), 0)])
    partition = _partition(broker)
    replicas = broker.replica_manager
    assert replicas.list_offset(partition, LATEST, 0)[0] == 4
    assert replicas.list_offset(partition, EARLIEST, 0)[0] == 0
    answers = _run(broker, replicas.delete_records, [(partition, 3), (partition, 9)], 5.0)
    assert answers[1] == (ErrorCode.offset_out_of_range, -1)
    error, low_watermark = answers[0]
    assert error == ErrorCode.none and low_watermark >= 3
    assert replicas.list_offset(partition, EARLIEST, 0)[0] == partition.hosted_log.log_start_offset


def test_a_restore_append_keeps_offsets_and_raises_the_producer_id_floor(broker: Broker) -> None:
    misplaced = build_batch(_records(2), 0, base_offset=5)
    (refused,) = _append(broker, AppendOrigin.RESTORE, [misplaced])
    assert refused.error_code == ErrorCode.invalid_record
    assert _partition(broker).hosted_log.log_end_offset == 0
    stored = build_batch(
        _records(2), 0, base_offset=0, producer_id=PID, producer_epoch=0, base_sequence=0
    )
    (restored,) = _append(broker, AppendOrigin.RESTORE, [stored])
    assert (restored.error_code, restored.base_offset) == (ErrorCode.none, 0)
    assert broker.controller.image.producer_id_floor > PID


def _start_together(broker: Broker, batches: list[bytes]) -> tuple[list[int], list[AppendResult]]:
    """Start one CLIENT append per batch with group commit, as requests read together are;
    the log end before the proposed batches are written, and the settled answers."""
    partition = _partition(broker)
    manager = broker.replica_manager

    async def together() -> tuple[list[int], list[AppendResult]]:
        (first,) = await manager.append_records(
            AppendOrigin.CLIENT, -1, 5.0, [(partition, build_batch(_records(1), 0))]
        )
        assert first.error_code == ErrorCode.none
        pending = [
            manager.start_append(AppendOrigin.CLIENT, -1, 5.0, [(partition, b)], group_commit=True)
            for b in batches
        ]
        ends = [partition.hosted_log.log_end_offset]
        manager.write_proposed()
        ends.append(partition.hosted_log.log_end_offset)
        for appended in pending:
            if not appended.settle():
                await appended.wait()  # an fsync of the leader's election still running
        return ends, [p.results[0] for p in pending]

    result: tuple[list[int], list[AppendResult]] = _run(broker, together)
    return result


def test_appends_read_together_are_written_together(broker: Broker) -> None:
    ends, results = _start_together(
        broker,
        [build_batch(_records(2), 0), build_batch(_records(3), 0), build_batch(_records(1), 0)],
    )
    assert ends == [1, 7]
    assert [(r.error_code, r.base_offset) for r in results] == [
        (ErrorCode.none, 1),
        (ErrorCode.none, 3),
        (ErrorCode.none, 6),
    ]
    assert _partition(broker).high_watermark == 7


def _idempotent(base_sequence: int) -> bytes:
    return build_batch(
        _records(2), 0, producer_id=PID, producer_epoch=0, base_sequence=base_sequence
    )


def test_an_idempotent_producers_pipelined_batches_are_written_together_in_sequence(
    broker: Broker,
) -> None:
    ends, results = _start_together(broker, [_idempotent(0), _idempotent(2), _idempotent(4)])
    assert ends == [1, 7], "the batches in sequence were not written before the round's end"
    assert [(r.error_code, r.base_offset) for r in results] == [
        (ErrorCode.none, 1),
        (ErrorCode.none, 3),
        (ErrorCode.none, 5),
    ]


def test_a_retried_batch_behind_unwritten_ones_answers_the_first_offset(broker: Broker) -> None:
    _, results = _start_together(broker, [_idempotent(0), _idempotent(2), _idempotent(2)])
    assert [(r.error_code, r.base_offset) for r in results] == [
        (ErrorCode.none, 1),
        (ErrorCode.none, 3),
        (ErrorCode.none, 3),  # the retry of a batch proposed earlier in the round
    ]
    assert _partition(broker).hosted_log.log_end_offset == 5


def test_a_batch_out_of_sequence_behind_unwritten_ones_is_refused(broker: Broker) -> None:
    _, results = _start_together(broker, [_idempotent(0), _idempotent(5)])
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.out_of_order_sequence_number,
    ]
    assert _partition(broker).hosted_log.log_end_offset == 3
