"""One fault-test run, from an empty machine back to an empty machine.

`run_chaos(config)`: build the network and a fresh cluster, create the topic, start the
workload, run the nemeses until the time limit, heal everything, let the workload run on
for a few seconds, stop it, read every partition from the beginning, compare the replicas
once quiet, stop the brokers, check the history and draw the picture.

Workloads (`ChaosConfig.workload`): `log` (idempotent producers and plain consumers, checked
by `checker`), `txn` (transactional producers and read_committed consumers, `txn`),
`share` (idempotent producers and share-group consumers, `share`) and `compact` (the `log`
workload with keyed values on a compacted topic the cleaner works on during the run,
`compact`). Whatever happens,
brokers, mounts, namespaces and the bridge are gone when it returns; a run with an
anomaly or an error keeps its directory (history, broker logs, data) for a post-mortem.
"""

from __future__ import annotations

import logging
import random
import secrets
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.checker import CheckResult, check_history, duplicated_values
from tests.chaos.cluster import ChaosCluster, create_topic
from tests.chaos.history import History, read_history
from tests.chaos.nemesis import (
    DECOMMISSION_AT_END_S,
    NEMESES,
    Decommission,
    NemesisContext,
    NemesisThread,
    Spawner,
    Watchdog,
    all_nemeses,
    reassignments_in_progress,
    unavailable_nemeses,
)
from tests.chaos.netns import ChaosNetwork, RunResources, cleanup_stale_runs
from tests.chaos.plot import plot_run
from tests.chaos.replicas import compare_replicas, partition_logs, producers_at
from tests.chaos.share import (
    DELIVERY_LIMIT,
    LOCK_MS,
    SHARE_BROKER_CONFIG,
    SHARE_GROUP,
    Settled,
    drain,
    start_share_consumers,
)
from tests.chaos.txn import TRANSACTION_TIMEOUT_MS, TXN_COORDINATED_ID, start_txn_workload
from tests.chaos.workload import (
    KeyedProducerWorker,
    ProducerWorker,
    ProtocolErrorRecorder,
    Worker,
    WorkloadConfig,
    final_read,
    start_workload,
    stop_workers,
)
from tests.compat.harness import BrokerStopError

TOPIC = "chaos"
GROUP = "chaos-group"
BROKER_CONFIG = {
    # A small __consumer_offsets keeps start-up light on two shared cores.
    "offsets.topic.num.partitions": "10",
    "group.initial.rebalance.delay.ms": "500",
    # Small segments, so runs cross segment rolls on every replica.
    "log.segment.bytes": "262144",
}
#: The internal topics' replication factors (lowered for `decommission`).
INTERNAL_REPLICATION_FACTORS = (
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "share.coordinator.state.topic.replication.factor",
)
#: Settings a workload adds to BROKER_CONFIG.
WORKLOAD_BROKER_CONFIG: dict[str, dict[str, str]] = {
    "log": {},
    "txn": {
        "transaction.state.log.num.partitions": "4",
        # Transactions left open by a producer that died are aborted within seconds.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
    },
    "share": SHARE_BROKER_CONFIG,
    # The cleaner looks for work every second (Kafka's default: 15 s).
    "compact": {"log.cleaner.backoff.ms": "1000"},
}
#: The `compact` workload's topic: compacted, segments rolled every 2 s or 32 KiB, and a
#: cleaning due as soon as there is anything to clean, so the cleaner runs all along.
COMPACT_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "2000",
    "segment.bytes": "32768",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
}
WORKLOADS = tuple(WORKLOAD_BROKER_CONFIG)
WARMUP_TIMEOUT_S = 20.0
PROGRESS_EVERY_S = 5.0
# A transactional producer finishes its last transaction (commit retries included) first.
TXN_STOP_TIMEOUT_S = 60.0
# Every acknowledged record settled: a few lock durations after the faults.
SHARE_DRAIN_TIMEOUT_S = 30.0 + 4 * LOCK_MS / 1000
# A share consumer's close commits what it holds (up to its commit timeout) and leaves.
SHARE_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ChaosConfig:
    """One run: which nemeses (together), how long, how big."""

    nemeses: tuple[str, ...]
    out_dir: Path
    nodes: int = 3
    time_limit_s: float = 30.0
    seed: int = 0
    partitions: int = 4
    replication_factor: int = 3
    producers: int = 3
    sends_per_second: float = 40.0
    disk_mib: int = 128
    recovery_s: float = 3.0
    final_read_timeout_s: float = 60.0
    quiet_timeout_s: float = 20.0
    max_faults: int | None = None  # faults in place at once across the nemeses (None: any)
    workload: str = "log"  # one of WORKLOADS

    @property
    def label(self) -> str:
        return "all" if set(self.nemeses) == set(all_nemeses()) else "+".join(self.nemeses)

    @property
    def title(self) -> str:
        """The label, with the workload when it is not the log workload."""
        return self.label if self.workload == "log" else f"{self.workload}: {self.label}"


