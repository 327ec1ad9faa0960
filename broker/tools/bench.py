"""Producer and consumer throughput, and end-to-end latency, against a Kafka-compatible broker.

Figures are printed like Kafka's kafka-producer-perf-test / kafka-consumer-perf-test, followed
by the broker's CPU seconds (user+system, from /proc/PID/stat) and CPU seconds per GB.

Throughput (default): --producers N processes (multiprocessing, spawn; one confluent-kafka
client each) share --num-records, then --consumers N processes read them back, each from its
own share of the partitions (explicit assignment, no group rebalance). Rates are total records
over the wall time from the first send to the last acknowledgement, and from the first record
received to the last.

Latency (--rate R): the producers send R records/s in total, paced in small batches, for
--warmup + --duration seconds; every value starts with its send time (time.time_ns), and the
consumers, running at the same time, report receive minus send time over the steady part
(records sent after the warm-up). Over that steady part it also reports the producers'
acknowledgement latency (produce() to delivery report), the acknowledged records/s (the rate
kept), requests/s by API and the broker's CPU per request: counted by the broker's metrics
endpoint (--start-broker opens one; --broker-metrics for another raftka) or, without one and
always with --compare, by the clients' librdkafka statistics.

Many connections (--connections N --rate R): N raw TCP connections, spread over --producers
generator processes, send R one-record Produce requests/s in total; request latency (send to
answer), requests/s achieved and errors over the steady part. --idle-connections N holds N
connections that only asked ApiVersions, beside any load or alone, and reports the broker's
RSS and CPU meanwhile.

Waiting fetches (--long-polls N): N raw connections each keep one Fetch of an empty partition
waiting up to --fetch-wait-ms and send the next as each is answered, as idle consumers do;
the fetches answered per second and the broker's CPU per fetch, share of a core and RSS.

--compare BOOTSTRAP runs the same load against another Kafka-compatible broker, alternating
with raftka for --repeat rounds, and prints medians and raftka/other ratios.

The client is Python: one producer process tops out around 0.5-1.5 M records/s of 100 bytes.
Use --producers/--consumers to take the client out of the measurement, and the broker's CPU
seconds per GB to see how much the broker itself spent.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from raftka.broker.tools.bench_browse import browse_report
from raftka.broker.tools.bench_conn_runs import IdleConnections, run_connections, run_idle
from raftka.broker.tools.bench_long_polls import run_long_polls
from raftka.broker.tools.bench_report import Result, medians, plot, print_summary
from raftka.broker.tools.bench_requests import metrics_url
from raftka.broker.tools.bench_runs import run_latency, run_throughput
from raftka.broker.tools.bench_workers import LATENCY_HEADER
from raftka.broker.tools.processes import BrokerProcess, free_port
from raftka.broker.tools.procfs import Pids


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def pid_list(text: str) -> list[int]:
    """argparse type: one pid or a comma-separated list of them."""
    pids = []
    for item in text.split(","):
        try:
            pid = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a pid") from None
        if pid < 1:
            raise argparse.ArgumentTypeError(f"{item} is not a pid")
        pids.append(pid)
    return pids


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's options from `argv` (default: the command line), checked together."""
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", default="127.0.0.1:9092", help="broker to measure")
    where.add_argument(
        "--start-broker",
        action="store_true",
        help="start a raftka broker on a free port with a temporary data dir, and stop it after",
    )
    parser.add_argument(
        "--broker-pid",
        type=pid_list,
        action="extend",
        default=[],
        metavar="PID[,PID...]",
        help="pid of an external broker, to report its CPU and memory; repeatable (or a comma "
        "list) for a broker of several processes (--shards N, local cluster nodes): figures "
        "are summed over them, with a line per process",
    )
    parser.add_argument(
        "--broker-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="raftka's metrics endpoint of an external broker (HOST:PORT or URL), to count "
        "its requests by API; repeatable, counts summed (one per shard or node); "
        "--start-broker opens one on a free port",
    )
    parser.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--config for the broker started by --start-broker (repeatable)",
    )
    parser.add_argument("--mode", choices=("produce", "consume", "both"), default="both")
    parser.add_argument("--topic", help="topic (default: a new raftka-bench-<id> topic per run)")
    parser.add_argument(
        "--partitions",
        type=positive_int,
        help="partitions of a new topic (default: --consumers, so each consumer has one)",
    )
    parser.add_argument(
        "--replication-factor", type=int, default=1, help="replication factor of a new topic"
    )
    parser.add_argument("--num-records", type=positive_int, default=1_000_000)
    parser.add_argument("--record-size", type=positive_int, default=100, help="value bytes")
    parser.add_argument("--acks", default="all", choices=("0", "1", "all", "-1"))
    parser.add_argument(
        "--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd")
    )
    parser.add_argument("--linger-ms", type=float, default=5)
    parser.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch bytes")
    parser.add_argument(
        "--timeout-s", type=float, default=10, help="consumers give up after this long idle"
    )
    parser.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer property (repeatable)",
    )
    parser.add_argument(
        "--consumer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer property (repeatable)",
    )
    parser.add_argument(
        "--producers", type=positive_int, default=1, help="producer processes sharing the load"
    )
    parser.add_argument(
        "--consumers", type=positive_int, default=1, help="consumer processes sharing partitions"
    )
    parser.add_argument(
        "--rate",
        type=positive_int,
        help="latency mode: send this many records/s in total, measure end-to-end latency",
    )
    parser.add_argument(
        "--connections",
        type=positive_int,
        metavar="N",
        help="many-connections load: N raw connections sending --rate one-record Produce "
        "requests/s in total (needs --rate; --producers generator processes share them)",
    )
    parser.add_argument(
        "--connection-in-flight",
        type=positive_int,
        default=5,
        metavar="K",
        help="--connections: requests a connection may have unanswered; at K it skips its "
        "turn (1: each connection waits for an answer before it sends again)",
    )
    parser.add_argument(
        "--idle-connections",
        type=positive_int,
        metavar="N",
        help="hold N connections that only ask ApiVersions, beside the load (or alone, with "
        "neither --rate nor --connections), and report the broker's RSS and CPU meanwhile",
    )
    parser.add_argument(
        "--long-polls",
        type=positive_int,
        metavar="N",
        help="N connections each keeping one Fetch of an empty partition waiting (a new topic), "
        "the next sent as each is answered: the broker's CPU per empty fetch and its RSS",
    )
    parser.add_argument(
        "--fetch-wait-ms",
        type=positive_int,
        default=500,
        metavar="MS",
        help="--long-polls: each Fetch's max_wait_ms (librdkafka's fetch.wait.max.ms default)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=30,
        help="latency, connections and idle modes: seconds measured after warm-up",
    )
    parser.add_argument(
        "--warmup", type=float, default=2, help="latency mode: first seconds left out of figures"
    )
    parser.add_argument("--repeat", type=positive_int, default=1, help="runs; medians printed")
    parser.add_argument(
        "--compare",
        metavar="BOOTSTRAP",
        help="another Kafka-compatible broker: run the same load there, alternating with raftka",
    )
    parser.add_argument("--compare-pid", type=int, help="pid of the --compare broker, for CPU")
    parser.add_argument("--json", type=Path, help="write results as JSON to this file")
    parser.add_argument(
        "--plot", type=Path, help="PNG of throughput (and latency) over time (default: --json .png)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-second progress on stderr")
    parser.add_argument(
        "--browse",
        action="store_true",
        help="after producing, time the web console's pages of the topic's partition 0 (newest, "
        "by offset at its start, middle and end, by timestamp); needs --console, or "
        "--start-broker, which opens one",
    )
    parser.add_argument("--console", metavar="HOST:PORT", help="console.listen of the broker")
    args = parser.parse_args(argv)
    if args.browse and not (args.console or args.start_broker):
        parser.error("--browse needs --console HOST:PORT (the broker's console.listen)")
    if args.browse and (args.mode == "consume" or args.rate or args.connections):
        parser.error("--browse follows a produce run: use --mode produce or both")
    if args.partitions is None:
        args.partitions = args.consumers
    if args.connections is not None:
        if args.rate is None:
            parser.error("--connections N needs --rate R (requests/s over all N connections)")
        if args.mode != "both":
            parser.error("--connections only produces; leave out --mode")
    if args.rate is not None:
        if args.record_size < LATENCY_HEADER.size:
            parser.error(
                f"--rate stamps each value with {LATENCY_HEADER.size} bytes of send time and "
                f"run tag: use --record-size {LATENCY_HEADER.size} or more"
            )
        if args.rate < args.producers:
            parser.error(
                f"--rate {args.rate} is split among {args.producers} producers: "
                "give at least one record/s each"
            )
        if args.duration <= 0 or args.warmup < 0:
            parser.error("--duration must be > 0 and --warmup >= 0")
        if args.mode != "both":
            parser.error("--rate produces and consumes at once; leave out --mode")
    if args.long_polls is not None and (args.rate or args.connections or args.mode != "both"):
        parser.error("--long-polls is a load of its own: leave out --rate, --connections, --mode")
    if args.idle_connections is not None and args.rate is None and args.mode != "both":
        parser.error("--idle-connections alone runs no load; leave out --mode")
    if args.topic is None and args.mode == "consume":
        parser.error("--mode consume needs --topic (a topic that already holds records)")
    if len(set(args.broker_pid)) < len(args.broker_pid):
        parser.error("--broker-pid names a process twice; its CPU would be counted twice")
    args.broker_pid = tuple(args.broker_pid)
    if len(set(args.broker_metrics)) < len(args.broker_metrics):
        parser.error("--broker-metrics names an endpoint twice; its requests would count twice")
    if args.compare_pid and not args.compare:
        parser.error("--compare-pid is the pid of the --compare broker; give --compare too")
    if args.plot is None and args.json is not None:
        args.plot = args.json.with_suffix(".png")
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"{option} {path}: directory {path.resolve().parent} does not exist")
    return args


