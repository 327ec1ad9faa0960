"""The many-connections run (`--connections N --rate R`) and the idle connections held open
beside any run (`--idle-connections N`): their figures over the steady part, and the
broker's CPU, RSS and request counts meanwhile."""

from __future__ import annotations

import argparse
import random
import socket
import time
from typing import Any

from confluent_kafka.admin import AdminClient

from raftka.broker.tools.bench_connections import (
    check_descriptors,
    connection_alive,
    connection_error_name,
    connections_worker,
    open_connections,
)
from raftka.broker.tools.bench_report import Result, latency_summary
from raftka.broker.tools.bench_requests import (
    SteadyWindow,
    broker_request_figures,
    process_lines,
    request_figures,
    request_lines,
    steady_broker_lines,
)
from raftka.broker.tools.bench_runs import ensure_topic, split
from raftka.broker.tools.bench_workers import WorkerGroup
from raftka.broker.tools.processes import split_host_port
from raftka.broker.tools.procfs import Pids, cpu_seconds_by_pid, status_kb_by_pid

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def partition_leaders(bootstrap: str, topic: str) -> dict[int, tuple[str, int]]:
    """{partition: (host, port) of its leader} from the cluster's metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic=topic, timeout=10)
    partitions = md.topics[topic].partitions
    brokers = md.brokers
    return {p: (str(brokers[m.leader].host), brokers[m.leader].port) for p, m in partitions.items()}


def connection_targets(
    leaders: dict[int, tuple[str, int]], connections: int
) -> list[tuple[int, str, int]]:
    """(partition, host, port) of each connection: connection i produces to partition
    i mod P, on that partition's leader."""
    partitions = sorted(leaders)
    return [
        (partitions[i % len(partitions)], *leaders[partitions[i % len(partitions)]])
        for i in range(connections)
    ]


def steady_requests_of(results: list[Result], steady_from_ns: int, duration_s: float) -> Result:
    """Answered requests' latency (of those sent in the steady part) and the answers per
    second that arrived within it, over every generator process."""
    steady_to_ns = steady_from_ns + int(duration_s * 1e9)
    latencies_ms: list[float] = []
    answered_in_window = 0
    for r in results:
        for sent_at, latency_us, answered_at in zip(
            r["send_ns"], r["latency_us"], r["answer_ns"], strict=True
        ):
            if sent_at >= steady_from_ns:
                latencies_ms.append(latency_us / 1000.0)
            if steady_from_ns <= answered_at < steady_to_ns:
                answered_in_window += 1
    return {
        "latency_ms": latency_summary(latencies_ms),
        "answered_per_s": answered_in_window / duration_s if duration_s else 0.0,
    }


