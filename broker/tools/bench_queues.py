"""Queue benchmarks (`scripts/bench share ...` and `scripts/bench http ...`), each against
a broker it starts:

- `share`: ShareFetch throughput of a `priority` topic against a `fifo` one. The records
  are produced first (random priorities on the priority topic), then drained by N
  confluent-kafka ShareConsumer processes acknowledging every record; records/s of the
  drain, the broker's CPU seconds and its RSS (peak) are reported.
- `http`: the HTTP queue API under load from `wrk` (Debian's `wrk`, with a Lua script):
  C concurrent connections enqueueing one message per request, then dequeueing one per
  request with `ack=true`; requests/s and latency p50/p99 of each. The messages the
  dequeues acknowledged are counted from the queue's share-group state, not from wrk.

Speed is what this reports, never what a test asserts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from raftka.broker.tools.processes import BrokerProcess, free_port, run_as_child
from raftka.broker.tools.procfs import cpu_seconds_total, status_kb

Result = dict[str, Any]
#: DOQ's published figure: HTTP requests/s (enqueue and dequeue) with 100 k6 virtual users.
DOQ_REQUESTS_PER_S = 25_830
WRK_HINT = "wrk not found: install it (Debian: apt-get install -y wrk; scripts/setup does as root)"


def _broker(extra: dict[str, str]) -> tuple[BrokerProcess, str, str]:
    http = f"127.0.0.1:{free_port()}"
    config = {
        "metrics.listen": http,
        "share.auto.offset.reset": "earliest",
        "group.initial.rebalance.delay.ms": "0",
        "group.share.heartbeat.interval.ms": "500",
        **extra,
    }
    base_dir = tempfile.mkdtemp(prefix="raftka-bench-queues-")
    broker = BrokerProcess(config, base_dir=base_dir)
    broker.start()
    return broker, f"http://{http}", base_dir


def _sample(pid: int) -> tuple[float, int]:
    return cpu_seconds_total(pid), status_kb(pid, "VmHWM") or 0


def _load_average() -> float:
    return os.getloadavg()[0]


# -- share ---------------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, count: int, size: int, priorities: bool) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "1"}
    )
    value = b"x" * size
    rng = random.Random(7)
    for _ in range(count):
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("priority", str(rng.randrange(1000)).encode())] if priorities else None
        )
        while True:
            try:
                producer.produce(topic, value, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"bench: records of {topic} not delivered within 120 s")


def _drain(bootstrap: str, topic: str, group: str, done: Any, stop: Any) -> None:
    """A ShareConsumer acknowledging (implicitly) every record, counting them in `done`."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 500}
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            got = sum(1 for m in consumer.poll(0.5) if m.error() is None)
            if got:
                with done.get_lock():
                    done.value += got
    finally:
        consumer.close()


def run_share(args: argparse.Namespace) -> list[Result]:
    results = []
    for order in args.order:
        broker, _http, base_dir = _broker({})
        try:
            topic, group = f"bench-{order}", f"bench-{order}-workers"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            new = NewTopic(topic, 1, 1, config={"share.delivery.order": order})
            admin.create_topics([new])[topic].result(60)
            started = time.monotonic()
            _produce(broker.bootstrap, topic, args.num_records, args.record_size, order != "fifo")
            produced_s = time.monotonic() - started
            print(f"{order}: produced {args.num_records} records in {produced_s:.1f} s")
            done = multiprocessing.Value("q", 0)
            stop = multiprocessing.Event()
            cpu_before, _ = _sample(broker.pid)
            load_before = _load_average()
            started = time.monotonic()
            workers = [
                multiprocessing.Process(
                    target=run_as_child, args=(_drain, broker.bootstrap, topic, group, done, stop)
                )
                for _ in range(args.consumers)
            ]
            for w in workers:
                w.start()
            deadline = started + args.timeout
            while done.value < args.num_records and time.monotonic() < deadline:
                time.sleep(0.2)
            drained_s = time.monotonic() - started
            cpu_after, peak_kb = _sample(broker.pid)
            stop.set()
            for w in workers:
                w.join(30)
            result = {
                "order": order,
                "records": args.num_records,
                "delivered": int(done.value),
                "consumers": args.consumers,
                "seconds": round(drained_s, 2),
                "records_per_s": round(done.value / drained_s) if drained_s else 0,
                "broker_cpu_s": round(cpu_after - cpu_before, 2),
                "broker_rss_peak_mib": round(peak_kb / 1024, 1),
                "load_average_1m": [round(load_before, 2), round(_load_average(), 2)],
                "ok": done.value >= args.num_records,
            }
            print(
                f"{order}: drained {result['delivered']} of {args.num_records} with "
                f"{args.consumers} ShareConsumer(s) in {drained_s:.1f} s: "
                f"{result['records_per_s']} records/s, broker CPU {result['broker_cpu_s']} s, "
                f"RSS peak {result['broker_rss_peak_mib']} MiB, load average "
                f"{result['load_average_1m'][0]} -> {result['load_average_1m'][1]}"
            )
            results.append(result)
            broker.stop()
        finally:
            if broker.is_running():
                broker.kill()
            shutil.rmtree(base_dir, ignore_errors=True)
    return results


# -- http ----------------------------------------------------------------------------------

_ENQUEUE_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil,
    '{"value":"message ' .. n .. '","priority":' .. (n % 100) .. '}')
