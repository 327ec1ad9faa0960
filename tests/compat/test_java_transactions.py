"""Transactions with the Java client (kafka-clients, the reference), end to end, against
raftka processes:

- a transactional KafkaProducer commits and aborts (after flush); KafkaConsumers under
  read_committed see exactly the committed records, under read_uncommitted all of them,
  also with two producers' transactions interleaved in one partition;
- a second instance with the same transactional.id, or the transaction timeout, fences the
  first: the exceptions the Java client raises are the ones it raises against Kafka;
- consume-transform-produce (sendOffsetsToTransaction) resumes exactly once after a crash,
  and a stalled copier is fenced by its consumer group's generation;
- Admin describeTransactions / listTransactions;
- an open transaction survives a broker restart, and on a 3-node cluster a SIGKILLed
  coordinator or partition leader.

Driven through tests/compat/java/KafkaTool.java: `txn-produce` and `txn-copy` (one JSON
event a line, see their usage), `consume-to-end` (every partition from the beginning to its
end offset, which is the last stable offset under read_committed), `describe-transactions`
and `list-transactions`.
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from brokers import Brokers
from clients import create_topic, find_transaction_coordinator, wait_until
from harness import BrokerProcess, ClusterProcess, JavaTool

CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "transaction.max.timeout.ms": "120000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
PRODUCER_FENCED = "org.apache.kafka.common.errors.ProducerFencedException"
INVALID_PRODUCER_EPOCH = "org.apache.kafka.common.errors.InvalidProducerEpochException"
COMMIT_FAILED = "org.apache.kafka.clients.consumer.CommitFailedException"
TXN_FAILED = 3  # KafkaTool's exit code for a transaction that failed and was not redone
CRASHED = 4  # txn-copy's exit code when it halts on purpose (--crash-after)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def txn_broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(CONFIG, name="java-txn-broker")


class RunningTool:
    """A KafkaTool command in the background whose JSON event lines are read as they come.

    One thread reads its stdout to the end, line by line, into a queue that `wait_for` and
    `finish` take from. (Reading some lines with `readline()` and the rest with
    `communicate(timeout=...)` loses lines: `communicate` with a timeout reads the pipe's
    descriptor, not the lines `readline()` had already buffered, and a transaction's
    "committed" went missing that way.)"""

    def __init__(self, tool: JavaTool, *args: object) -> None:
        argv = [tool.java, "-XX:TieredStopAtLevel=1", "-cp", tool.classpath, "KafkaTool"]
        self.args = [str(a) for a in args]
        # A file, not a pipe: nobody reads stderr until the end, and a full pipe would block.
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by kill())
        self.proc = subprocess.Popen(
            argv + self.args, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # the end of its output

    def _take(self, line: str) -> tuple[str, Any]:
        [(name, payload)] = json.loads(line).items()
        self.events.append({name: payload})
        return name, payload

    def wait_for(self, event: str, timeout: float = 60) -> dict[str, Any]:
        """Reads lines until `event`; its payload."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {event!r} from KafkaTool within {timeout} s: {self.events}"
                ) from None
            if line is None:
                self._lines.put(None)  # finish() reads to the end too
                raise AssertionError(f"KafkaTool ended before {event!r}: {self.finish(5)}")
            if line.strip():
                name, payload = self._take(line)
                if name == event:
                    result: dict[str, Any] = payload
                    return result

    def finish(self, timeout: float = 90) -> tuple[int, list[dict[str, Any]], str]:
        """(exit code, every event, stderr) once the tool has exited."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"KafkaTool {self.args} timed out: {self.err()}") from None
        self._reader.join(30)
        while (line := self._lines.get(timeout=30)) is not None:
            if line.strip():
                self._take(line)
        return self.proc.returncode, self.events, self.err()

    def err(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-3000:]

    def kill(self) -> None:
        """Ends the tool if it still runs; always called last."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(30)
        self.stderr.close()


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e[name] for e in events if name in e]


