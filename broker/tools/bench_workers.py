"""The bench's worker processes: producers and consumers (one confluent-kafka client each,
started with multiprocessing's spawn), and the group that starts them together and samples
their counters once a second.

Each worker builds its client, reports ("ready", index, None), waits for the start event,
runs, and puts ("result", index, dict) or ("error", index, traceback). Counters are shared
arrays the parent samples once a second for progress and the timeline.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import struct
import sys
import time
import traceback
import uuid
from array import array
from collections.abc import Callable, MutableSequence
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from raftka.broker.tools.bench_report import Result
from raftka.broker.tools.bench_requests import ClientRequestStats
from raftka.broker.tools.processes import run_as_child

POLL_EVERY = 1024  # records between poll(0) calls and counter updates
MB = 1024 * 1024
LATENCY_HEADER = struct.Struct(">qQ")  # send time (time.time_ns), run tag
SAMPLED_LATENCIES_MAX = 1_000_000  # per producer, like Kafka's perf tool bounds its samples

# What a worker is given: the bench's options for its role, pickled to its process; a dict
# (Any: options of every type) so that a role's spec is the common one plus a few keys.
WorkerSpec = dict[str, Any]
# ("ready", index, None), ("result", index, result) or ("error", index, traceback)
WorkerMessage = tuple[str, int, Result | str | None]
# Records done so far, one per worker: a ctypes array of int64 in shared memory.
Counters = MutableSequence[int]
DeliveryCallback = Callable[[KafkaError | None, Message], None]
# A worker process's function: (spec, index, counters, start event, message queue).
WorkerMain = Callable[[WorkerSpec, int, Counters, Event, "Queue[WorkerMessage]"], None]


class SharedCount(Protocol):
    """An int64 in shared memory: multiprocessing's Value without a lock."""

    value: int


def producer_config(spec: WorkerSpec) -> dict[str, str | int | float | bool]:
    """librdkafka properties of a producer: the bench's, then --producer-config's."""
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": spec["bootstrap"],
        "acks": spec["acks"],
        "compression.type": spec["compression"],
        "linger.ms": spec["linger_ms"],
        "batch.size": spec["batch_size"],
        "enable.idempotence": False,
        # Fail a run against a broker that stops answering within a minute, not five.
        "message.timeout.ms": 60_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
    }
    for item in spec["producer_config"]:
        key, _, value = item.partition("=")
        config[key] = value
    return config


