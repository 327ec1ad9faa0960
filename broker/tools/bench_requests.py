"""Requests per second by API and broker CPU per request over a bench run's steady part.

Two sources count requests. The broker's own: raftka's metrics endpoint serves Prometheus'
`kafka_network_requestmetrics_requests_total{request=...}`, read at both ends of the steady
part. The clients': librdkafka's statistics (`statistics.interval.ms`) carry per-broker
request counts by API name (`brokers.*.req`), sampled in every bench client; their rate over
the samples inside the steady part stands for the whole part. A broker without the endpoint
(Apache Kafka) is counted from the client side, and a comparison counts both sides that way.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from raftka.broker.tools.procfs import Pids, cpu_seconds, status_kb_by_pid, sum_kb

REQUESTS_METRIC = "kafka_network_requestmetrics_requests"
# Turns of raftka's event loop that read client sockets (see broker/readiness.py).
WAKEUPS_METRIC = "raftka_poller_wakeups"
# Of those, the ones that lingered first (`request.linger.us`).
LINGERS_METRIC = "raftka_poller_lingers"
STATISTICS_INTERVAL_MS = 500
# A busy broker's event loop answers its metrics endpoint late; past this it is reported.
SCRAPE_TIMEOUT_S = 30.0
SCRAPE_SLOW_S = 0.5
# Produce "dominates" a load, and CPU per Produce request is printed, from this share on.
PRODUCE_DOMINATES = 0.9

# API name -> requests (counters are floats in Prometheus' text format).
RequestCounts = dict[str, float]
# (time.time_ns() of the sample, requests by API so far): one client's statistics over time.
ClientSample = tuple[int, dict[str, int]]


# -- the broker's counters -----------------------------------------------------------------


def metrics_url(address: str) -> str:
    """The /metrics URL of a `metrics.listen` address (HOST:PORT) or of a full URL."""
    if "://" in address:
        return address
    return f"http://{address}/metrics"


def parse_request_counts(text: str) -> RequestCounts:
    """Requests answered by API from a Prometheus text page (`..._requests_total` samples)."""
    counts: RequestCounts = {}
    for family in text_string_to_metric_families(text):
        if family.name != REQUESTS_METRIC:
            continue
        for sample in family.samples:
            if sample.name == f"{REQUESTS_METRIC}_total" and "request" in sample.labels:
                api = sample.labels["request"]
                counts[api] = counts.get(api, 0.0) + float(sample.value)
    return counts


def parse_poller_counts(text: str) -> tuple[float | None, float | None]:
    """The poller's wake-ups and lingers from a Prometheus text page; None for a counter the
    page does not have (a broker other than raftka, or one from before lingers)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in (WAKEUPS_METRIC, LINGERS_METRIC):
            for sample in family.samples:
                if sample.name == f"{family.name}_total":
                    found[family.name] = float(sample.value)
    return found.get(WAKEUPS_METRIC), found.get(LINGERS_METRIC)


