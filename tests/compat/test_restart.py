"""Durability across broker restarts (clean and kill -9) and the on-disk segment layout.
Each test runs its own broker process (`broker_factory`)."""

from __future__ import annotations

import os
import re
import threading

from clients import consume, make_producer, produce, wait_until, watermarks
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource


def _read_all(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Everything readable in the partition, from the low watermark to the end."""
    low, _high = watermarks(bootstrap, topic, partition)
    return consume(bootstrap, topic, [partition], start=low, timeout=90)[partition]


def _produce_next(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    res = produce(bootstrap, topic, [{"value": v, "partition": 0} for v in values], acks="all")
    assert not res.errors, res.errors[:3]
    return res.offsets_by_partition()[0]


def test_clean_restart_keeps_records_and_continues_offsets(broker_factory, new_topic):
    broker = broker_factory()
    topic = new_topic(
        partitions=2, bootstrap=broker.bootstrap, config={"max.message.bytes": "300000"}
    )
    n = 2000
    recs = [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2} for i in range(n)
    ]
    res = produce(broker.bootstrap, topic, recs, acks="all", compression_type="lz4")
    assert not res.errors, res.errors[:3]
    acked = res.offsets_by_partition()
    marks_before = {p: watermarks(broker.bootstrap, topic, p) for p in (0, 1)}

    broker.stop()  # SIGTERM; asserts a clean exit
    broker.start()

    # The topic, its partitions and its configs survive.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1]
    res_ = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res_], request_timeout=10)[res_].result(timeout=15)
    assert entries["max.message.bytes"].value == "300000"
    assert ConfigSource(entries["max.message.bytes"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG

    for p in (0, 1):
        low, high = watermarks(broker.bootstrap, topic, p)
        assert low == marks_before[p][0]
        assert high >= marks_before[p][1]
        msgs = consume(broker.bootstrap, topic, [p], start=0, timeout=60)[p]
        assert [m.offset() for m in msgs] == acked[p]
        assert [(m.key(), m.value()) for m in msgs] == [
            (r["key"], r["value"]) for r in recs if r["partition"] == p
        ]

    # New records go after the stored ones, at the high watermark, and nothing is
    # overwritten.
    _low, high = watermarks(broker.bootstrap, topic, 0)
    assert high > acked[0][-1]
    new_offsets = _produce_next(broker.bootstrap, topic, [b"after-1", b"after-2", b"after-3"])
    assert new_offsets[0] == high
    assert new_offsets == sorted(new_offsets)
    msgs = _read_all(broker.bootstrap, topic)
    assert [m.value() for m in msgs] == [r["value"] for r in recs if r["partition"] == 0] + [
        b"after-1",
        b"after-2",
        b"after-3",
    ]
    assert [m.offset() for m in msgs] == acked[0] + new_offsets


class _BackgroundProducer(threading.Thread):
    """Produces numbered records to partition 0 until stopped; records every acknowledgement."""

    def __init__(self, bootstrap: str, topic: str, acks: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = make_producer(
            bootstrap,
            acks=acks,
            linger_ms=5,
            message_timeout_ms=8000,
            retries=0,
            reconnect_backoff_max_ms=500,
        )
        self.acked: dict[int, bytes] = {}  # offset -> value
        self.failed = 0
        self.sent = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            assert msg.offset() not in self.acked, f"offset {msg.offset()} acknowledged twice"
            self.acked[msg.offset()] = msg.value()
        else:
            self.failed += 1

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for _ in range(50):
                    try:
                        self.producer.produce(
                            self.topic,
                            value=b"rec-%08d" % self.sent,
                            partition=0,
                            on_delivery=self._on_delivery,
                        )
                        self.sent += 1
                    except BufferError:
                        break
                self.producer.poll(0.005)
            # Give up on whatever is still queued or in flight: those are not acknowledged.
            self.producer.purge()
            self.producer.flush(15)
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.error = e


def _kill9_while_producing(broker_factory, new_topic, acks: str) -> None:
    broker = broker_factory()
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    bg = _BackgroundProducer(broker.bootstrap, topic, acks)
    bg.start()
    try:
        wait_until(lambda: len(bg.acked) >= 3000, timeout=60, what="3000 acknowledged records")
        broker.kill()  # SIGKILL, mid-stream: nothing can be acknowledged from here on
    finally:
        bg.stop_event.set()
        bg.join(timeout=30)
    assert not bg.is_alive(), "producer thread did not finish"
    assert bg.error is None, bg.error
    acked = dict(bg.acked)
    assert len(acked) >= 3000
    # The kill interrupted the stream: records were still queued or in flight.
    assert bg.failed > 0 and bg.sent > len(acked), (bg.sent, len(acked), bg.failed)

    broker.start()
    msgs = _read_all(broker.bootstrap, topic)
    stored = {m.offset(): m.value() for m in msgs}
    lost = {o: v for o, v in acked.items() if stored.get(o) != v}
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged records missing or changed after kill -9, "
        f"e.g. {sorted(lost.items())[:5]} (stored there: "
        f"{[(o, stored.get(o)) for o in sorted(lost)[:5]]})"
    )
    # Records that were stored are whole (no torn or foreign values).
    assert all(re.fullmatch(rb"rec-\d{8}", v) for v in stored.values())
    assert len(set(stored.values())) == len(stored), "a record was stored twice"

    # New offsets continue after the last stored one.
    _low, high = watermarks(broker.bootstrap, topic)
    last_stored = max(stored)
    assert high > last_stored
    new_offsets = _produce_next(broker.bootstrap, topic, [b"after-kill-1", b"after-kill-2"])
    assert new_offsets[0] == high
    assert new_offsets[1] > new_offsets[0]
    tail = consume(broker.bootstrap, topic, [0], start=last_stored)[0]
    assert [m.value() for m in tail] == [stored[last_stored], b"after-kill-1", b"after-kill-2"]


def test_kill9_while_producing_acks_all(broker_factory, new_topic):
    _kill9_while_producing(broker_factory, new_topic, "all")


def test_kill9_while_producing_acks_1(broker_factory, new_topic):
    _kill9_while_producing(broker_factory, new_topic, "1")


def _log_files(partition_dir) -> list[str]:
    return sorted(f for f in os.listdir(partition_dir) if f.endswith(".log"))


def test_small_segments_roll_into_many_files(broker_factory, new_topic):
    segment_bytes = 1024 * 1024  # Kafka's smallest allowed log.segment.bytes
    broker = broker_factory({"log.segment.bytes": str(segment_bytes)})
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    n, size = 6000, 1000  # ~6 MB of incompressible values
    values = [os.urandom(size) for _ in range(n)]
    res = produce(
        broker.bootstrap,
        topic,
        [{"value": v, "partition": 0} for v in values],
        compression_type="none",
        acks="all",
    )
    assert not res.errors
    offsets = res.offsets_by_partition()[0]

    pdir = broker.data_dir / f"{topic}-0"
    assert pdir.is_dir(), f"no partition folder {pdir}: {os.listdir(broker.data_dir)}"
    logs = _log_files(pdir)
    assert len(logs) >= 5, logs
    assert all(re.fullmatch(r"\d{20}\.log", f) for f in logs), logs
    bases = [int(f[:-4]) for f in logs]
    assert bases[0] == 0
    assert bases == sorted(set(bases))
    assert bases[-1] <= offsets[-1]
    # Rolled segments stay near the configured size (a batch may straddle the limit).
    for f in logs[:-1]:
        assert (pdir / f).stat().st_size <= segment_bytes + 1024 * 1024, f

    # Everything is readable across segment boundaries, also after a restart.
    got = consume(broker.bootstrap, topic, [0], count=n, timeout=90)[0]
    assert [m.offset() for m in got] == offsets
    assert [m.value() for m in got] == values
    broker.restart()
    assert _log_files(pdir)[: len(logs)] == logs
    got = consume(broker.bootstrap, topic, [0], start=offsets[n // 2], count=n - n // 2)[0]
    assert [m.value() for m in got] == values[n // 2 :]


def test_retention_bytes_deletes_old_segments(broker_factory, new_topic):
    broker = broker_factory(
        {"log.segment.bytes": str(1024 * 1024), "log.retention.check.interval.ms": "500"}
    )
    retention_bytes = 2 * 1024 * 1024
    topic = new_topic(
        partitions=1, bootstrap=broker.bootstrap, config={"retention.bytes": str(retention_bytes)}
    )
    n = 6000
    values = [os.urandom(1000) for _ in range(n)]
    res = produce(
        broker.bootstrap, topic, [{"value": v, "partition": 0} for v in values],
        compression_type="none", acks="all",
    )  # fmt: skip
    assert not res.errors
    offsets = res.offsets_by_partition()[0]

    # Old segments go; the log start offset (low watermark) moves forward, the end stays.
    def moved_start():
        low, high = watermarks(broker.bootstrap, topic)
        return (low, high) if low > 0 else None

    wait_until(moved_start, timeout=30, what="retention to delete old segments")
    pdir = broker.data_dir / f"{topic}-0"

    # Retention may have run while the records were being produced: wait until it has
    # nothing left to delete (the oldest segment is needed to keep retention.bytes), so
    # that no later round moves the log start while the records are read back.
    def settled() -> bool:
        sizes = [os.path.getsize(pdir / name) for name in _log_files(pdir)]
        return len(sizes) == 1 or sum(sizes) - retention_bytes < sizes[0]

    wait_until(settled, timeout=30, what="retention to finish deleting")
    low, high = wait_until(moved_start, timeout=30, what="the log start offset")
    assert high == offsets[-1] + 1
    assert low <= offsets[-1]
    # The log start offset is the base offset of the oldest remaining segment file.
    wait_until(
        lambda: int(_log_files(pdir)[0][:-4]) == low,
        timeout=30,
        what=f"segment files below the log start offset {low} to be removed",
    )
    # What is left is readable from the new start, and the newest records are kept.
    got = consume(broker.bootstrap, topic, [0], start=low)[0]
    assert got[0].offset() == low
    assert [m.value() for m in got] == values[offsets.index(low) :]
    assert len(got) * 1000 >= 1024 * 1024  # at least retention.bytes minus one segment kept


def test_topics_come_back_from_the_metadata_log_without_a_snapshot(broker_factory, new_topic):
    """The metadata snapshot only shortens start-up: a broker that lost it (or crashed
    before writing it) rebuilds its topics from the replicated metadata log."""
    import shutil

    broker = broker_factory()
    topic = new_topic(partitions=3, bootstrap=broker.bootstrap, config={"retention.ms": "600000"})
    acked = _produce_next(broker.bootstrap, topic, [b"a", b"b", b"c"])
    broker.stop()
    shutil.rmtree(broker.data_dir / "cluster-metadata.lmdb")
    broker.start()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    res_ = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res_], request_timeout=10)[res_].result(timeout=15)
    assert entries["retention.ms"].value == "600000"
    msgs = _read_all(broker.bootstrap, topic)
    assert [m.offset() for m in msgs] == acked
    assert [m.value() for m in msgs] == [b"a", b"b", b"c"]


def test_a_second_broker_on_the_same_data_dir_is_refused(broker_factory, new_topic):
    """Kafka's log-directory lock: a second process on a data directory in use exits with
    an error naming the directory and the holder, and the first broker keeps its data."""
    import subprocess
    import sys

    from harness import free_port

    broker = broker_factory()
    topic = new_topic(bootstrap=broker.bootstrap)
    res = produce(broker.bootstrap, topic, [{"value": b"v%d" % i} for i in range(10)], acks="all")
    assert not res.errors, res.errors[:3]
    second = subprocess.run(
        [sys.executable, "-m", "raftka.broker", "serve", "--listen", f"127.0.0.1:{free_port()}"]
        + ["--data-dir", str(broker.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2, second
    assert f"{broker.data_dir} is in use by another raftka broker (pid {broker.pid}" in (
        second.stderr
    )
    msgs = consume(broker.bootstrap, topic, [0], start=0, timeout=30)[0]
    assert [m.value() for m in msgs] == [b"v%d" % i for i in range(10)]
