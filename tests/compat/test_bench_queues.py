"""`scripts/bench share` and `scripts/bench http` run briefly as a user runs them, each
against the broker it starts: their JSON reports every record drained and non-zero rates,
latencies, CPU and memory. Speed is what the bench reports, never what a test asserts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from harness import REPO_ROOT

BENCH = REPO_ROOT / "scripts" / "bench"
BENCH_TIMEOUT_S = 300


def bench(tmp_path: Path, *args: object) -> dict[str, Any]:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [str(BENCH), *map(str, args), "--json", out],
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, f"{args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def test_share_drains_fifo_and_priority_topics(tmp_path: Path) -> None:
    document = bench(tmp_path, "share", "--num-records", 3000, "--consumers", 2)
    results = document["results"]
    assert [r["order"] for r in results] == ["fifo", "priority"]
    for r in results:
        assert r["ok"] and r["delivered"] >= r["records"] == 3000
        assert r["records_per_s"] > 0 and r["seconds"] > 0
        assert r["broker_cpu_s"] > 0 and r["broker_rss_peak_mib"] > 0
        assert len(r["load_average_1m"]) == 2


def test_http_enqueues_then_dequeues_with_wrk(tmp_path: Path) -> None:
    """Needs Debian's wrk (scripts/setup installs it as root)."""
    document = bench(tmp_path, "http", "--duration", 2, "--clients", 10, "--threads", 1)
    enqueue, dequeue = document["results"]
    assert (enqueue["phase"], dequeue["phase"]) == ("enqueue", "dequeue+ack")
    for r in (enqueue, dequeue):
        assert r["requests"] > 0 and r["requests_per_s"] > 0 and r["non_2xx"] == 0
        assert 0 < r["latency_p50_ms"] <= r["latency_p99_ms"]
        assert r["broker_cpu_s"] > 0 and r["broker_rss_peak_mib"] > 0
        assert "-c10" in r["command"] and "--latency" in r["command"]
    # The share group's state counts what the dequeues took (wrk's count leaves out the
    # requests in flight when it stops, so the two need not be equal).
    assert dequeue["messages_dequeued"] > 0
