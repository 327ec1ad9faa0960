"""Consumer groups with real clients: rebalancing, failover, committed offsets, restarts.

Consumers that must die run as subprocesses (so `kill -9` is real); the rest run in threads.
Waits are bounded polls, never fixed sleeps.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clients import RawConnection, make_producer, retry_retriable, wait_until, watermarks
from confluent_kafka import Consumer, KafkaError, TopicPartition

SESSION_TIMEOUT_MS = 6000

# A group consumer as its own process: prints one JSON line per assignment and per record,
# commits after each poll, and leaves the group on SIGTERM.
CONSUMER_SCRIPT = r"""
import json, signal, sys
from confluent_kafka import Consumer
bootstrap, topic, group, extra = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
conf.update(extra)
c = Consumer(conf)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def on_assign(consumer, partitions):
    out({"assigned": sorted(p.partition for p in partitions)})
def on_revoke(consumer, partitions):
    out({"revoked": sorted(p.partition for p in partitions)})
c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
while not stop:
    batch = c.consume(num_messages=200, timeout=0.2)
    records = [m for m in batch if m.error() is None]
    for m in records:
        out({"p": m.partition(), "o": m.offset(), "v": m.value().decode()})
    if records:
        try:
            c.commit(asynchronous=False)
        except Exception as exc:
            out({"commit_error": str(exc)})
c.close()
out({"closed": True})
"""


class ConsumerProcess:
    def __init__(self, bootstrap: str, topic: str, group: str, **conf: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER_SCRIPT, bootstrap, topic, group, json.dumps(conf)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.assignment: list[int] | None = None
        self.values: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.events.append(event)
            if "assigned" in event:
                self.assignment = event["assigned"]
            elif "v" in event:
                self.values.append(event["v"])

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Feeder:
    """Produces numbered records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.producer = make_producer(bootstrap)
        self.topic = topic
        self.partitions = partitions
        self.sent: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"r{i}"
            self.producer.produce(self.topic, value=value.encode(), partition=i % self.partitions)
            self.sent.append(value)
            self.producer.poll(0)
            i += 1
            self._stop.wait(0.01)
        assert self.producer.flush(30) == 0

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def group_id() -> str:
    return f"grp-{uuid.uuid4().hex[:10]}"


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Log-end offsets (high watermarks); a log may begin with a leader's control batch."""
    return {p: watermarks(bootstrap, topic, p)[1] for p in range(partitions)}


def owners(procs: list[ConsumerProcess]) -> list[list[int] | None]:
    return [p.assignment for p in procs]


def covers(procs: list[ConsumerProcess], partitions: int, each: int) -> bool:
    got = owners(procs)
    if any(a is None or len(a) != each for a in got):
        return False
    return sorted(p for a in got for p in a) == list(range(partitions))  # type: ignore[union-attr]


# -- confluent-kafka: share, take over, fail over --------------------------------------------


