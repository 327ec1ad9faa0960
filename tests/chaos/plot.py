"""A run as a picture: throughput and latency over time, fault windows shaded (PNG).

Top: sends acknowledged / failed / unknown and records read per second. Bottom: the latency of
every acknowledged send (log scale), failed and unknown sends marked where they ended. Each
nemesis's fault windows are shaded in its own colour; dashed lines mark the run's phases.
In a txn run a send is a transaction meant to commit (committed: acknowledged; aborted:
failed); in a share run records read are the share consumers' deliveries.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tests.chaos.history import Event

COLOURS = (
    "tab:red",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
    "tab:blue",
)


def fault_windows(events: list[Event], end_t: float) -> dict[str, list[tuple[float, float]]]:
    """{nemesis name: [(start, end)]}; a window never ended closes at `end_t`."""
    windows: dict[str, list[tuple[float, float]]] = {}
    open_at: dict[str, float] = {}
    for event in events:
        if event["type"] != "nemesis":
            continue
        name = event["name"]
        if event["phase"] == "start":
            open_at[name] = event.get("t0", event["t"])  # the fault began before it was logged
        elif event["phase"] == "end" and name in open_at:
            windows.setdefault(name, []).append((open_at.pop(name), event["t"]))
    for name, start in open_at.items():
        windows.setdefault(name, []).append((start, end_t))
    return windows


def plot_run(events: Iterable[Event], path: Path, title: str) -> Path:
    """Draw the run's PNG at `path` (matplotlib, Agg backend); returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = list(events)
    end_t = max((e["t"] for e in events), default=1.0)
    seconds = max(1, math.ceil(end_t))
    per_second: dict[str, Counter[int]] = {
        k: Counter() for k in ("ok", "failed", "unknown", "read")
    }
    latency_ok: list[tuple[float, float]] = []
    latency_bad: list[tuple[float, float, str]] = []
    for event in events:
        outcome = None
        if event["type"] == "send":
            outcome = event["outcome"]
        elif event["type"] == "txn" and event["intent"] == "commit":
            # A committed transaction counts as an acknowledged send, a commit that ended
            # aborted as a failed one; aborts on purpose are not drawn.
            outcome = {"committed": "ok", "aborted": "failed"}.get(event["outcome"], "unknown")
        elif event["type"] in ("poll", "share-poll") and event["process"] != "final":
            per_second["read"][int(event["t"])] += len(event["records"])
        if outcome is not None:
            per_second[outcome][int(event["t"])] += 1
            if event.get("t0") is not None:
                latency_ms = max(0.1, (event["t"] - event["t0"]) * 1000)
                if outcome == "ok":
                    latency_ok.append((event["t"], latency_ms))
                else:
                    latency_bad.append((event["t"], latency_ms, outcome))

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(12, 7))
    xs = list(range(seconds + 1))
    for key, colour, label in (
        ("ok", "tab:green", "acknowledged sends/s"),
        ("failed", "tab:red", "failed sends/s"),
        ("unknown", "tab:orange", "unknown sends/s"),
        ("read", "tab:blue", "records read/s"),
    ):
        if key in ("ok", "read") or per_second[key]:
            top.plot(
                xs,
                [per_second[key][x] for x in xs],
                color=colour,
                label=label,
                linewidth=1.2,
                drawstyle="steps-post",
            )
    top.set_ylabel("operations / s")
    fig.suptitle(title)

    if latency_ok:
        bottom.scatter(
            [t for t, _ in latency_ok],
            [ms for _, ms in latency_ok],
            s=2,
            color="tab:green",
            label="acknowledged send latency",
            alpha=0.5,
        )
    for outcome, colour, marker in (("failed", "tab:red", "x"), ("unknown", "tab:orange", "^")):
        points = [(t, ms) for t, ms, o in latency_bad if o == outcome]
        if points:
            bottom.scatter(
                [t for t, _ in points],
                [ms for _, ms in points],
                s=12,
                color=colour,
                marker=marker,
                label=f"{outcome} send (time to error)",
            )
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("seconds since start")

    for i, (name, spans) in enumerate(sorted(fault_windows(events, end_t).items())):
        colour = COLOURS[i % len(COLOURS)]
        for j, (start, end) in enumerate(spans):
            for ax in (top, bottom):
                ax.axvspan(
                    start,
                    end,
                    color=colour,
                    alpha=0.18,
                    label=name if j == 0 and ax is top else None,
                )
    for event in events:
        if event["type"] == "phase":
            for ax in (top, bottom):
                ax.axvline(event["t"], color="black", linestyle="--", linewidth=0.8)
            top.annotate(
                event["name"],
                (event["t"], 1),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
            )
    top.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=8, ncol=6, frameon=False)
    if latency_ok or latency_bad:
        bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
