"""BrokerMetrics on its own: what the hot paths count and how a scrape renders it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from raftka.broker.metrics import HANDLER_FAILED, BrokerMetrics, error_name

PRODUCE, FETCH = 0, 1


def _samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_requests_time_and_errors_per_api() -> None:
    metrics = BrokerMetrics({PRODUCE: "Produce", FETCH: "Fetch"})
    metrics.request_done(PRODUCE, 0.004, None)
    metrics.request_done(PRODUCE, 0.020, error_name(6))
    metrics.request_done(FETCH, 0.5, HANDLER_FAILED)
    metrics.request_done(99, 0.001, None)  # not in the table: named by its key
    metrics.request_error(PRODUCE, 6)
    samples = _samples(metrics)
    requests = "kafka_network_requestmetrics_requests_total"
    assert samples[requests, (("request", "Produce"),)] == 2
    assert samples[requests, (("request", "Fetch"),)] == 1
    assert samples[requests, (("request", "ApiKey99"),)] == 1
    errors = "kafka_network_requestmetrics_errors_total"
    assert samples[errors, (("error", "NOT_LEADER_OR_FOLLOWER"), ("request", "Produce"))] == 2
    assert samples[errors, (("error", "UNKNOWN_SERVER_ERROR"), ("request", "Fetch"))] == 1
    time_ms = "kafka_network_requestmetrics_totaltimems"
    assert samples[time_ms + "_count", (("request", "Produce"),)] == 2
    assert samples[time_ms + "_sum", (("request", "Produce"),)] == 24.0
    assert samples[time_ms + "_bucket", (("le", "5.0"), ("request", "Produce"))] == 1


def test_bytes_and_messages_per_topic_and_deleted_topics_forgotten() -> None:
    live = {"orders", "clicks"}
    metrics = BrokerMetrics({}, live_topics=lambda: live)
    metrics.produced("orders", 1000, 10)
    metrics.produced("orders", 500, 5)
    metrics.produced("clicks", 70, 1)
    metrics.fetched("orders", 1500)
    samples = _samples(metrics)
    orders = (("topic", "orders"),)
    assert samples["kafka_server_brokertopicmetrics_bytesin_total", orders] == 1500
    assert samples["kafka_server_brokertopicmetrics_messagesin_total", orders] == 15
    assert samples["kafka_server_brokertopicmetrics_bytesout_total", orders] == 1500
    live.discard("orders")
    samples = _samples(metrics)
    assert not [key for key in samples if key[1] == orders]
    assert samples["kafka_server_brokertopicmetrics_bytesin_total", (("topic", "clicks"),)] == 70
    metrics.produced("orders", 1, 1)  # re-created: counts from zero again
    live.add("orders")
    assert _samples(metrics)["kafka_server_brokertopicmetrics_bytesin_total", orders] == 1


def test_connections_and_separate_registries() -> None:
    first, second = BrokerMetrics({}), BrokerMetrics({})
    first.connection_opened()
    first.connection_opened()
    first.connection_closed()
    second.connection_opened()
    key = ("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))
    assert _samples(first)[key] == 1
    assert _samples(second)[key] == 1


def test_error_names_are_kafkas() -> None:
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(-12345) == "-12345"


def test_the_grafana_dashboard_uses_only_metrics_the_broker_has() -> None:
    root = Path(__file__).resolve().parents[3]
    dashboard = json.loads((root / "scripts" / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {
        re.sub(r"_(total|bucket)$", "", name)
        for expr in exprs
        for name in re.findall(r"\b(?:kafka|raftka)_[a-z_]+", expr)
    }
    source = (root / "broker" / "metrics.py").read_text()
    assert used and all(f'"{name}"' in source for name in used), sorted(used)