def run_connections(
    args: argparse.Namespace,
    bootstrap: str,
    pids: Pids,
    topic: str,
    label: str,
    metrics: tuple[str, ...] = (),
) -> Result:
    """--connections N sending --rate R one-record Produce requests/s in total."""
    ensure_topic(bootstrap, topic, args.partitions, args.replication_factor)
    largest_share = -(-args.connections // args.producers)
    for problem in check_descriptors(args.connections, pids, largest_share):
        print(f"bench: LIMIT: {problem}")
    targets = connection_targets(partition_leaders(bootstrap, topic), args.connections)
    tag = random.getrandbits(63)
    processes = min(args.producers, args.connections)
    group = WorkerGroup(args.quiet, f"{label} connections", args.record_size)
    first = 0
    for share in split(args.connections, processes):
        spec = {
            "topic": topic,
            "acks": ACKS[args.acks],
            "record_size": args.record_size,
            "tag": tag,
            "rate": args.rate * share / args.connections,
            "seconds": args.warmup + args.duration,
            "warmup": args.warmup,
            "in_flight": args.connection_in_flight,
            "targets": targets[first : first + share],
        }
        group.add("produce", spec, connections_worker)
        first += share
    window = SteadyWindow(pids, metrics, args.warmup, args.duration)
    results, timeline = group.run(on_start=window.start)
    window.finish()
    acks_wanted = ACKS[args.acks] != 0
    start_ns = min(r["first_send_ns"] for r in results)
    steady = steady_requests_of(results, start_ns + int(args.warmup * 1e9), args.duration)
    sent = sum(r["sent"] for r in results)
    sent_per_s = sum(r["sent_steady"] for r in results) / args.duration
    answered = sum(r["answered"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for code, n in r["errors"].items():
            name = connection_error_name(code)
            errors[name] = errors.get(name, 0) + n
    skipped = sum(r["skipped_in_flight"] for r in results)
    lost = sum(r["lost"] for r in results)
    closed = sum(r["closed"] for r in results)
    broker = window.figures()
    if broker.get("complete") and broker["requests"] is not None and not args.compare:
        rates = {api: n / broker["seconds"] for api, n in broker["requests"].items()}
        requests = broker_request_figures(broker, rates)
    elif broker.get("complete"):
        answered_per_s = steady["answered_per_s"] if acks_wanted else sent_per_s
        rates = {"Produce": answered_per_s} if answered_per_s else {}
        requests = request_figures(
            rates,
            broker["seconds"],
            broker["cpu_s"],
            "generator",
            system_s=broker.get("system_s"),
        )
    else:
        requests = None
    lat = steady["latency_ms"]
    generator_busy = max(r["cpu_s"] / r["run_s"] for r in results if r["run_s"])
    lag_max_s = max(r["lag_max_s"] for r in results)
    print(f"-- {label}, {args.connections} connections, steady part:")
    print(
        f"{sent:,} Produce requests of one {args.record_size} B record sent at {args.rate:,}/s "
        f"target by {processes} process(es), {answered:,} acknowledged (acks={args.acks}); "
        + (
            f"requests/s achieved: {steady['answered_per_s']:,.0f} answered"
            if acks_wanted
            else "no answers with acks=0"
        )
        + f", {sent_per_s:,.0f} sent"
    )
    if acks_wanted:
        print(
            f"request latency p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, "
            f"p99.9 {lat['p99_9']:.2f} ms, max {lat['max']:.2f} ms ({lat['count']:,} requests)"
        )
    if errors or skipped or lost or closed:
        print(
            f"errors {errors or 'none'}; turns skipped with {args.connection_in_flight} "
            f"requests in flight: {skipped:,}; "
            f"unanswered: {lost:,}; connections closed by the broker: {closed:,}"
        )
    if requests is not None:
        for line in request_lines(requests):
            print(line)
    for line in steady_broker_lines(broker):
        print(line)
    # A generator near a full core, or sending late, measures itself as well as the broker.
    print(
        f"generator: busiest process {100 * generator_busy:.0f}% of a core, "
        f"at worst {1000 * lag_max_s:.1f} ms behind its schedule"
    )
    return {
        "target": label,
        "topic": topic,
        "ok": not errors and lost == 0 and closed == 0 and (answered == sent or not acks_wanted),
        "connections": {
            "connections": args.connections,
            "rate": args.rate,
            "processes": processes,
            "in_flight_max": args.connection_in_flight,
            "produce_version": results[0]["produce_version"],
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "sent": sent,
            "answered": answered,
            "errors": errors,
            "skipped_in_flight": skipped,
            "unanswered": lost,
            "closed_by_broker": closed,
            "generator_cpu_s": [r["cpu_s"] for r in results],
            "generator_lag_max_ms": 1000 * lag_max_s,
            "requests_per_s": steady["answered_per_s"],
            "sent_per_s": sent_per_s,
            "request_latency_ms": lat,
            "requests": requests,
            "steady_broker": broker,
            "tag": tag,
            "timeline": timeline,
        },
    }


class IdleConnections:
    """`count` connections to a broker that ask ApiVersions once and then stay silent, and
    the broker's RSS and CPU from when they are all open until `report()`."""

    def __init__(self, bootstrap: str, pids: Pids, count: int) -> None:
        self.address = split_host_port(bootstrap)
        self.pids = pids
        self.count = count
        self.sockets: list[socket.socket] = []
        self.rss_before_kb: dict[int, int | None] = {}
        self.cpu_open_s: dict[int, float] = {}
        self.opened_at = 0.0
        self.open_s = 0.0

    def open(self) -> None:
        """Open them all; SystemExit with the reason if a limit stops it."""
        for problem in check_descriptors(self.count, self.pids):
            print(f"bench: LIMIT: {problem}")
        self.rss_before_kb = status_kb_by_pid(self.pids, "VmRSS")
        started = time.monotonic()
        try:
            self.sockets, _ = open_connections([self.address] * self.count)
        except OSError as exc:
            raise SystemExit(f"bench: cannot open {self.count} idle connections: {exc}") from None
        self.open_s = time.monotonic() - started
        self.opened_at = time.monotonic()
        self.cpu_open_s = cpu_seconds_by_pid(self.pids)
        print(f"opened {self.count:,} idle connections in {self.open_s:.1f} s")

    def report(self, label: str, under_load: bool) -> Result:
        """Print and return the idle period's figures (CPU and RSS summed over the broker's
        processes, and each process's when several), then close the connections."""
        seconds = time.monotonic() - self.opened_at
        alive = sum(1 for sock in self.sockets if connection_alive(sock))
        figures: dict[str, Any] = {
            "connections": self.count,
            "still_open": alive,
            "open_s": self.open_s,
            "seconds": seconds,
            "under_load": under_load,
        }
        if self.pids:
            cpu_by_pid = {
                pid: cpu - self.cpu_open_s[pid]
                for pid, cpu in cpu_seconds_by_pid(self.pids).items()
            }
            rss_by_pid = {pid: kb or 0 for pid, kb in status_kb_by_pid(self.pids, "VmRSS").items()}
            cpu_s = sum(cpu_by_pid.values())
            rss_kb = sum(rss_by_pid.values())
            before = sum(kb or 0 for kb in self.rss_before_kb.values())
            figures |= {
                "cpu_s": cpu_s,
                "cpu_percent": 100.0 * cpu_s / seconds if seconds else 0.0,
                "rss_before_mb": before / 1024,
                "rss_mb": rss_kb / 1024,
                "kb_per_connection": (rss_kb - before) / self.count if self.count else 0.0,
            }
            if len(self.pids) > 1:
                figures["processes"] = [
                    {"pid": pid, "cpu_s": cpu_by_pid[pid], "rss_mb": rss_by_pid[pid] / 1024}
                    for pid in self.pids
                ]
            print(
                f"-- {label}, {self.count:,} idle connections ({alive:,} still open) for "
                f"{seconds:.1f} s{' beside the load' if under_load else ''}: broker "
                f"{figures['cpu_percent']:.1f}% of a core, RSS {figures['rss_mb']:.1f} MB "
                f"({figures['rss_before_mb']:.1f} MB before they opened, "
                f"{figures['kb_per_connection']:.1f} kB per connection)"
            )
            for line in process_lines(figures):
                print(line)
        else:
            print(
                f"-- {label}, {self.count:,} idle connections ({alive:,} still open) for "
                f"{seconds:.1f} s: broker pid unknown (--broker-pid) so no CPU or RSS"
            )
        for sock in self.sockets:
            sock.close()
        self.sockets = []
        return figures


def run_idle(
    args: argparse.Namespace,
    bootstrap: str,
    pids: Pids,
    topic: str,
    label: str,
    metrics: tuple[str, ...] = (),
) -> Result:
    """--idle-connections without a load: open them, wait --warmup, then measure --duration."""
    idle = IdleConnections(bootstrap, pids, args.idle_connections)
    idle.open()
    time.sleep(args.warmup)
    # The measured period starts after the warm-up: opening them is not idling.
    idle.opened_at = time.monotonic()
    idle.cpu_open_s = cpu_seconds_by_pid(pids)
    time.sleep(args.duration)
    figures = idle.report(label, under_load=False)
    return {
        "target": label,
        "topic": topic,
        "ok": figures["still_open"] == figures["connections"],
        "idle": figures,
    }
