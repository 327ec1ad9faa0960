"""Transactions end to end with confluent-kafka's transactional producer and consumers:
committed and aborted transactions as read_committed and read_uncommitted consumers see
them, the last stable offset held back by an open transaction, consume-transform-produce
exactly once across a SIGKILL of the app (tests/compat/eos_app.py), and a transaction
coordinator killed on a 3-node cluster while a producer is mid-transaction.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from clients import (
    RawConnection,
    consume,
    create_topic,
    find_transaction_coordinator,
    make_consumer,
    wait_until,
    watermarks,
)
from confluent_kafka import KafkaException, Producer, TopicPartition
from harness import REPO_ROOT, ClusterProcess
from test_transactions import CONFIG, describe

APP = Path(__file__).resolve().parent / "eos_app.py"

pytestmark = pytest.mark.timeout(120)


def transactional_producer(bootstrap: str, transactional_id: str, **conf: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "socket.timeout.ms": 10000,
            **conf,
        }
    )
    producer.init_transactions(60)
    return producer


def wait_complete(bootstrap: str, transactional_id: str) -> Any:
    """Until the coordinator has written the id's markers and Complete* (commit_transaction and
    abort_transaction return once Prepare* is written); its DescribeTransactions state."""
    return wait_until(
        lambda: (
            (s := describe(bootstrap, transactional_id)).transaction_state
            in ("CompleteCommit", "CompleteAbort", "Empty")
            and s
        ),
        60,
        f"the transaction of {transactional_id} to complete",
    )


def list_offset_latest(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets(LATEST) of one partition: the LSO under read_committed (1), the high
    watermark under read_uncommitted (0)."""
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.static.primitive import i8, i32, i64

    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(isolation_level),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(-1)),
                ),
            ),
        ),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        response = conn.recv_response(ListOffsetsResponse)
    part = response.topics[0].partitions[0]
    assert int(part.error_code) == 0, part
    return int(part.offset)


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str
) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record a consumer with `isolation` reads from offset 0 up to
    its end of each partition (the LSO under read_committed, the high watermark otherwise)."""
    got = consume(bootstrap, topic, partitions, isolation_level=isolation, timeout=60)
    return {p: [(m.offset(), m.value()) for m in msgs] for p, msgs in got.items()}


# -- one broker: commit, abort, the LSO ---------------------------------------------------------


def test_committed_and_aborted_transactions_as_consumers_see_them(broker_factory):
    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    topic = f"txn-e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    transactional_id = f"e2e-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(bootstrap, transactional_id)

    # Each partition's expected log: (offset, value) of data records, and marker offsets.
    layout: dict[int, list[tuple[int, bytes | None]]] = {0: [], 1: []}

    def run(name: str, count: int, outcome: str | None) -> None:
        producer.begin_transaction()
        for i in range(count):
            partition = i % 2
            value = f"{name}-{i}".encode()
            producer.produce(topic, value=value, partition=partition)
            layout[partition].append((len(layout[partition]), value))
        # Without a flush, an abort would purge the unsent records and prove nothing.
        assert producer.flush(30) == 0
        if outcome == "commit":
            producer.commit_transaction(30)
        elif outcome == "abort":
            producer.abort_transaction(30)
        if outcome is not None:
            wait_complete(bootstrap, transactional_id)
            for partition in (0, 1):
                layout[partition].append((len(layout[partition]), None))

    plan = [("t1", 6, "commit"), ("t2", 4, "abort"), ("t3", 5, "commit"), ("t4", 7, "abort")]
    for name, count, outcome in plan:
        run(name, count, outcome)
    run("t5", 4, None)  # left open: it holds the LSO back
    committed_names = {"t1", "t3"}

    def values(partition: int, names: set[str]) -> list[tuple[int, bytes | None]]:
        return [
            (offset, value)
            for offset, value in layout[partition]
            if value is not None and value.decode().split("-")[0] in names
        ]

    all_names = {name for name, _, _ in plan} | {"t5"}
    open_start = {p: next(o for o, v in layout[p] if v and v.startswith(b"t5")) for p in (0, 1)}
    log_end = {p: len(layout[p]) for p in (0, 1)}

    for partition in (0, 1):
        assert list_offset_latest(bootstrap, topic, partition, 1) == open_start[partition]
        assert list_offset_latest(bootstrap, topic, partition, 0) == log_end[partition]
        # librdkafka's watermark query uses its default isolation.level=read_committed.
        assert watermarks(bootstrap, topic, partition) == (0, open_start[partition])

    committed = read_all(bootstrap, topic, 2, "read_committed")
    uncommitted = read_all(bootstrap, topic, 2, "read_uncommitted")
    for partition in (0, 1):
        assert committed[partition] == values(partition, committed_names)
        assert uncommitted[partition] == values(partition, all_names)

    producer.commit_transaction(30)
    assert wait_complete(bootstrap, transactional_id).transaction_state == "CompleteCommit"
    committed_names.add("t5")
    for partition in (0, 1):
        layout[partition].append((len(layout[partition]), None))
        end = len(layout[partition])
        assert list_offset_latest(bootstrap, topic, partition, 1) == end
        assert list_offset_latest(bootstrap, topic, partition, 0) == end
        assert watermarks(bootstrap, topic, partition) == (0, end)

    committed = read_all(bootstrap, topic, 2, "read_committed")
    uncommitted = read_all(bootstrap, topic, 2, "read_uncommitted")
    for partition in (0, 1):
        assert committed[partition] == values(partition, committed_names)
        assert uncommitted[partition] == values(partition, all_names)
        # The offsets no consumer saw are exactly the five transactions' markers.
        seen = {offset for offset, _ in uncommitted[partition]}
        markers = [o for o in range(len(layout[partition])) if o not in seen]
        assert markers == [o for o, v in layout[partition] if v is None]
        assert len(markers) == 5


def raw_transactional_produce(
    bootstrap: str, topic: str, partition: int, transactional_id: str, pid: int, epoch: int
) -> Any:
    """Produce v9 of one transactional batch (sequence 0) to one partition; its answer."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v9.response import ProduceResponse

    from raftka.protocol.batch_builder import build_batch

    records = build_batch(
        [(None, b"raw")],
        int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=15),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )
    with RawConnection(bootstrap, timeout=30) as conn:
        conn.send_request(request)
        response = conn.recv_response(ProduceResponse)
    return response.responses[0].partition_responses[0]