def run_topic(args: argparse.Namespace, label: str, round_no: int, runs_total: int) -> str:
    """The topic of one run: --topic itself for one run (or --mode consume), else a new one."""
    topic: str | None = args.topic
    if args.mode == "consume" and topic is not None:
        return topic
    if topic is not None and runs_total == 1:
        return topic
    base = topic or "raftka-bench"
    return f"{base}-{label}-{round_no}-{uuid.uuid4().hex[:8]}"


def pick_run(args: argparse.Namespace) -> Callable[..., Result]:
    """The run of the options: many connections, latency, idle connections or throughput."""
    if args.connections:
        return run_connections
    if args.long_polls:
        return run_long_polls
    if args.rate:
        return run_latency
    if args.idle_connections:
        return run_idle
    return run_throughput


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 0 if every run counted every record, 1 otherwise, 130 on Ctrl-C."""
    args = parse_args(argv)
    broker: BrokerProcess | None = None
    runs: list[Result] = []
    metrics: tuple[str, ...]
    try:
        if args.start_broker:
            config = dict(item.partition("=")[::2] for item in args.broker_config)
            config.setdefault("metrics.listen", f"127.0.0.1:{free_port()}")
            if args.browse:
                args.console = config.setdefault("console.listen", f"127.0.0.1:{free_port()}")
            broker_dir = tempfile.mkdtemp(prefix="raftka-bench-")
            broker = BrokerProcess(config, base_dir=broker_dir)
            broker.start()
            bootstrap, pids = broker.bootstrap, (broker.pid,)
            metrics = (metrics_url(config["metrics.listen"]),) if config["metrics.listen"] else ()
            print(
                f"started broker on {bootstrap} (pid {broker.pid}, data {broker.data_dir}, "
                f"metrics {metrics[0] if metrics else None})"
            )
        else:
            bootstrap, pids = args.bootstrap, args.broker_pid
            metrics = tuple(metrics_url(url) for url in args.broker_metrics)
        targets: list[tuple[str, str, Pids, tuple[str, ...]]] = [
            ("raftka", bootstrap, pids, metrics)
        ]
        if args.compare:
            compare_pids = (args.compare_pid,) if args.compare_pid else ()
            targets.append(("other", args.compare, compare_pids, ()))
        if args.connections:
            load = (
                f"{args.connections} connections at {args.rate} requests/s in total for "
                f"{args.warmup:g}+{args.duration:g} s"
            )
        elif args.rate:
            load = f"latency at {args.rate} rec/s for {args.warmup:g}+{args.duration:g} s"
        elif args.long_polls:
            load = (
                f"{args.long_polls} waiting fetches ({args.fetch_wait_ms} ms) for "
                f"{args.warmup:g}+{args.duration:g} s"
            )
        elif args.idle_connections:
            load = (
                f"{args.idle_connections} idle connections for {args.warmup:g}+{args.duration:g} s"
            )
        else:
            load = f"{args.mode} {args.num_records} records"
        partitions = "" if args.mode == "consume" else f"{args.partitions} partition(s), "
        if (args.idle_connections and not args.rate) or args.long_polls:
            print(f"bench: {load}, {args.repeat} run(s) on {len(targets)} broker(s)")
        elif args.connections:
            # raw connections: no librdkafka client, so none of its settings apply
            print(
                f"bench: {load}, {args.record_size} B records, {args.producers} generator "
                f"process(es), {partitions}acks={args.acks}, {args.repeat} run(s) on "
                f"{len(targets)} broker(s)"
            )
        else:
            print(
                f"bench: {load} of {args.record_size} B, {args.producers} producer(s), "
                f"{args.consumers} consumer(s), {partitions}acks={args.acks}, "
                f"compression={args.compression}, linger.ms={args.linger_ms}, "
                f"batch.size={args.batch_size}, {args.repeat} run(s) on {len(targets)} broker(s)"
            )
        runs_total = args.repeat * len(targets)
        for round_no in range(1, args.repeat + 1):
            for label, target_bootstrap, target_pid, target_metrics in targets:
                if runs_total > 1:
                    print(f"\n-- {label} ({target_bootstrap}), run {round_no} of {args.repeat}")
                topic = run_topic(args, label, round_no, runs_total)
                run = pick_run(args)
                idle = None
                if args.idle_connections and run is not run_idle:
                    idle = IdleConnections(target_bootstrap, target_pid, args.idle_connections)
                    idle.open()
                result = run(args, target_bootstrap, target_pid, topic, label, target_metrics)
                if idle is not None:
                    result["idle"] = idle.report(label, under_load=True)
                if args.browse and label == "raftka":
                    per_partition = args.num_records // args.partitions
                    result["browse"] = browse_report(args.console, topic, per_partition)
                result["run"] = round_no
                result["bootstrap"] = target_bootstrap
                runs.append(result)
        summary: Result = {
            "medians": {
                label: medians([r for r in runs if r["target"] == label]) for label, *_ in targets
            }
        }
        if args.compare:
            ours, theirs = summary["medians"]["raftka"], summary["medians"]["other"]
            # null where the other broker's figure is 0 (e.g. CPU below one clock tick)
            summary["ratio"] = {
                name: ours[name] / theirs[name] if theirs[name] else None
                for name in ours
                if name in theirs
            }
        if runs_total > 1:
            print_summary(summary, args.repeat)
        if args.json is not None:
            document = {
                "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "runs": runs,
                "summary": summary,
            }
            args.json.write_text(json.dumps(document, indent=2) + "\n")
            print(f"json: {args.json}")
        if args.plot is not None:
            plot(runs, args.plot)
        if broker is not None:
            broker.stop()
            shutil.rmtree(broker_dir, ignore_errors=True)
            broker = None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if broker is not None:
            broker.kill()
            print(f"broker log: {broker.log_path}", file=sys.stderr)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