def producer_worker(
    spec: WorkerSpec, index: int, counters: Counters, start: Event, out: Queue[WorkerMessage]
) -> None:
    """Send spec["records"] records (or spec["rate"] records/s); report the acknowledgements."""
    try:
        stats = ClientRequestStats()
        producer = Producer({**producer_config(spec), **stats.client_config(spec)})
        rng = random.Random(index)
        # Random upper-case letters, as Kafka's perf tool sends: compressible, not trivially.
        filler = bytes(rng.randrange(65, 91) for _ in range(spec["record_size"]))
        n = spec["records"]
        sampling = max(1, n // SAMPLED_LATENCIES_MAX)
        latencies_s = array("d")
        # Rate mode keeps every acknowledgement's time and latency: the figures are taken
        # over the steady part, which only the parent knows the bounds of.
        ack_ns = array("q")
        ack_latency_us = array("q")
        paced = bool(spec["rate"])
        state = {"delivered": 0, "failed": 0, "last_ack_ns": 0}
        first_error: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                state["failed"] += 1
                if not first_error:
                    first_error.append(str(err))
                return
            state["delivered"] += 1
            latency_s = msg.latency()
            if latency_s is None:  # a delivered record always has one
                return
            if paced:
                ack_ns.append(time.time_ns())
                ack_latency_us.append(int(latency_s * 1e6))
            elif state["delivered"] % sampling == 0:
                latencies_s.append(latency_s)

        produce = producer.produce
        poll = producer.poll
        topic = spec["topic"]
        out.put(("ready", index, None))
        start.wait()
        first_send_ns = time.time_ns()
        if spec["rate"]:
            sent = paced_send(spec, producer, filler, on_delivery, counters, index, state)
        else:
            for i in range(n):
                while True:
                    try:
                        produce(topic, filler, on_delivery=on_delivery)
                        break
                    except BufferError:
                        poll(0.01)
                if i % POLL_EVERY == 0:
                    poll(0)
                    counters[index] = state["delivered"]
            sent = n
        while producer.flush(0.25):
            counters[index] = state["delivered"]
        last_ack_ns = time.time_ns()
        counters[index] = state["delivered"]
        out.put(
            (
                "result",
                index,
                {
                    "sent": sent,
                    "delivered": state["delivered"],
                    "failed": state["failed"],
                    "first_error": first_error[0] if first_error else None,
                    "first_send_ns": first_send_ns,
                    "last_ack_ns": last_ack_ns,
                    "ack_latencies_ms": [s * 1000.0 for s in latencies_s],
                    "ack_ns": ack_ns,
                    "ack_latency_us": ack_latency_us,
                    "request_stats": stats.samples,
                },
            )
        )
    except BaseException:
        out.put(("error", index, traceback.format_exc()))


def paced_send(
    spec: WorkerSpec,
    producer: Producer,
    filler: bytes,
    on_delivery: DeliveryCallback,
    counters: Counters,
    index: int,
    state: dict[str, int],
) -> int:
    """Send spec["rate"] records/s for spec["seconds"] s, each value stamped with its send time."""
    rate = spec["rate"]
    tag = spec["tag"]
    topic = spec["topic"]
    body = filler[LATENCY_HEADER.size :]
    pack = LATENCY_HEADER.pack
    produce = producer.produce
    started = time.perf_counter()
    deadline = started + spec["seconds"]
    sent = 0
    while True:
        now = time.perf_counter()
        if now >= deadline:
            break
        due = int((now - started) * rate)
        while sent < due:
            try:
                produce(topic, pack(time.time_ns(), tag) + body, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        counters[index] = state["delivered"]
        # Batches of about a millisecond's worth of records: steady, not bursty.
        time.sleep(max(0.0, min(0.001, started + (sent + 1) / rate - time.perf_counter())))
    return sent


def consumer_worker(
    spec: WorkerSpec, index: int, counters: Counters, start: Event, out: Queue[WorkerMessage]
) -> None:
    """Read spec["partitions"] until the consumers together have spec["target"] records."""
    try:
        stats = ClientRequestStats()
        consumer = Consumer(
            {
                **stats.client_config(spec),
                "bootstrap.servers": spec["bootstrap"],
                # Required by the client; the bench assigns partitions and never commits.
                "group.id": f"raftka-bench-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 64 * MB,
                "max.partition.fetch.bytes": 16 * MB,
                "queued.max.messages.kbytes": 256 * 1024,
                # A 16 MB response of small records holds more than librdkafka's default
                # queued.min.messages (100,000): it would then back off fetching for
                # fetch.queue.backoff.ms (1 s) after every response, whatever the broker.
                "queued.min.messages": 10_000_000,
                **dict(item.partition("=")[::2] for item in spec["consumer_config"]),
            }
        )
        target = spec["target"]  # shared: total records all consumers should read; -1 unknown
        first = spec["first_counter"]
        last = first + spec["consumers"]
        latency_mode = bool(spec["rate"])
        tag = spec["tag"]
        unpack = LATENCY_HEADER.unpack_from
        send_ns = array("q")
        latency_us = array("q")
        records = 0
        total_bytes = 0
        errors: list[str] = []
        first_ns = last_ns = 0
        out.put(("ready", index, None))
        start.wait()
        # Assigned only now: librdkafka starts fetching at the assignment, and records it
        # fetched before the clock started would count as read in no time.
        start_ns = time.time_ns()
        # -2: from the beginning; the topic is new unless --topic was given.
        consumer.assign([TopicPartition(spec["topic"], p, -2) for p in spec["partitions"]])
        idle_since = time.monotonic()
        consume = consumer.consume
        while True:
            wanted = target.value
            if wanted >= 0 and sum(counters[first:last]) >= wanted:
                break
            if latency_mode:
                # consume() waits for a full batch or its timeout: that wait would be latency.
                first_message = consumer.poll(0.2)
                batch = [first_message, *consume(10_000, 0)] if first_message else []
            else:
                batch = consume(num_messages=10_000, timeout=0.2)
            now_ns = time.time_ns()
            if not batch:
                if wanted >= 0 and time.monotonic() - idle_since > spec["timeout_s"]:
                    break
                continue
            idle_since = time.monotonic()
            if not first_ns:
                first_ns = now_ns
            last_ns = now_ns
            bad = [m for m in batch if m.error() is not None]
            if bad and len(errors) < 5:
                errors.append(str(bad[0].error()))
            if not latency_mode:
                # Whole-batch counting: a Python statement per record would be the limit.
                records += len(batch) - len(bad)
                total_bytes += sum(map(len, batch))  # len(message) is its value's length
            else:
                for message in batch:
                    value = message.value()
                    if message.error() is not None or value is None:
                        continue
                    if len(value) < LATENCY_HEADER.size:
                        continue
                    sent_at, record_tag = unpack(value)
                    if record_tag != tag:
                        continue  # an older run's record in a reused --topic
                    send_ns.append(sent_at)
                    latency_us.append((now_ns - sent_at) // 1000)
                    records += 1
                    total_bytes += len(value)
            counters[index] = records
        consumer.close()
        out.put(
            (
                "result",
                index,
                {
                    "records": records,
                    "bytes": total_bytes,
                    "errors": errors,
                    "start_ns": start_ns,
                    "first_ns": first_ns,
                    "last_ns": last_ns,
                    "send_ns": send_ns,
                    "latency_us": latency_us,
                    "request_stats": stats.samples,
                },
            )
        )
    except BaseException:
        out.put(("error", index, traceback.format_exc()))


class WorkerGroup:
    """Producer and/or consumer processes started together, sampled once a second."""

    def __init__(self, quiet: bool, label: str, record_size: int) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.quiet = quiet
        self.label = label
        self.record_size = record_size
        self.roles: list[str] = []
        self.specs: list[WorkerSpec] = []
        self.mains: list[WorkerMain | None] = []
        # Total records all consumers should read; -1 while unknown.
        self.target: SharedCount = self.ctx.Value("q", -1, lock=False)

    def add(self, role: str, spec: WorkerSpec, main: WorkerMain | None = None) -> None:
        """A worker of `role` ("produce" or "consume"), run by `main` (default: the role's
        librdkafka worker); its counter counts records done in that role."""
        self.roles.append(role)
        self.specs.append(spec)
        self.mains.append(main)

    def run(
        self,
        on_producers_done: Callable[[list[Result]], None] | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> tuple[list[Result], list[dict[str, float]]]:
        """Run every worker to the end; (results by index, per-second timeline).
        `on_producers_done` is called with the producers' results once they all have one;
        `on_start` as the workers are told to start."""
        n = len(self.specs)
        counters: Counters = self.ctx.Array("q", n, lock=False)
        start = self.ctx.Event()
        out: Queue[WorkerMessage] = self.ctx.Queue()
        processes: list[BaseProcess] = []
        for index, (role, spec) in enumerate(zip(self.roles, self.specs, strict=True)):
            if role == "consume":
                spec["target"] = self.target
            target_fn = self.mains[index] or (
                producer_worker if role == "produce" else consumer_worker
            )
            worker = self.ctx.Process(
                target=run_as_child,
                args=(target_fn, spec, index, counters, start, out),
                daemon=True,
            )
            worker.start()
            processes.append(worker)
        results: list[Result | None] = [None] * n
        ready = 0
        timeline: list[dict[str, float]] = []
        try:
            while ready < n:
                kind, index, payload = self._get(out, processes, 120)
                if kind == "error":
                    raise SystemExit(
                        f"bench: {self.roles[index]} worker {index} failed:\n{payload}"
                    )
                ready += 1
            start.set()
            if on_start is not None:
                on_start()
            started = time.monotonic()
            next_tick = started + 1.0
            while any(r is None for r in results):
                try:
                    kind, index, payload = out.get(timeout=max(0.0, next_tick - time.monotonic()))
                except queue.Empty:
                    kind = "tick"
                if kind == "error":
                    raise SystemExit(
                        f"bench: {self.roles[index]} worker {index} failed:\n{payload}"
                    )
                if kind == "result" and isinstance(payload, dict):
                    results[index] = payload
                    if (
                        on_producers_done is not None
                        and self.roles[index] == "produce"
                        and all(
                            results[i] is not None
                            for i, role in enumerate(self.roles)
                            if role == "produce"
                        )
                    ):
                        on_producers_done([r for r in results if r is not None])
                        on_producers_done = None
                if time.monotonic() >= next_tick:
                    if not any(p.is_alive() for p in processes) and out.empty():
                        missing = [i for i, r in enumerate(results) if r is None]
                        raise SystemExit(f"bench: worker(s) {missing} exited without a result")
                    next_tick += 1.0
                    self._sample(counters, started, timeline, progress=True)
            # A phase shorter than a second still gets one point (a partial last second of a
            # longer phase would plot as a drop that is only the tail).
            if not timeline:
                self._sample(counters, started, timeline, progress=False)
        finally:
            for process in processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
        return [r for r in results if r is not None], timeline

    def _sample(
        self, counters: Counters, started: float, timeline: list[dict[str, float]], progress: bool
    ) -> None:
        """Append a point: records so far and rec/s since the previous point, per role."""
        now = time.monotonic() - started
        previous = timeline[-1] if timeline else {"t_s": 0.0}
        interval = max(now - previous["t_s"], 1e-9)
        point: dict[str, float] = {"t_s": now}
        for role in ("produce", "consume"):
            if role not in self.roles:
                continue
            total = sum(c for c, r in zip(counters, self.roles, strict=True) if r == role)
            point[f"{role}_records"] = total
            point[f"{role}_rec_s"] = (total - previous.get(f"{role}_records", 0)) / interval
        timeline.append(point)
        if progress:
            self._progress(point)

    def _get(
        self, out: Queue[WorkerMessage], processes: list[BaseProcess], timeout_s: float
    ) -> WorkerMessage:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return out.get(timeout=1.0)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    raise SystemExit("bench: every worker exited before it was ready") from None
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench: workers not ready after {timeout_s:.0f} s") from None

    def _progress(self, point: dict[str, float]) -> None:
        if self.quiet:
            return
        parts = []
        for role in ("produce", "consume"):
            if f"{role}_records" in point:
                rate = point[f"{role}_rec_s"]
                parts.append(
                    f"{role} {point[f'{role}_records']:,.0f} records, {rate:,.0f} rec/s, "
                    f"{rate * self.record_size / MB:.1f} MB/s"
                )
        print(f"[{self.label} {point['t_s']:3.0f}s] " + "; ".join(parts), file=sys.stderr)
