"""One broker process against two on the same machine: does a second core help?

Starts, on free ports with temporary data dirs:
  single  one raftka broker (a cluster of one)
  shards  a 2-node raftka cluster (two processes, `--node-id 1/2 --peers ...`)
and runs the same `scripts/bench` load against each in turn, interleaved round by round so
that noise from other work on the machine falls on every configuration alike:
  single  a 4-partition topic on the one broker
  rf1     a 4-partition topic with replication factor 1 on the 2-node cluster: placement
          spreads the leaders, so each process leads two partitions and nothing is replicated
  rf2     the same with replication factor 2: each process leads two partitions and follows
          the other two (every batch is written by both processes)
Each run is `scripts/bench --mode produce` (2 producer processes) into a new topic, then
`scripts/bench --mode consume` (2 consumer processes) of that topic. For every broker process
the CPU seconds (user+system from /proc/PID/stat) are read before and after each phase.
Prints every run, then medians per configuration and record size; --json keeps them all.

    scripts/shards-experiment                       # 100 B and 1 KB, 3 rounds
    scripts/shards-experiment --sizes 100 --repeat 5 --json shards.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from raftka.broker.tools.processes import BrokerProcess, ClusterProcess
from raftka.broker.tools.procfs import cpu_seconds_total

# scripts/bench, run by the interpreter running this experiment.
BENCH = (sys.executable, "-m", "raftka.broker.tools.bench")
SENT = re.compile(r"^(\d+) records sent by .*?, ([\d.]+) records/sec", re.M)
CONSUMED = re.compile(r"^(\d+) records consumed by .*?, ([\d.]+) records/sec", re.M)
CONFIGS = ("single", "rf1", "rf2")
IDLE_S = 10.0  # seconds over which idle CPU is measured before the first run

# A run's (or a median row's) figures as --json writes them: JSON of mixed depth (hence Any).
Run = dict[str, Any]


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader node id, from Metadata."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=10)
    return {p: meta.leader for p, meta in sorted(md.topics[topic].partitions.items())}


def bench(argv: list[str], pids: list[int], pattern: re.Pattern[str]) -> Run:
    """Run scripts/bench; records, rec/s, and CPU seconds of each broker pid meanwhile."""
    before = [cpu_seconds_total(pid) for pid in pids]
    load_1m = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run([*BENCH, *argv], capture_output=True, text=True, timeout=900, check=False)
    cpu = [
        round(cpu_seconds_total(pid) - start, 2) for pid, start in zip(pids, before, strict=True)
    ]
    match = pattern.search(done.stdout)
    # bench exits 1 when consumers read a different count (duplicates after a producer retry
    # are legal without idempotence); the caller reports it, the figures still stand.
    if done.returncode not in (0, 1) or match is None:
        sys.exit(
            f"shards-experiment: scripts/bench {' '.join(argv)} failed "
            f"(exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return {
        "records": int(match.group(1)),
        "records_per_s": float(match.group(2)),
        "broker_cpu_s": cpu,
        "loadavg_1m_before": load_1m,
        "bench_wall_s": round(time.monotonic() - started, 2),
        "bench_exit": done.returncode,
    }


def one_run(
    args: argparse.Namespace, config: str, size: int, bootstrap: str, pids: list[int]
) -> Run:
    """One configuration at one record size: produce into a new topic, then consume it."""
    records = args.records_100 if size <= 100 else args.records_1k
    rf = 2 if config == "rf2" else 1
    topic = f"shards-{config}-{size}-{uuid.uuid4().hex[:8]}"
    common = ["--bootstrap", bootstrap, "--topic", topic, "--quiet"]
    common += ["--num-records", str(records), "--record-size", str(size)]
    produce = bench(
        [*common, "--mode", "produce", "--producers", "2", "--partitions", "4"]
        + ["--replication-factor", str(rf), "--acks", args.acks],
        pids,
        SENT,
    )
    consume = bench([*common, "--mode", "consume", "--consumers", "2"], pids, CONSUMED)
    if consume["records"] != produce["records"]:
        print(
            f"shards-experiment: {topic}: {produce['records']} records acknowledged, "
            f"{consume['records']} consumed (more: a producer retried batches a former leader "
            "had written; fewer: acknowledged records missing, possible with acks=1 after a "
            "leader change)",
            flush=True,
        )
    return {
        "config": config,
        "record_size": size,
        "records": records,
        "topic": topic,
        "leaders": leaders(bootstrap, topic),
        "produce": produce,
        "consume": consume,
    }


def cpus(seconds: list[float]) -> str:
    """CPU seconds of each broker process, joined with '+'."""
    return "+".join(f"{x:.2f}" for x in seconds)


def show(run: Run) -> None:
    """One line per run: rates, each broker's CPU seconds, the load before, the leaders."""
    p, c = run["produce"], run["consume"]
    print(
        f"{run['config']:<6} {run['record_size']:>5} B  produce {p['records_per_s']:>11,.0f} rec/s "
        f"CPU {cpus(p['broker_cpu_s']):<11}  "
        f"consume {c['records_per_s']:>11,.0f} rec/s "
        f"CPU {cpus(c['broker_cpu_s']):<11}  "
        f"load {p['loadavg_1m_before']:.1f}  leaders {run['leaders']}",
        flush=True,
    )


