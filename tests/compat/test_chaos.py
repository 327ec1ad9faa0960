"""Every nemesis of tests/chaos for about 30 s against a fresh namespaced 3-broker cluster.

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

from tests.chaos.nemesis import NEMESES
from tests.chaos.netns import chaos_unavailable_reason
from tests.chaos.runner import ChaosConfig, run_chaos

# Each nemesis runs for 30 s against a fresh cluster: about 7 minutes in all.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("chaos")]

FAULT_SECONDS = 30.0
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


@pytest.mark.timeout(RUN_TIMEOUT_S)
@pytest.mark.parametrize("nemesis", list(NEMESES))
def test_no_anomaly_under_nemesis(
    nemesis: str, chaos_machine: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seed = int(os.environ.get("RAFTKA_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    config = ChaosConfig(
        nemeses=(nemesis,),
        out_dir=tmp_path_factory.mktemp("chaos"),
        time_limit_s=FAULT_SECONDS,
        seed=seed,
    )
    result = run_chaos(config, log=print)
    assert result.ok, result.report()
