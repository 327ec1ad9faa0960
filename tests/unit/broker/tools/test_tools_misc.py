"""The pure parts of `scripts/shards-experiment` and `scripts/startup-time`, and of the tools'
broker processes: medians and report lines, /proc readings, addresses, the ApiVersions probe's
request (no broker processes)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftka.broker.tools import shards_experiment, startup_time
from raftka.broker.tools.processes import (
    API_VERSIONS_KEY,
    BrokerProcess,
    api_versions_request_v3,
    free_port,
    split_host_port,
)
from raftka.broker.tools.procfs import (
    cpu_seconds,
    cpu_seconds_by_pid,
    cpu_seconds_sum,
    cpu_seconds_total,
    run_queue_wait_s,
    status_kb,
    status_kb_by_pid,
    sum_kb,
)


def shards_run(config: str, rate: float, cpu: list[float]) -> shards_experiment.Run:
    phase = {"records_per_s": rate, "broker_cpu_s": cpu, "loadavg_1m_before": 0.5}
    return {
        "config": config,
        "record_size": 100,
        "leaders": {0: 1},
        "produce": phase,
        "consume": {**phase, "records_per_s": 2 * rate},
    }


def test_shards_summary_takes_medians_per_config_and_broker_process() -> None:
    runs = [
        shards_run("rf2", 100.0, [1.0, 2.0]),
        shards_run("single", 50.0, [1.0]),
        shards_run("rf2", 300.0, [3.0, 4.0]),
        shards_run("rf2", 200.0, [2.0, 9.0]),
    ]
    single, rf2 = shards_experiment.summarize(runs)
    assert single["config"] == "single" and single["runs"] == 1
    assert rf2["config"] == "rf2" and rf2["runs"] == 3
    assert rf2["produce_rec_s"] == 200.0 and rf2["consume_rec_s"] == 400.0
    assert rf2["produce_rec_s_all"] == [100.0, 300.0, 200.0]
    assert rf2["produce_cpu_s"] == [2.0, 4.0]


def test_shards_run_line(capsys: pytest.CaptureFixture[str]) -> None:
    shards_experiment.show(shards_run("rf1", 123456.0, [1.5, 0.25]))
    assert capsys.readouterr().out == (
        "rf1      100 B  produce     123,456 rec/s CPU 1.50+0.25    "
        "consume     246,912 rec/s CPU 1.50+0.25    load 0.5  leaders {0: 1}\n"
    )


def test_bench_output_patterns_match_what_bench_prints() -> None:
    sent = (
        "20000 records sent by 2 producer(s), 146714.2 records/sec (13.99 MB/sec), "
        "56.11 ms avg latency"
    )
    consumed = "20000 records consumed by 2 consumer(s), 1.91 MB, 4.99 MB/sec, 52373.9 records/sec"
    sent_match = shards_experiment.SENT.search(f"created topic t\n{sent}\n")
    assert sent_match is not None and sent_match.groups() == ("20000", "146714.2")
    consumed_match = shards_experiment.CONSUMED.search(consumed)
    assert consumed_match is not None and consumed_match.groups() == ("20000", "52373.9")


def test_procfs_reads_this_process() -> None:
    user, system = cpu_seconds(os.getpid())
    assert user >= 0 and system >= 0
    assert cpu_seconds_total(os.getpid()) >= user + system
    rss_kb = status_kb(os.getpid(), "VmRSS")
    assert rss_kb is not None and rss_kb > 0
    assert status_kb(os.getpid(), "NoSuchField") is None
    assert startup_time.rss_mb(os.getpid()) > 0


def _spin(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_run_queue_wait_is_the_time_a_process_was_ready_but_its_core_was_busy() -> None:
    """Two busy threads on one core: each runs about half the time and waits the rest."""
    core = {min(os.sched_getaffinity(0))}
    mine = os.sched_getaffinity(0)
    spin = "end = time.thread_time() + 0.4\nwhile time.thread_time() < end: pass"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time\nos.sched_setaffinity(0, {core})\n{spin}\ntime.sleep(60)",
        ]
    )
    try:
        os.sched_setaffinity(0, core)  # this thread, beside the child's on the one core
        try:
            _spin(0.4)
        finally:
            os.sched_setaffinity(0, mine)
        deadline = time.monotonic() + 30
        while cpu_seconds_total(child.pid) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)  # the child's spin, finished alone if it started late
        waited = run_queue_wait_s(child.pid)
    finally:
        child.kill()
        child.wait()
    assert waited > 0.05


def test_procfs_sums_over_processes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pids = (os.getpid(), child.pid)
        assert set(cpu_seconds_by_pid(pids)) == set(pids)
        child_user, child_system = cpu_seconds(child.pid)
        user, system = cpu_seconds_sum(pids)
        assert user >= child_user and system >= child_system
        assert cpu_seconds_sum(()) == (0.0, 0.0)
        by_pid = status_kb_by_pid(pids, "VmHWM")
        assert all(kb is not None and kb > 0 for kb in by_pid.values())
        assert sum_kb(by_pid) == sum(kb for kb in by_pid.values() if kb is not None)
        assert sum_kb({1: None, 2: 5}) == 5 and sum_kb({1: None}) is None and sum_kb({}) is None
    finally:
        child.kill()
        child.wait()


def test_folder_mb_counts_files_below(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 500_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"x" * 1_500_000)
    assert startup_time.folder_mb(tmp_path) == 2.0


def test_split_host_port_takes_the_first_address() -> None:
    assert split_host_port("10.0.0.1:9092,10.0.0.2:9093") == ("10.0.0.1", 9092)
    assert split_host_port("[::1]:9092") == ("::1", 9092)
    assert split_host_port(":9092") == ("127.0.0.1", 9092)


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_api_versions_request_is_one_frame_of_api_key_18_v3() -> None:
    request = api_versions_request_v3(7)
    (size,) = struct.unpack(">i", request[:4])
    assert size == len(request) - 4
    assert struct.unpack(">hhi", request[4:12]) == (API_VERSIONS_KEY, 3, 7)


def test_broker_command_line(tmp_path: Path) -> None:
    broker = BrokerProcess({"num.partitions": "3"}, port=19092, base_dir=tmp_path, python="python3")
    assert broker.command() == [
        "python3",
        "-m",
        "raftka.broker",
        "serve",
        "--listen",
        "127.0.0.1:19092",
        "--data-dir",
        str(tmp_path / "data"),
        "--config",
        "num.partitions=3",
    ]
    assert broker.log_path == tmp_path / "broker.log" and not broker.is_running()
