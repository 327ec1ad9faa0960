"""Every nemesis of tests/chaos for about 30 s against a fresh namespaced 3-broker cluster:
the nine process, partition and disk nemeses one at a time, then the link, slow-disk and
clock-jump nemeses together in one run (one run keeps the suite's time in bounds); then the
transactional and the share-group workloads (`--workload txn|share`) under two nemeses each,
replicas moved (reassign) while leaders are killed, voters taken out of the metadata quorum
and added back (membership) while leaders are killed, a broker decommissioned, wiped and
rejoined (decommission) while leaders are killed, and a compacted topic cleaned while
leaders are killed and brokers paused (`--workload compact`).

Each run must end with zero anomalies (see tests/chaos/checker.py); a failure prints the
checker's report, the seed and the run directory (history, broker logs, plot). Needs root
for network namespaces: skipped elsewhere, a failure under scripts/test.
`RAFTKA_CHAOS_SEED=N` repeats the nemeses' choices of a failed run; `scripts/chaos` runs
longer or combined nemeses.
"""

from __future__ import annotations

import os
import random

import pytest
from required import missing_client

from tests.chaos.nemesis import NEMESES, unavailable_nemeses
from tests.chaos.netns import chaos_unavailable_reason
from tests.chaos.runner import ChaosConfig, ChaosResult, run_chaos

# Each of the sixteen runs has 25-30 s of faults against a fresh cluster.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("chaos")]

FAULT_SECONDS = 30.0
WORKLOAD_FAULT_SECONDS = 25.0  # the txn and share runs: two nemeses each
COMBINED = ("net-loss", "net-delay", "net-duplicate", "slow-disk", "clock-jump")
ALONE = [
    name
    for name in NEMESES
    if name not in COMBINED and name not in ("reassign", "membership", "decommission")
]
# Start-up, warm-up, healing, final read and replica comparison take 20-60 s more.
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def chaos_machine(request: pytest.FixtureRequest) -> None:
    """Skip (fail under scripts/test) where namespaces, nftables or root are missing."""
    if request.config.getoption("--bootstrap-servers"):
        pytest.skip("fault tests start their own raftka cluster; not with --bootstrap-servers")
    reason = chaos_unavailable_reason()
    if reason is None:
        return
    missing_client(f"fault tests cannot run: {reason}")


def _run(
    nemeses: tuple[str, ...],
    tmp_path_factory: pytest.TempPathFactory,
    workload: str = "log",
    fault_seconds: float = FAULT_SECONDS,
) -> ChaosResult:
    seed = int(os.environ.get("RAFTKA_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    config = ChaosConfig(
        nemeses=nemeses,
        out_dir=tmp_path_factory.mktemp("chaos"),
        time_limit_s=fault_seconds,
        seed=seed,
        workload=workload,
    )
    result = run_chaos(config, log=print)
    assert result.ok, result.report()
    return result


@pytest.mark.timeout(RUN_TIMEOUT_S)
@pytest.mark.parametrize("nemesis", ALONE)
def test_no_anomaly_under_nemesis(
    nemesis: str, chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _run((nemesis,), tmp_path_factory)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_anomaly_under_lossy_links_a_slow_disk_and_clock_jumps(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Packet loss, delay and duplication on random brokers' links, one broker's slow
    fsyncs and one broker's wall clock stepped, all at once."""
    unavailable = unavailable_nemeses()
    for name in ("slow-disk", "clock-jump"):
        if name in unavailable:
            missing_client(f"{name} cannot run: {unavailable[name]}")
    if "net-delay" in unavailable:
        # A kernel without netem (no sch_netem, nothing to load) cannot delay packets.
        print(f"net-delay left out: {unavailable['net-delay']}")
    _run(tuple(n for n in COMBINED if n not in unavailable), tmp_path_factory)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_transaction_partly_visible_under_coordinator_kills_and_pauses(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Transactional producers committing and aborting transactions across partitions while
    the transaction coordinator is killed and brokers paused: every committed transaction
    whole, no aborted record read_committed (tests/chaos/txn.py)."""
    _run(("kill-coordinator", "pause"), tmp_path_factory, "txn", WORKLOAD_FAULT_SECONDS)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_share_record_acknowledged_twice_or_lost_under_coordinator_kills_and_a_cut_off_leader(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A share group acknowledging records while its coordinator is killed and a partition's
    leader cut off: nothing acknowledged delivered again, nothing lost (tests/chaos/share.py)."""
    _run(
        ("kill-coordinator", "partition-leader"),
        tmp_path_factory,
        "share",
        WORKLOAD_FAULT_SECONDS,
    )


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_anomaly_when_replicas_move_while_leaders_are_killed(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Replicas of the log workload's partitions moved to other brokers (the topic has two
    replicas on three brokers) while partition leaders are killed: nothing lost, replicas
    identical once the moves finish."""
    _run(("reassign", "kill-leader"), tmp_path_factory, "log", WORKLOAD_FAULT_SECONDS)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_anomaly_when_voters_leave_and_rejoin_the_metadata_quorum_while_leaders_are_killed(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Voters of the metadata quorum (half the time the controller) removed and added back
    (`raftka cluster remove-voter` / `add-voter`) while partition leaders are killed: nothing
    lost, replicas identical, every broker a voter again at the end."""
    _run(("membership", "kill-leader"), tmp_path_factory, "log", WORKLOAD_FAULT_SECONDS)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_no_anomaly_when_a_broker_is_decommissioned_and_rejoins_while_leaders_are_killed(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A broker decommissioned (`raftka cluster decommission`: its replicas move off, it
    leaves the voters and is unregistered), wiped and started again with `raftka serve
    --join`, then made a voter again, while partition leaders are killed (every topic has
    two replicas on three brokers): nothing lost, replicas identical, every broker a voter
    again at the end."""
    _run(("decommission", "kill-leader"), tmp_path_factory, "log", WORKLOAD_FAULT_SECONDS)


@pytest.mark.timeout(RUN_TIMEOUT_S)
def test_a_compacted_topic_keeps_every_keys_latest_value_under_kills_and_pauses(
    chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Keyed writes to a compacted topic the log cleaner works on all along, while leaders
    are killed and brokers paused: every key's latest value read at the end, no key back to
    an older value, replicas identical (tests/chaos/compact.py)."""
    result = _run(("kill-leader", "pause"), tmp_path_factory, "compact", WORKLOAD_FAULT_SECONDS)
    # The run tested compaction only if the cleaner removed superseded records.
    assert result.check.counts["compacted"] > 0, result.report()
