"""How long one broker takes to start with many partitions, and what it costs idle.

Starts `raftka serve` on free ports with a temporary data dir (or --data-dir), creates one
topic of --partitions partitions with confluent-kafka's AdminClient, stops the broker
(SIGTERM, timed), then restarts it --restarts times. For every restart it prints the seconds
until /healthz answers, until /readyz answers, and until Metadata names a leader for every
partition of the topic; then the open descriptors, RSS, the CPU it uses over --idle seconds
with nothing to do, and how long the clean shutdown takes.

    scripts/startup-time                          # 10,000 partitions, 2 restarts
    scripts/startup-time --partitions 1000 --restarts 3 --idle 20

With --metadata-records N it writes N metadata records instead (client quota changes on
100 users through AlterClientQuotas, one change per user per request), prints the size of the
`__cluster_metadata` log folder, and times restarts until /readyz. --config passes broker
configs (e.g. metadata.log.segment.bytes); --repo runs the broker of another checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from raftka.broker.tools.processes import free_port
from raftka.broker.tools.procfs import cpu_seconds_total, status_kb

TOPIC = "startup-time"


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (0.0 if /proc does not say)."""
    kb = status_kb(pid, "VmRSS")
    return kb / 1024 if kb is not None else 0.0


class Broker:
    """One `raftka serve` on free ports (Kafka and the metrics endpoint), started, timed and
    stopped again and again on the same data dir; its output is appended to `log_path`."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        configs: list[str] | None = None,
        repo: Path | None = None,
    ) -> None:
        self.configs = list(configs or [])
        self.repo = repo
        self.port = free_port()
        self.http = free_port()
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Launch the broker; the monotonic time it was launched at."""
        python = sys.executable
        if self.repo is not None:
            # That checkout's own virtualenv: its editable install maps raftka.* to its tree.
            python = str(self.repo / ".venv" / "bin" / "python")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [python, "-m", "raftka.broker", "serve"]
                + ["--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
                + ["--config", f"metrics.listen=127.0.0.1:{self.http}"]
                + [arg for config in self.configs for arg in ("--config", config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.repo,
            )
        return time.monotonic()

    def answers(self, path: str, since: float, limit_s: float) -> float:
        """Seconds from `since` until `path` of the metrics endpoint answers 200."""
        while time.monotonic() - since < limit_s:
            if self.proc is not None and self.proc.poll() is not None:
                sys.exit(f"startup-time: the broker exited (see {self.log_path})")
            try:
                url = f"http://127.0.0.1:{self.http}{path}"
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return time.monotonic() - since
            except OSError:
                pass
            time.sleep(0.05)
        sys.exit(f"startup-time: {path} did not answer within {limit_s:.0f} s")

    def stop(self) -> float:
        """SIGTERM and wait; the seconds the shutdown took."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(600)
        return time.monotonic() - started


def every_leader_known(bootstrap: str, partitions: int, since: float, limit_s: float) -> float:
    """Seconds from `since` until Metadata names a leader for every partition of TOPIC."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.monotonic() - since < limit_s:
        try:
            topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        except Exception:  # noqa: BLE001 - a broker still starting: ask again
            topic = None
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return time.monotonic() - since
        time.sleep(0.1)
    sys.exit(f"startup-time: Metadata did not name every leader within {limit_s:.0f} s")


def write_metadata_records(bootstrap: str, count: int, per_request: int = 100) -> None:
    """`count` client quota changes (each one metadata record) on 100 users."""
    from raftka.broker.admin.wire import WireConnection, alter_client_quotas

    with WireConnection(bootstrap, 60.0) as connection:
        written = 0
        while written < count:
            entries = []
            for i in range(written, min(count, written + per_request)):
                user = f"user-{i % 100}"
                entries.append(([("user", user)], {"producer_byte_rate": float(1000 + i)}))
            response = alter_client_quotas(connection, entries)
            errors = {e.error_code for e in response.entries if e.error_code}
            if errors:
                sys.exit(f"startup-time: AlterClientQuotas answered error codes {errors}")
            written += len(entries)


def folder_mb(path: Path) -> float:
    """Size of the files under `path`, in MB (10^6 bytes)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def metadata_main(args: argparse.Namespace, broker: Broker) -> None:
    """--metadata-records: write them, then time restarts until /readyz."""
    since = broker.start()
    broker.answers("/readyz", since, args.timeout)
    started = time.monotonic()
    write_metadata_records(broker.bootstrap, args.metadata_records)
    print(
        f"wrote {args.metadata_records} metadata records in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    time.sleep(3)  # a snapshot (and any truncation behind it) after the last change
    metadata_dir = broker.data_dir / "__cluster_metadata-0"
    print(f"clean shutdown in {broker.stop():.1f} s", flush=True)
    print(f"__cluster_metadata folder: {folder_mb(metadata_dir):.1f} MB", flush=True)
    for run in range(1, args.restarts + 1):
        since = broker.start()
        readyz = broker.answers("/readyz", since, args.timeout)
        print(f"restart {run}: /readyz {readyz:.2f} s", flush=True)
        print(f"restart {run}: clean shutdown in {broker.stop():.1f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Run the measurement; exits non-zero if a step fails or takes longer than --timeout."""
    parser = argparse.ArgumentParser(
        prog="startup-time", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measured")
    parser.add_argument("--data-dir", type=Path, help="kept after the run (default: temporary)")
    parser.add_argument("--timeout", type=float, default=900.0, help="limit for each step")
    parser.add_argument("--metadata-records", type=int, default=0)
    parser.add_argument("--config", action="append", default=[], help="broker config k=v")
    parser.add_argument("--repo", type=Path, help="checkout whose broker runs (default: this one)")
    args = parser.parse_args(argv)

    temporary = args.data_dir is None
    base = Path(tempfile.mkdtemp(prefix="raftka-startup-")) if temporary else args.data_dir
    broker = Broker(base / "data", base / "broker.log", args.config, args.repo)
    try:
        if args.metadata_records:
            metadata_main(args, broker)
            return
        since = broker.start()
        broker.answers("/readyz", since, args.timeout)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        started = time.monotonic()
        futures = admin.create_topics(
            [NewTopic(TOPIC, args.partitions, 1)],
            operation_timeout=args.timeout,
            request_timeout=args.timeout,
        )
        futures[TOPIC].result(timeout=args.timeout)
        every_leader_known(broker.bootstrap, args.partitions, started, args.timeout)
        created = time.monotonic() - started
        print(f"created {args.partitions} partitions in {created:.1f} s", flush=True)
        print(f"clean shutdown in {broker.stop():.1f} s", flush=True)
        for run in range(1, args.restarts + 1):
            since = broker.start()
            healthz = broker.answers("/healthz", since, args.timeout)
            readyz = broker.answers("/readyz", since, args.timeout)
            leaders = every_leader_known(broker.bootstrap, args.partitions, since, args.timeout)
            assert broker.proc is not None
            pid = broker.proc.pid
            time.sleep(5)  # let the start-up's stragglers finish before idling is measured
            before = cpu_seconds_total(pid)
            time.sleep(args.idle)
            idle = (cpu_seconds_total(pid) - before) / args.idle
            descriptors = len(os.listdir(f"/proc/{pid}/fd"))
            print(
                f"restart {run}: /healthz {healthz:.2f} s, /readyz {readyz:.2f} s, every "
                f"leader in Metadata {leaders:.2f} s; {descriptors} descriptors open, RSS "
                f"{rss_mb(pid):.0f} MB, idle {100 * idle:.1f}% of a core",
                flush=True,
            )
            print(f"restart {run}: clean shutdown in {broker.stop():.1f} s", flush=True)
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.kill()
        if temporary:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
