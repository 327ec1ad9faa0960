"""This broker's throughput over the last minutes for the overview: the produce and fetch
byte counters sampled every SAMPLE_INTERVAL_S into a bounded window, and the rates between
samples drawn as an inline SVG chart (rendered here, no script)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, NamedTuple

import trio

from raftka.broker.console.html import Html, size_text, tag

if TYPE_CHECKING:
    from raftka.broker.clock import Clock
    from raftka.broker.metrics import BrokerMetrics

SAMPLE_INTERVAL_S = 5.0
#: Samples kept: ten minutes.
SAMPLES_MAX = 120
#: Per-topic counts kept, for the topics' rates over the last minute.
TOPIC_SAMPLES_MAX = 13
WIDTH = 640
HEIGHT = 160
MARGIN = 40


class Sample(NamedTuple):
    at_s: float
    bytes_in: int
    messages_in: int
    bytes_out: int


class Rate(NamedTuple):
    """Rates between two samples, per second; `at_s` is the later sample's time."""

    at_s: float
    bytes_in: float
    messages_in: float
    bytes_out: float


class Throughput:
    """Samples `metrics`' traffic counters while `run` runs."""

    def __init__(self, metrics: BrokerMetrics, clock: Clock) -> None:
        self.metrics = metrics
        self.clock = clock
        self.samples: deque[Sample] = deque(maxlen=SAMPLES_MAX)
        self.topic_samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=TOPIC_SAMPLES_MAX)

    def sample(self) -> None:
        now = self.clock.now_s()
        self.samples.append(Sample(now, *self.metrics.traffic_totals()))
        self.topic_samples.append((now, self.metrics.topic_messages_in()))

    def topic_rates(self) -> dict[str, float]:
        """Records produced to each topic through this broker per second, over the last
        minute of samples (empty until there are two)."""
        if len(self.topic_samples) < 2:
            return {}
        (first_s, first), (last_s, last) = self.topic_samples[0], self.topic_samples[-1]
        elapsed = last_s - first_s
        if elapsed <= 0:
            return {}
        return {topic: (count - first.get(topic, 0)) / elapsed for topic, count in last.items()}

    async def run(self) -> None:
        while True:
            self.sample()
            await trio.sleep(SAMPLE_INTERVAL_S)

    def rates(self) -> list[Rate]:
        found = []
        ordered = list(self.samples)
        for before, after in zip(ordered, ordered[1:], strict=False):
            elapsed = after.at_s - before.at_s
            if elapsed > 0:
                found.append(
                    Rate(
                        after.at_s,
                        (after.bytes_in - before.bytes_in) / elapsed,
                        (after.messages_in - before.messages_in) / elapsed,
                        (after.bytes_out - before.bytes_out) / elapsed,
                    )
                )
        return found


def _points(rates: list[Rate], values: list[float], top: float, start_s: float) -> str:
    span_s = SAMPLES_MAX * SAMPLE_INTERVAL_S
    plot_w = WIDTH - 2 * MARGIN
    plot_h = HEIGHT - 2 * MARGIN
    return " ".join(
        f"{MARGIN + plot_w * (rate.at_s - start_s) / span_s:.1f},"
        f"{HEIGHT - MARGIN - plot_h * value / top:.1f}"
        for rate, value in zip(rates, values, strict=True)
    )


def chart(rates: list[Rate], now_s: float) -> Html:
    """The rates of the last SAMPLES_MAX intervals as an SVG chart: bytes in (produce) and
    out (fetch) per second, the time axis ending now."""
    if not rates:
        return tag("p", "No samples yet: the chart fills in over the next seconds.")
    start_s = now_s - SAMPLES_MAX * SAMPLE_INTERVAL_S
    top = max(1024.0, *(max(r.bytes_in, r.bytes_out) for r in rates)) * 1.1
    incoming = _points(rates, [r.bytes_in for r in rates], top, start_s)
    outgoing = _points(rates, [r.bytes_out for r in rates], top, start_s)
    last = rates[-1]
    axis = (
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" '
        f'y2="{HEIGHT - MARGIN}" stroke="#8a94a0"/>'
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" '
        'stroke="#8a94a0"/>'
    )
    labels = (
        f'<text x="{MARGIN}" y="{MARGIN - 8}" font-size="11">{size_text(int(top))}/s</text>'
        f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 16}" font-size="11">−10 min</text>'
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" font-size="11" '
        'text-anchor="end">now</text>'
    )
    lines = (
        f'<polyline points="{incoming}" fill="none" stroke="#1f6feb" stroke-width="2"/>'
        f'<polyline points="{outgoing}" fill="none" stroke="#d97706" stroke-width="2"/>'
    )
    svg = Html(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="throughput">'
        + axis
        + labels
        + lines
        + "</svg>"
    )
    peak_in = max(r.bytes_in for r in rates)
    peak_out = max(r.bytes_out for r in rates)
    legend = tag(
        "p",
        tag("span", f"in (produce): {size_text(int(last.bytes_in))}/s", class_="in", id="rate-in"),
        f", {last.messages_in:.0f} messages/s, peak ",
        tag("span", f"{size_text(int(peak_in))}/s", id="peak-in"),
        " · ",
        tag(
            "span", f"out (fetch): {size_text(int(last.bytes_out))}/s", class_="out", id="rate-out"
        ),
        ", peak ",
        tag("span", f"{size_text(int(peak_out))}/s", id="peak-out"),
        class_="legend",
    )
    return tag("div", svg, legend, class_="chart", id="throughput")