end
"""
_DEQUEUE_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"max":1,"ack":true}'
"""
_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS_MS[unit]


def parse_wrk(output: str) -> Result:
    """Requests/s, request count, non-2xx answers and latency p50/p99 (ms) of `wrk --latency`."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    if rate is None or total is None or p50 is None or p99 is None:
        raise RuntimeError(f"bench: wrk's output not understood:\n{output}")
    return {
        "requests_per_s": float(rate.group(1)),
        "requests": int(total.group(1)),
        "non_2xx": int(bad.group(1)) if bad else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
        "latency_p50_ms": _ms(p50.group(1)),
        "latency_p99_ms": _ms(p99.group(1)),
    }


def _wrk(wrk: str, url: str, script: str, args: argparse.Namespace, scratch: Path) -> Result:
    path = scratch / "script.lua"
    path.write_text(script)
    command = [
        wrk,
        f"-t{args.threads}",
        f"-c{args.clients}",
        f"-d{args.duration}s",
        "--latency",
        "-s",
        str(path),
        url,
    ]
    load_before = _load_average()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.duration + 120)
    if done.returncode != 0:
        raise RuntimeError(f"bench: {' '.join(command)} exited {done.returncode}: {done.stderr}")
    result = parse_wrk(done.stdout)
    result["command"] = " ".join(command[:-3] + ["-s", path.name, url])
    result["load_average_1m"] = [round(load_before, 2), round(_load_average(), 2)]
    return result


def _json(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def run_http(args: argparse.Namespace) -> list[Result]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit(WRK_HINT)
    broker, http, base_dir = _broker({})
    scratch = Path(base_dir)
    try:
        queue = "bench-http"
        _json("PUT", f"{http}/queues/{queue}", {"order": args.http_order})
        pid = broker.pid
        results = []
        for phase, path, script in (
            ("enqueue", f"/queues/{queue}/messages", _ENQUEUE_LUA),
            ("dequeue+ack", f"/queues/{queue}/dequeue", _DEQUEUE_LUA),
        ):
            cpu_before, _ = _sample(pid)
            result = _wrk(wrk, http + path, script, args, scratch)
            cpu_after, peak_kb = _sample(pid)
            result |= {
                "phase": phase,
                "broker_cpu_s": round(cpu_after - cpu_before, 2),
                "broker_rss_peak_mib": round(peak_kb / 1024, 1),
            }
            # The share group's view (none before its first dequeue).
            state = _json("GET", f"{http}/queues/{queue}/state")["partitions"][0]
            result["queue_after"] = {
                k: state[k]
                for k in ("log_end_offset", "lag", "acknowledged", "start_offset")
                if k in state
            }
            print(
                f"{phase}: {result['requests_per_s']:.0f} requests/s ({result['requests']} in "
                f"{args.duration} s, {result['non_2xx']} non-2xx), latency p50 "
                f"{result['latency_p50_ms']:.2f} ms p99 {result['latency_p99_ms']:.2f} ms, "
                f"broker CPU {result['broker_cpu_s']} s, RSS peak "
                f"{result['broker_rss_peak_mib']} MiB, load average "
                f"{result['load_average_1m'][0]} -> {result['load_average_1m'][1]}; "
                f"queue after: {result['queue_after']}"
            )
            results.append(result)
        # Messages the dequeues took: those done past the start plus those below it.
        after = results[-1]["queue_after"]
        results[-1]["messages_dequeued"] = after["start_offset"] + after["acknowledged"]
        print(
            f"dequeue+ack took {results[-1]['messages_dequeued']} messages; DOQ publishes "
            f"{DOQ_REQUESTS_PER_S} requests/s with 100 virtual users on its own machine"
        )
        broker.stop()
        return results
    finally:
        if broker.is_running():
            broker.kill()
        shutil.rmtree(base_dir, ignore_errors=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    runs = parser.add_subparsers(dest="bench", required=True)
    share = runs.add_parser("share", help="ShareFetch throughput: priority against fifo")
    share.add_argument("--order", action="append", choices=("fifo", "priority", "fair"))
    share.add_argument("--num-records", type=int, default=1_000_000)
    share.add_argument("--record-size", type=int, default=100)
    share.add_argument("--consumers", type=int, default=2, help="ShareConsumer processes")
    share.add_argument("--timeout", type=float, default=1800, help="seconds a drain may take")
    http = runs.add_parser("http", help="HTTP enqueue and dequeue+ack rates under wrk")
    http.add_argument("--clients", type=int, default=100, help="concurrent connections")
    http.add_argument("--threads", type=int, default=2, help="wrk threads")
    http.add_argument("--duration", type=int, default=10, help="seconds of each phase")
    http.add_argument("--http-order", default="priority", choices=("fifo", "priority", "fair"))
    for sub in (share, http):
        sub.add_argument("--json", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.bench == "share" and not args.order:
        args.order = ["fifo", "priority"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print(time.strftime("bench: %Y-%m-%d %H:%M:%S UTC", time.gmtime()), f"on {os.cpu_count()} CPUs")
    results = run_share(args) if args.bench == "share" else run_http(args)
    if args.json is not None:
        args.json.write_text(json.dumps({"bench": args.bench, "results": results}, indent=2))
    return 0 if all(r.get("ok", True) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