def summarize(runs: list[Run]) -> list[Run]:
    """Medians per configuration and record size (rates, and CPU seconds per broker)."""
    rows = []
    for size in sorted({r["record_size"] for r in runs}):
        for config in CONFIGS:
            mine = [r for r in runs if r["config"] == config and r["record_size"] == size]
            if not mine:
                continue
            row: Run = {"config": config, "record_size": size, "runs": len(mine)}
            for phase in ("produce", "consume"):
                rates = [r[phase]["records_per_s"] for r in mine]
                row[f"{phase}_rec_s"] = statistics.median(rates)
                row[f"{phase}_rec_s_all"] = rates
                per_pid = zip(*(r[phase]["broker_cpu_s"] for r in mine), strict=True)
                row[f"{phase}_cpu_s"] = [statistics.median(xs) for xs in per_pid]
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the experiment; 0 when it ran to the end."""
    parser = argparse.ArgumentParser(
        prog="shards-experiment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default="100,1024", help="record sizes, comma-separated")
    parser.add_argument("--records-100", type=int, default=1_000_000, help="records at <=100 B")
    parser.add_argument("--records-1k", type=int, default=300_000, help="records above 100 B")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians over them)")
    parser.add_argument("--acks", default="1", choices=("0", "1", "all", "-1"))
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="subset of " + ",".join(CONFIGS)
    )
    parser.add_argument("--json", type=Path, help="write every run and the medians here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = args.configs.split(",")
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"--configs: unknown {sorted(unknown)}; choose from {', '.join(CONFIGS)}")

    base = Path(tempfile.mkdtemp(prefix="raftka-shards-"))
    single = BrokerProcess(base_dir=base / "single")
    cluster = ClusterProcess(2, base_dir=base / "cluster")
    runs: list[Run] = []
    idle: list[float] = []
    try:
        single.start()
        cluster.start()
        pids = {
            "single": [single.pid],
            "rf1": [n.pid for n in cluster.nodes],
            "rf2": [n.pid for n in cluster.nodes],
        }
        bootstraps = {
            "single": single.bootstrap,
            "rf1": cluster.bootstrap,
            "rf2": cluster.bootstrap,
        }
        print(
            f"single broker pid {single.pid} on {single.bootstrap}; 2-node cluster pids "
            f"{pids['rf1']} on {cluster.bootstrap}; {os.cpu_count()} CPUs; acks={args.acks}",
            flush=True,
        )
        time.sleep(2)  # let the cluster's first leader elections settle
        all_pids = [single.pid, *pids["rf1"]]
        before = [cpu_seconds_total(pid) for pid in all_pids]
        time.sleep(IDLE_S)
        idle = [
            round((cpu_seconds_total(pid) - start) / IDLE_S, 4)
            for pid, start in zip(all_pids, before, strict=True)
        ]
        print(
            f"idle CPU s per s over {IDLE_S:.0f} s (heartbeats, ticks): single {idle[0]}, "
            f"cluster {idle[1]} + {idle[2]}",
            flush=True,
        )
        for round_no in range(1, args.repeat + 1):
            print(f"-- round {round_no} of {args.repeat}", flush=True)
            for size in sizes:
                for config in configs:
                    run = one_run(args, config, size, bootstraps[config], pids[config])
                    run["round"] = round_no
                    runs.append(run)
                    show(run)
        rows = summarize(runs)
        print("\nmedians (broker CPU seconds per process, node 1 + node 2 for the cluster)")
        for row in rows:
            print(
                f"{row['config']:<6} {row['record_size']:>5} B  produce "
                f"{row['produce_rec_s']:>11,.0f} rec/s CPU {cpus(row['produce_cpu_s']):<11}  "
                f"consume {row['consume_rec_s']:>11,.0f} rec/s CPU {cpus(row['consume_cpu_s'])}"
            )
        if args.json is not None:
            args.json.write_text(
                json.dumps({"idle_cpu_s_per_s": idle, "runs": runs, "medians": rows}, indent=2)
                + "\n"
            )
            print(f"json: {args.json}")
        single.stop()
        cluster.stop()
    finally:
        single.kill()
        cluster.kill()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
