"""The link, slow-disk and clock-jump nemeses' mechanics: the commands they build, the fault
shim they preload, and healing that leaves a link as it was."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import nemesis as nemesis_module
from tests.chaos.cluster import build_fault_shim, fault_shim_unavailable_reason, write_control_file
from tests.chaos.history import History
from tests.chaos.nemesis import (
    NEMESES,
    Nemesis,
    NemesisContext,
    NemesisThread,
    unavailable_nemeses,
)
from tests.chaos.netns import (
    NFT_IMPAIR_TABLE,
    ChaosNetwork,
    ChaosSetupError,
    LinkImpairment,
    RunResources,
    chaos_unavailable_reason,
    impairment_commands,
    netem_unavailable_reason,
    run_command,
)


def test_netem_arguments_hold_every_impairment() -> None:
    impairment = LinkImpairment(
        loss_pct=12.5, delay_ms=200, jitter_ms=100, duplicate_pct=5, reorder_pct=10
    )
    assert impairment.netem_args() == [
        "netem",
        "limit",
        "10000",
        "delay",
        "200ms",
        "100ms",
        "loss",
        "12.5%",
        "duplicate",
        "5%",
        "reorder",
        "10%",
    ]
    assert LinkImpairment(loss_pct=3).netem_args() == ["netem", "limit", "10000", "loss", "3%"]
    # netem reorders only packets that others wait behind: no delay, no reorder argument.
    assert "reorder" not in LinkImpairment(reorder_pct=10).netem_args()


@pytest.mark.parametrize(
    "kwargs",
    [{"loss_pct": -1}, {"loss_pct": 101}, {"delay_ms": 10, "jitter_ms": 20}, {"delay_ms": -5}],
)
def test_an_impossible_impairment_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LinkImpairment(**kwargs)  # type: ignore[arg-type]


def test_two_nemeses_on_one_link_merge_to_the_worse_of_each() -> None:
    loss = LinkImpairment(loss_pct=10)
    delay = LinkImpairment(delay_ms=100, jitter_ms=50, reorder_pct=5, loss_pct=2)
    assert loss.merge(delay) == LinkImpairment(
        loss_pct=10, delay_ms=100, jitter_ms=50, reorder_pct=5
    )
    assert LinkImpairment().merge(LinkImpairment()).empty


def test_netem_goes_on_both_ends_of_the_veth_pair_and_heals_to_the_default() -> None:
    impairment = LinkImpairment(loss_pct=10)
    commands = impairment_commands("ns1", "vethh1", impairment, None)
    assert [argv for argv, _ in commands] == [
        ["tc", "-n", "ns1", "qdisc", "replace", "dev", "eth0", "root", "netem", "limit", "10000"]
        + ["loss", "10%"],
        ["tc", "qdisc", "replace", "dev", "vethh1", "root", "netem", "limit", "10000"]
        + ["loss", "10%"],
    ]
    healed = [argv for argv, _ in impairment_commands("ns1", "vethh1", LinkImpairment(), None)]
    assert healed[-1] == ["tc", "qdisc", "del", "dev", "vethh1", "root"]
    assert ["tc", "-n", "ns1", "qdisc", "del", "dev", "eth0", "root"] in healed


def test_without_netem_loss_and_duplicates_are_nftables_rules() -> None:
    impairment = LinkImpairment(loss_pct=20, duplicate_pct=7.5)
    ((argv, script),) = impairment_commands("ns1", "vethh1", impairment, "no netem")
    assert argv == ["ip", "netns", "exec", "ns1", "nft", "-f", "-"]
    assert script is not None
    lines = script.splitlines()
    # The chains are flushed in the same transaction: the old rules never linger.
    assert lines[:2] == [
        f"flush chain ip {NFT_IMPAIR_TABLE} impair_in",
        f"flush chain ip {NFT_IMPAIR_TABLE} impair_out",
    ]
    assert 'impair_in iifname "eth0" numgen random mod 1000 < 200 drop' in lines[2]
    assert 'impair_out oifname "eth0" numgen random mod 1000 < 200 drop' in lines[3]
    assert "numgen random mod 1000 < 75 dup to ip daddr" in lines[4]
    ((_, healed),) = impairment_commands("ns1", "vethh1", LinkImpairment(), "no netem")
    assert healed is not None and "add rule" not in healed


def test_without_netem_a_delay_is_refused_with_the_reason() -> None:
    with pytest.raises(ChaosSetupError, match="needs netem: kernel has none"):
        impairment_commands("ns1", "h1", LinkImpairment(delay_ms=50), "kernel has none")


def test_every_nemesis_machine_cannot_run_names_a_reason() -> None:
    for name, reason in unavailable_nemeses().items():
        assert name in NEMESES and reason


# -- against a real namespace (root) ------------------------------------------------------


def link_state(network: ChaosNetwork, node_id: int) -> str:
    """What a broker's link does, as the kernel reports it (netem qdiscs or nft rules)."""
    if netem_unavailable_reason() is None:
        inside = run_command(["tc", "-n", network.netns(node_id), "qdisc", "show", "dev", "eth0"])
        outside = run_command(["tc", "qdisc", "show", "dev", network.host_end(node_id)])
        return inside.stdout + outside.stdout
    argv = network.exec_prefix(node_id) + ["nft", "list", "table", "ip", NFT_IMPAIR_TABLE]
    return run_command(argv).stdout


