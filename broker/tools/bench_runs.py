"""One bench run against one broker: its topic, the throughput phases (produce, then
consume) or the latency phase (both at once, paced), and the broker's CPU meanwhile."""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from raftka.broker.tools.bench_report import Result, latency_summary, percentile
from raftka.broker.tools.bench_requests import (
    SteadyWindow,
    request_lines,
    steady_broker_lines,
    steady_requests,
)
from raftka.broker.tools.bench_workers import MB, WorkerGroup, WorkerSpec
from raftka.broker.tools.procfs import (
    Pids,
    cpu_seconds,
    run_queue_wait_s,
    status_kb_by_pid,
    sum_kb,
)

GB = 1_000_000_000  # CPU per GB: bytes = records x record size, GB = 10^9 bytes


# -- broker process accounting -------------------------------------------------------------


class BrokerMeter:
    """CPU used by the broker since construction, summed over its processes (`pids`: one for
    a single broker, several for shards or local nodes); no-op without pids."""

    def __init__(self, pids: Pids) -> None:
        self.pids = pids
        self.start = {pid: cpu_seconds(pid) for pid in pids}
        self.start_wait = {pid: run_queue_wait_s(pid) for pid in pids}

    def report(self, label: str, data_bytes: int) -> dict[str, Any] | None:
        """Print and return CPU seconds (and per GB of `data_bytes`) summed over the processes,
        with a line per process when there are several; None without pids."""
        if not self.pids:
            return None
        try:
            now = {pid: cpu_seconds(pid) for pid in self.pids}
            waited = {pid: run_queue_wait_s(pid) - self.start_wait[pid] for pid in self.pids}
            peak_by_pid = status_kb_by_pid(self.pids, "VmHWM")
        except (FileNotFoundError, ProcessLookupError):
            print(f"broker ({label}): process {' or '.join(map(str, self.pids))} is gone")
            return None
        used = {
            pid: (now[pid][0] - self.start[pid][0], now[pid][1] - self.start[pid][1])
            for pid in self.pids
        }
        user = sum(u for u, _ in used.values())
        system = sum(s for _, s in used.values())
        total = user + system
        peak_kb = sum_kb(peak_by_pid)
        per_gb = total / (data_bytes / GB) if data_bytes else 0.0
        peak = f"{peak_kb / 1024:.1f} MB" if peak_kb is not None else "unknown"
        several = len(self.pids) > 1
        wait = sum(waited.values())
        print(
            f"broker ({label}): {total:.2f} s CPU ({user:.2f} user, {system:.2f} sys), "
            f"{per_gb:.2f} s/GB, peak RSS {peak}; main thread waited {wait:.2f} s for a core"
            + (f" (sums of {len(self.pids)} processes)" if several else "")
        )
        figures: dict[str, Any] = {
            "cpu_s": total,
            "user_s": user,
            "system_s": system,
            # Ready to run but not running (a raftka broker's event loop held back by load).
            "run_queue_wait_s": wait,
            "cpu_s_per_gb": per_gb,
            "peak_rss_mb": peak_kb / 1024 if peak_kb is not None else -1.0,
        }
        if several:
            figures["processes"] = [
                {
                    "pid": pid,
                    "cpu_s": sum(used[pid]),
                    "run_queue_wait_s": waited[pid],
                    "peak_rss_mb": kb / 1024 if (kb := peak_by_pid[pid]) is not None else -1.0,
                }
                for pid in self.pids
            ]
            for process in figures["processes"]:
                print(
                    f"  process {process['pid']}: {process['cpu_s']:.2f} s CPU, "
                    f"peak RSS {process['peak_rss_mb']:.1f} MB, main thread waited "
                    f"{process['run_queue_wait_s']:.2f} s for a core"
                )
        return figures


