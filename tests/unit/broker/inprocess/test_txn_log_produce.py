"""Transactional Produce and write_marker in an in-process broker, with a stand-in for the
transaction coordinator's verification: who is asked when, that its error is the answer,
and that the producer checks run again after the await."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i16, i32
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.config import BrokerConfig
from raftka.broker.handlers.produce import _transactional_error, handle_produce
from raftka.broker.replica import append as replica_append
from raftka.broker.server import Broker, Listener
from raftka.broker.services import BrokerServices, RequestContext
from raftka.log import validation
from raftka.protocol.batch_builder import build_batch

TOPIC = "txn"
PID = 500


_run = run_with_broker


class Coordinator:
    """Answers `verdict` and records each question; `during` runs inside the await."""

    def __init__(self, verdict: ErrorCode = ErrorCode.none) -> None:
        self.verdict = verdict
        self.asked: list[tuple[str, int, int, str, int]] = []
        self.during: Callable[[], Awaitable[None]] | None = None

    async def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, index: int
    ) -> ErrorCode:
        self.asked.append((transactional_id, producer_id, producer_epoch, topic, index))
        await trio.sleep(0)
        if self.during is not None:
            await self.during()
        return self.verdict


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    config = BrokerConfig({}, environ={})
    instance = Broker(config, Listener("127.0.0.1", 0), tmp_path / "data")
    _run(instance, instance.controller.register, "127.0.0.1", 9092, None)
    created = _run(
        instance,
        instance.controller.execute,
        CreateTopicCommand(name=TOPIC, num_partitions=1, replication_factor=1),
    )
    assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        partition = instance.topics.partition(TOPIC, 0)
        while partition is None or not partition.is_leader:
            await trio.sleep(0.01)
            partition = instance.topics.partition(TOPIC, 0)

    _run(instance, led)
    return instance


def services_with(broker: Broker, coordinator: Coordinator) -> BrokerServices:
    return broker.services.replace(transactions=coordinator)


def _header() -> RequestHeader:
    return RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="t"
    )


def produce(
    broker: Broker,
    services: BrokerServices,
    records: bytes,
    transactional_id: str | None,
    topic: str = TOPIC,
) -> Any:
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    header = RequestHeader(
        request_api_key=i16(0),
        request_api_version=i16(9),
        correlation_id=i32(1),
        client_id="test",
    )
    context = RequestContext(services, header, 0, 9, "127.0.0.1", 1)
    response = _run(broker, handle_produce, context, request)
    return response.responses[0].partition_responses[0]


def txn_batch(seq: int, epoch: int = 0) -> bytes:
    return build_batch(
        [(None, b"v")],
        0,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def marker(broker: Broker, services: BrokerServices, epoch: int, committed: bool) -> ErrorCode:
    result: ErrorCode = _run(
        broker, services.replica_manager.write_marker, TOPIC, 0, PID, epoch, 0, committed, 10.0
    )
    return result


def log_end(broker: Broker) -> int:
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None and partition.log is not None
    return partition.log.log_end_offset


def lso(broker: Broker) -> int:
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None
    return partition.last_stable_offset


def test_first_batch_of_a_transaction_is_verified_once(broker: Broker) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)
    start = log_end(broker)
    answer = produce(broker, services, txn_batch(0), "tx")
    assert answer.error_code == ErrorCode.none, answer
    assert coordinator.asked == [("tx", PID, 0, TOPIC, 0)]
    assert lso(broker) == start
    assert produce(broker, services, txn_batch(1), "tx").error_code == ErrorCode.none
    assert len(coordinator.asked) == 1  # the transaction is ongoing here: no question
    assert marker(broker, services, 0, committed=True) == ErrorCode.none
    assert lso(broker) == log_end(broker)
    # The next transaction starts anew: asked again.
    assert produce(broker, services, txn_batch(2), "tx").error_code == ErrorCode.none
    assert len(coordinator.asked) == 2


def test_high_watermark_forgets_completed_transactions_without_a_fetch(
    broker: Broker,
) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None and partition.log is not None
    for seq in range(3):
        assert produce(broker, services, txn_batch(seq), "tx").error_code == ErrorCode.none
        assert marker(broker, services, 0, committed=seq % 2 == 0) == ErrorCode.none
    # No Fetch or ListOffsets asked for the LSO: the replicated markers are forgotten anyway.
    assert not partition.log.producer_state.unreplicated_txns
    assert lso(broker) == log_end(broker)


def test_coordinator_error_is_the_answer_and_nothing_is_written(broker: Broker) -> None:
    coordinator = Coordinator(ErrorCode.producer_fenced)
    services = services_with(broker, coordinator)
    end = log_end(broker)
    answer = produce(broker, services, txn_batch(0), "tx")
    assert answer.error_code == ErrorCode.producer_fenced
    assert log_end(broker) == end


def test_producer_checks_run_again_after_verification(broker: Broker) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)

    async def fence() -> None:
        # While the produce waits, the coordinator fences the producer with a newer epoch.
        assert (
            await services.replica_manager.write_marker(TOPIC, 0, PID, 1, 0, False, 10.0)
            == ErrorCode.none
        )

    coordinator.during = fence
    end = log_end(broker)
    answer = produce(broker, services, txn_batch(0), "tx")
    assert answer.error_code == ErrorCode.invalid_producer_epoch, answer
    assert log_end(broker) == end + 1  # only the marker
    coordinator.during = None
    assert marker(broker, services, 0, committed=True) == ErrorCode.invalid_producer_epoch
    assert log_end(broker) == end + 1


@pytest.mark.parametrize("committed", [True, False])
def test_marker_landing_during_verification_refuses_the_batch(
    broker: Broker, committed: bool
) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)
    # An earlier transaction is ongoing here, then ended: the next batch is verified.
    assert produce(broker, services, txn_batch(0), "tx").error_code == ErrorCode.none
    assert marker(broker, services, 0, committed=True) == ErrorCode.none

    async def end_transaction() -> None:
        # The new transaction's marker (e.g. a timeout abort) lands while the produce waits.
        assert (
            await services.replica_manager.write_marker(TOPIC, 0, PID, 0, 0, committed, 10.0) == 0
        )

    coordinator.during = end_transaction
    end = log_end(broker)
    answer = produce(broker, services, txn_batch(1), "tx")
    assert answer.error_code == ErrorCode.invalid_txn_state, answer
    assert log_end(broker) == end + 1  # only the marker
    assert lso(broker) == log_end(broker)  # no transaction left open


def test_marker_of_an_unknown_producer_during_verification_refuses_the_batch(
    broker: Broker,
) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)

    async def end_transaction() -> None:
        assert await services.replica_manager.write_marker(TOPIC, 0, PID, 0, 0, False, 10.0) == 0

    coordinator.during = end_transaction
    answer = produce(broker, services, txn_batch(0), "tx")
    assert answer.error_code == ErrorCode.invalid_txn_state, answer
    assert lso(broker) == log_end(broker)


class _NoTopicLookups:
    def get(self, name: str) -> None:
        raise AssertionError(f"topic {name} looked up for a request without transactions")


def test_non_transactional_request_skips_the_transactional_checks(broker: Broker) -> None:
    services = broker.services.replace(topics=_NoTopicLookups())
    context = RequestContext(services, _header(), 0, 9, "127.0.0.1", 1)
    plain = build_batch([(None, b"v")], 0, producer_id=PID, producer_epoch=0, base_sequence=0)
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=TOPIC,
                partition_data=(
                    PartitionProduceData(index=0, records=plain),
                    PartitionProduceData(index=1, records=build_batch([(None, b"w")], 0)),
                    PartitionProduceData(index=2, records=None),
                ),
            ),
        ),
    )
    assert _transactional_error(context, request) is None


def test_transactional_and_another_producer_in_one_request_is_refused(broker: Broker) -> None:
    coordinator = Coordinator()
    services = services_with(broker, coordinator)
    other = build_batch(
        [(None, b"w")],
        0,
        producer_id=PID + 1,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=TOPIC,
                partition_data=(
                    PartitionProduceData(index=0, records=txn_batch(0)),
                    PartitionProduceData(index=0, records=other),
                ),
            ),
        ),
    )
    header = RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="t"
    )
    context = RequestContext(services, header, 0, 9, "127.0.0.1", 1)
    end = log_end(broker)
    response = _run(broker, handle_produce, context, request)
    codes = {p.error_code for p in response.responses[0].partition_responses}
    assert codes == {ErrorCode.invalid_producer_id_mapping}
    assert log_end(broker) == end
    assert coordinator.asked == []


def create_compacted(broker: Broker, name: str) -> None:
    created = _run(
        broker,
        broker.controller.execute,
        CreateTopicCommand(
            name=name,
            num_partitions=1,
            replication_factor=1,
            configs={"cleanup.policy": "compact"},
        ),
    )
    assert created.error_code == ErrorCode.none, created

    async def led() -> None:
        with trio.fail_after(10):  # awaiting the new topic's leader
            while True:
                partition = broker.topics.partition(name, 0)
                if partition is not None and partition.is_leader:
                    return
                await trio.sleep(0.01)

    _run(broker, led)


def test_large_compacted_transactional_batch_is_scanned_for_keys_once(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch large enough for its key scan to run in a worker thread is not scanned again
    on the event loop once the coordinator verified it."""
    create_compacted(broker, "compacted")
    loop_thread = threading.current_thread()
    scans: list[bool] = []
    scan = validation.keyless_records_of

    def counting_scan(records: bytes, headers: Any) -> list[int]:
        scans.append(threading.current_thread() is loop_thread)
        return scan(records, headers)

    # The scan in a worker thread (log/validation.py) and on the loop (the append path).
    monkeypatch.setattr(validation, "keyless_records_of", counting_scan)
    monkeypatch.setattr(replica_append, "keyless_records_of", counting_scan)
    value = b"v" * 1024
    records = [(b"k%d" % i, value) for i in range(100)]
    assert len(value) * len(records) > validation.RECOMPRESS_IN_THREAD_BYTES
    batch = build_batch(
        records, 0, producer_id=PID, producer_epoch=0, base_sequence=0, transactional=True
    )
    coordinator = Coordinator()
    answer = produce(broker, services_with(broker, coordinator), batch, "tx", topic="compacted")
    assert answer.error_code == ErrorCode.none, answer
    assert len(coordinator.asked) == 1
    assert scans == [False], f"key scans (True: on the event loop): {scans}"


