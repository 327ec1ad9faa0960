"""`scripts/bench`'s request counting: the broker's Prometheus counters, librdkafka's
statistics, the arithmetic of requests/s and CPU per request over a steady part, and the
producers' acknowledgement figures (no broker, no client processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from array import array

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from raftka.broker.metrics import BrokerMetrics
from raftka.broker.tools.bench_requests import (
    BrokerSnapshot,
    ClientRequestStats,
    SteadyWindow,
    client_request_counts,
    client_window_rates,
    count_delta,
    metrics_url,
    parse_poller_counts,
    parse_request_counts,
    process_lines,
    request_figures,
    request_lines,
    steady_requests,
)
from raftka.broker.tools.bench_runs import BrokerMeter, steady_acks


def requests_page(counts: dict[str, int]) -> str:
    """A /metrics page as the broker renders it (prometheus_client), with another metric."""
    registry = CollectorRegistry()
    requests = Counter(
        "kafka_network_requestmetrics_requests", "requests", ["request"], registry=registry
    )
    errors = Counter(
        "kafka_network_requestmetrics_errors", "errors", ["request", "error"], registry=registry
    )
    for api, n in counts.items():
        requests.labels(request=api).inc(n)
    errors.labels(request="Produce", error="NOT_LEADER_OR_FOLLOWER").inc(7)
    return generate_latest(registry).decode()


def test_parse_request_counts_reads_the_totals_by_api_only() -> None:
    page = requests_page({"Produce": 1200, "Fetch": 30, "Metadata": 2})
    assert "kafka_network_requestmetrics_requests_created" in page  # left out below
    assert parse_request_counts(page) == {"Produce": 1200.0, "Fetch": 30.0, "Metadata": 2.0}
    assert parse_request_counts("# nothing here\n") == {}


def test_the_poller_wakeups_of_a_raftka_page_give_requests_per_wakeup() -> None:
    metrics = BrokerMetrics({0: "Produce"})
    for _ in range(300):
        metrics.request_done(0, 0.001, None)
    metrics.poller_wakeups += 120
    metrics.poller_lingers += 90
    page = metrics.exposition().decode()
    assert parse_request_counts(page) == {"Produce": 300.0}
    assert parse_poller_counts(page) == (120.0, 90.0)
    assert parse_poller_counts(requests_page({"Produce": 300})) == (None, None)  # not raftka
    figures = request_figures({"Produce": 30.0}, 10, 0.02, "broker", wakeups=120.0)
    assert figures["wakeups_per_s"] == 12.0 and figures["requests_per_wakeup"] == 2.5
    assert request_lines(figures)[-1] == (
        "broker event loop: 12 poller wake-ups/s, 2.50 requests per wake-up"
    )
    assert len(request_lines(request_figures({"Produce": 30.0}, 10, 0.02, "broker"))) == 2
    figures = request_figures(
        {"Produce": 30.0}, 10, 0.02, "broker", wakeups=120.0, lingers=90.0, system_s=0.005
    )
    assert request_lines(figures)[-2:] == [
        "broker CPU per request: 67 µs (67 µs per Produce request, 100% of requests),"
        " 0.02 CPU s in 10.0 s, 25% of it in the kernel",
        "broker event loop: 12 poller wake-ups/s, 2.50 requests per wake-up,"
        " 75% of them after a linger (request.linger.us)",
    ]


def test_count_delta_drops_apis_without_requests_in_between() -> None:
    before = {"Produce": 100.0, "Fetch": 10.0, "Metadata": 1.0}
    after = {"Produce": 160.0, "Fetch": 10.0, "Metadata": 1.0, "ApiVersions": 2.0}
    assert count_delta(before, after) == {"ApiVersions": 2.0, "Produce": 60.0}


def test_metrics_url_of_an_address_or_a_url() -> None:
    assert metrics_url("127.0.0.1:9404") == "http://127.0.0.1:9404/metrics"
    assert metrics_url("http://h:1/m") == "http://h:1/m"


STATISTICS = {
    "name": "rdkafka#producer-1",
    "brokers": {
        "127.0.0.1:9092/bootstrap": {"tx": 3, "req": {"ApiVersions": 1, "Metadata": 2}},
        "127.0.0.1:9092/1": {"tx": 900, "req": {"Produce": 890, "Metadata": 10, "Fetch": 0}},
        ":0/internal": {"tx": 0, "req": {}},
    },
}


def test_client_request_counts_sum_the_brokers_of_a_statistics_document() -> None:
    assert client_request_counts(STATISTICS) == {"ApiVersions": 1, "Metadata": 12, "Produce": 890}


def test_client_statistics_samples_are_kept_with_their_time() -> None:
    stats = ClientRequestStats()
    assert stats.client_config({"client_stats": False}) == {}
    config = stats.client_config({"client_stats": True})
    assert config["statistics.interval.ms"] > 0
    config["stats_cb"](json.dumps(STATISTICS))
    ((at_ns, counts),) = stats.samples
    assert at_ns > 0 and counts["Produce"] == 890


def test_client_window_rates_use_each_clients_samples_inside_the_window() -> None:
    s = 1_000_000_000
    producer = [
        (0 * s, {"Produce": 0}),  # before the window: left out
        (2 * s, {"Produce": 100, "Metadata": 1}),
        (4 * s, {"Produce": 2100, "Metadata": 1}),
        (6 * s, {"Produce": 4100, "Metadata": 2}),
        (9 * s, {"Produce": 9999}),  # after the window: left out
    ]
    consumer = [(3 * s, {"Fetch": 10}), (5 * s, {"Fetch": 1010})]
    lonely = [(4 * s, {"Fetch": 5})]  # one sample in the window: no rate
    rates = client_window_rates([producer, consumer, lonely], 1 * s, 7 * s)
    assert rates == {"Fetch": 500.0, "Metadata": 0.25, "Produce": 1000.0}
    assert client_window_rates([lonely], 1 * s, 7 * s) is None


def test_request_figures_divide_the_broker_cpu_by_the_requests() -> None:
    figures = request_figures({"Produce": 9_000.0, "Metadata": 1_000.0}, 10.0, 5.0, "broker")
    assert figures["total_per_s"] == 10_000.0
    assert figures["cpu_us_per_request"] == pytest.approx(50.0)  # 5 s / 100,000 requests
    assert figures["cpu_us_per_produce"] == pytest.approx(5e6 / 90_000)
    assert figures["produce_share"] == pytest.approx(0.9)
    unknown = request_figures({"Fetch": 10.0}, 10.0, None, "client")
    assert unknown["cpu_us_per_request"] is None and unknown["cpu_us_per_produce"] is None


def test_request_lines_name_the_source_and_per_produce_only_when_it_dominates() -> None:
    mostly_produce = request_lines(
        request_figures({"Produce": 950.0, "Fetch": 50.0}, 10, 1, "broker")
    )
    assert mostly_produce[0].startswith("requests/s (broker metrics): 1,000 total; Produce 950")
    assert "per Produce request" in mostly_produce[1] and "100 µs" in mostly_produce[1]
    mixed = request_lines(request_figures({"Produce": 500.0, "Fetch": 500.0}, 10, 1, "client"))
    assert "client statistics" in mixed[0] and "per Produce request" not in mixed[1]


def snapshot(
    time_s: float, cpu_s: float, produce: float | None, pid: int = 1, rss_kb: int = 51_200
) -> BrokerSnapshot:
    snap = BrokerSnapshot((), ())
    snap.time_ns = int(time_s * 1e9)
    snap.cpu_by_pid = {pid: cpu_s}
    snap.rss_by_pid = {pid: rss_kb}
    snap.requests = None if produce is None else {"Produce": produce}
    return snap


def two_processes(
    time_s: float, cpu: tuple[float, float], rss_kb: tuple[int, int]
) -> BrokerSnapshot:
    snap = snapshot(time_s, 0.0, None)
    snap.cpu_by_pid = {11: cpu[0], 12: cpu[1]}
    snap.rss_by_pid = {11: rss_kb[0], 12: rss_kb[1]}
    snap.requests = {"Produce": 1_000 * time_s}
    return snap


def test_steady_window_sums_the_processes_of_a_broker_and_shows_each() -> None:
    window = SteadyWindow((11, 12), (), 0.0, 4.0)
    window.first = two_processes(10, (1.0, 5.0), (10_240, 20_480))
    window.last = two_processes(14, (2.0, 8.0), (20_480, 30_720))
    window._note_rss(window.first)
    window._note_rss(window.last)
    figures = window.figures()
    assert figures["cpu_s"] == 4.0 and figures["cpu_percent"] == 100.0
    assert figures["rss_mb"] == 50.0 and figures["peak_rss_mb"] == 50.0
    assert figures["processes"] == [
        {"pid": 11, "cpu_s": 1.0, "rss_mb": 20.0, "peak_rss_mb": 20.0},
        {"pid": 12, "cpu_s": 3.0, "rss_mb": 30.0, "peak_rss_mb": 30.0},
    ]
    requests = steady_requests(figures, [], prefer_client=False)
    assert requests is not None and requests["cpu_us_per_request"] == 1_000.0, (
        "4 CPU s of both processes over 4,000 requests"
    )
    assert process_lines(figures) == [
        "  process 11: 1.00 s CPU, RSS 20.0 MB (peak 20.0 MB)",
        "  process 12: 3.00 s CPU, RSS 30.0 MB (peak 30.0 MB)",
    ]
    one = SteadyWindow((11,), (), 0.0, 4.0)
    one.first, one.last = snapshot(10, 1.0, 0, pid=11), snapshot(14, 2.0, 4_000, pid=11)
    assert "processes" not in one.figures() and process_lines(one.figures()) == []


def test_snapshot_reads_every_process_and_sums_every_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = {
        "http://a/metrics": ({"Produce": 3.0}, 2.0, 1.0),
        "http://b/metrics": ({"Produce": 4.0, "Fetch": 1.0}, 5.0, 3.0),
    }
    monkeypatch.setattr(
        "raftka.broker.tools.bench_requests.scrape_broker_counts",
        lambda url, timeout_s: pages[url],
    )
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        snap = BrokerSnapshot((os.getpid(), child.pid), list(pages))
        assert snap.requests == {"Produce": 7.0, "Fetch": 1.0}
        assert snap.wakeups == 7.0 and snap.lingers == 4.0
        assert snap.system_s is not None and 0 <= snap.system_s <= snap.cpu_s
        assert snap.cpu_by_pid is not None and set(snap.cpu_by_pid) == {os.getpid(), child.pid}
        assert snap.cpu_s == sum(snap.cpu_by_pid.values())
        assert snap.rss_by_pid is not None and all(snap.rss_by_pid.values())
        assert snap.rss_kb == sum(kb or 0 for kb in snap.rss_by_pid.values())
    finally:
        child.kill()
        child.wait()
    gone = BrokerSnapshot((child.pid,), ())
    assert gone.cpu_s is None and gone.error == f"broker process {child.pid} is gone"


def test_broker_meter_sums_its_processes_and_prints_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        meter = BrokerMeter((os.getpid(), child.pid))
        busy_until = time.process_time() + 0.2
        while time.process_time() < busy_until:
            pass
        figures = meter.report("produce", 10**9)
    finally:
        child.kill()
        child.wait()
    assert figures is not None
    mine, sleeper = figures["processes"]
    assert mine["pid"] == os.getpid() and mine["cpu_s"] >= 0.1
    assert sleeper["pid"] == child.pid and sleeper["cpu_s"] < mine["cpu_s"]
    assert figures["cpu_s"] == pytest.approx(mine["cpu_s"] + sleeper["cpu_s"])
    assert figures["cpu_s_per_gb"] == pytest.approx(figures["cpu_s"])
    assert figures["peak_rss_mb"] == pytest.approx(mine["peak_rss_mb"] + sleeper["peak_rss_mb"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("broker (produce): ") and "(sums of 2 processes)" in out[0]
    assert out[1].startswith(f"  process {os.getpid()}: ") and "peak RSS" in out[1]
    assert out[2].startswith(f"  process {child.pid}: ")
    assert BrokerMeter(()).report("produce", 1) is None


def test_steady_window_figures_and_the_source_they_count_by() -> None:
    window = SteadyWindow((), (), 0.0, 4.0)
    assert window.figures() == {"complete": False}
    window.first, window.last = snapshot(10, 1.0, 1_000), snapshot(14, 3.0, 9_000)
    figures = window.figures()
    assert figures["seconds"] == 4.0 and figures["cpu_s"] == 2.0
    assert figures["cpu_percent"] == 50.0 and figures["rss_mb"] == 50.0
    assert figures["requests"] == {"Produce": 8_000.0}
    broker = steady_requests(figures, [], prefer_client=False)
    assert broker is not None and broker["source"] == "broker"
    assert broker["total_per_s"] == 2_000.0 and broker["cpu_us_per_request"] == 250.0
    samples = [[(11 * 10**9, {"Produce": 0}), (13 * 10**9, {"Produce": 2_000})]]
    client = steady_requests(figures, samples, prefer_client=True)
    assert client is not None and client["source"] == "client"
    assert client["total_per_s"] == 1_000.0 and client["cpu_us_per_request"] == 500.0
    assert steady_requests(figures, [], prefer_client=True) is None


def test_steady_acks_take_records_sent_after_the_warmup_and_acks_inside_the_part() -> None:
    ms = 1_000_000
    produced = [
        {
            # acknowledged at 5, 1005, 1500 and 3100 ms after 0, latencies 5, 5, 400, 50 ms
            "ack_ns": array("q", [5 * ms, 1005 * ms, 1500 * ms, 3100 * ms]),
            "ack_latency_us": array("q", [5_000, 5_000, 400_000, 50_000]),
        }
    ]
    acks = steady_acks(produced, steady_from_ns=1000 * ms, duration_s=2.0)
    # Sent at or after 1000 ms: the second (sent 1000 ms), third (1100), fourth (3050).
    assert acks["ack_latency_ms"]["count"] == 3 and acks["ack_latency_ms"]["max"] == 400.0
    # Acknowledged within [1000, 3000) ms: the second and third, over 2 s.
    assert acks["acked_records_per_s"] == 1.0
