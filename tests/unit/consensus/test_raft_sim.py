"""Deterministic simulation of Raft groups under faults (see consensus/sim.py).

Default: 1,000 seeds. `--raft-seeds 100000` for a long run; a failing seed prints its
reproduction line (`python -m raftka.consensus.sim --seed N`).
"""

from __future__ import annotations

import os

import pytest

from raftka.consensus import Message, MessageType, RaftCore
from raftka.consensus.sim import SimParams, Simulation, SimulationFailure, run_seed, run_seeds

# Runs that once failed, with their parameters pinned so later changes to the seed-to-params
# mapping cannot silently turn them into different runs. Each must keep passing.
REGRESSIONS: dict[str, tuple[int, SimParams]] = {
    # Two nodes removed from the configuration without learning it sit at a higher term
    # forever; the liveness check must judge the leader by the voters of its own config.
    "removed-nodes-at-higher-term": (
        12283,
        SimParams(
            nodes=5,
            spare_nodes=1,
            safety_ticks=300,
            drop_rate=0.2,
            duplicate_rate=0.03,
            crash_rate=0.01,
            leader_crash_rate=0.0,
            partition_rate=0.04,
            isolate_leader_rate=0.02,
            config_change_rate=0.05,
            max_append_bytes=400,
            max_inflight_appends=1,
        ),
    ),
}


def test_raft_simulation_seeds(pytestconfig: pytest.Config) -> None:
    count: int = pytestconfig.getoption("--raft-seeds")
    start: int = pytestconfig.getoption("--raft-seed-start")
    workers = min(2, os.cpu_count() or 1)
    failures = run_seeds(start, count, workers=workers)
    if failures:
        seeds = sorted(seed for seed, _ in failures)
        pytest.fail(f"{len(failures)} of {count} seeds failed: {seeds[:20]}\n{failures[0][1]}")


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_raft_simulation_regression(name: str) -> None:
    seed, params = REGRESSIONS[name]
    Simulation(seed, params).run()


def test_same_seed_same_history() -> None:
    a, b = Simulation(42), Simulation(42)
    a.run()
    b.run()
    assert list(a.trace) == list(b.trace) and a.steps == b.steps


def test_simulation_catches_a_core_that_votes_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself is tested: a core granting every vote request must be caught."""

    def grant_everything(self: RaftCore, m: Message) -> None:
        is_pre = m.type is MessageType.PRE_VOTE
        reply = MessageType.PRE_VOTE_RESPONSE if is_pre else MessageType.VOTE_RESPONSE
        self._send(reply, m.from_id, term=m.term)
        if not is_pre:
            self.voted_for = m.from_id

    monkeypatch.setattr(RaftCore, "_handle_vote_request", grant_everything)
    caught = 0
    for seed in range(30):
        try:
            run_seed(seed)
        except SimulationFailure:
            caught += 1
    assert caught > 0


def test_random_runs_truncate_logs_and_install_snapshots() -> None:
    """Some seeds delete log prefixes; followers then catch up by snapshot, and the safety
    checks (committed entries never lost, logs match) hold across the install."""
    installed = 0
    for seed in range(60):
        sim = Simulation(seed)
        sim.run()
        installed += sim.snapshots_installed
    assert installed > 10


def test_simulation_catches_a_core_that_acknowledges_a_snapshot_it_did_not_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def ack_only(self: RaftCore, m: Message) -> None:
        self._send(MessageType.APPEND_RESPONSE, m.from_id, match_end=m.prev_offset + 1)

    monkeypatch.setattr(RaftCore, "_handle_snapshot", ack_only)
    caught = 0
    for seed in range(60):
        if Simulation(seed).params.truncate_rate == 0:
            continue
        try:
            run_seed(seed)
        except SimulationFailure:
            caught += 1
    assert caught > 0