def test_a_batch_to_a_partition_not_in_the_transaction_is_refused(broker_factory):
    """The id's transaction is ongoing with partition 0 only: a batch to partition 1 gets
    INVALID_TXN_STATE (Kafka's answer to Produce before v11) and writes nothing; partition 0
    takes its batch; after the id's epoch was bumped, the old epoch's batch is refused too."""
    from kio.schema.errors import ErrorCode
    from test_transactions import add_partitions_v3, init_producer_id

    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    topic = f"txn-e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    transactional_id = f"raw-{uuid.uuid4().hex[:8]}"
    init = init_producer_id(bootstrap, transactional_id)
    assert int(init.error_code) == 0, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    assert add_partitions_v3(bootstrap, transactional_id, pid, epoch, {topic: [0]}) == {
        (topic, 0): 0
    }

    answer = raw_transactional_produce(bootstrap, topic, 1, transactional_id, pid, epoch)
    assert answer.error_code == ErrorCode.invalid_txn_state, answer
    assert list_offset_latest(bootstrap, topic, 1, 0) == 0
    answer = raw_transactional_produce(bootstrap, topic, 0, transactional_id, pid, epoch)
    assert answer.error_code == ErrorCode.none, answer
    assert list_offset_latest(bootstrap, topic, 0, 0) == 1
    assert list_offset_latest(bootstrap, topic, 0, 1) == 0  # the open transaction

    # A new instance bumps the epoch (aborting the open transaction): the old one is fenced.
    bumped = init_producer_id(bootstrap, transactional_id)
    # Kafka bumps twice: once to fence the open transaction's producer, once for the new one.
    assert (int(bumped.error_code), int(bumped.producer_epoch)) == (0, epoch + 2), bumped
    for partition in (0, 1):
        before = list_offset_latest(bootstrap, topic, partition, 0)
        answer = raw_transactional_produce(
            bootstrap, topic, partition, transactional_id, pid, epoch
        )
        assert answer.error_code == ErrorCode.invalid_producer_epoch, (partition, answer)
        assert list_offset_latest(bootstrap, topic, partition, 0) == before


# -- consume-transform-produce, exactly once across a crash ------------------------------------


def start_app(bootstrap: str, log_path: Path, *args: object) -> subprocess.Popen[bytes]:
    from harness import _set_parent_death_signal

    argv = [sys.executable, str(APP), "--bootstrap", bootstrap, *map(str, args)]
    with open(log_path, "ab") as log:
        log.write(f"=== {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_set_parent_death_signal,
        )


