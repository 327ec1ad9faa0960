"""The bench's figures: percentiles, medians over runs, the summary table and the plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A run's results as the bench writes them to --json: JSON of mixed depth (hence Any).
Result = dict[str, Any]

METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("produce rec/s", ("produce", "records_per_s")),
    ("produce MB/s", ("produce", "mb_per_s")),
    ("produce ack p99 ms", ("produce", "ack_latency_ms", "p99")),
    ("consume rec/s", ("consume", "records_per_s")),
    ("consume MB/s", ("consume", "mb_per_s")),
    ("produce broker CPU s/GB", ("produce", "broker", "cpu_s_per_gb")),
    ("consume broker CPU s/GB", ("consume", "broker", "cpu_s_per_gb")),
    ("latency e2e p50 ms", ("latency", "e2e_latency_ms", "p50")),
    ("latency e2e p99 ms", ("latency", "e2e_latency_ms", "p99")),
    ("latency e2e p99.9 ms", ("latency", "e2e_latency_ms", "p99_9")),
    ("latency e2e max ms", ("latency", "e2e_latency_ms", "max")),
    ("latency broker CPU s/GB", ("latency", "broker", "cpu_s_per_gb")),
    ("latency ack p50 ms", ("latency", "ack_latency_ms", "p50")),
    ("latency ack p99 ms", ("latency", "ack_latency_ms", "p99")),
    ("latency ack p99.9 ms", ("latency", "ack_latency_ms", "p99_9")),
    ("latency rate kept rec/s", ("latency", "acked_records_per_s")),
    ("latency requests/s", ("latency", "requests", "total_per_s")),
    ("latency CPU µs/request", ("latency", "requests", "cpu_us_per_request")),
    ("latency broker RSS MB", ("latency", "steady_broker", "rss_mb")),
    ("connections requests/s", ("connections", "requests_per_s")),
    ("connections p50 ms", ("connections", "request_latency_ms", "p50")),
    ("connections p99 ms", ("connections", "request_latency_ms", "p99")),
    ("connections p99.9 ms", ("connections", "request_latency_ms", "p99_9")),
    ("connections CPU µs/request", ("connections", "requests", "cpu_us_per_request")),
    ("connections broker RSS MB", ("connections", "steady_broker", "rss_mb")),
    ("long polls fetches/s", ("long_polls", "answered_per_s")),
    ("long polls CPU µs/fetch", ("long_polls", "requests", "cpu_us_per_request")),
    ("long polls broker RSS MB", ("long_polls", "steady_broker", "rss_mb")),
    ("idle broker CPU %", ("idle", "cpu_percent")),
    ("idle broker RSS MB", ("idle", "rss_mb")),
)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of an ascending sequence, nearest rank; 0.0 if empty."""
    if not len(sorted_values):
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))])


def latency_summary(values_ms: Sequence[float]) -> dict[str, float]:
    """count, avg, p50, p99, p99_9 and max of latencies in any order."""
    ordered = sorted(values_ms)
    return {
        "count": len(ordered),
        "avg": sum(ordered) / len(ordered) if ordered else 0.0,
        "p50": percentile(ordered, 0.5),
        "p99": percentile(ordered, 0.99),
        "p99_9": percentile(ordered, 0.999),
        "max": float(ordered[-1]) if ordered else 0.0,
    }


def dig(result: Result, path: tuple[str, ...]) -> float | None:
    """The figure at `path` in a run's result, or None where any step is missing or null."""
    node: object = result
    for key in path:
        if not isinstance(node, dict) or node.get(key) is None:
            return None
        node = node[key]
    if not isinstance(node, int | float):
        raise TypeError(f"{'.'.join(path)} is {node!r}, not a figure")
    return float(node)


def medians(runs: list[Result]) -> dict[str, float]:
    """Each METRICS figure's median over the runs that have it."""
    out: dict[str, float] = {}
    for name, path in METRICS:
        values = [v for v in (dig(r, path) for r in runs) if v is not None]
        if values:
            out[name] = statistics.median(values)
    return out


def print_summary(summary: Result, repeat: int) -> None:
    """The medians table, one column per broker (and raftka/other with --compare)."""
    targets = [t for t in summary["medians"]]
    print(f"\nmedians of {repeat} run(s):")
    header = f"{'':26}" + "".join(f"{t:>16}" for t in targets)
    if "ratio" in summary:
        header += f"{'raftka/other':>16}"
    print(header)
    for name, _ in METRICS:
        if not any(name in summary["medians"][t] for t in targets):
            continue
        line = f"{name:26}"
        for t in targets:
            value = summary["medians"][t].get(name)
            line += f"{value:>16,.2f}" if value is not None else f"{'-':>16}"
        if "ratio" in summary:
            ratio = summary["ratio"].get(name)
            line += f"{ratio:>16.2f}" if ratio is not None else f"{'-':>16}"
        print(line)


def plot(runs: list[Result], path: Path) -> None:
    """A PNG of throughput per second (and latency percentiles per second) of every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latency_runs = [r for r in runs if "latency" in r]
    rows = 2 if latency_runs else 1
    fig, axes = plt.subplots(rows, 1, figsize=(10, 4 * rows), squeeze=False)
    # One colour per run (a broker's run: "raftka #1", "other #1", ...), one line style per
    # series of it, so a side-by-side plot's dozen lines stay told apart.
    palette: list[str] = plt.rcParams["axes.prop_cycle"].by_key()["color"]  # ten colours
    colour = {id(r): palette[i % len(palette)] for i, r in enumerate(runs)}
    role_style = {"produce": "-", "consume": "--"}
    throughput = axes[0][0]
    for r in runs:
        name = f"{r['target']} #{r['run']}"
        for phase in ("produce", "consume", "latency", "connections"):
            timeline = r.get(phase, {}).get("timeline", [])
            for role in ("produce", "consume"):
                points = [p for p in timeline if f"{role}_rec_s" in p]
                if points:
                    throughput.plot(
                        [p["t_s"] for p in points],
                        [p[f"{role}_rec_s"] for p in points],
                        marker=".",
                        color=colour[id(r)],
                        linestyle=role_style[role],
                        label=f"{name} {role}",
                    )
    throughput.set_xlabel("seconds since the phase started")
    throughput.set_ylabel("records/s")
    throughput.set_title("throughput per second")
    throughput.grid(True, alpha=0.3)
    if throughput.get_legend_handles_labels()[1]:
        throughput.legend(fontsize="small")
    if latency_runs:
        latency = axes[1][0]
        for r in latency_runs:
            points = r["latency"]["latency_timeline"]
            xs = [p["t_s"] for p in points]
            for key, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
                latency.plot(
                    xs,
                    [p[key] for p in points],
                    color=colour[id(r)],
                    linestyle=style,
                    label=f"{r['target']} #{r['run']} {key}",
                )
        latency.axvline(latency_runs[0]["latency"]["warmup_s"], color="grey", linestyle="--")
        latency.set_xlabel("send second (dashed: end of warm-up)")
        latency.set_ylabel("end-to-end latency, ms")
        if any(p["max"] > 0 for r in latency_runs for p in r["latency"]["latency_timeline"]):
            latency.set_yscale("log")
        latency.set_title("latency percentiles per second")
        latency.grid(True, alpha=0.3)
        latency.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"plot: {path}")