@pytest.fixture
def network(tmp_path: Path):  # type: ignore[no-untyped-def]
    reason = chaos_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    resources = RunResources(f"u{random.randrange(1 << 20):05x}", tmp_path)
    network = ChaosNetwork(resources, [1, 2])
    try:
        network.create()
        yield network
    finally:
        assert resources.release_all() == []


def test_impairments_of_two_owners_combine_and_heal_back_to_a_clean_link(
    network: ChaosNetwork,
) -> None:
    clean = {node: link_state(network, node) for node in (1, 2)}
    network.impair("net-loss", {1: LinkImpairment(loss_pct=10)})
    network.impair(
        "net-duplicate", {1: LinkImpairment(duplicate_pct=5), 2: LinkImpairment(duplicate_pct=5)}
    )
    one, two = link_state(network, 1), link_state(network, 2)
    if netem_unavailable_reason() is None:
        assert "loss 10%" in one and "duplicate 5%" in one
        assert "loss" not in two and "duplicate 5%" in two
    else:
        assert "< 100 drop" in one and "< 50 dup to" in one
        assert "drop" not in two and "< 50 dup to" in two
    assert network.impairments() == {
        1: LinkImpairment(loss_pct=10, duplicate_pct=5),
        2: LinkImpairment(duplicate_pct=5),
    }
    network.heal_links("net-duplicate")
    assert network.impairments() == {1: LinkImpairment(loss_pct=10)}
    assert link_state(network, 2) == clean[2]
    network.heal_links()
    assert network.impairments() == {}
    assert {node: link_state(network, node) for node in (1, 2)} == clean


# -- the fault shim -------------------------------------------------------------------------

PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    real_before = float(sys.argv[1])
    started = time.monotonic()
    fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"x")
    os.fsync(fd)
    fsync_s = time.monotonic() - started
    print(json.dumps({"wall": time.time(), "fsync_s": fsync_s, "wall_ns": time.time_ns()}))
    """
)


def run_probe(library: Path, tmp_path: Path, delay_ms: int, offset_ms: int) -> dict[str, float]:
    import json
    import time

    write_control_file(tmp_path / "delay", delay_ms)
    write_control_file(tmp_path / "offset", offset_ms)
    env = {
        "LD_PRELOAD": str(library),
        "RAFTKA_FAULT_FSYNC_DELAY_FILE": str(tmp_path / "delay"),
        "RAFTKA_FAULT_CLOCK_OFFSET_FILE": str(tmp_path / "offset"),
    }
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(before), str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result = json.loads(out.stdout)
    result["real_before"], result["real_after"] = before, time.time()
    return result


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = fault_shim_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return build_fault_shim(tmp_path_factory.mktemp("shim"))


def test_the_shim_delays_fsync_and_steps_the_wall_clock_only(shim: Path, tmp_path: Path) -> None:
    hour_ms = 3_600_000
    ahead = run_probe(shim, tmp_path, delay_ms=300, offset_ms=hour_ms)
    assert ahead["fsync_s"] >= 0.3  # the sleep comes before the real fsync
    # The child's wall clock is an hour ahead of ours, give or take the child's own run time.
    assert ahead["real_before"] + 3600 <= ahead["wall"] <= ahead["real_after"] + 3600
    behind = run_probe(shim, tmp_path, delay_ms=0, offset_ms=-hour_ms)
    assert behind["real_before"] - 3600 <= behind["wall"] <= behind["real_after"] - 3600


def test_the_shim_changes_nothing_when_its_files_say_zero(shim: Path, tmp_path: Path) -> None:
    healed = run_probe(shim, tmp_path, delay_ms=0, offset_ms=0)
    assert healed["real_before"] <= healed["wall"] <= healed["real_after"]


# -- faults at once ---------------------------------------------------------------------------


class CountingNemesis(Nemesis):
    """Counts the faults in place at once across its instances; holds none (hold 0 s)."""

    name = "counting"
    hold_s = (0.0, 0.0)

    def __init__(self, ctx: NemesisContext, rng: random.Random, state: dict[str, int]) -> None:
        super().__init__(ctx, rng)
        self.state = state

    def inject(self) -> str | None:
        with LOCK:
            self.state["now"] += 1
            self.state["most"] = max(self.state["most"], self.state["now"])
            self.state["faults"] += 1
        # Give the other threads a chance to overlap this fault if nothing stops them.
        threading.Event().wait(0.01)
        return "counted"

    def repair(self) -> str | None:
        with LOCK:
            self.state["now"] -= 1
        return "uncounted"


LOCK = threading.Lock()


def _context(history: History, cluster: object = None, **extra: Any) -> NemesisContext:
    """A nemesis context with no network, no spawner and a quiet log."""
    return NemesisContext(
        cluster=cluster,  # type: ignore[arg-type]
        network=None,  # type: ignore[arg-type]
        history=history,
        spawner=None,  # type: ignore[arg-type]
        topic="t",
        group="g",
        log=lambda _line: None,
        **extra,
    )


@pytest.mark.parametrize("max_faults", [1, 2])
def test_nemesis_threads_keep_to_the_runs_limit_of_faults_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_faults: int
) -> None:
    monkeypatch.setattr(nemesis_module, "QUIET_S", (0.0, 0.0))
    history = History(tmp_path / "history.jsonl")
    ctx = _context(history, fault_slots=threading.Semaphore(max_faults))
    state = {"now": 0, "most": 0, "faults": 0}
    deadline = time.monotonic() + 1.0
    threads = [
        NemesisThread(CountingNemesis(ctx, random.Random(i), state), deadline) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    history.close()
    assert all(t.error is None and not t.is_alive() for t in threads)
    assert state["faults"] > max_faults  # the threads did take turns
    assert state["most"] == max_faults
    assert state["now"] == 0  # every fault repaired


def test_all_leaves_out_the_nemeses_that_change_replication_and_the_workload_is_an_option() -> None:
    from tests.chaos.__main__ import SUMMARY_COLUMNS, parse_args
    from tests.chaos.nemesis import all_nemeses
    from tests.chaos.runner import WORKLOADS

    # reassign and decommission run the topics with a replica fewer; membership needs nothing.
    for name in ("reassign", "decommission"):
        assert name in NEMESES and name not in all_nemeses()
    assert "membership" in all_nemeses()
    assert set(SUMMARY_COLUMNS) == set(WORKLOADS)
    assert parse_args(["--nemesis", "membership", "--workload", "compact"]).workload == "compact"
    everything = parse_args(["--nemesis", "all", "--workload", "txn"])
    assert everything.runs == [tuple(all_nemeses())] and everything.workload == "txn"
    assert parse_args(["--nemesis", "reassign,kill-leader"]).workload == "log"
    with pytest.raises(SystemExit):
        parse_args(["--workload", "queue"])


def test_a_decommission_is_done_once_the_broker_is_unregistered_whatever_came_before() -> None:
    from tests.chaos.nemesis import decommission_outcome

    progress = "raftka cluster decommission: 3 partitions left to move\n"
    assert decommission_outcome(0, progress)[0] is True
    # A later try of a decommission an earlier one finished (after its answer was lost).
    gone = "raftka cluster decommission: BROKER_ID_NOT_REGISTERED: Broker 1 is not registered"
    assert decommission_outcome(1, progress + "request timed out; retrying\n" + gone) == (
        True,
        gone,
    )
    still = (
        "raftka cluster decommission: broker 1 still hosts 5 partitions after 20 s (t-0);"
        " the moves go on: run the command again to wait"
    )
    assert decommission_outcome(1, progress + still)[0] is False
    refused = "raftka cluster decommission: no broker is free to take t-0's replica"
    assert decommission_outcome(1, refused) == (None, refused)


class _Cluster:
    def live_bootstrap(self) -> str:
        return "10.0.0.1:9092"


def test_restoring_voters_reports_one_another_nemesis_took_out_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """membership's add-voter loop and decommission's share the removed voters: one taken
    out while the loop ran is reported as not yet added back (it failed the run with a
    KeyError in a 5-broker run, seed 2726)."""
    history = History(tmp_path / "history.jsonl")
    ctx = _context(history, cluster=_Cluster())
    ctx.removed_voters.add(1)

    def add_voter(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        ctx.removed_voters.add(4)  # the decommission nemesis, meanwhile
        return subprocess.CompletedProcess(list(args), 0, "{}", "")

    monkeypatch.setattr(nemesis_module, "raftka_cli", add_voter)
    try:
        detail = ctx.restore_voters(0.0)
    finally:
        history.close()
    assert detail == "voters [1] added back; [4] not yet (4 taken out meanwhile)"
    assert ctx.removed_voters == {4}