# -- topic ---------------------------------------------------------------------------------


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    """Create the topic unless it exists; return once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)]
    )
    try:
        futures[topic].result(timeout=30)
        print(
            f"created topic {topic} with {partitions} partition(s), "
            f"replication factor {replication_factor}"
        )
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        print(f"using existing topic {topic}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and md.partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise SystemExit(f"bench: topic {topic} has no leader for every partition after 30 s")


def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """The topic's partition ids; exits if the broker does not know the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise SystemExit(
            f"bench: topic {topic} not found on {bootstrap} ({md.error if md else 'missing'}); "
            "produce to it first or leave out --mode consume"
        )
    return sorted(md.partitions)


# -- one run -------------------------------------------------------------------------------


def split(total: int, parts: int) -> list[int]:
    """`total` in `parts` shares that differ by at most one, larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def base_spec(args: argparse.Namespace, bootstrap: str, topic: str) -> WorkerSpec:
    """What every worker of a run is given; roles add their share of the load."""
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "record_size": args.record_size,
        "acks": args.acks,
        "compression": args.compression,
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "producer_config": args.producer_config,
        "consumer_config": args.consumer_config,
        "timeout_s": args.timeout_s,
        "rate": 0,
        "tag": 0,
    }


def add_consumers(
    group: WorkerGroup, args: argparse.Namespace, spec: WorkerSpec, partitions: list[int]
) -> None:
    """--consumers consumers (at most one per partition), each reading every n-th partition."""
    consumers = min(args.consumers, len(partitions))
    first = len(group.specs)
    for i in range(consumers):
        group.add(
            "consume",
            {
                **spec,
                "partitions": partitions[i::consumers],
                "consumers": consumers,
                "first_counter": first,
            },
        )


def run_throughput(
    args: argparse.Namespace,
    bootstrap: str,
    pids: Pids,
    topic: str,
    label: str,
    metrics: tuple[str, ...] = (),
) -> Result:
    """--mode produce, consume or both, one after the other; printed like Kafka's perf tools."""
    result: Result = {"target": label, "topic": topic}
    spec = base_spec(args, bootstrap, topic)
    to_consume = args.num_records
    if args.mode in ("produce", "both"):
        ensure_topic(bootstrap, topic, args.partitions, args.replication_factor)
        group = WorkerGroup(args.quiet, f"{label} produce", args.record_size)
        for records in split(args.num_records, args.producers):
            group.add("produce", {**spec, "records": records})
        meter = BrokerMeter(pids)
        results, timeline = group.run()
        delivered = sum(r["delivered"] for r in results)
        failed = sum(r["failed"] for r in results)
        seconds = (
            max(r["last_ack_ns"] for r in results) - min(r["first_send_ns"] for r in results)
        ) / 1e9
        lat = latency_summary([x for r in results for x in r["ack_latencies_ms"]])
        rate = delivered / seconds if seconds else 0.0
        print(
            f"{delivered} records sent by {args.producers} producer(s), {rate:.1f} records/sec "
            f"({rate * args.record_size / MB:.2f} MB/sec), {lat['avg']:.2f} ms avg latency, "
            f"{lat['max']:.2f} ms max latency, {lat['p50']:.0f} ms 50th, {lat['p99']:.0f} ms 99th, "
            f"{lat['p99_9']:.0f} ms 99.9th."
        )
        errors = [r["first_error"] for r in results if r["first_error"]]
        if failed:
            print(f"{failed} records FAILED (first error: {errors[0]})")
        result["produce"] = {
            "records": delivered,
            "failed": failed,
            "seconds": seconds,
            "records_per_s": rate,
            "mb_per_s": rate * args.record_size / MB,
            "ack_latency_ms": lat,
            "broker": meter.report(f"{label} produce", delivered * args.record_size),
            "timeline": timeline,
        }
        to_consume = delivered
    if args.mode in ("consume", "both"):
        partitions = topic_partitions(bootstrap, topic)
        if args.consumers > len(partitions):
            print(
                f"bench: topic {topic} has {len(partitions)} partition(s); "
                f"using {len(partitions)} consumer(s), not {args.consumers}"
            )
        group = WorkerGroup(args.quiet, f"{label} consume", args.record_size)
        add_consumers(group, args, spec, partitions)
        group.target.value = to_consume
        meter = BrokerMeter(pids)
        results, timeline = group.run()
        records = sum(r["records"] for r in results)
        total_bytes = sum(r["bytes"] for r in results)
        # From the assignment (the first Fetch) to the last record, as kafka-consumer-perf-test
        # counts: from the first record, a read answered by one Fetch took no time at all.
        active = [r for r in results if r["first_ns"]]
        seconds = (
            (max(r["last_ns"] for r in active) - min(r["start_ns"] for r in active)) / 1e9
            if active
            else 0.0
        )
        rate = records / seconds if seconds else 0.0
        mb = total_bytes / MB
        print(
            f"{records} records consumed by {len(results)} consumer(s), {mb:.2f} MB, "
            f"{mb / seconds if seconds else 0.0:.2f} MB/sec, {rate:.1f} records/sec, "
            f"{seconds:.2f} s from the assignment to the last record."
        )
        errors = [e for r in results for e in r["errors"]]
        if errors:
            print(f"consume errors, first: {errors[0]}")
        if records < to_consume:
            print(f"consumed {records} of {to_consume} records: no data for {args.timeout_s:.0f} s")
        result["consume"] = {
            "records": records,
            "bytes": total_bytes,
            "seconds": seconds,
            "records_per_s": rate,
            "mb_per_s": mb / seconds if seconds else 0.0,
            "errors": len(errors),
            "broker": meter.report(f"{label} consume", records * args.record_size),
            "timeline": timeline,
        }
        result["ok"] = not errors and records == to_consume
    result.setdefault("ok", True)
    if "produce" in result:
        result["ok"] = result["ok"] and result["produce"]["failed"] == 0
    return result


