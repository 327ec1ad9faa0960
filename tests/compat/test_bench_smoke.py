"""`scripts/bench` run as a user runs it, on small loads: its JSON and PNG have the expected
shape and count every record. Speed is what the bench reports, never what a test asserts."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import REPO_ROOT, BrokerProcess

BENCH = REPO_ROOT / "scripts" / "bench"
BENCH_TIMEOUT_S = 240
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: A line librdkafka logs: %<syslog level>|<seconds since epoch>|<facility>|<client name>| ...
LIBRDKAFKA_LOG = re.compile(r"%\d\|\d+\.\d+\|[A-Z_]+\|")


def bench(tmp_path: Path, *args: object) -> dict[str, Any]:
    """Run the bench with --json; the parsed JSON. The plot is checked where --plot put it,
    or next to the JSON by default."""
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [str(BENCH), *map(str, args), "--json", out, "--quiet"],
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, (
        f"scripts/bench {args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    # librdkafka logs to stderr itself: on a loaded machine, e.g. "%6|...|BGQUEUE|...:
    # Purging 1 unserved events from background queue" when a client (the bench's admin
    # client) is destroyed before its background thread served every event. --quiet
    # silences the bench's own progress, not the client library.
    own = [line for line in result.stderr.splitlines() if not LIBRDKAFKA_LOG.match(line)]
    assert own == [], f"--quiet still wrote progress: {result.stderr}"
    plot = Path(args[args.index("--plot") + 1]) if "--plot" in args else out.with_suffix(".png")
    assert plot.read_bytes().startswith(PNG_SIGNATURE), f"{plot} is not a PNG"
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("script", "usage"),
    [
        ("bench", "usage: scripts/bench "),
        ("shards-experiment", "usage: shards-experiment "),
        ("startup-time", "usage: startup-time "),
    ],
)
def test_each_tool_wrapper_runs_its_module(script: str, usage: str) -> None:
    """scripts/<tool> runs raftka.broker.tools.<tool> from any folder; --help needs no broker."""
    result = subprocess.run(
        [str(REPO_ROOT / "scripts" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(usage) and result.stderr == ""


def test_produce_and_consume_with_two_processes_each(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if request.config.getoption("--bootstrap-servers"):
        pytest.skip("--start-broker starts raftka; not available with --bootstrap-servers")
    plot = tmp_path / "throughput.png"
    document = bench(
        tmp_path,
        "--start-broker",
        "--num-records", 20_000,
        "--producers", 2,
        "--consumers", 2,
        "--acks", 1,
        "--plot", plot,
    )  # fmt: skip
    (run,) = document["runs"]
    assert run["ok"] and run["target"] == "raftka"
    produce, consume = run["produce"], run["consume"]
    assert produce["records"] == 20_000 and produce["failed"] == 0
    assert consume["records"] == 20_000 and consume["bytes"] == 20_000 * 100
    for phase in (produce, consume):
        assert phase["records_per_s"] > 0 and phase["seconds"] > 0
        # --start-broker knows the broker's pid, so CPU per GB is reported.
        assert phase["broker"]["cpu_s"] >= 0 and "cpu_s_per_gb" in phase["broker"]
    lat = produce["ack_latency_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]
    medians = document["summary"]["medians"]["raftka"]
    assert medians["produce rec/s"] == produce["records_per_s"]


def test_latency_mode_reports_ordered_percentiles(bootstrap: str, tmp_path: Path) -> None:
    document = bench(
        tmp_path,
        "--bootstrap", bootstrap,
        "--rate", 2000,
        "--duration", 3,
        "--warmup", 1,
        "--acks", "all",
    )  # fmt: skip
    (run,) = document["runs"]
    latency = run["latency"]
    assert run["ok"], latency
    assert latency["failed"] == 0 and latency["received"] == latency["sent"] > 0
    e2e = latency["e2e_latency_ms"]
    # Records sent in the 3 steady seconds, not the warm-up one.
    assert 0 < e2e["count"] < latency["sent"]
    assert 0 <= e2e["p50"] <= e2e["p99"] <= e2e["p99_9"] <= e2e["max"]
    assert latency["latency_timeline"], "no per-second latency points for the plot"
    ack = latency["ack_latency_ms"]
    assert ack["count"] > 0 and 0 <= ack["p50"] <= ack["p99"] <= ack["p99_9"] <= ack["max"]
    assert latency["acked_records_per_s"] > 0
    # No metrics endpoint named: the clients' librdkafka statistics count the requests.
    requests = latency["requests"]
    assert requests["source"] == "client"
    assert requests["requests_per_s"]["Produce"] > 0 and requests["requests_per_s"]["Fetch"] > 0


def test_compare_prints_medians_and_ratios(
    broker_factory: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    other: BrokerProcess = broker_factory()
    document = bench(
        tmp_path,
        "--start-broker",
        "--compare", other.bootstrap,
        "--compare-pid", other.pid,
        "--num-records", 10_000,
        "--repeat", 2,
        "--acks", 1,
    )  # fmt: skip
    runs = document["runs"]
    assert [(r["target"], r["run"]) for r in runs] == [
        ("raftka", 1),
        ("other", 1),
        ("raftka", 2),
        ("other", 2),
    ]
    assert len({r["topic"] for r in runs}) == 4, "each run writes its own topic"
    assert all(r["produce"]["records"] == r["consume"]["records"] == 10_000 for r in runs)
    # 10,000 records fit one Fetch answer: still a read that took time, not 0 s (the clock
    # starts at the assignment, not at the first record).
    assert all(r["consume"]["seconds"] > 0 and r["consume"]["records_per_s"] > 0 for r in runs)
    summary = document["summary"]
    for name in ("produce rec/s", "consume rec/s", "produce broker CPU s/GB"):
        assert name in summary["medians"]["raftka"] and name in summary["medians"]["other"]
        assert name in summary["ratio"]
    assert summary["ratio"]["produce rec/s"] == pytest.approx(
        summary["medians"]["raftka"]["produce rec/s"] / summary["medians"]["other"]["produce rec/s"]
    )
