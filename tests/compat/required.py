"""Whether a missing client or fault tool fails a test or skips it.

Under `scripts/test` (and in CI) every client the compat suite drives has been installed by
`scripts/setup`, so one that is missing is a broken set-up and fails the test that needs it.
Run directly with pytest on a developer's machine, such a test is skipped instead.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def clients_required() -> bool:
    """RAFTKA_REQUIRE_CLIENTS=1 (scripts/test's default) or CI set: missing means failed."""
    wanted = os.environ.get("RAFTKA_REQUIRE_CLIENTS")
    if wanted is not None:
        return wanted not in ("", "0")
    return bool(os.environ.get("CI"))


def missing_client(reason: str) -> NoReturn:
    """Fail (clients required) or skip the calling test because `reason`."""
    if clients_required():
        pytest.fail(
            f"{reason} (scripts/setup installs it; RAFTKA_REQUIRE_CLIENTS=0 skips such tests)"
        )
    pytest.skip(reason)