def run_latency(
    args: argparse.Namespace,
    bootstrap: str,
    pids: Pids,
    topic: str,
    label: str,
    metrics: tuple[str, ...] = (),
) -> Result:
    """--rate records/s for --warmup + --duration s, consumed meanwhile; end-to-end latency,
    the producers' acknowledgement latency, and requests and broker CPU per request over the
    steady part (from the broker's metrics at `metrics`, or the clients' statistics)."""
    ensure_topic(bootstrap, topic, args.partitions, args.replication_factor)
    tag = random.getrandbits(63)
    seconds = args.warmup + args.duration
    # "rate" tells consumers to read send times; each producer gets its share below.
    spec = {
        **base_spec(args, bootstrap, topic),
        "rate": args.rate,
        "tag": tag,
        "client_stats": True,
    }
    group = WorkerGroup(args.quiet, f"{label} latency", args.record_size)
    add_consumers(group, args, spec, topic_partitions(bootstrap, topic))
    for rate in split(args.rate, args.producers):
        group.add("produce", {**spec, "records": 0, "rate": rate, "seconds": seconds})

    def producers_done(results: list[Result]) -> None:
        group.target.value = sum(r.get("delivered", 0) for r in results)

    meter = BrokerMeter(pids)
    window = SteadyWindow(pids, metrics, args.warmup, args.duration)
    results, timeline = group.run(on_producers_done=producers_done, on_start=window.start)
    window.finish()
    produced = [r for r in results if "delivered" in r]
    consumed = [r for r in results if "latency_us" in r]
    delivered = sum(r["delivered"] for r in produced)
    failed = sum(r["failed"] for r in produced)
    start_ns = min(r["first_send_ns"] for r in produced)
    steady_from = start_ns + int(args.warmup * 1e9)
    steady_ms: list[float] = []
    per_second: dict[int, list[float]] = {}
    for r in consumed:
        for sent_at, lat_us in zip(r["send_ns"], r["latency_us"], strict=True):
            ms = lat_us / 1000.0
            per_second.setdefault(int((sent_at - start_ns) // 1_000_000_000), []).append(ms)
            if sent_at >= steady_from:
                steady_ms.append(ms)
    received = sum(r["records"] for r in consumed)
    lat = latency_summary(steady_ms)
    achieved = lat["count"] / args.duration if args.duration else 0.0
    print(
        f"{delivered} records sent at {args.rate} rec/s target by {args.producers} producer(s), "
        f"{received} received by {len(consumed)} consumer(s); steady part "
        f"({args.duration:g} s after {args.warmup:g} s warm-up): {lat['count']} records, "
        f"{achieved:.0f} rec/s, end-to-end latency {lat['p50']:.2f} ms 50th, "
        f"{lat['p99']:.2f} ms 99th, {lat['p99_9']:.2f} ms 99.9th, {lat['max']:.2f} ms max."
    )
    if failed:
        errors = [r["first_error"] for r in produced if r["first_error"]]
        print(f"{failed} records FAILED (first error: {errors[0]})")
    acks = steady_acks(produced, steady_from, args.duration)
    steady = window.figures()
    requests = steady_requests(
        steady, [r["request_stats"] for r in results], prefer_client=bool(args.compare)
    )
    print_steady_block(label, args.rate, acks, steady, requests)
    latency_timeline = []
    for second in sorted(per_second):
        values = sorted(per_second[second])
        latency_timeline.append(
            {
                "t_s": second,
                "p50": percentile(values, 0.5),
                "p99": percentile(values, 0.99),
                "max": values[-1],
            }
        )
    return {
        "target": label,
        "topic": topic,
        "ok": failed == 0 and received == delivered,
        "latency": {
            "rate": args.rate,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "sent": delivered,
            "failed": failed,
            "received": received,
            "steady_records_per_s": achieved,
            "e2e_latency_ms": lat,
            "ack_latency_ms": acks["ack_latency_ms"],
            "acked_records_per_s": acks["acked_records_per_s"],
            "steady_broker": steady,
            "requests": requests,
            "broker": meter.report(f"{label} latency", delivered * args.record_size),
            "timeline": timeline,
            "latency_timeline": latency_timeline,
        },
    }


def steady_acks(produced: list[Result], steady_from_ns: int, duration_s: float) -> Result:
    """The producers' acknowledgement latency (produce() to delivery report) of the records
    sent in the steady part, and the records acknowledged per second within it."""
    steady_to_ns = steady_from_ns + int(duration_s * 1e9)
    latencies_ms: list[float] = []
    acked = 0
    for r in produced:
        for acked_at, latency_us in zip(r["ack_ns"], r["ack_latency_us"], strict=True):
            if acked_at - latency_us * 1000 >= steady_from_ns:
                latencies_ms.append(latency_us / 1000.0)
            if steady_from_ns <= acked_at < steady_to_ns:
                acked += 1
    return {
        "ack_latency_ms": latency_summary(latencies_ms),
        "acked_records_per_s": acked / duration_s if duration_s else 0.0,
    }


def print_steady_block(
    label: str, rate: int, acks: Result, steady: Result, requests: Result | None
) -> None:
    """One run's steady part in a few lines: rate kept, ack latency, requests, broker."""
    ack = acks["ack_latency_ms"]
    print(f"-- {label}, steady part:")
    print(
        f"rate kept: {acks['acked_records_per_s']:,.0f} acknowledged records/s of {rate:,} "
        f"sent; ack latency p50 {ack['p50']:.2f} ms, p99 {ack['p99']:.2f} ms, "
        f"p99.9 {ack['p99_9']:.2f} ms, max {ack['max']:.2f} ms ({ack['count']} records)"
    )
    if requests is not None:
        for line in request_lines(requests):
            print(line)
    else:
        print("requests/s: not counted (no broker metrics endpoint and no client statistics)")
    for line in steady_broker_lines(steady):
        print(line)
