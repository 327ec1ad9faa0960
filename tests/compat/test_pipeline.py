"""The click-stream pipeline end to end: `scripts/pipeline generate` into a real broker, the
page-count job over it, and restarts from its checkpoint.

The job runs in the test's shared SparkSession (`spark_fixtures.spark`) except in the test
of the command line, which starts `scripts/pipeline run` as a user would.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clients import consume
from harness import REPO_ROOT, free_port, free_ports

from raftka.pipeline.clicks import format_ts, parse_ts
from raftka.pipeline.page_counts import COUNTS_TOPIC, PageCountsJob, PipelineError, kafka_package

# Spark jobs end to end: a few minutes.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

pytest_plugins = ["spark_fixtures"]  # the shared SparkSession fixture `spark`

PIPELINE = str(REPO_ROOT / "scripts" / "pipeline")
WINDOW_MS = 60_000
WATERMARK_MS = 30_000


def run_pipeline(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `scripts/pipeline ARGS` as a user would, whatever its exit status."""
    return subprocess.run(
        [PIPELINE, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def shown(result: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"


def pipeline(*args: str, timeout: float = 120) -> str:
    """Run `scripts/pipeline ARGS`; its stdout (it must exit 0)."""
    result = run_pipeline(*args, timeout=timeout)
    assert result.returncode == 0, (
        f"scripts/pipeline {' '.join(args)} exited {result.returncode}\n{shown(result)}"
    )
    return result.stdout


def terminal_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What the user sees of a run, setup's own lines aside."""
    return [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and not line.startswith("setup: ")
    ]


def iso(ms: int) -> str:
    """A window bound as the job writes it: whole seconds, UTC."""
    return format_ts(ms).replace(".000Z", "Z")


def window_counts_from_events(bootstrap: str) -> tuple[dict[tuple[str, str], int], int]:
    """Views per (window start, page) computed directly from `events`, and the largest
    event time: what the job must report."""
    events = [m for ms in consume(bootstrap, "events", partitions=3).values() for m in ms]
    counts: Counter[tuple[str, str]] = Counter()
    newest = 0
    for message in events:
        event = json.loads(message.value())
        ts_ms = parse_ts(event["ts"])
        newest = max(newest, ts_ms)
        counts[(iso(ts_ms - ts_ms % WINDOW_MS), event["page"])] += 1
    return dict(counts), newest


def written_counts(bootstrap: str) -> tuple[list[tuple[bytes, bytes]], dict[tuple[str, str], int]]:
    """Every record in `page-counts`, and views per (window start, page) from them; a
    window written twice must have been written with the same key and value."""
    records = [(m.key(), m.value()) for m in consume(bootstrap, COUNTS_TOPIC, partitions=1)[0]]
    views: dict[tuple[str, str], int] = {}
    values: dict[bytes, bytes] = {}
    for key, value in records:
        assert values.setdefault(key, value) == value, (
            f"{key!r} written as {values[key]!r} and {value!r}"
        )
        record = json.loads(value)
        assert json.loads(key) == {k: record[k] for k in ("window_start", "window_end", "page")}
        views[(record["window_start"], record["page"])] = record["views"]
    return records, views


def finished(expected: dict[tuple[str, str], int], newest_ms: int) -> dict[tuple[str, str], int]:
    """The windows the 30 s watermark has closed once the newest event has been read."""
    watermark_ms = newest_ms - WATERMARK_MS
    return {
        (start, page): n
        for (start, page), n in expected.items()
        if parse_ts(start) + WINDOW_MS <= watermark_ms
    }


def forget_last_commit(checkpoint: Path) -> None:
    """As if the job died after its last batch wrote its windows but before the checkpoint
    recorded that batch as done."""
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(commits[-1]), f".{commits[-1]}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def run_job(spark: Any, bootstrap: str, checkpoint: Path) -> str:
    out = io.StringIO()
    PageCountsJob(spark, bootstrap, str(checkpoint), out=out).run(available_now=True)
    return out.getvalue()


@pytest.mark.timeout(420)
def test_window_counts_match_the_events_across_restarts(broker_factory, spark, tmp_path) -> None:
    bootstrap = broker_factory().bootstrap
    checkpoint = tmp_path / "checkpoint"

    out = pipeline(
        "generate", "--rate", "250", "--duration", "4", "--speedup", "60", "--seed", "3",
        "--start", "2026-01-01T00:00:10Z", "--bootstrap", bootstrap,
    )  # fmt: skip
    assert "generate: 1000 events to events" in out, out

    console = run_job(spark, bootstrap, checkpoint)
    expected, newest = window_counts_from_events(bootstrap)
    first_records, written = written_counts(bootstrap)
    want = finished(expected, newest)
    assert len(want) >= 3 * 6, f"too few finished windows to test: {sorted(want)}"
    assert written == want
    assert "2026-01-01 00:01:00 - 00:02:00  /home" in console, console

    # More events on the same timeline (generate continues after the newest event).
    out = pipeline(
        "generate", "--rate", "250", "--duration", "2", "--speedup", "60", "--seed", "4",
        "--bootstrap", bootstrap,
    )  # fmt: skip
    assert "generate: 500 events to events" in out, out
    run_job(spark, bootstrap, checkpoint)
    expected, newest = window_counts_from_events(bootstrap)
    records, written = written_counts(bootstrap)
    assert records[: len(first_records)] == first_records
    assert written == finished(expected, newest)
    assert len(written) > len(want)

    # A restart with nothing new writes nothing; one after a crash rewrites at most the
    # last batch's windows, with the same keys and values (checked by written_counts).
    run_job(spark, bootstrap, checkpoint)
    assert len(written_counts(bootstrap)[0]) == len(records)
    forget_last_commit(checkpoint)
    run_job(spark, bootstrap, checkpoint)
    assert written_counts(bootstrap)[1] == written


@pytest.mark.timeout(900)
def test_command_line_run_and_a_missing_spark_connector(broker_factory, spark, tmp_path) -> None:
    bootstrap = broker_factory().bootstrap
    pipeline(
        "generate", "--rate", "300", "--duration", "2", "--speedup", "90", "--seed", "5",
        "--start", "2026-01-01T00:00:00Z", "--bootstrap", bootstrap,
    )  # fmt: skip

    with pytest.raises(PipelineError, match=kafka_package(spark.version).replace(".", r"\.")):
        PageCountsJob(spark, bootstrap, str(tmp_path / "kafka"), source="kafka").run(
            available_now=True
        )

    expected, newest = window_counts_from_events(bootstrap)
    want = finished(expected, newest)
    # A bounded run stops at its deadline wherever the query is. A user then runs again with
    # the checkpoint to resume, and so does this test (each run's windows add up).
    out, windows = "", 0
    for _ in range(4):
        result = run_pipeline(
            "run", "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap", bootstrap,
            "--duration", "10", "--trigger-interval", "2 seconds",
            timeout=240,
        )  # fmt: skip
        # A stop at --duration is a clean stop: exit 0, one line saying so, and none of
        # Spark's or py4j's complaints about the interrupted batch on the terminal.
        assert result.returncode == 0, shown(result)
        noise = [
            line
            for line in terminal_lines(result)
            if any(word in line for word in ("Traceback", "py4j", "Exception"))
        ]
        assert not noise, shown(result)
        stops = [line for line in terminal_lines(result) if line.startswith("run: stopped")]
        assert len(stops) == 1 and "(--duration 10 s reached)" in stops[0], shown(result)
        # The duration counts from the first batch, so every run gets some done.
        batches = re.search(r"after (\d+) batch\(es\)", stops[0])
        assert batches and int(batches.group(1)) >= 1, shown(result)
        out += result.stdout
        found = re.search(r"(\d+) window\(s\) written", result.stdout)
        assert found, shown(result)
        windows += int(found.group(1))
        # A batch the stop cut short may have written its windows already; it is not
        # counted until a later run repeats it to the end (one Spark committed before the
        # stop counts in the run that wrote it).
        if windows >= len(want):
            break
    assert written_counts(bootstrap)[1] == want
    assert windows == len(want), out
    assert "2026-01-01 00:01:00 - 00:02:00  /home" in out, out
    assert (tmp_path / "checkpoint.log").exists()


@pytest.mark.timeout(300)
def test_command_line_run_without_a_broker_says_so_in_one_line(tmp_path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    checkpoint = tmp_path / "checkpoint"
    result = run_pipeline(
        "run", "--checkpoint", str(checkpoint), "--bootstrap", bootstrap, "--duration", "5",
        timeout=240,
    )  # fmt: skip
    assert result.returncode != 0, shown(result)
    lines = terminal_lines(result)
    assert len(lines) == 1, shown(result)
    assert lines[0].startswith("run: no answer from the broker at " + bootstrap), lines[0]
    assert lines[0].endswith(f"(log: {checkpoint}.log)"), lines[0]
    assert "the broker at " + bootstrap in (tmp_path / "checkpoint.log").read_text()


@pytest.mark.timeout(420)
def test_command_line_run_stopped_by_sigterm_exits_0_with_one_line(
    broker_factory, tmp_path
) -> None:
    bootstrap = broker_factory().bootstrap
    pipeline(
        "generate", "--rate", "200", "--duration", "1", "--speedup", "60", "--seed", "6",
        "--bootstrap", bootstrap,
    )  # fmt: skip
    run = subprocess.Popen(
        [PIPELINE, "run", "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap", bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        before = []
        for line in run.stdout:
            before.append(line)
            if line.startswith("batch "):
                break
        assert before and before[-1].startswith("batch "), "".join(before)
        run.send_signal(signal.SIGTERM)
        rest, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    result = subprocess.CompletedProcess(run.args, run.returncode, "".join(before) + rest, err)
    assert result.returncode == 0, shown(result)
    lines = terminal_lines(result)
    assert not [
        line for line in lines if any(w in line for w in ("Traceback", "py4j", "Exception"))
    ], shown(result)
    stops = [line for line in lines if line.startswith("run: stopped")]
    assert len(stops) == 1 and stops[0].startswith("run: stopped (interrupted) after"), shown(
        result
    )


@dataclass
class StandaloneCluster:
    master: str  # spark://127.0.0.1:PORT
    master_json: str  # the master's web UI status as JSON
    worker_json: list[str]  # each worker's
    work_dirs: list[Path]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """A Spark standalone cluster on 127.0.0.1, a master and two one-core workers, started
    with the launcher PySpark ships (`bin/spark-class`, which execs the JVM)."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    ports = free_ports(["master", "master_ui", "worker1_ui", "worker2_ui"])
    master = f"spark://127.0.0.1:{ports['master']}"
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",  # the master's and workers' own heaps
    }
    spark_class = [str(spark_home / "bin" / "spark-class")]
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "wb") as log:
            processes.append(
                subprocess.Popen(
                    [*spark_class, *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=tmp_path,
                )
            )

    cluster = StandaloneCluster(
        master,
        f"http://127.0.0.1:{ports['master_ui']}/json/",
        [f"http://127.0.0.1:{ports[f'worker{n}_ui']}/json/" for n in (1, 2)],
        [tmp_path / f"work{n}" for n in (1, 2)],
    )
    try:
        start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(ports["master"]), "--webui-port", str(ports["master_ui"]),
        )  # fmt: skip
        for n, work_dir in enumerate(cluster.work_dirs, 1):
            start(
                f"worker{n}", "org.apache.spark.deploy.worker.Worker", master,
                "--host", "127.0.0.1", "--webui-port", str(ports[f"worker{n}_ui"]),
                "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir),
            )  # fmt: skip
        # Until both workers have registered (a bound on a wait, not on the test's result).
        deadline = time.monotonic() + 180
        while True:
            try:
                alive = [
                    w for w in get_json(cluster.master_json)["workers"] if w["state"] == "ALIVE"
                ]
            except (OSError, ValueError):
                # Not up yet. ValueError: HTML instead of JSON. The master's UI attaches each
                # page's HTML handler ("/") before its JSON one ("/json") while it already
                # serves, so a request in between gets the overview page.
                alive = []
            if len(alive) == 2:
                break
            exited = [p.args[1] for p in processes if p.poll() is not None]
            assert not exited and time.monotonic() < deadline, (
                f"cluster not up (exited: {exited}); see the logs in {tmp_path}"
            )
            time.sleep(0.5)
        yield cluster
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.timeout(600)
def test_command_line_run_on_a_standalone_cluster(
    broker_factory, standalone_cluster, tmp_path
) -> None:
    bootstrap = broker_factory().bootstrap
    pipeline(
        "generate", "--rate", "300", "--duration", "2", "--speedup", "90", "--seed", "7",
        "--start", "2026-01-01T00:00:00Z", "--bootstrap", bootstrap,
    )  # fmt: skip
    result = run_pipeline(
        "run", "--master", standalone_cluster.master, "--available-now",
        "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap", bootstrap,
        "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
        timeout=480,
    )  # fmt: skip
    assert result.returncode == 0, shown(result)
    assert "run: stopped (all available events processed)" in result.stdout, shown(result)
    expected, newest = window_counts_from_events(bootstrap)
    want = finished(expected, newest)
    assert want and written_counts(bootstrap)[1] == want

    # The job ran on the cluster: an executor on each worker, and each ran tasks.
    apps = [
        app
        for app in get_json(standalone_cluster.master_json)["completedapps"]
        if app["name"] == "raftka-page-counts"
    ]
    assert len(apps) == 1, apps
    for url, work_dir in zip(
        standalone_cluster.worker_json, standalone_cluster.work_dirs, strict=True
    ):
        executors = [e for e in get_json(url)["finishedexecutors"] if e["appid"] == apps[0]["id"]]
        assert len(executors) == 1, (url, get_json(url))
        stderr = work_dir / apps[0]["id"] / str(executors[0]["id"]) / "stderr"
        assert "Running task" in stderr.read_text(errors="replace"), stderr
