"""`scripts/bench`'s pure parts: its statistics, the medians table, how a load is shared out,
and which option combinations it refuses (no broker, no client processes)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from raftka.broker.tools.bench import parse_args, pid_list, positive_int, run_topic
from raftka.broker.tools.bench_report import (
    METRICS,
    dig,
    latency_summary,
    medians,
    percentile,
    print_summary,
)
from raftka.broker.tools.bench_runs import split
from raftka.broker.tools.bench_workers import LATENCY_HEADER, producer_config


def test_percentile_is_nearest_rank_and_zero_when_empty() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.99) == 100.0
    assert percentile(values, 0.999) == 100.0
    assert percentile(values, 0.0) == 1.0
    assert percentile([], 0.5) == 0.0


def test_latency_summary_orders_its_input() -> None:
    summary = latency_summary([3.0, 1.0, 2.0, 10.0])
    assert summary == {
        "count": 4,
        "avg": 4.0,
        "p50": 3.0,
        "p99": 10.0,
        "p99_9": 10.0,
        "max": 10.0,
    }
    assert latency_summary([]) == {
        "count": 0,
        "avg": 0.0,
        "p50": 0.0,
        "p99": 0.0,
        "p99_9": 0.0,
        "max": 0.0,
    }


def test_dig_finds_a_figure_or_none() -> None:
    run = {"produce": {"records_per_s": 10, "broker": None}}
    assert dig(run, ("produce", "records_per_s")) == 10.0
    assert dig(run, ("produce", "broker", "cpu_s_per_gb")) is None
    assert dig(run, ("consume", "records_per_s")) is None


def test_medians_take_each_metric_over_the_runs_that_have_it() -> None:
    runs = [
        {"produce": {"records_per_s": 100.0, "mb_per_s": 1.0}},
        {"produce": {"records_per_s": 300.0, "mb_per_s": 3.0}},
        {"produce": {"records_per_s": 200.0}},
    ]
    assert medians(runs) == {"produce rec/s": 200.0, "produce MB/s": 2.0}
    assert {name for name, _ in METRICS} >= set(medians(runs))


def test_summary_table_has_a_column_per_broker_and_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    summary = {
        "medians": {
            "raftka": {"produce rec/s": 200_000.0, "consume rec/s": 300_000.0},
            "other": {"produce rec/s": 100_000.0},
        },
        "ratio": {"produce rec/s": 2.0},
    }
    print_summary(summary, 3)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "",
        "medians of 3 run(s):",
        f"{'':26}{'raftka':>16}{'other':>16}{'raftka/other':>16}",
        f"{'produce rec/s':26}{'200,000.00':>16}{'100,000.00':>16}{'2.00':>16}",
        f"{'consume rec/s':26}{'300,000.00':>16}{'-':>16}{'-':>16}",
    ]


def test_split_shares_a_load_by_at_most_one() -> None:
    assert split(10, 3) == [4, 3, 3]
    assert split(2, 4) == [1, 1, 0, 0]
    assert sum(split(1_000_001, 7)) == 1_000_001


def test_defaults_and_derived_options() -> None:
    args = parse_args(["--consumers", "3", "--json", "/tmp/bench.json"])
    assert args.bootstrap == "127.0.0.1:9092" and not args.start_broker
    assert args.partitions == 3, "one partition per consumer unless --partitions"
    assert args.num_records == 1_000_000 and args.record_size == 100 and args.acks == "all"
    assert args.plot == Path("/tmp/bench.png"), "the plot goes beside the JSON"
    assert parse_args(["--partitions", "8", "--consumers", "2"]).partitions == 8
    assert args.connections is None and args.idle_connections is None
    assert args.connection_in_flight == 5, "as the Java producer's max in-flight requests"


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--rate", "100", "--record-size", "8"], "--record-size 16 or more"),
        (["--rate", "1", "--producers", "2"], "at least one record/s each"),
        (["--rate", "100", "--duration", "0"], "--duration must be > 0"),
        (["--rate", "100", "--mode", "produce"], "leave out --mode"),
        (["--mode", "consume"], "--mode consume needs --topic"),
        (["--compare-pid", "1"], "give --compare too"),
        (["--json", "/no/such/folder/bench.json"], "does not exist"),
        (["--start-broker", "--bootstrap", "127.0.0.1:9092"], "not allowed with"),
        (["--num-records", "0"], "is not a positive integer"),
        (["--connections", "10"], "--connections N needs --rate R"),
        (["--connections", "10", "--rate", "100", "--mode", "produce"], "only produces"),
        (["--idle-connections", "10", "--mode", "produce"], "runs no load"),
        (["--broker-pid", "12,x"], "'x' is not a pid"),
        (["--broker-pid", "0"], "0 is not a pid"),
        (["--broker-pid", "12", "--broker-pid", "13,12"], "names a process twice"),
        (["--broker-metrics", "h:1", "--broker-metrics", "h:1"], "names an endpoint twice"),
    ],
)
def test_refused_option_combinations(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_broker_pids_are_one_or_several_and_metrics_endpoints_repeat() -> None:
    assert parse_args([]).broker_pid == () and parse_args([]).broker_metrics == []
    assert parse_args(["--broker-pid", "4242"]).broker_pid == (4242,)
    several = parse_args(["--broker-pid", "11,12", "--broker-pid", "13"])
    assert several.broker_pid == (11, 12, 13), "comma lists and repeats add up, in order"
    metrics = parse_args(["--broker-metrics", "h:1", "--broker-metrics", "http://h:2/metrics"])
    assert metrics.broker_metrics == ["h:1", "http://h:2/metrics"]
    assert pid_list("7") == [7] and pid_list("7,8") == [7, 8]
    with pytest.raises(argparse.ArgumentTypeError):
        pid_list("7,")


def test_positive_int() -> None:
    assert positive_int("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int("0")


def test_latency_header_fits_the_smallest_record_it_allows() -> None:
    assert LATENCY_HEADER.size == 16
    assert parse_args(["--rate", "100", "--record-size", "16"]).rate == 100


def test_run_topic_is_new_per_run_unless_one_run_names_it() -> None:
    one = parse_args(["--topic", "t"])
    assert run_topic(one, "raftka", 1, 1) == "t"
    assert run_topic(one, "raftka", 1, 2).startswith("t-raftka-1-")
    fresh = parse_args([])
    first, second = run_topic(fresh, "other", 2, 1), run_topic(fresh, "other", 2, 1)
    assert first.startswith("raftka-bench-other-2-") and first != second
    assert run_topic(parse_args(["--mode", "consume", "--topic", "t"]), "raftka", 1, 2) == "t"


def test_producer_config_takes_extra_properties_last() -> None:
    spec = {
        "bootstrap": "b:1",
        "acks": "1",
        "compression": "lz4",
        "linger_ms": 5.0,
        "batch_size": 1000,
        "producer_config": ["linger.ms=0", "client.id=x=y"],
    }
    config = producer_config(spec)
    assert config["bootstrap.servers"] == "b:1" and config["compression.type"] == "lz4"
    assert config["linger.ms"] == "0" and config["client.id"] == "x=y"
    assert config["enable.idempotence"] is False