@dataclass
class ChaosResult:
    """What a run found: the checker's result, plus an error if the run itself failed."""

    config: ChaosConfig
    run_dir: Path
    check: CheckResult = field(default_factory=CheckResult)
    png: Path | None = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.check.valid

    def report(self) -> str:
        at_once = "" if self.config.max_faults is None else f", {self.config.max_faults} at once"
        lines = [
            f"{self.config.title} (seed {self.config.seed}, {self.config.nodes} nodes, "
            f"{self.config.time_limit_s:.0f} s of faults{at_once}): "
            f"{'ok' if self.ok else 'FAILED'} "
            f"in {self.elapsed_s:.0f} s",
            self.check.report(),
            f"run directory: {self.run_dir}",
        ]
        if self.png is not None:
            lines.append(f"plot: {self.png}")
        if self.error:
            lines.append(f"run error:\n{self.error}")
        if not self.ok:
            label = self.config.label
            nemeses = label if label == "all" else ",".join(self.config.nemeses)
            lines.append(
                f"reproduce with: scripts/chaos --nodes {self.config.nodes} --nemesis "
                f"{nemeses} --time-limit {self.config.time_limit_s:g} "
                f"--seed {self.config.seed}"
                + ("" if self.config.workload == "log" else f" --workload {self.config.workload}")
                + (
                    ""
                    if self.config.max_faults is None
                    else f" --max-faults {self.config.max_faults}"
                )
            )
        return "\n".join(lines)


def _client_logger(run_dir: Path, tag: str, recorder: logging.Handler) -> logging.Logger:
    """librdkafka's log lines go to clients.log (not the terminal) and to `recorder`."""
    logger = logging.getLogger(f"raftka.chaos.{tag}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = logging.FileHandler(run_dir / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
    logger.addHandler(handler)
    logger.addHandler(recorder)
    return logger


def _close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)


def _record_provenance(history: History, cluster: ChaosCluster) -> None:
    """For every duplicated value, the producer id, epoch and sequence of each copy (all of
    them: a value without its copies' writers would count as an anomaly)."""
    duplicates = duplicated_values(read_history(history.path))
    if not duplicates:
        return
    wanted: dict[int, set[int]] = {}
    for places in duplicates.values():
        for partition, offset in places:
            wanted.setdefault(partition, set()).add(offset)
    writers: dict[tuple[int, int], tuple[int, int, int]] = {}
    for partition, offsets in wanted.items():
        for node in cluster.nodes:
            segments = partition_logs(node.data_dir).get(f"{TOPIC}-{partition}")
            if segments:
                for offset, writer in producers_at(segments, offsets).items():
                    writers[(partition, offset)] = writer
                break
    history.record(
        "provenance",
        duplicates={
            value: [[p, o, *writers[(p, o)]] for p, o in sorted(places) if (p, o) in writers]
            for value, places in duplicates.items()
        },
    )