def consume_to_end(
    tool: JavaTool, bootstrap: str, topic: str, isolation: str
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """(records, end offset by partition) read by a KafkaConsumer with `isolation`."""
    rows = tool.json(
        "consume-to-end", bootstrap, topic, 60000, f"isolation.level={isolation}", timeout=90
    )
    ends = {r["partition"]: r["end_offset"] for r in rows if "end_offset" in r}
    return [r for r in rows if "offset" in r], ends


def read(tool: JavaTool, bootstrap: str, topic: str, isolation: str) -> list[dict[str, Any]]:
    return consume_to_end(tool, bootstrap, topic, isolation)[0]


def test_commit_and_abort_seen_by_read_committed_and_read_uncommitted(
    java_tool: JavaTool, txn_broker: BrokerProcess
):
    bootstrap = txn_broker.bootstrap
    topic = f"java-txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    # Four transactions of 25 records; the second and fourth are flushed, then aborted.
    events = java_tool.json(
        "txn-produce",
        bootstrap,
        topic,
        100,
        f"--transactional-id=java-{uuid.uuid4().hex[:8]}",
        "--per-txn=25",
        "--abort-every=2",
        timeout=90,
    )
    assert [e["committed"]["txn"] for e in events if "committed" in e] == [1, 3]
    assert [e["aborted"]["txn"] for e in events if "aborted" in e] == [2, 4]
    acked = named(events, "acked")
    assert len(acked) == 100
    committed_keys = {a["key"] for a in acked if a["txn"] in (1, 3)}
    every_key = {a["key"] for a in acked}

    committed = read(java_tool, bootstrap, topic, "read_committed")
    assert sorted(r["key"] for r in committed) == sorted(committed_keys)
    uncommitted = read(java_tool, bootstrap, topic, "read_uncommitted")
    assert sorted(r["key"] for r in uncommitted) == sorted(every_key)
    # Each record is where its ack said it was.
    where = {a["key"]: (a["partition"], a["offset"]) for a in acked}
    assert all(where[r["key"]] == (r["partition"], r["offset"]) for r in uncommitted)


def test_interleaved_transactions_of_two_producers(java_tool: JavaTool, txn_broker: BrokerProcess):
    """Two producers write small transactions into one partition at once, one aborting each
    of its transactions, the other committing; read_committed consumers (whole fetches, and
    fetches of a few hundred bytes that split the aborted transactions) see exactly the
    committed ones, in order."""
    bootstrap = txn_broker.bootstrap
    topic = f"java-interleaved-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    count = 120
    common = ["txn-produce", bootstrap, topic, count, "--per-txn=3"]
    aborter = RunningTool(
        java_tool,
        *common,
        f"--transactional-id=a-{uuid.uuid4().hex[:8]}",
        "--key-prefix=a",
        "--abort-every=1",
        "linger.ms=0",
    )
    committer = RunningTool(
        java_tool,
        *common,
        f"--transactional-id=c-{uuid.uuid4().hex[:8]}",
        "--key-prefix=c",
        "linger.ms=0",
    )
    try:
        (a_code, a_events, a_err), (c_code, c_events, c_err) = aborter.finish(), committer.finish()
    finally:
        aborter.kill()
        committer.kill()
    assert (a_code, c_code) == (0, 0), a_err + c_err
    assert len(named(a_events, "aborted")) == len(named(c_events, "committed")) == count // 3
    committed_acks = sorted(named(c_events, "acked"), key=lambda a: a["offset"])

    expected = [(a["offset"], a["key"]) for a in committed_acks]
    for fetch_bytes in ("1048576", "300"):
        rows = java_tool.json(
            "consume-to-end",
            bootstrap,
            topic,
            60000,
            "isolation.level=read_committed",
            f"max.partition.fetch.bytes={fetch_bytes}",
            timeout=90,
        )
        assert [(r["offset"], r["key"]) for r in rows if "offset" in r] == expected, fetch_bytes
    uncommitted = read(java_tool, bootstrap, topic, "read_uncommitted")
    assert len(uncommitted) == 2 * count


def test_admin_describes_and_lists_transactions(
    java_tool: JavaTool, txn_broker: BrokerProcess, tmp_path: Path
):
    """The Java Admin client's describeTransactions and listTransactions, for an open
    transaction and after its commit."""
    bootstrap = txn_broker.bootstrap
    topic = f"java-describe-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    transactional_id = f"java-describe-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    producer = RunningTool(
        java_tool,
        "txn-produce",
        bootstrap,
        topic,
        10,
        f"--transactional-id={transactional_id}",
        f"--pause-before-commit={release}",
    )
    try:
        producer.wait_for("paused")
        [ongoing] = named(
            java_tool.json("describe-transactions", bootstrap, transactional_id), "transaction"
        )
        listed = named(java_tool.json("list-transactions", bootstrap), "transaction")
        release.touch()
        code, events, stderr = producer.finish()
    finally:
        producer.kill()
    assert code == 0, stderr
    written = sorted({(topic, a["partition"]) for a in named(events, "acked")})
    assert ongoing["state"] == "Ongoing"
    assert ongoing["started"] is True
    assert [tuple(p) for p in ongoing["partitions"]] == written
    assert (ongoing["producer_epoch"], ongoing["timeout_ms"]) == (0, 60000)
    assert {
        "transactional_id": transactional_id,
        "producer_id": ongoing["producer_id"],
        "state": "Ongoing",
    } in listed

    [done] = named(
        java_tool.json("describe-transactions", bootstrap, transactional_id), "transaction"
    )
    assert (done["state"], done["producer_id"], done["partitions"]) == (
        "CompleteCommit",
        ongoing["producer_id"],
        [],
    )


@pytest.mark.parametrize("next_step", ["commit", "send"])
def test_a_second_producer_with_the_same_id_fences_the_first(
    java_tool: JavaTool, txn_broker: BrokerProcess, tmp_path: Path, next_step: str
):
    """Against Apache Kafka (TransactionManager, ProducerAppendInfo, AddPartitionsToTxnManager):
    a fenced producer's EndTxn gets PRODUCER_FENCED, which the client raises as
    ProducerFencedException; its Produce gets INVALID_PRODUCER_EPOCH, an abortable
    InvalidProducerEpochException, and the abort that follows is then fenced at the
    coordinator (ProducerFencedException)."""
    bootstrap = txn_broker.bootstrap
    topic = f"java-fence-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = f"java-fence-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    first = RunningTool(
        java_tool,
        "txn-produce",
        bootstrap,
        topic,
        5,
        f"--transactional-id={transactional_id}",
        f"--pause-before-commit={release}",
        f"--send-after-pause={1 if next_step == 'send' else 0}",
    )
    try:
        first.wait_for("paused")
        # The open transaction holds the last stable offset at its first record.
        assert consume_to_end(java_tool, bootstrap, topic, "read_committed") == ([], {0: 0})
        assert len(read(java_tool, bootstrap, topic, "read_uncommitted")) == 5
        # The second instance: initTransactions, then an empty transaction of its own.
        second = java_tool.json(
            "txn-produce", bootstrap, topic, 3, f"--transactional-id={transactional_id}"
        )
        assert named(second, "committed") == [{"txn": 1, "attempts": 1}]
        release.touch()
        code, events, stderr = first.finish()
    finally:
        first.kill()
    assert code == TXN_FAILED, stderr
    errors = [(e["op"], e["exception"]) for e in named(events, "error")]
    if next_step == "commit":
        assert errors == [("commit", PRODUCER_FENCED)]
    else:
        assert errors == [("send", INVALID_PRODUCER_EPOCH), ("abort", PRODUCER_FENCED)]
    assert named(events, "committed") == []

    # Only the second instance's records are visible; the first's were aborted when fenced.
    committed = read(java_tool, bootstrap, topic, "read_committed")
    assert [r["key"] for r in committed] == ["k0", "k1", "k2"]
    assert [r["value"] for r in committed] == ["v0", "v1", "v2"]


@pytest.mark.parametrize("next_step", ["commit", "send"])
def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    java_tool: JavaTool, txn_broker: BrokerProcess, tmp_path: Path, next_step: str
):
    """The coordinator aborts a transaction open longer than transaction.timeout.ms and bumps
    the epoch, so the producer's next step fails as if another instance had fenced it."""
    bootstrap = txn_broker.bootstrap
    topic = f"java-timeout-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    release = tmp_path / "release"
    producer = RunningTool(
        java_tool,
        "txn-produce",
        bootstrap,
        topic,
        5,
        f"--transactional-id=java-timeout-{uuid.uuid4().hex[:8]}",
        f"--pause-before-commit={release}",
        f"--send-after-pause={1 if next_step == 'send' else 0}",
        "transaction.timeout.ms=2000",
    )
    try:
        producer.wait_for("paused")

        def aborted() -> bool:
            # Five records and the ABORT marker: the last stable offset moves past them.
            return consume_to_end(java_tool, bootstrap, topic, "read_committed") == ([], {0: 6})

        wait_until(aborted, 60, "the coordinator aborts the timed-out transaction")
        release.touch()
        code, events, stderr = producer.finish()
    finally:
        producer.kill()
    assert code == TXN_FAILED, stderr
    errors = [(e["op"], e["exception"]) for e in named(events, "error")]
    if next_step == "commit":
        assert errors == [("commit", PRODUCER_FENCED)]
    else:
        assert errors == [("send", INVALID_PRODUCER_EPOCH), ("abort", PRODUCER_FENCED)]
    assert len(read(java_tool, bootstrap, topic, "read_uncommitted")) == 5