@pytest.mark.slow
def test_consume_transform_produce_is_exactly_once_across_a_crash(broker_factory, tmp_path):
    from clients import produce

    inputs = 3000
    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"eos-in-{suffix}", f"eos-out-{suffix}"
    group, transactional_id = f"eos-group-{suffix}", f"eos-app-{suffix}"
    for topic in (source, sink):
        create_topic(bootstrap, topic, partitions=2)
    result = produce(
        bootstrap,
        source,
        ({"value": f"in-{i}".encode(), "partition": i % 2} for i in range(inputs)),
        enable_idempotence=True,
    )
    assert not result.errors

    app_args = ["--input", source, "--output", sink, "--group", group]
    app_args += ["--transactional-id", transactional_id, "--inputs", inputs, "--batch", 100]
    stall_file = tmp_path / "stalled"
    log_path = tmp_path / "eos_app.log"
    app = start_app(bootstrap, log_path, *app_args, "--stall-after", 7, "--stall-file", stall_file)
    try:
        wait_until(
            lambda: stall_file.exists() or app.poll() is not None, 60, "the app to stall mid-txn"
        )
        assert app.poll() is None, log_path.read_text()
        state = describe(bootstrap, transactional_id)
        assert state.transaction_state == "Ongoing", state
        app.send_signal(signal.SIGKILL)
        app.wait(10)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)

    # The same transactional.id fences the killed instance; its open transaction is aborted.
    app = start_app(bootstrap, log_path, *app_args)
    try:
        code = app.wait(90)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
    assert code == 0, log_path.read_text()

    assert wait_complete(bootstrap, transactional_id).transaction_state == "CompleteCommit"
    committed = read_all(bootstrap, sink, 2, "read_committed")
    uncommitted = read_all(bootstrap, sink, 2, "read_uncommitted")
    committed_values = sorted(v for records in committed.values() for _, v in records)
    uncommitted_values = [v for records in uncommitted.values() for _, v in records]
    assert committed_values == sorted(f"out-{i}".encode() for i in range(inputs))
    aborted = len(uncommitted_values) - len(committed_values)
    print(
        f"eos: inputs={inputs} committed_outputs={len(committed_values)} "
        f"aborted_outputs={aborted} uncommitted_outputs={len(uncommitted_values)}"
    )
    assert aborted >= 50  # the killed instance's half transaction is in the log, aborted
    assert set(uncommitted_values) == set(committed_values)

    group_consumer = make_consumer(bootstrap, group_id=group)
    try:
        offsets = group_consumer.committed([TopicPartition(source, p) for p in (0, 1)], 10)
    finally:
        group_consumer.close()
    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, inputs // 2), (1, inputs // 2)]


# -- a 3-node cluster: the transaction coordinator dies mid-transaction ------------------------


def end_transaction(
    producer: Producer, make_producer: Any, commit: bool = True
) -> tuple[str, Producer]:
    """commit_transaction (or abort_transaction) as an application calls it across a
    coordinator failover: retried while retriable; on an abortable error abort; on a fatal one
    start a new instance with the same id, which ends the open transaction (a commit's outcome
    is then unknown). ("committed" | "aborted" | "unknown", the producer to go on with)."""
    try:
        if commit:
            producer.commit_transaction(60)
            return "committed", producer
        producer.abort_transaction(60)
        return "aborted", producer
    except KafkaException as exc:
        error = exc.args[0]
        if error.txn_requires_abort():
            producer.abort_transaction(60)
            return "aborted", producer
        if error.retriable():
            return end_transaction(producer, make_producer, commit)
        return ("unknown" if commit else "aborted"), make_producer()