def run_chaos(config: ChaosConfig, log: Callable[[str], None] = print) -> ChaosResult:
    """Run one fault test as described in the module docstring; never leaves anything behind."""
    if config.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {config.workload!r}; known: {WORKLOADS}")
    unknown = [n for n in config.nemeses if n not in NEMESES]
    if unknown:
        raise ValueError(f"unknown nemesis {unknown}; known: {sorted(NEMESES)}")
    unavailable = {n: r for n, r in unavailable_nemeses().items() if n in config.nemeses}
    if unavailable:
        raise ValueError(f"nemeses this machine cannot run: {unavailable}")
    started = time.monotonic()
    tag = secrets.token_hex(3)
    prefix = "" if config.workload == "log" else f"{config.workload}-"
    run_dir = config.out_dir / f"{prefix}{config.label}-seed{config.seed}-{tag}"
    run_dir.mkdir(parents=True)
    result = ChaosResult(config, run_dir)
    run_log = open(run_dir / "run.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below

    def say(message: str) -> None:
        line = f"[{time.monotonic() - started:6.1f}s] {config.title}: {message}"
        log(line)
        run_log.write(line + "\n")
        run_log.flush()

    for line in cleanup_stale_runs():
        say(line)
    resources = RunResources(tag)
    history = History(run_dir / "history.jsonl")
    protocol_errors = ProtocolErrorRecorder(history)
    logger = _client_logger(run_dir, tag, protocol_errors)
    spawner = Spawner()
    cluster: ChaosCluster | None = None
    workers: list[Worker] = []
    watchdog: Watchdog | None = None
    threads: list[NemesisThread] = []
    try:
        network = ChaosNetwork(resources, range(1, config.nodes + 1))
        network.create()
        say(
            f"network {network.subnet} on bridge {network.bridge}, brokers at "
            f"{', '.join(network.address(n) for n in network.node_ids)}"
        )
        disk_bytes = config.disk_mib << 20 if "disk-full" in config.nemeses else None
        broker_config = {**BROKER_CONFIG, **WORKLOAD_BROKER_CONFIG[config.workload]}
        if "decommission" in config.nemeses:
            # A decommissioned broker's replicas need brokers free to take them: the
            # internal topics too have one replica fewer than there are brokers.
            internal_rf = str(min(3, config.nodes - 1))
            for key in INTERNAL_REPLICATION_FACTORS:
                broker_config[key] = internal_rf
        cluster = ChaosCluster(network, resources, run_dir, broker_config, disk_bytes=disk_bytes)
        cluster.mount_disks()
        if any(NEMESES[name].needs_fault_shim for name in config.nemeses):
            cluster.preload_fault_shim()
        spawner.call(cluster.start)
        say("cluster formed")
        # With a slow disk, every acknowledgement waits for an fsync (flush.messages=1), so
        # the slow fsyncs sit on the produce path and not only on Raft's hard state.
        topic_configs = {"flush.messages": "1"} if "slow-disk" in config.nemeses else {}
        if config.workload == "compact":
            topic_configs.update(COMPACT_TOPIC_CONFIG)
        replication_factor = config.replication_factor
        if "reassign" in config.nemeses or "decommission" in config.nemeses:
            # A replica can only move to a broker that holds none of the partition.
            replication_factor = min(replication_factor, config.nodes - 1)
        create_topic(
            cluster.bootstrap,
            TOPIC,
            config.partitions,
            replication_factor,
            configs=topic_configs,
        )
        workload = WorkloadConfig(
            bootstrap=cluster.bootstrap,
            topic=TOPIC,
            partitions=config.partitions,
            group=GROUP,
            producers=config.producers,
            sends_per_second=config.sends_per_second,
        )
        history.record(
            "workload",
            name=config.workload,
            delivery_limit=DELIVERY_LIMIT,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        )
        producers: list[Worker]
        consumers: list[Worker]
        settled = Settled()
        if config.workload == "txn":
            producers, consumers = start_txn_workload(workload, history, logger, config.seed)
            warmed_up: tuple[str, ...] = ("txn",)
        elif config.workload == "share":
            producers = [
                ProducerWorker(f"p{i}", history, workload, logger) for i in range(config.producers)
            ]
            for producer in producers:
                producer.start()
            consumers = start_share_consumers(workload, history, logger, config.seed, settled)
            warmed_up = ("send:ok", "share-ack")
        else:
            log_producers, consumers = start_workload(
                workload,
                history,
                logger,
                KeyedProducerWorker if config.workload == "compact" else ProducerWorker,
            )
            producers = list(log_producers)
            warmed_up = ("send:ok", "commit")
        workers = [*producers, *consumers]
        ctx = NemesisContext(
            cluster=cluster,
            network=network,
            history=history,
            spawner=spawner,
            topic=TOPIC,
            # kill-coordinator's target: the coordinator of what the workload uses.
            group={"txn": TXN_COORDINATED_ID, "share": SHARE_GROUP}.get(config.workload, GROUP),
            coordinator_key_type=1 if config.workload == "txn" else 0,
            log=say,
            disk_bytes=disk_bytes,
            fault_slots=(
                None if config.max_faults is None else threading.Semaphore(config.max_faults)
            ),
        )
        watchdog = Watchdog(ctx)
        watchdog.start()
        warmup_until = time.monotonic() + WARMUP_TIMEOUT_S
        while time.monotonic() < warmup_until and not all(
            history.counts[what] for what in warmed_up
        ):
            time.sleep(0.2)
        say(f"workload running ({_progress(history, config.workload)})")

        history.record("phase", name="faults")
        deadline = time.monotonic() + config.time_limit_s
        threads = [
            NemesisThread(NEMESES[name](ctx, random.Random(f"{config.seed}:{name}")), deadline)
            for name in config.nemeses
        ]
        for thread in threads:
            thread.start()
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.2)
            if time.monotonic() >= next_progress:
                next_progress += PROGRESS_EVERY_S
                say(_progress(history, config.workload))
            if time.monotonic() > deadline + 120:
                raise TimeoutError("a nemesis did not finish within 120 s of the time limit")
        for thread in threads:
            if thread.error is not None:
                raise RuntimeError(f"nemesis {thread.nemesis.name} failed: {thread.error!r}")

        for line in ctx.heal_all():
            say(f"heal: {line}")
        for thread in threads:
            if isinstance(thread.nemesis, Decommission) and thread.nemesis.target is not None:
                say(f"heal: {thread.nemesis.finish(DECOMMISSION_AT_END_S)}")
        cluster.wait_formed(60)
        if "reassign" in config.nemeses:
            _wait_for_moves(cluster.bootstrap, say)
        if "membership" in config.nemeses or "decommission" in config.nemeses:
            _record_quorum(history, ctx, say)
        history.record("phase", name="healed")
        say(f"healed; workload runs {config.recovery_s:g} s more")
        time.sleep(config.recovery_s)
        if config.workload == "share":
            still = stop_workers(producers, workload.message_timeout_ms / 1000 + 15)
            history.record("phase", name="drain")
            drained = drain(history, settled, SHARE_DRAIN_TIMEOUT_S)
            say(f"share drain {'complete' if drained else 'INCOMPLETE'}")
            still += stop_workers(consumers, SHARE_STOP_TIMEOUT_S)
        else:
            stop_timeout_s = workload.message_timeout_ms / 1000 + 15
            if config.workload == "txn":
                stop_timeout_s = TXN_STOP_TIMEOUT_S
            still = stop_workers(workers, stop_timeout_s)
        if still:
            raise TimeoutError(f"workload threads did not stop: {still}")
        history.record("phase", name="final read")
        complete = final_read(workload, history, logger, config.final_read_timeout_s)
        say(f"final read {'complete' if complete else 'INCOMPLETE'}")
        table, diffs = compare_replicas(
            {node.node_id: node.data_dir for node in cluster.nodes}, config.quiet_timeout_s
        )
        history.record(
            "replicas",
            identical=not diffs,
            partitions={
                name: {str(n): list(d) for n, d in row.items()} for name, row in table.items()
            },
            diffs=diffs,
        )
        say(
            f"replicas of {len(table)} partitions "
            + ("byte-identical" if not diffs else f"DIFFER in {[d['partition'] for d in diffs]}")
        )
        if config.workload in ("log", "compact"):
            _record_provenance(history, cluster)
        watchdog.stop()
        watchdog = None
        try:
            cluster.stop(timeout=20)
        except BrokerStopError as exc:
            history.record("unclean-stop", node=None, detail=str(exc)[:3000])
    except BaseException as exc:  # noqa: BLE001 - reported in the result; teardown follows
        result.error = "".join(traceback.format_exception(exc))
        say(f"run error: {exc!r}")
        if not isinstance(exc, Exception):
            raise
    finally:
        for thread in threads:
            thread.stop()
        if watchdog is not None:
            watchdog.stop()
        stop_workers(workers, 20)
        if cluster is not None:
            cluster.kill()
        spawner.close()
        protocol_errors.record_summary()
        history.close()
        try:
            result.check = check_history(read_history(history.path))
        except Exception as exc:  # noqa: BLE001 - a checker bug must not skip the teardown
            result.error = (
                (result.error or "")
                + "\nchecker error:\n"
                + "".join(traceback.format_exception(exc))
            )
            say(f"checker error: {exc!r}")
        if cluster is not None and cluster.disk_bytes is not None and not result.ok:
            for node in cluster.nodes:  # the tmpfs goes with the mount: keep a copy
                if node.data_dir.exists():
                    shutil.copytree(node.data_dir, node.base_dir / "data-at-end", symlinks=True)
        errors = resources.release_all()
        if errors:
            say(f"teardown errors: {errors}")
            result.error = (result.error or "") + f"\nteardown errors: {errors}"
        _close_logger(logger)
        result.elapsed_s = time.monotonic() - started
        try:
            result.png = plot_run(
                read_history(history.path),
                run_dir / "chaos.png",
                f"{config.title}, seed {config.seed}, {config.nodes} nodes",
            )
        except Exception as exc:  # noqa: BLE001 - a missing picture does not hide the result
            say(f"plot failed: {exc!r}")
        (run_dir / "result.txt").write_text(result.report() + "\n")
        say("ok" if result.ok else f"FAILED: {result.check.anomaly_count} anomalies")
        run_log.close()
    if result.ok:
        for node_id in range(1, config.nodes + 1):  # keep logs and history, not broker data
            shutil.rmtree(run_dir / f"node-{node_id}" / "disk", ignore_errors=True)
    return result