def test_consume_transform_produce_resumes_exactly_once_after_a_crash(
    java_tool: JavaTool, txn_broker: BrokerProcess
):
    """KIP-447 with the Java client: a read_committed consumer in a group and a transactional
    producer copy a topic, committing the group's offsets in each transaction
    (sendOffsetsToTransaction with the consumer's group metadata). The first copier halts
    inside a transaction; the second, with the same transactional id and group, aborts it on
    initTransactions, resumes from the committed offsets, and the output holds every input
    record exactly once."""
    bootstrap = txn_broker.bootstrap
    source = f"java-eos-in-{uuid.uuid4().hex[:8]}"
    sink = f"java-eos-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    count = 60
    produced = java_tool.json("produce", bootstrap, source, count)
    source_ends: dict[str, int] = {}
    for a in produced:
        source_ends[str(a["partition"])] = max(
            source_ends.get(str(a["partition"]), 0), a["offset"] + 1
        )
    group = f"java-eos-{uuid.uuid4().hex[:8]}"
    copier = ["txn-copy", bootstrap, source, sink, group]
    transactional_id = f"--transactional-id=java-eos-{uuid.uuid4().hex[:8]}"

    first = RunningTool(java_tool, *copier, count, transactional_id, "--crash-after=25")
    try:
        code, events, stderr = first.finish()
    finally:
        first.kill()
    assert code == CRASHED, stderr
    copied = sum(e["records"] for e in named(events, "committed"))
    last_offsets: dict[str, int] = {}
    for e in named(events, "committed"):
        last_offsets.update(e["offsets"])
    [crashed] = named(events, "crashing")
    assert copied <= 25 < copied + crashed["records"]

    events = java_tool.json(*copier, count - copied, transactional_id, timeout=120)
    committed = named(events, "committed")
    assert sum(e["records"] for e in committed) == count - copied
    for e in committed:
        last_offsets.update(e["offsets"])
    assert last_offsets == source_ends

    rows = read(java_tool, bootstrap, sink, "read_committed")
    assert sorted(r["key"] for r in rows) == sorted(f"k{i}" for i in range(count))
    assert all(r["value"] == "v" + r["key"][1:] for r in rows)
    # The halted transaction's records are there, aborted.
    assert len(read(java_tool, bootstrap, sink, "read_uncommitted")) == count + crashed["records"]