def scrape_broker_counts(
    url: str, timeout_s: float = 5.0
) -> tuple[RequestCounts, float | None, float | None]:
    """The broker's request counters, poller wake-ups and lingers now; OSError if the
    endpoint does not answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    return parse_request_counts(text), *parse_poller_counts(text)


def count_delta(before: Mapping[str, float], after: Mapping[str, float]) -> RequestCounts:
    """Requests by API between two readings of the counters; APIs with none left out."""
    delta = {api: after[api] - before.get(api, 0.0) for api in after}
    return {api: n for api, n in sorted(delta.items()) if n > 0}


# -- the clients' statistics ---------------------------------------------------------------


def client_request_counts(statistics: Mapping[str, Any]) -> dict[str, int]:
    """Requests sent by API, summed over the brokers of one librdkafka statistics document."""
    counts: dict[str, int] = {}
    for broker in statistics.get("brokers", {}).values():
        for api, n in broker.get("req", {}).items():
            if n:
                counts[api] = counts.get(api, 0) + int(n)
    return counts


def client_window_rates(
    workers: Sequence[Sequence[ClientSample]], start_ns: int, end_ns: int
) -> RequestCounts | None:
    """Requests/s by API summed over the clients, each client's rate taken between its first
    and last statistics sample inside [start_ns, end_ns]; None if no client has two there."""
    rates: RequestCounts = {}
    measured = False
    for samples in workers:
        inside = [s for s in samples if start_ns <= s[0] <= end_ns]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            continue
        measured = True
        (t0, first), (t1, last) = inside[0], inside[-1]
        seconds = (t1 - t0) / 1e9
        for api, n in count_delta(first, last).items():
            rates[api] = rates.get(api, 0.0) + n / seconds
    return dict(sorted(rates.items())) if measured else None


class ClientRequestStats:
    """A bench client's librdkafka statistics, kept as (time, requests by API) samples."""

    def __init__(self) -> None:
        self.samples: list[ClientSample] = []

    def client_config(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The properties that turn the statistics on (none unless spec["client_stats"])."""
        if not spec.get("client_stats"):
            return {}
        return {"statistics.interval.ms": STATISTICS_INTERVAL_MS, "stats_cb": self.on_stats}

    def on_stats(self, document: str) -> None:
        self.samples.append((time.time_ns(), client_request_counts(json.loads(document))))


# -- figures -------------------------------------------------------------------------------


def request_figures(
    requests_per_s: Mapping[str, float],
    seconds: float,
    cpu_s: float | None,
    source: str,
    wakeups: float | None = None,
    lingers: float | None = None,
    system_s: float | None = None,
) -> dict[str, Any]:
    """Requests/s by API and in total, and broker CPU µs per request (and per Produce
    request) for a part of `seconds` in which the broker used `cpu_s` (`system_s` of it in
    the kernel), and its poller woke `wakeups` times, `lingers` of them after a linger (each
    None: unknown)."""
    total_per_s = sum(requests_per_s.values())
    requests = total_per_s * seconds
    produce = requests_per_s.get("Produce", 0.0) * seconds
    cpu_us = cpu_s * 1e6 if cpu_s is not None else None
    return {
        "wakeups_per_s": wakeups / seconds if wakeups is not None and seconds else None,
        "requests_per_wakeup": requests / wakeups if wakeups and requests else None,
        "lingered_share": lingers / wakeups if wakeups and lingers is not None else None,
        "kernel_share": system_s / cpu_s if cpu_s and system_s is not None else None,
        "source": source,
        "seconds": seconds,
        "requests_per_s": dict(requests_per_s),
        "total_per_s": total_per_s,
        "produce_share": produce / requests if requests else 0.0,
        "broker_cpu_s": cpu_s,
        "cpu_us_per_request": cpu_us / requests if cpu_us is not None and requests else None,
        "cpu_us_per_produce": cpu_us / produce if cpu_us is not None and produce else None,
    }


def request_lines(figures: Mapping[str, Any]) -> list[str]:
    """The printed lines of `request_figures`: rates by API, then CPU per request."""
    by_api = ", ".join(
        f"{api} {rate:,.0f}" if rate >= 10 else f"{api} {rate:.1f}"
        for api, rate in sorted(figures["requests_per_s"].items(), key=lambda item: -item[1])
    )
    source = {
        "broker": "broker metrics",
        "client": "client statistics",
        "generator": "load generator's own count",
    }.get(figures["source"], figures["source"])
    lines = [f"requests/s ({source}): {figures['total_per_s']:,.0f} total; {by_api or 'none'}"]
    per_request = figures["cpu_us_per_request"]
    if per_request is not None:
        line = f"broker CPU per request: {per_request:,.0f} µs"
        if figures["produce_share"] >= PRODUCE_DOMINATES and figures["cpu_us_per_produce"]:
            line += (
                f" ({figures['cpu_us_per_produce']:,.0f} µs per Produce request, "
                f"{figures['produce_share']:.0%} of requests)"
            )
        line += f", {figures['broker_cpu_s']:.2f} CPU s in {figures['seconds']:.1f} s"
        kernel = figures.get("kernel_share")
        if kernel is not None:
            # The kernel's part: socket calls, and the sleeps and wake-ups between rounds.
            line += f", {kernel:.0%} of it in the kernel"
        lines.append(line)
    per_wakeup = figures.get("requests_per_wakeup")
    if per_wakeup is not None:
        # Each wake-up is a turn of the event loop: a fixed cost its requests share.
        line = (
            f"broker event loop: {figures['wakeups_per_s']:,.0f} poller wake-ups/s, "
            f"{per_wakeup:.2f} requests per wake-up"
        )
        lingered = figures.get("lingered_share")
        if lingered is not None:
            line += f", {lingered:.0%} of them after a linger (request.linger.us)"
        lines.append(line)
    return lines


# -- the steady part, seen from the broker's side ------------------------------------------


def total_of_all(values: Sequence[float | None]) -> float | None:
    """The sum of a counter read from every endpoint; None if one of them lacks it."""
    if not values or None in values:
        return None
    return sum(v for v in values if v is not None)


def difference(first: float | None, last: float | None) -> float | None:
    """A counter's growth between two readings; None if either is unknown."""
    return last - first if first is not None and last is not None else None


def broker_request_figures(window: Mapping[str, Any], rates: RequestCounts) -> dict[str, Any]:
    """`request_figures` of a steady window read from the broker's own counters."""
    return request_figures(
        rates,
        window["seconds"],
        window["cpu_s"],
        "broker",
        window.get("poller_wakeups"),
        window.get("poller_lingers"),
        window.get("system_s"),
    )


class BrokerSnapshot:
    """The broker's CPU seconds, RSS and request counters at one moment, each summed over its
    processes (`pids`) and metrics endpoints (`urls`: one per shard or node); each None when
    it cannot be read (no pid, no metrics endpoint, process gone). A busy broker renders its
    counters some time into the scrape: time and CPU are then the means of their readings
    before and after it, so a late answer shifts neither end of a window more than the other."""

    def __init__(self, pids: Pids, urls: Sequence[str]) -> None:
        self.time_ns = time.time_ns()
        self.cpu_by_pid: dict[int, float] | None = None
        self.rss_by_pid: dict[int, int | None] | None = None
        self.requests: RequestCounts | None = None
        self.wakeups: float | None = None
        self.lingers: float | None = None
        #: System (kernel) CPU seconds of all the processes; None if unknown.
        self.system_s: float | None = None
        self.error: str | None = None
        self.cpu_by_pid = self._cpu(pids)
        if pids and self.cpu_by_pid is not None:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                self.rss_by_pid = status_kb_by_pid(pids, "VmRSS")
        if not urls:
            return
        started = time.monotonic()
        try:
            self.requests = {}
            wakeups: list[float | None] = []
            lingers: list[float | None] = []
            for url in urls:
                counts, woke, lingered = scrape_broker_counts(url, SCRAPE_TIMEOUT_S)
                for api, n in counts.items():
                    self.requests[api] = self.requests.get(api, 0.0) + n
                wakeups.append(woke)
                lingers.append(lingered)
            self.wakeups = total_of_all(wakeups)
            self.lingers = total_of_all(lingers)
        except (OSError, ValueError) as exc:
            self.requests = None
            self.wakeups = self.lingers = None
            self.error = f"metrics endpoint {url}: {exc}"
        took_s = time.monotonic() - started
        self.time_ns = (self.time_ns + time.time_ns()) // 2
        system_before = self.system_s
        cpu_after = self._cpu(pids)
        if self.cpu_by_pid is not None and cpu_after is not None:
            self.cpu_by_pid = {
                pid: (cpu + cpu_after[pid]) / 2 for pid, cpu in self.cpu_by_pid.items()
            }
            if system_before is not None and self.system_s is not None:
                self.system_s = (system_before + self.system_s) / 2
        if took_s > SCRAPE_SLOW_S and self.error is None:
            self.error = (
                f"metrics endpoint took {took_s:.1f} s to answer: request counts are approximate"
            )

    @property
    def cpu_s(self) -> float | None:
        """User+system CPU seconds of all the processes; None if unknown."""
        return sum(self.cpu_by_pid.values()) if self.cpu_by_pid is not None else None

    @property
    def rss_kb(self) -> int | None:
        """RSS of all the processes in kB; None if unknown."""
        return sum_kb(self.rss_by_pid) if self.rss_by_pid is not None else None

    def _cpu(self, pids: Pids) -> dict[int, float] | None:
        if not pids:
            return None
        by_pid = {}
        system_s = 0.0
        for pid in pids:
            try:
                user, system = cpu_seconds(pid)
            except (FileNotFoundError, ProcessLookupError):
                self.error = f"broker process {pid} is gone"
                self.system_s = None
                return None
            by_pid[pid] = user + system
            system_s += system
        self.system_s = system_s
        return by_pid


class SteadyWindow:
    """Snapshots of the broker at both ends of a run's steady part, taken by a thread that
    sleeps from `start()` (the run's start) through `warmup_s`, then through `duration_s`."""

    def __init__(
        self,
        pids: Pids,
        urls: Sequence[str],
        warmup_s: float,
        duration_s: float,
        snapshot: Callable[[Pids, Sequence[str]], BrokerSnapshot] = BrokerSnapshot,
    ) -> None:
        self.pids = pids
        self.urls = urls
        self.warmup_s = warmup_s
        self.duration_s = duration_s
        self.snapshot = snapshot
        self.first: BrokerSnapshot | None = None
        self.last: BrokerSnapshot | None = None
        self.peak_rss_kb: int | None = None
        self.peak_rss_by_pid: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-window", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        if self._stop.wait(self.warmup_s):
            return
        self.first = self.snapshot(self.pids, self.urls)
        end = started + self.warmup_s + self.duration_s
        # RSS once a second in between: the peak of the steady part, not of the whole life.
        while not self._stop.wait(max(0.0, min(1.0, end - time.monotonic()))):
            if time.monotonic() >= end:
                break
            self._note_rss(self.snapshot(self.pids, ()))
        if self._stop.is_set():
            return
        self.last = self.snapshot(self.pids, self.urls)
        self._note_rss(self.first)
        self._note_rss(self.last)

    def _note_rss(self, snap: BrokerSnapshot) -> None:
        if snap.rss_kb is not None:
            self.peak_rss_kb = max(self.peak_rss_kb or 0, snap.rss_kb)
        for pid, kb in (snap.rss_by_pid or {}).items():
            if kb is not None:
                self.peak_rss_by_pid[pid] = max(self.peak_rss_by_pid.get(pid, 0), kb)

    def finish(self) -> None:
        """Wait for the last snapshot (the run lasts longer than the window), or give up."""
        self._thread.join(timeout=self.warmup_s + self.duration_s + 30)
        self._stop.set()

    def figures(self) -> dict[str, Any]:
        """The window's bounds, the broker's CPU and RSS in it, and its request counts."""
        first, last = self.first, self.last
        if first is None or last is None:
            return {"complete": False}
        seconds = (last.time_ns - first.time_ns) / 1e9
        cpu_s = (
            last.cpu_s - first.cpu_s if first.cpu_s is not None and last.cpu_s is not None else None
        )
        requests = (
            count_delta(first.requests, last.requests)
            if first.requests is not None and last.requests is not None
            else None
        )
        return {
            "complete": True,
            "start_ns": first.time_ns,
            "end_ns": last.time_ns,
            "seconds": seconds,
            "cpu_s": cpu_s,
            "cpu_percent": 100.0 * cpu_s / seconds if cpu_s is not None and seconds else None,
            "rss_mb": last.rss_kb / 1024 if last.rss_kb is not None else None,
            "peak_rss_mb": self.peak_rss_kb / 1024 if self.peak_rss_kb is not None else None,
            "requests": requests,
            "poller_wakeups": difference(first.wakeups, last.wakeups),
            "poller_lingers": difference(first.lingers, last.lingers),
            "system_s": difference(first.system_s, last.system_s),
            "error": last.error or first.error,
            **self._processes(first, last),
        }

    def _processes(self, first: BrokerSnapshot, last: BrokerSnapshot) -> dict[str, Any]:
        """{"processes": CPU seconds and RSS of each process} when the broker has several."""
        if len(self.pids) < 2 or first.cpu_by_pid is None or last.cpu_by_pid is None:
            return {}
        rss = last.rss_by_pid or {}
        return {
            "processes": [
                {
                    "pid": pid,
                    "cpu_s": last.cpu_by_pid[pid] - first.cpu_by_pid[pid],
                    "rss_mb": kb / 1024 if (kb := rss.get(pid)) is not None else None,
                    "peak_rss_mb": (
                        self.peak_rss_by_pid[pid] / 1024 if pid in self.peak_rss_by_pid else None
                    ),
                }
                for pid in self.pids
            ]
        }


def process_lines(figures: Mapping[str, Any]) -> list[str]:
    """A line per broker process (CPU seconds, RSS) of figures with "processes"; none else."""
    lines = []
    for process in figures.get("processes", ()):
        rss = f"{process['rss_mb']:.1f} MB" if process["rss_mb"] is not None else "unknown"
        peak = process.get("peak_rss_mb")
        lines.append(
            f"  process {process['pid']}: {process['cpu_s']:.2f} s CPU, RSS {rss}"
            + (f" (peak {peak:.1f} MB)" if peak is not None else "")
        )
    return lines


def steady_broker_lines(steady: Mapping[str, Any]) -> list[str]:
    """The broker's lines of a steady part (`SteadyWindow.figures`): its share of a core and
    RSS, a line per process when there are several, and what went wrong if anything."""
    lines = []
    if steady.get("complete") and steady["cpu_s"] is not None:
        share = steady["cpu_percent"]
        lines.append(
            f"broker: {share:.{1 if share < 10 else 0}f}% of a core, RSS "
            f"{steady['rss_mb']:.1f} MB (peak {steady['peak_rss_mb']:.1f} MB in the steady part)"
        )
        lines.extend(process_lines(steady))
    if steady.get("error"):
        lines.append(f"broker: {steady['error']}")
    return lines


def steady_requests(
    window: Mapping[str, Any],
    client_samples: Sequence[Sequence[ClientSample]],
    prefer_client: bool,
) -> dict[str, Any] | None:
    """Request figures of a steady part: from the broker's counters when the window has
    them (unless `prefer_client`), else from the clients' statistics; None without either."""
    if not window.get("complete"):
        return None
    seconds = window["seconds"]
    if window["requests"] is not None and not prefer_client and seconds > 0:
        rates = {api: n / seconds for api, n in window["requests"].items()}
        return broker_request_figures(window, rates)
    client = client_window_rates(client_samples, window["start_ns"], window["end_ns"])
    if client is None:
        return None
    return request_figures(
        client, seconds, window["cpu_s"], "client", system_s=window.get("system_s")
    )