@pytest.mark.slow
def test_a_killed_transaction_coordinator_loses_no_transaction(cluster_factory):
    """The coordinator dies (1) after PrepareCommit, while a partition leader it must write a
    marker to is paused, (2) between produce and commit, (3) after PrepareAbort. Each time its
    successor finishes or aborts the transaction as a whole, and the producer carries on with
    the same id."""
    from test_cluster import state_from_any

    config = {**CONFIG, "transaction.state.log.replication.factor": "3"}
    cluster: ClusterProcess = cluster_factory(3, config=config)
    topic = f"txn-failover-{uuid.uuid4().hex[:8]}"
    partitions = 3
    create_topic(cluster.bootstrap, topic, partitions=partitions, replication_factor=3)
    transactional_id = f"failover-{uuid.uuid4().hex[:8]}"

    def new_producer() -> Producer:
        return transactional_producer(cluster.bootstrap, transactional_id)

    producer = new_producer()
    outcomes: dict[str, str] = {}
    state_partitions = range(int(CONFIG["transaction.state.log.num.partitions"]))
    wait_until(
        lambda: all(
            state_from_any(cluster.nodes, "__transaction_state", index)["replicas"] == [1, 2, 3]
            for index in state_partitions
        ),
        30,
        "every __transaction_state partition led, with 3 replicas",
    )

    def produce_txn(name: str, count: int = 10) -> None:
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=f"{name}-{i}".encode(), partition=i % partitions)
        assert producer.flush(60) == 0

    def coordinator() -> Any:
        """The coordinator a running node names, once that is a running node."""

        def found() -> Any:
            for node in cluster.running():
                named = cluster.node(find_transaction_coordinator(node.bootstrap, transactional_id))
                if named.is_running():
                    return named
            return None

        return wait_until(found, 60, f"a running coordinator of {transactional_id}")

    for name in ("t1", "t2"):
        produce_txn(name)
        producer.commit_transaction(60)
        outcomes[name] = "committed"

    def end_with_coordinator_killed(name: str, commit: bool) -> str:
        """Produce transaction `name` and end it in another thread while a partition leader
        it needs a marker from is paused (when one is not the coordinator); kill the
        coordinator once it has left Ongoing (written Prepare*). The state it was in."""
        nonlocal producer
        killed = coordinator()
        leaders = {state_from_any(cluster.nodes, topic, p)["leader"] for p in range(partitions)}
        others = sorted(leaders - {killed.node_id})
        paused = cluster.node(others[0]) if others else None
        produce_txn(name)
        if paused is not None:
            paused.pause()
        ended: list[tuple[str, Producer]] = []
        ender = threading.Thread(
            target=lambda: ended.append(end_transaction(producer, new_producer, commit))
        )
        ender.start()
        seen = wait_until(
            lambda: (
                (s := describe(killed.bootstrap, transactional_id).transaction_state) != "Ongoing"
                and s
            ),
            30,
            f"the coordinator to prepare ending {name}",
        )
        killed.kill()
        if paused is not None:
            paused.resume()
        ender.join(90)
        assert ended, f"ending {name} did not return after the coordinator was killed"
        outcomes[name], producer = ended[0]
        killed.start()
        return str(seen)

    # (1) The coordinator dies once it has written PrepareCommit.
    seen = end_with_coordinator_killed("t3", commit=True)

    # (2) Killed between produce and commit: the successor has the ongoing transaction.
    second = coordinator()
    produce_txn("t4")
    second.kill()
    outcomes["t4"], producer = end_transaction(producer, new_producer)
    second.start()

    # (3) The coordinator dies once it has written PrepareAbort.
    seen_abort = end_with_coordinator_killed("t5", commit=False)

    produce_txn("t6")
    producer.commit_transaction(60)
    outcomes["t6"] = "committed"

    final = coordinator()
    state = wait_complete(final.bootstrap, transactional_id)
    print(
        f"failover: states at the kills={seen},{seen_abort} outcomes={outcomes} "
        f"final_state={state.transaction_state}"
    )

    committed = read_all(cluster.bootstrap, topic, partitions, "read_committed")
    uncommitted = read_all(cluster.bootstrap, topic, partitions, "read_uncommitted")
    seen_values = [v.decode() for records in committed.values() for _, v in records]
    assert len(seen_values) == len(set(seen_values)), "a record visible twice"
    by_txn: dict[str, int] = {}
    for value in seen_values:
        by_txn[value.split("-")[0]] = by_txn.get(value.split("-")[0], 0) + 1
    for name, outcome in outcomes.items():
        expected = {"committed": 10, "aborted": 0}.get(outcome)
        if expected is None:  # all or nothing
            assert by_txn.get(name, 0) in (0, 10), (name, by_txn)
        else:
            assert by_txn.get(name, 0) == expected, (name, outcome, by_txn)
    # A replicated PrepareCommit is a decision: the successor completes it.
    if seen in ("PrepareCommit", "CompleteCommit"):
        assert by_txn.get("t3", 0) == 10, (seen, by_txn)
    # Every record was written once, whatever became of its transaction.
    written = sorted(v.decode() for records in uncommitted.values() for _, v in records)
    assert written == sorted(f"{name}-{i}" for name in outcomes for i in range(10))