def test_verification_holds_up_only_its_own_producer(broker: Broker) -> None:
    """While the coordinator has not answered for a producer's first transactional batch,
    that producer's pipelined batch waits behind it, and another producer's write lands."""
    release = trio.Event()

    class Stuck(Coordinator):
        async def verify_partition(
            self,
            transactional_id: str,
            producer_id: int,
            producer_epoch: int,
            topic: str,
            index: int,
        ) -> ErrorCode:
            self.asked.append((transactional_id, producer_id, producer_epoch, topic, index))
            await release.wait()
            return ErrorCode.none

    coordinator = Stuck()
    services = services_with(broker, coordinator)
    other = build_batch([(None, b"o")], 0, producer_id=PID + 1, producer_epoch=0, base_sequence=0)
    answers: dict[str, Any] = {}

    async def send(name: str, records: bytes, transactional_id: str | None) -> None:
        request = ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(
                    name=TOPIC, partition_data=(PartitionProduceData(index=0, records=records),)
                ),
            ),
        )
        context = RequestContext(services, _header(), 0, 9, "127.0.0.1", 1)
        response = await handle_produce(context, request)
        answers[name] = response.responses[0].partition_responses[0]

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            try:
                nursery.start_soon(send, "first", txn_batch(0), "tx")
                await trio.testing.wait_all_tasks_blocked()
                assert len(coordinator.asked) == 1, coordinator.asked
                nursery.start_soon(send, "second", txn_batch(1), "tx")
                await trio.testing.wait_all_tasks_blocked()
                with trio.move_on_after(10) as waited:
                    await send("other", other, None)
                assert not waited.cancelled_caught, (
                    "another producer's write waited for the stuck verification"
                )
                assert "first" not in answers and "second" not in answers, answers
            finally:
                release.set()

    _run(broker, scenario)
    assert [answers[name].error_code for name in ("other", "first", "second")] == [
        ErrorCode.none
    ] * 3, answers
    assert answers["other"].base_offset < answers["first"].base_offset
    assert answers["first"].base_offset < answers["second"].base_offset
    assert len(coordinator.asked) == 1