def test_an_open_transaction_survives_a_broker_restart(
    java_tool: JavaTool, broker_factory: Any, tmp_path: Path
):
    """One broker, SIGKILLed and started again while a transaction is open: the coordinator
    reloads it, the partition its producer's epoch and sequence, so the producer sends more
    records in the same transaction and commits it."""
    broker = broker_factory(CONFIG)
    bootstrap = broker.bootstrap
    topic = f"java-restart-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    release = tmp_path / "release"
    producer = RunningTool(
        java_tool,
        "txn-produce",
        bootstrap,
        topic,
        5,
        f"--transactional-id=java-restart-{uuid.uuid4().hex[:8]}",
        f"--pause-before-commit={release}",
        "--send-after-pause=2",
    )
    try:
        producer.wait_for("paused")
        broker.kill()
        broker.start()
        release.touch()
        code, events, stderr = producer.finish()
    finally:
        producer.kill()
    assert code == 0, f"{events}\n{stderr}"
    assert [e["txn"] for e in named(events, "committed")] == [1]
    acked = [(a["key"], a["offset"]) for a in named(events, "acked")]
    rows = read(java_tool, bootstrap, topic, "read_committed")
    assert [(r["key"], r["offset"]) for r in rows] == acked
    assert [k for k, _ in acked] == [f"k{i}" for i in range(5)] + [
        "k5-after-pause",
        "k6-after-pause",
    ]


