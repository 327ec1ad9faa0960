"""What incremental fetch sessions (KIP-227) save: one kafka-python consumer of many
partitions against a broker with sessions and one without
(`max.incremental.fetch.session.cache.slots=0`), each for a fixed time on an idle topic and
then on a slowly written one. Prints, per broker and phase, the broker's CPU seconds, the
Fetch requests it answered (and how many from a session), and the bytes the consumer sent
and received on its connections (the kernel's TCP counters, read with `ss`).

    python -m raftka.broker.tools.fetch_sessions_bench --partitions 1000 --duration 60
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from multiprocessing.synchronize import Event

from raftka.broker.tools.processes import BrokerProcess, free_port, run_as_child
from raftka.broker.tools.procfs import cpu_seconds_total

_FETCHES = re.compile(
    r'^kafka_network_requestmetrics_requests_total\{request="Fetch"\} (\S+)$', re.M
)
_INCREMENTAL = re.compile(r"^raftka_incremental_fetch_requests_total (\S+)$", re.M)
_BYTES = re.compile(r"bytes_(sent|received):(\d+)")


@dataclass(frozen=True)
class Sample:
    cpu_s: float
    fetches: float
    incremental: float
    sent: int
    received: int


def _consume(bootstrap: str, topic: str, partitions: int, stop: Event) -> None:
    """The consumer process: every partition from its end, polling until told to stop."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_end(*assigned)
    while not stop.is_set():
        consumer.poll(timeout_ms=500)
    consumer.close()


def _connection_bytes(pid: int, port: int) -> tuple[int, int]:
    """(sent, received) bytes over the process's TCP connections to `port`."""
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established", "dport", "=", f":{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sent = received = 0
    mine = False
    for line in out.splitlines():
        if "users:(" in line:
            mine = f"pid={pid}," in line
        elif mine:
            counts = dict(_BYTES.findall(line))
            sent += int(counts.get("sent", 0))
            received += int(counts.get("received", 0))
    return sent, received


def _sample(broker: BrokerProcess, metrics: str, consumer_pid: int) -> Sample:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        text = response.read().decode()
    fetches = _FETCHES.search(text)
    incremental = _INCREMENTAL.search(text)
    sent, received = _connection_bytes(consumer_pid, broker.port)
    return Sample(
        cpu_seconds_total(broker.pid),
        float(fetches.group(1)) if fetches else 0.0,
        float(incremental.group(1)) if incremental else 0.0,
        sent,
        received,
    )


def _report(label: str, before: Sample, after: Sample, duration_s: float) -> None:
    fetches = after.fetches - before.fetches
    per_fetch = max(fetches, 1)
    print(
        f"{label:<28} broker CPU {after.cpu_s - before.cpu_s:6.2f} s | "
        f"Fetch {fetches:6.0f} ({fetches / duration_s:5.1f}/s, "
        f"{after.incremental - before.incremental:6.0f} incremental) | "
        f"sent {(after.sent - before.sent) / 1e6:8.3f} MB "
        f"({(after.sent - before.sent) / per_fetch:8.0f} B/fetch) | "
        f"received {(after.received - before.received) / 1e6:8.3f} MB "
        f"({(after.received - before.received) / per_fetch:8.0f} B/fetch)",
        flush=True,
    )


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        described = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(described) == partitions and all(p.leader >= 0 for p in described.values()):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{topic}: not every partition has a leader")


def run(slots: int, args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    metrics = f"127.0.0.1:{free_port()}"
    config = {
        "metrics.listen": metrics,
        "max.incremental.fetch.session.cache.slots": str(slots),
    }
    with BrokerProcess(config).start() as broker:
        topic = "sessions-bench"
        _create_topic(broker.bootstrap, topic, args.partitions)
        stop = multiprocessing.get_context("spawn").Event()
        consumer = multiprocessing.get_context("spawn").Process(
            target=run_as_child, args=(_consume, broker.bootstrap, topic, args.partitions, stop)
        )
        consumer.start()
        assert consumer.pid is not None
        try:
            time.sleep(args.warmup)
            label = f"slots={slots}"
            before = _sample(broker, metrics, consumer.pid)
            time.sleep(args.duration)
            _report(f"{label}, idle", before, _sample(broker, metrics, consumer.pid), args.duration)

            producer = Producer({"bootstrap.servers": broker.bootstrap})
            interval_s = 1 / args.rate
            partition = 0
            due = time.monotonic()
            started: Sample | None = None
            measure_from = due + args.warmup
            measure_to = measure_from + args.duration
            while (now := time.monotonic()) < measure_to:
                if started is None and now >= measure_from:
                    started = _sample(broker, metrics, consumer.pid)
                producer.produce(topic, b"x" * 100, partition=partition)
                producer.poll(0)
                partition = (partition + 1) % args.partitions
                due += interval_s
                time.sleep(max(0.0, due - time.monotonic()))
            assert started is not None
            _report(
                f"{label}, {args.rate:g} rec/s",
                started,
                _sample(broker, metrics, consumer.pid),
                args.duration,
            )
            producer.flush(10)
            del producer  # closed before the broker stops
        finally:
            stop.set()
            consumer.join(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=10, help="seconds before each phase")
    parser.add_argument("--rate", type=float, default=100, help="records/s written, slow phase")
    parser.add_argument("--slots", type=int, nargs="+", default=[1000, 0])
    args = parser.parse_args(argv)
    for slots in args.slots:
        run(slots, args)


if __name__ == "__main__":
    main()
