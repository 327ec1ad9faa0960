"""BrokerMetrics on its own: what the hot paths count and how a scrape renders it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from raftka.broker.metrics import (
    HANDLER_FAILED,
    REQUEST_TIME_BUCKETS_MS,
    BrokerInfoCollector,
    BrokerMetrics,
    error_name,
)

PRODUCE, FETCH = 0, 1


def _samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _series(metrics: BrokerMetrics) -> dict[str, str]:
    """The sample lines of a scrape, as Prometheus reads them: series -> value."""
    lines = metrics.exposition().decode().splitlines()
    return dict(line.rsplit(" ", 1) for line in lines if not line.startswith("#"))


def test_a_scrape_shows_each_series_with_its_value() -> None:
    started = time.time()
    metrics = BrokerMetrics({PRODUCE: "Produce", FETCH: "Fetch"}, live_topics=lambda: {"orders"})
    gauges = {
        'kafka_server_socketservermetrics_connection_count{listener="PLAINTEXT"}': "0.0",
        "raftka_event_loop_lag_seconds": "0.0",
    }
    before = _series(metrics)
    # nothing counted yet: no per-API or per-topic series, and no response sent
    assert {name: value for name, value in before.items() if "_created" not in name} == {
        **gauges,
        "raftka_response_sends_total": "0.0",
        "raftka_poller_wakeups_total": "0.0",
        "raftka_poller_lingers_total": "0.0",
    }
    for seconds in (0.0005, 0.001, 0.003):  # 1 ms is on a bound: counted in le="1.0"
        metrics.request_done(PRODUCE, seconds, None)
    metrics.request_done(FETCH, 40.0, HANDLER_FAILED)  # past the last bound: only in +Inf
    metrics.request_error(PRODUCE, 6)
    metrics.produced("orders", 100, 1)
    metrics.produced("orders", 250, 4)
    metrics.fetched("orders", 350)
    metrics.response_sends += 2
    metrics.poller_wakeups += 3
    metrics.poller_lingers += 2
    series = _series(metrics)
    created = {name: value for name, value in series.items() if "_created" in name}
    assert sorted(created) == [
        'kafka_network_requestmetrics_errors_created{error="NOT_LEADER_OR_FOLLOWER",'
        'request="Produce"}',
        'kafka_network_requestmetrics_errors_created{error="UNKNOWN_SERVER_ERROR",request="Fetch"}',
        'kafka_network_requestmetrics_requests_created{request="Fetch"}',
        'kafka_network_requestmetrics_requests_created{request="Produce"}',
        'kafka_network_requestmetrics_totaltimems_created{request="Fetch"}',
        'kafka_network_requestmetrics_totaltimems_created{request="Produce"}',
        'kafka_server_brokertopicmetrics_bytesin_created{topic="orders"}',
        'kafka_server_brokertopicmetrics_bytesout_created{topic="orders"}',
        'kafka_server_brokertopicmetrics_messagesin_created{topic="orders"}',
        "raftka_poller_lingers_created",
        "raftka_poller_wakeups_created",
        "raftka_response_sends_created",
    ]
    assert all(started <= float(value) <= time.time() for value in created.values())
    time_ms = "kafka_network_requestmetrics_totaltimems"
    produce_buckets = [2, 2, 3] + [3] * 12  # cumulative: le="1.0", le="2.5", ..., "+Inf"
    expected = {
        **gauges,
        'kafka_network_requestmetrics_requests_total{request="Produce"}': "3.0",
        'kafka_network_requestmetrics_requests_total{request="Fetch"}': "1.0",
        'kafka_network_requestmetrics_errors_total{error="NOT_LEADER_OR_FOLLOWER",'
        'request="Produce"}': "1.0",
        'kafka_network_requestmetrics_errors_total{error="UNKNOWN_SERVER_ERROR",'
        'request="Fetch"}': "1.0",
        **{
            f'{time_ms}_bucket{{le="{le}",request="Produce"}}': f"{count:.1f}"
            for le, count in zip(_les(), produce_buckets, strict=True)
        },
        f'{time_ms}_count{{request="Produce"}}': "3.0",
        f'{time_ms}_sum{{request="Produce"}}': "4.5",
        **{f'{time_ms}_bucket{{le="{le}",request="Fetch"}}': "0.0" for le in _les()[:-1]},
        f'{time_ms}_bucket{{le="+Inf",request="Fetch"}}': "1.0",
        f'{time_ms}_count{{request="Fetch"}}': "1.0",
        f'{time_ms}_sum{{request="Fetch"}}': "40000.0",
        'kafka_server_brokertopicmetrics_bytesin_total{topic="orders"}': "350.0",
        'kafka_server_brokertopicmetrics_messagesin_total{topic="orders"}': "5.0",
        'kafka_server_brokertopicmetrics_bytesout_total{topic="orders"}': "350.0",
        "raftka_response_sends_total": "2.0",
        "raftka_poller_wakeups_total": "3.0",
        "raftka_poller_lingers_total": "2.0",
    }
    assert {name: value for name, value in series.items() if name not in created} == expected
    metrics.request_done(PRODUCE, 0.0001, None)  # counting goes on after a scrape
    series = _series(metrics)
    assert series['kafka_network_requestmetrics_requests_total{request="Produce"}'] == "4.0"
    assert series[f'{time_ms}_bucket{{le="1.0",request="Produce"}}'] == "3.0"
    assert series[f'{time_ms}_bucket{{le="+Inf",request="Produce"}}'] == "4.0"


def _les() -> list[str]:
    return [f"{float(bound)}" for bound in REQUEST_TIME_BUCKETS_MS] + ["+Inf"]


def test_a_scrape_is_what_prometheus_clients_counters_and_histogram_render() -> None:
    """The same calls counted by prometheus_client's own Counter and Histogram give the
    same text, but for the times in `_created`."""
    live = {"orders", "clicks"}
    metrics = BrokerMetrics({PRODUCE: "Produce", FETCH: "Fetch"}, live_topics=lambda: live)
    reference = CollectorRegistry()
    requests = Counter(
        "kafka_network_requestmetrics_requests",
        "Requests answered, per API (Kafka's RequestMetrics RequestsPerSec).",
        ["request"],
        registry=reference,
    )
    total_time = Histogram(
        "kafka_network_requestmetrics_totaltimems",
        "Time from reading a request to writing its response, in milliseconds, per API "
        "(Kafka's RequestMetrics TotalTimeMs).",
        ["request"],
        buckets=REQUEST_TIME_BUCKETS_MS,
        registry=reference,
    )
    errors = Counter(
        "kafka_network_requestmetrics_errors",
        "Requests answered with an error, per API and error: the response's top-level "
        "error code, Produce and Fetch per partition, UNKNOWN_SERVER_ERROR for a failed "
        "handler (Kafka's RequestMetrics ErrorsPerSec, without NONE).",
        ["request", "error"],
        registry=reference,
    )
    topic_counters = [
        Counter(name, help_text, ["topic"], registry=reference)
        for name, help_text in [
            (
                "kafka_server_brokertopicmetrics_bytesin",
                "Bytes of record batches appended by Produce, per topic (BytesInPerSec).",
            ),
            (
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by Produce, per topic (MessagesInPerSec).",
            ),
            (
                "kafka_server_brokertopicmetrics_bytesout",
                "Bytes of record batches returned by Fetch, per topic (BytesOutPerSec).",
            ),
        ]
    ]
    bytes_in, messages_in, bytes_out = topic_counters
    names = {PRODUCE: "Produce", FETCH: "Fetch"}
    times = [0.0, 0.0001, 0.001, 0.0025, 0.0026, 0.0099999, 0.02, 0.5, 3.0, 29.9, 30.0, 31.0]
    for index, seconds in enumerate(times):
        api_key = index % 2
        error = None if index % 3 else error_name(6)
        metrics.request_done(api_key, seconds, error)
        requests.labels(names[api_key]).inc()
        total_time.labels(names[api_key]).observe(seconds * 1000)
        if error is not None:
            errors.labels(names[api_key], error).inc()
    for topic, batch_bytes, records in [("orders", 1000, 10), ("clicks", 70, 1), ("orders", 3, 2)]:
        metrics.produced(topic, batch_bytes, records)
        bytes_in.labels(topic).inc(batch_bytes)
        messages_in.labels(topic).inc(records)
    metrics.fetched("clicks", 9)
    bytes_out.labels("clicks").inc(9)
    metrics.request_error(FETCH, 1)
    errors.labels("Fetch", "OFFSET_OUT_OF_RANGE").inc()

    def without_times(text: bytes) -> list[str]:
        lines = text.decode().splitlines()
        return [re.sub(r"^(\S*_created\S*) \S+$", r"\1", line) for line in lines]

    ours = without_times(metrics.exposition())
    theirs = without_times(generate_latest(reference))
    assert ours[: len(theirs)] == theirs
    assert all(
        line.startswith(("# ", "kafka_server_socketserver", "raftka_"))
        for line in ours[len(theirs) :]
    )


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
        re.sub(r"_(total|bucket|info)$", "", name)
        for expr in exprs
        for name in re.findall(r"\b(?:kafka|raftka)_[a-z_]+", expr)
    }
    source = (root / "broker" / "metrics.py").read_text()
    assert used and all(f'"{name}"' in source for name in used), sorted(used)


def test_the_broker_info_names_node_rack_and_host() -> None:
    """One series, value 1, whose labels say which broker and host a scrape came from (a
    broker without a rack shows an empty one)."""
    metrics = BrokerMetrics({PRODUCE: "Produce"}, live_topics=lambda: set())
    metrics.registry.register(BrokerInfoCollector(3, "rack-b", "host-7"))
    series = _series(metrics)
    assert series['raftka_broker_info{host="host-7",node_id="3",rack="rack-b"}'] == "1.0"
    plain = BrokerMetrics({PRODUCE: "Produce"}, live_topics=lambda: set())
    plain.registry.register(BrokerInfoCollector(1, None, "h"))
    assert _series(plain)['raftka_broker_info{host="h",node_id="1",rack=""}'] == "1.0"