def test_a_zombie_copier_is_fenced_by_its_group_generation(
    java_tool: JavaTool, txn_broker: BrokerProcess, tmp_path: Path
):
    """KIP-447's fencing without a shared transactional id: copier A stalls holding a batch
    past max.poll.interval.ms, so the group moves its partitions to copier B (another
    transactional id), which copies everything. A's late offset commit carries its old
    generation: the Java client raises CommitFailedException (UNKNOWN_MEMBER_ID or
    ILLEGAL_GENERATION from the coordinator, as with Kafka) and A aborts, so nothing is
    copied twice."""
    bootstrap = txn_broker.bootstrap
    source = f"java-zombie-in-{uuid.uuid4().hex[:8]}"
    sink = f"java-zombie-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    count = 40
    java_tool.json("produce", bootstrap, source, count)
    group = f"java-zombie-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    zombie = RunningTool(
        java_tool,
        "txn-copy",
        bootstrap,
        source,
        sink,
        group,
        count,
        f"--transactional-id=java-zombie-a-{uuid.uuid4().hex[:8]}",
        f"--pause-before-offsets={release}",
        "max.poll.interval.ms=3000",
    )
    try:
        stalled = zombie.wait_for("paused")
        events = java_tool.json(
            "txn-copy",
            bootstrap,
            source,
            sink,
            group,
            count,
            f"--transactional-id=java-zombie-b-{uuid.uuid4().hex[:8]}",
            timeout=90,
        )
        assert sum(e["records"] for e in named(events, "committed")) == count
        release.touch()
        code, zombie_events, stderr = zombie.finish()
    finally:
        zombie.kill()
    assert code == TXN_FAILED, stderr
    assert [(e["op"], e["exception"]) for e in named(zombie_events, "error")] == [
        ("offsets", COMMIT_FAILED)
    ]
    assert named(zombie_events, "aborted") == [{"txn": 1}]

    rows = read(java_tool, bootstrap, sink, "read_committed")
    assert sorted(r["key"] for r in rows) == sorted(f"k{i}" for i in range(count))
    uncommitted = read(java_tool, bootstrap, sink, "read_uncommitted")
    assert len(uncommitted) == count + stalled["records"]


def partition_leaders(tool: JavaTool, bootstrap: str, topic: str) -> dict[int, int]:
    return {r["partition"]: r["leader"] for r in tool.json("describe-topic", bootstrap, topic)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "victim, moment",
    [
        ("coordinator", "before-commit"),
        ("coordinator", "during-commit"),
        ("coordinator", "while-sending"),
        ("partition-leader", "before-commit"),
    ],
)
def test_a_transaction_survives_a_killed_broker(
    java_tool: JavaTool, cluster_factory: Any, tmp_path: Path, victim: str, moment: str
):
    """The transaction coordinator, or a broker leading one of the transaction's partitions
    but not coordinating it, is SIGKILLed while the first of three transactions waits to
    commit, as the second one commits, or as the second one starts sending. The producer
    finishes (or redoes) each transaction and a read_committed consumer sees every record
    exactly once."""
    cluster: ClusterProcess = cluster_factory(3, config=CONFIG)
    every_broker = ",".join(n.bootstrap for n in cluster.nodes)
    topic = f"java-failover-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.nodes[0].bootstrap, topic, partitions=3, replication_factor=3)
    transactional_id = f"java-failover-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    count = 60
    producer = RunningTool(
        java_tool,
        "txn-produce",
        every_broker,
        topic,
        count,
        f"--transactional-id={transactional_id}",
        "--per-txn=20",
        f"--pause-before-commit={release}",
        "--redo-failed",
    )
    try:
        paused = producer.wait_for("paused", timeout=60)
        assert paused["txn"] == 1
        coordinator_id = find_transaction_coordinator(every_broker, transactional_id)
        if victim == "coordinator":
            killed = cluster.node(coordinator_id)
        else:
            # Placement spreads preferred leaders, so another broker leads a partition; if
            # leadership has gathered on the coordinator, a follower of each partition dies.
            leaders = set(partition_leaders(java_tool, every_broker, topic).values())
            others = sorted(leaders - {coordinator_id}) or sorted(
                n.node_id for n in cluster.nodes if n.node_id != coordinator_id
            )
            killed = cluster.node(others[0])
        if moment == "during-commit":
            release.touch()
            producer.wait_for("paused", timeout=60)  # the second transaction, about to commit
        elif moment == "while-sending":
            release.touch()
            producer.wait_for("begin", timeout=60)  # the second transaction's first sends
        killed.kill()
        release.touch()
        code, events, stderr = producer.finish(timeout=100)
    finally:
        producer.kill()
    assert code == 0, f"{events}\n{stderr}"
    assert [e["txn"] for e in named(events, "committed")] == [1, 2, 3], f"{events}\n{stderr}"
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n is not killed)
    if victim == "coordinator":
        assert find_transaction_coordinator(survivors, transactional_id) != killed.node_id
    else:
        assert killed.node_id not in partition_leaders(java_tool, survivors, topic).values()

    committed = read(java_tool, survivors, topic, "read_committed")
    keys = sorted(r["key"] for r in committed)
    assert keys == sorted(f"k{i}" for i in range(count)), "each committed record exactly once"
    # What a redone transaction left behind is aborted: the committed copy is the last acked.
    where = {a["key"]: (a["partition"], a["offset"]) for a in named(events, "acked")}
    assert all(where[r["key"]] == (r["partition"], r["offset"]) for r in committed)