def _progress(history: History, workload: str) -> str:
    """The workload's counts so far, for the progress lines."""
    counts = history.counts
    sends = (
        f"{counts['send']} sends ({counts['send:ok']} ok, {counts['send:failed']} "
        f"failed, {counts['send:unknown']} unknown)"
    )
    if workload == "txn":
        return f"{counts['txn']} transactions, {counts['poll']} read_committed polls"
    if workload == "share":
        return f"{sends}, {counts['share-poll']} share polls, {counts['share-ack']} ack answers"
    return f"{sends}, {counts['poll']} polls, {counts['commit']} commits"


def _record_quorum(history: History, ctx: NemesisContext, say: Callable[[str], None]) -> None:
    """The metadata quorum once healed, as a `quorum` event: every broker must vote again."""
    quorum = ctx.metadata_quorum() or {"voters": [], "observers": [], "detail": "no answer"}
    want = list(ctx.network.node_ids)
    history.record(
        "quorum",
        voters=sorted(quorum["voters"]),
        observers=sorted(quorum["observers"]),
        want=want,
        detail=quorum.get("detail"),
    )
    say(f"metadata quorum: voters {sorted(quorum['voters'])}, observers {quorum['observers']}")


def _wait_for_moves(bootstrap: str, say: Callable[[str], None], timeout_s: float = 90.0) -> None:
    """Wait until no reassignment is under way (the replicas compared at the end are then
    the partitions' final ones); says so when some still are after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    moves = reassignments_in_progress(bootstrap)
    while moves != [] and time.monotonic() < deadline:
        time.sleep(1.0)
        moves = reassignments_in_progress(bootstrap)
    say("no reassignment under way" if moves == [] else f"reassignments still under way: {moves}")
