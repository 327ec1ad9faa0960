"""`scripts/chaos`: run nemeses against a fresh namespaced cluster and print a summary.

    scripts/chaos [--nodes 3|5] [--nemesis NAME[,NAME]]... [--time-limit S] [--seed N]
                  [--workload log|txn|share|compact] [--out DIR]
    scripts/chaos --preset long [--nodes 3|5]... [--seeds K] [--time-limit S] [--out DIR]

Each `--nemesis` is one run; names joined by commas run together in that run. Without
`--nemesis`, every nemesis runs alone, one run after another; `--nemesis all` is every nemesis
this machine can run but `reassign` and `decommission` (which run the topics with a replica
fewer), at once.
`--preset long` is for long runs outside CI: every nemesis at once for `--time-limit`
(default 600 s), on 3 and on 5 brokers (or the `--nodes` given), with `--seeds` seeds
(default 3) each, at most `--max-faults` faults at once (default 2); it writes `summary.md`
(runs, ops, anomalies, plots) to `--out`. `--workload` picks what the
clients do and what is checked: `log` (default: idempotent producers, plain and group
consumers), `txn` (transactional producers committing and aborting transactions across
partitions, read_committed consumers), `share` (a share group acknowledging records) or
`compact` (keyed values on a compacted topic the log cleaner works on during the run).
Exits 1 when any run found an anomaly or failed, 2 when the machine cannot run them.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from tests.chaos.nemesis import NEMESES, all_nemeses, unavailable_nemeses
from tests.chaos.netns import chaos_unavailable_reason
from tests.chaos.runner import WORKLOADS, ChaosConfig, ChaosResult, run_chaos

# Every nemesis at once with no limit leaves 3 brokers without a stable majority for whole
# minutes (a broker is killed again before it has started); two at a time still overlaps
# every kind of fault with every other, with healthy gaps between.
LONG_MAX_FAULTS = 2

# Anomaly columns every workload's summary ends with: the run's own checks.
_ALL_WORKLOADS_KINDS = (
    ("final", "final-read-incomplete"),
    ("replica", "replica-divergence"),
    ("voters", "voters-not-restored"),
    ("crash", "node-crash"),
    ("stop", "unclean-stop"),
    ("wl", "workload-error"),
    ("proto", "client-protocol-error"),
)
SUMMARY_KINDS = (
    ("lost", "lost-write"),
    ("unseen", "unseen"),
    ("dup", "duplicate"),
    ("incons", "inconsistent-offset"),
    ("nonmono", "nonmonotonic-poll"),
    ("skip", "poll-skip"),
    ("commit", "commit-backwards"),
    ("cmtd", "committed-backwards"),
    *_ALL_WORKLOADS_KINDS,
)
TXN_SUMMARY_KINDS = (
    ("partial", "txn-partial"),
    ("lost", "txn-lost"),
    ("aborted", "aborted-read"),
    ("phantom", "phantom-read"),
    ("dup", "duplicate"),
    ("incons", "inconsistent-offset"),
    ("nonmono", "nonmonotonic-poll"),
    ("skip", "poll-skip"),
    *_ALL_WORKLOADS_KINDS,
)
COMPACT_SUMMARY_KINDS = (
    ("latest", "latest-lost"),
    ("order", "key-order"),
    ("unseen", "unseen"),
    ("dup", "duplicate"),
    ("incons", "inconsistent-offset"),
    ("nonmono", "nonmonotonic-poll"),
    ("skip", "poll-skip"),
    ("commit", "commit-backwards"),
    ("cmtd", "committed-backwards"),
    *_ALL_WORKLOADS_KINDS,
)
SHARE_SUMMARY_KINDS = (
    ("twice", "acked-twice"),
    ("redeliv", "redelivered-after-ack"),
    ("limit", "over-limit"),
    ("lost", "lost"),
    ("incons", "inconsistent-offset"),
    ("drain", "drain-incomplete"),
    *_ALL_WORKLOADS_KINDS,
)
# (ops column names: acknowledged, failed, unknown) and anomaly columns, per workload.
SUMMARY_COLUMNS = {
    "log": (("acked", "failed", "unknown"), SUMMARY_KINDS),
    "txn": (("commit", "abort", "unknown"), TXN_SUMMARY_KINDS),
    "share": (("acked", "failed", "unknown"), SHARE_SUMMARY_KINDS),
    "compact": (("acked", "failed", "unknown"), COMPACT_SUMMARY_KINDS),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nodes",
        type=int,
        choices=(3, 5),
        action="append",
        help="brokers per run (default 3; with --preset long, 3 and 5; repeatable)",
    )
    parser.add_argument(
        "--preset", choices=("long",), help="long: every nemesis at once, several seeds"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per size (--preset long)")
    parser.add_argument(
        "--max-faults",
        type=int,
        metavar="N",
        help="at most N faults in place at once (default: no limit; 2 with --preset long)",
    )
    parser.add_argument(
        "--nemesis",
        action="append",
        metavar="NAME[,NAME]",
        help=f"nemeses of one run (repeatable; 'all' for every one): {', '.join(NEMESES)}",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="S",
        help="seconds of faults per run (default 60; 600 with --preset long)",
    )
    parser.add_argument("--seed", type=int, help="seed of the nemeses' choices (default random)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "raftka-chaos",
        help="where run directories go (default %(default)s)",
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--rate", type=float, default=40.0, help="sends per second per producer")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="log",
        help="what the clients do and what is checked (default %(default)s)",
    )
    args = parser.parse_args(argv)
    unavailable = unavailable_nemeses()
    available = [n for n in NEMESES if n not in unavailable]
    if args.preset == "long":
        if args.nemesis:
            parser.error("--preset long runs every nemesis; leave out --nemesis")
        if not 1 <= args.seeds <= 100:
            parser.error("--seeds must be between 1 and 100")
        args.nemesis = ["all"]
        args.nodes = args.nodes or [3, 5]
        args.time_limit = 600.0 if args.time_limit is None else args.time_limit
        args.max_faults = LONG_MAX_FAULTS if args.max_faults is None else args.max_faults
    else:
        args.seeds = 1
        args.nodes = args.nodes or [3]
        args.time_limit = 60.0 if args.time_limit is None else args.time_limit
    runs = []
    for spec in args.nemesis or available:
        names = tuple(all_nemeses() if spec == "all" else spec.split(","))
        unknown = [n for n in names if n not in NEMESES]
        if unknown:
            parser.error(f"unknown nemesis {', '.join(unknown)}; known: {', '.join(NEMESES)}")
        missing = [f"{n} ({unavailable[n]})" for n in names if n in unavailable]
        if missing:
            parser.error(f"this machine cannot run {'; '.join(missing)}")
        runs.append(names)
    args.runs = runs
    args.skipped = unavailable if args.nemesis is None or "all" in args.nemesis else {}
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.max_faults is not None and not 1 <= args.max_faults <= len(NEMESES):
        parser.error(f"--max-faults must be between 1 and {len(NEMESES)}")
    if args.time_limit <= 0 or args.time_limit > 24 * 3600:
        parser.error("--time-limit must be between 0 and 86400 seconds")
    return args


def summary_table(results: list[ChaosResult]) -> str:
    workload = results[0].config.workload if results else "log"
    outcomes, kinds = SUMMARY_COLUMNS[workload]
    header = ["nemesis", "nodes", "seed", "ops", *outcomes, *(s for s, _ in kinds)]
    rows = [header]
    for r in results:
        c = r.check
        rows.append(
            [
                r.config.label + ("" if r.error is None else " (error)"),
                str(r.config.nodes),
                str(r.config.seed),
                str(c.operations),
                str(c.acknowledged),
                str(c.failed),
                str(c.unknown),
                *(str(c.anomalies.get(k, 0)) for _, k in kinds),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    return "\n".join(lines)


def markdown_summary(results: list[ChaosResult], skipped: dict[str, str]) -> str:
    """The long preset's table: one row per run, then what this machine could not run."""
    lines = [
        "| nemeses | brokers | seed | faults (s) | at once | ops | acknowledged | anomalies "
        "| plot |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.check
        anomalies = str(c.anomaly_count) + ("" if r.error is None else " (run error)")
        plot = f"[chaos.png]({r.png})" if r.png is not None else "none"
        lines.append(
            f"| {r.config.title} | {r.config.nodes} | {r.config.seed} | "
            f"{r.config.time_limit_s:g} | {r.config.max_faults or 'any'} | "
            f"{c.operations:,} | {c.acknowledged:,} | "
            f"{anomalies} | {plot} |"
        )
    for name, reason in sorted(skipped.items()):
        lines.append(f"\nNot run here: {name}: {reason}")
    return "\n".join(lines) + "\n"


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the runner's teardown


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    reason = chaos_unavailable_reason()
    if reason is not None:
        print(f"chaos: cannot run here: {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [args.seed + i for i in range(args.seeds)]
    plan = [(nodes, seed, names) for nodes in args.nodes for seed in seeds for names in args.runs]
    print(
        f"chaos: {len(plan)} {args.workload} run(s) on {'/'.join(map(str, args.nodes))} nodes, "
        f"{args.time_limit:g} s of faults each, seed(s) {', '.join(map(str, seeds))}, "
        f"output in {args.out}"
    )
    for name, reason in sorted(args.skipped.items()):
        print(f"chaos: not running {name}: {reason}")
    results = []
    started = time.monotonic()
    for nodes, seed, names in plan:
        config = ChaosConfig(
            nemeses=names,
            out_dir=args.out.resolve(),
            nodes=nodes,
            time_limit_s=args.time_limit,
            seed=seed,
            partitions=args.partitions,
            sends_per_second=args.rate,
            max_faults=args.max_faults,
            workload=args.workload,
        )
        result = run_chaos(config, log=lambda line: print(line, flush=True))
        results.append(result)
        print(result.report(), flush=True)
        print(flush=True)
    print(f"summary ({time.monotonic() - started:.0f} s):")
    print(summary_table(results))
    if args.preset == "long":
        summary = args.out / "summary.md"
        summary.write_text(markdown_summary(results, args.skipped))
        print(f"table: {summary}")
    bad = [r for r in results if not r.ok]
    for r in bad:
        print(f"FAILED: {r.config.title}: {r.run_dir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
