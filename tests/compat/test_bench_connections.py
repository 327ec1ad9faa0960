"""`scripts/bench --connections`: the many-connections load generator against a real broker.
Its requests are acknowledged and its records are really in the topic, read back by a
librdkafka consumer; the idle connections beside it stay open. Speed is what the bench
reports, never what a test asserts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clients import consume
from harness import REPO_ROOT

from raftka.broker.tools.bench_workers import LATENCY_HEADER

BENCH = REPO_ROOT / "scripts" / "bench"


def bench(tmp_path: Path, *args: object) -> dict[str, Any]:
    """Run the bench with --json; the parsed JSON."""
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [str(BENCH), *map(str, args), "--json", out, "--quiet"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, (
        f"scripts/bench {args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return json.loads(out.read_text())


def test_fifty_connections_produce_records_that_are_in_the_topic(
    bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    document = bench(
        tmp_path,
        "--bootstrap", bootstrap,
        "--topic", topic,
        "--connections", 50,
        "--producers", 2,
        "--rate", 200,
        "--acks", "all",
        "--warmup", 1,
        "--duration", 2,
        "--idle-connections", 100,
    )  # fmt: skip
    (run,) = document["runs"]
    load = run["connections"]
    assert run["ok"], load
    assert load["connections"] == 50 and load["processes"] == 2
    assert load["sent"] > 0 and load["answered"] == load["sent"]
    assert load["errors"] == {} and load["unanswered"] == 0 and load["closed_by_broker"] == 0
    lat = load["request_latency_ms"]
    assert lat["count"] > 0 and 0 <= lat["p50"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]
    assert run["idle"]["connections"] == run["idle"]["still_open"] == 100

    # Every acknowledged request's record is in the topic, stamped with this run's tag,
    # spread over both partitions (connection i produces to partition i mod 2).
    records = consume(bootstrap, topic, partitions=2)
    assert all(records[p] for p in (0, 1))
    values = [m.value() for p in (0, 1) for m in records[p]]
    assert len(values) == load["answered"]
    tags = {LATENCY_HEADER.unpack_from(v)[1] for v in values}
    assert tags == {load["tag"]} and all(len(v) == 100 for v in values)


def test_a_started_broker_counts_the_requests_itself(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if request.config.getoption("--bootstrap-servers"):
        pytest.skip("--start-broker starts raftka; not available with --bootstrap-servers")
    document = bench(
        tmp_path,
        "--start-broker",
        "--connections", 20,
        "--rate", 200,
        "--acks", 1,
        "--warmup", 1,
        "--duration", 2,
    )  # fmt: skip
    (run,) = document["runs"]
    load = run["connections"]
    assert run["ok"] and load["answered"] == load["sent"] > 0
    requests = load["requests"]
    # --start-broker opens the metrics endpoint: the broker's own counters are the source.
    assert requests["source"] == "broker"
    assert requests["requests_per_s"]["Produce"] > 0
    assert requests["cpu_us_per_request"] is not None and requests["cpu_us_per_request"] > 0
    assert requests["wakeups_per_s"] > 0 and 0 <= requests["lingered_share"] <= 1
    # System time is sampled at clock ticks: a light 2 s window may hold none of it.
    assert requests["kernel_share"] is not None and 0 <= requests["kernel_share"] <= 1
    assert run["connections"]["steady_broker"]["rss_mb"] > 0


def test_waiting_fetches_are_held_for_their_wait_and_answered(
    bootstrap: str, tmp_path: Path
) -> None:
    """`--long-polls`: each connection's Fetch of the new, empty topic is answered at its
    `max_wait_ms` (the broker holds it that long, so 20 connections waiting 100 ms each get
    at most about 200 answers a second), and every connection stays open."""
    document = bench(
        tmp_path,
        "--bootstrap", bootstrap,
        "--long-polls", 20,
        "--fetch-wait-ms", 100,
        "--warmup", 0.5,
        "--duration", 2,
    )  # fmt: skip
    (run,) = document["runs"]
    polls = run["long_polls"]
    assert run["ok"] and polls["closed_by_broker"] == 0
    assert polls["answered"] > 0
    # At most floor(2 s / 100 ms) + 1 answers per connection fall in the 2 s window.
    assert polls["answered_per_s"] <= 20 * 21 / 2
