"""`scripts/chaos`: run nemeses against a fresh namespaced cluster and print a summary.

    scripts/chaos [--nodes 3|5] [--nemesis NAME[,NAME]]... [--time-limit S] [--seed N]
                  [--out DIR]

Each `--nemesis` is one run; names joined by commas run together in that run. Without
`--nemesis`, every nemesis runs alone, one run after another; `--nemesis all` is every nemesis
at once. Exits 1 when any run found an anomaly or failed, 2 when the machine cannot run them.
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

from tests.chaos.nemesis import NEMESES
from tests.chaos.netns import chaos_unavailable_reason
from tests.chaos.runner import ChaosConfig, ChaosResult, run_chaos

SUMMARY_KINDS = (
    ("lost", "lost-write"),
    ("unseen", "unseen"),
    ("dup", "duplicate"),
    ("incons", "inconsistent-offset"),
    ("nonmono", "nonmonotonic-poll"),
    ("skip", "poll-skip"),
    ("commit", "commit-backwards"),
    ("cmtd", "committed-backwards"),
    ("final", "final-read-incomplete"),
    ("replica", "replica-divergence"),
    ("crash", "node-crash"),
    ("stop", "unclean-stop"),
    ("wl", "workload-error"),
    ("proto", "client-protocol-error"),
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    parser.add_argument(
        "--nemesis",
        action="append",
        metavar="NAME[,NAME]",
        help=f"nemeses of one run (repeatable; 'all' for every one): {', '.join(NEMESES)}",
    )
    parser.add_argument(
        "--time-limit", type=float, default=60.0, metavar="S", help="seconds of faults per run"
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
    args = parser.parse_args(argv)
    runs = []
    for spec in args.nemesis or list(NEMESES):
        names = tuple(sorted(NEMESES) if spec == "all" else spec.split(","))
        unknown = [n for n in names if n not in NEMESES]
        if unknown:
            parser.error(f"unknown nemesis {', '.join(unknown)}; known: {', '.join(NEMESES)}")
        runs.append(names)
    args.runs = runs
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.time_limit <= 0 or args.time_limit > 24 * 3600:
        parser.error("--time-limit must be between 0 and 86400 seconds")
    return args


def summary_table(results: list[ChaosResult]) -> str:
    header = ["nemesis", "ops", "acked", "failed", "unknown", *(s for s, _ in SUMMARY_KINDS)]
    rows = [header]
    for r in results:
        c = r.check
        rows.append(
            [
                r.config.label + ("" if r.error is None else " (error)"),
                str(c.operations),
                str(c.acknowledged),
                str(c.failed),
                str(c.unknown),
                *(str(c.anomalies[k]) for _, k in SUMMARY_KINDS),
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
    print(
        f"chaos: {len(args.runs)} run(s), {args.nodes} nodes, {args.time_limit:g} s of faults "
        f"each, seed {args.seed}, output in {args.out}"
    )
    results = []
    started = time.monotonic()
    for names in args.runs:
        config = ChaosConfig(
            nemeses=names,
            out_dir=args.out.resolve(),
            nodes=args.nodes,
            time_limit_s=args.time_limit,
            seed=args.seed,
            partitions=args.partitions,
            sends_per_second=args.rate,
        )
        result = run_chaos(config, log=lambda line: print(line, flush=True))
        results.append(result)
        print(result.report(), flush=True)
        print(flush=True)
    print(f"summary ({time.monotonic() - started:.0f} s, seed {args.seed}):")
    print(summary_table(results))
    bad = [r for r in results if not r.ok]
    for r in bad:
        print(f"FAILED: {r.config.label}: {r.run_dir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