def test_three_consumers_share_and_survive_churn(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(partitions=6)
    group = group_id()
    feeder = Feeder(bootstrap, topic, 6).start()
    procs = [ConsumerProcess(bootstrap, topic, group) for _ in range(3)]
    try:
        wait_until(lambda: covers(procs, 6, 2), 60, "two partitions for each of 3 members")

        procs[0].terminate()  # a clean close: LeaveGroup, one rebalance
        left_at = time.monotonic()
        wait_until(lambda: covers(procs[1:], 6, 3), 30, "the other two to own all six")
        assert time.monotonic() - left_at < SESSION_TIMEOUT_MS / 1000, "waited for a timeout"

        procs[1].kill()  # kill -9: the broker notices by the session timeout
        killed_at = time.monotonic()
        wait_until(lambda: covers(procs[2:], 6, 6), 60, "the last member to own all six")
        assert time.monotonic() - killed_at >= SESSION_TIMEOUT_MS / 1000 - 1.5

        feeder.stop()
        sent = set(feeder.sent)
        consumed = lambda: {v for p in procs for v in p.values}  # noqa: E731
        wait_until(lambda: sent <= consumed(), 60, "every produced record to be consumed")
    finally:
        feeder.stop()
        for p in procs:
            p.cleanup()


def test_commit_then_restart_consumer_and_broker_resumes_at_the_commit(
    broker_factory: Callable[..., Any], new_topic: Any
) -> None:
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    bootstrap = broker.bootstrap
    topic = new_topic(partitions=3, bootstrap=bootstrap)
    producer = make_producer(bootstrap)
    for i in range(60):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    group = group_id()

    def consume(n: int) -> list[tuple[int, int]]:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([topic])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            got.append((m.partition(), m.offset()))
            c.commit(message=m, asynchronous=False)
        c.close()
        return got

    first = consume(20)
    assert len(first) == 20
    positions = committed(bootstrap, group, topic, 3)
    for part, offset in positions.items():
        mine = [o for p, o in first if p == part]
        # Committed = the next offset to read; -1001 (OFFSET_INVALID) if nothing was read.
        assert offset == (mine[-1] + 1 if mine else -1001)

    broker.restart()  # SIGTERM
    assert committed(bootstrap, group, topic, 3) == positions
    second = consume(20)
    broker.kill()  # kill -9
    broker.start()
    third = consume(20)
    seen = first + second + third
    assert len(set(seen)) == 60, "a record was read twice or skipped"
    for part in range(3):
        offsets = [o for p, o in second if p == part]
        if offsets and positions[part] >= 0:
            assert offsets[0] == positions[part], "did not resume exactly at the commit"
    # Each restart's new leader may append a control batch after the last record.
    last_read = {part: max(o for p, o in seen if p == part) + 1 for part in range(3)}
    assert committed(bootstrap, group, topic, 3) == last_read


# -- assignors and static membership ---------------------------------------------------------


class ThreadConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, **conf: Any) -> None:
        base = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
        }
        base.update(conf)
        self.consumer = Consumer(base)
        self.assigned: list[list[int]] = []
        self.revoked: list[list[int]] = []
        self.assignment: set[int] = set()
        self.incremental = conf.get("partition.assignment.strategy") == "cooperative-sticky"
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.append(sorted(p.partition for p in partitions))
        if self.incremental:
            self.assignment |= {p.partition for p in partitions}
        else:
            self.assignment = {p.partition for p in partitions}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.append(sorted(p.partition for p in partitions))
        self.assignment -= {p.partition for p in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.close()


def test_cooperative_sticky_rebalances_incrementally(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(partitions=4)
    group = group_id()
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    a = ThreadConsumer(bootstrap, topic, group, **conf)
    b = None
    try:
        wait_until(lambda: a.assignment == {0, 1, 2, 3}, 60, "the first member to own all")
        b = ThreadConsumer(bootstrap, topic, group, **conf)
        wait_until(
            lambda: len(a.assignment) == 2 and len(b.assignment) == 2,  # type: ignore[union-attr]
            60,
            "two partitions each",
        )
        assert a.assignment.isdisjoint(b.assignment)
        # Incremental: a gave up only the two partitions that moved, never all four.
        assert all(len(r) <= 2 for r in a.revoked), a.revoked
        assert sorted(p for r in a.revoked for p in r) == sorted(b.assignment)
    finally:
        a.close()
        if b is not None:
            b.close()


def test_static_member_restart_keeps_partitions_without_rebalance(
    bootstrap: str, new_topic: Any
) -> None:
    topic = new_topic(partitions=4)
    group = group_id()
    a = ThreadConsumer(bootstrap, topic, group, **{"group.instance.id": "static-a"})
    b = ThreadConsumer(bootstrap, topic, group, **{"group.instance.id": "static-b"})
    b2 = None
    try:
        wait_until(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, 60, "a stable group")
        before_a, before_b = set(a.assignment), set(b.assignment)
        a_assignments = len(a.assigned)
        b.close()  # a static member does not leave the group on close
        b2 = ThreadConsumer(bootstrap, topic, group, **{"group.instance.id": "static-b"})
        wait_until(lambda: b2.assignment, 30, "the restarted member's assignment")
        assert b2.assignment == before_b
        time.sleep(1)  # a rebalance, if one started, would reach a within its heartbeat
        assert a.assignment == before_a
        assert len(a.assigned) == a_assignments, "the other member saw a rebalance"
    finally:
        a.close()
        if b2 is not None:
            b2.close()


# -- other clients -----------------------------------------------------------------------------


def produce_values(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    producer = make_producer(bootstrap)
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def test_kcat_balanced_consumer(bootstrap: str, new_topic: Any, kcat_bin: str) -> None:
    topic = new_topic(partitions=2)
    produce_values(bootstrap, topic, 20, 2)
    group = group_id()
    out = subprocess.run(
        [kcat_bin, "-b", bootstrap, "-G", group, "-c", "20", "-f", "%p %o %s\n"]
        + ["-X", "auto.offset.reset=earliest", topic],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert sorted(line.split()[2] for line in lines) == sorted(f"m{i}" for i in range(20))
    ends = end_offsets(bootstrap, topic, 2)
    wait_until(lambda: committed(bootstrap, group, topic, 2) == ends, 15, "kcat's commits")


def test_kafka_python_group_consumer(bootstrap: str, new_topic: Any) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic = new_topic(partitions=3)
    produce_values(bootstrap, topic, 30, 3)
    group = group_id()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    values = []
    for record in consumer:
        values.append(record.value.decode())
        if len(values) == 30:
            break
    consumer.commit()
    assert sorted(values) == sorted(f"m{i}" for i in range(30))
    ends = end_offsets(bootstrap, topic, 3)
    assert {p: consumer.committed(KTopicPartition(topic, p)) for p in range(3)} == ends
    consumer.close()
    assert committed(bootstrap, group, topic, 3) == ends


def test_java_consumer_subscribe_and_commit_sync(
    bootstrap: str, new_topic: Any, java_tool: Any
) -> None:
    topic = new_topic(partitions=3)
    produce_values(bootstrap, topic, 30, 3)
    group = group_id()
    rows = java_tool.json("consume-group", bootstrap, topic, group, 30, 60000, timeout=120)
    assert sorted(r["value"] for r in rows) == sorted(f"m{i}" for i in range(30))
    ends = end_offsets(bootstrap, topic, 3)
    assert committed(bootstrap, group, topic, 3) == ends
    # The group resumes from its commits: only the new records are read.
    produce_values(bootstrap, topic, 3, 3)
    rows = java_tool.json("consume-group", bootstrap, topic, group, 3, 60000, timeout=120)
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(ends.items())


# -- bad input -------------------------------------------------------------------------------


def raw_commit(
    bootstrap: str,
    group: str,
    topic: str,
    partition: int,
    *,
    generation: int = -1,
    member: str = "",
    version: int = 8,
) -> int | None:
    """The partition's error code in the OffsetCommit answer; None if the broker closed the
    connection without answering (what Kafka does with a request it cannot parse)."""
    module = __import__(f"kio.schema.offset_commit.v{version}.request", fromlist=["x"])
    response = __import__(f"kio.schema.offset_commit.v{version}.response", fromlist=["x"])
    fields: dict[str, Any] = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "topics": (
            module.OffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    module.OffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    }
    if version >= 7:
        fields["group_instance_id"] = None

    def send() -> Any:
        with RawConnection(bootstrap) as conn:
            conn.send_request(module.OffsetCommitRequest(**fields))
            try:
                return conn.recv_response(response.OffsetCommitResponse)
            except ConnectionError:
                return None

    answer = retry_retriable(send)
    return None if answer is None else int(answer.topics[0].partitions[0].error_code)


def test_bad_offset_commits_get_kafkas_errors_and_change_nothing(
    bootstrap: str, new_topic: Any, on_raftka: bool
) -> None:
    topic = new_topic(partitions=1)
    group = group_id()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
    )
    c.subscribe([topic])
    try:
        wait_until(lambda: c.poll(0.2) is None and c.assignment(), 60, "an assignment")
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        member = c.memberid()
        assert raw_commit(bootstrap, group, topic, 1) == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert raw_commit(bootstrap, group, "no-such-topic", 0) == (
            KafkaError.UNKNOWN_TOPIC_OR_PART
        )
        assert raw_commit(bootstrap, group, topic, 0, generation=99, member=member) == (
            KafkaError.ILLEGAL_GENERATION
        )
        assert raw_commit(bootstrap, group, topic, 0, generation=1, member="stranger") == (
            KafkaError.UNKNOWN_MEMBER_ID
        )
        # A group id longer than a Kafka string may be (32,767): raftka answers INVALID_GROUP_ID,
        # deliberately; Kafka cannot parse the request and closes the connection.
        too_long = raw_commit(bootstrap, "x" * 40_000, topic, 0)
        accepted = (
            {KafkaError.INVALID_GROUP_ID} if on_raftka else {KafkaError.INVALID_GROUP_ID, None}
        )
        assert too_long in accepted, too_long
        assert committed(bootstrap, group, topic, 1) == {0: 3}
    finally:
        c.close()


def test_groups_cli_describes_a_live_group(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(partitions=2)
    produce_values(bootstrap, topic, 10, 2)
    group = group_id()
    # librdkafka heartbeats from its own threads: the member stays alive between polls.
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    try:
        wait_until(lambda: c.poll(0.2) is None and len(c.assignment()) == 2, 60, "an assignment")
        c.commit(
            offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 5)],
            asynchronous=False,
        )
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            [sys.executable, "-m", "raftka.broker", "groups", "describe", group]
            + ["--bootstrap", bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=root,
        )
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.splitlines() if line.startswith(group)]
        ends = end_offsets(bootstrap, topic, 2)
        assert [r[1:6] for r in rows] == [
            [topic, "0", "2", str(ends[0]), str(ends[0] - 2)],
            [topic, "1", "5", str(ends[1]), str(ends[1] - 5)],
        ]
        listed = subprocess.run(
            [sys.executable, "-m", "raftka.broker", "groups", "list", "--bootstrap", bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=root,
        )
        assert group in listed.stdout
    finally:
        c.close()
