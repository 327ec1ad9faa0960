"""The broker raises its soft open-file limit at start-up, up to the hard limit."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from raftka.broker.server import raise_open_file_limit


@pytest.fixture
def restore_limit() -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_low_soft_limit_is_raised_to_the_hard_limit(restore_limit: tuple[int, int]) -> None:
    _, hard = restore_limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    wanted = 1024 if hard == resource.RLIM_INFINITY else min(1024, hard)
    assert raise_open_file_limit(wanted) == wanted
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (wanted, hard)


def test_a_hard_limit_below_the_wanted_one_is_logged(
    restore_limit: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, hard = restore_limit
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit to stay under")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    with caplog.at_level(logging.WARNING, logger="raftka.server"):
        assert raise_open_file_limit(hard + 1) == hard
    assert "raise it" in caplog.text and str(hard) in caplog.text


def test_a_high_soft_limit_is_left_alone(restore_limit: tuple[int, int]) -> None:
    soft, _ = restore_limit
    assert raise_open_file_limit(16) == soft
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == restore_limit
