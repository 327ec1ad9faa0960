"""The broker raises its soft open-file limit at start-up, up to the hard limit, and warns
only when it stays below what its partitions and connections need."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.broker.config import BrokerConfig
from raftka.broker.server import (
    FILES_PER_PARTITION,
    OPEN_FILES_HEADROOM,
    open_files_needed,
    raise_open_file_limit,
)


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


def test_no_warning_when_the_limit_covers_what_the_broker_needs(
    restore_limit: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    soft, hard = restore_limit
    if soft == resource.RLIM_INFINITY or soft < 4096:
        pytest.skip("needs a finite soft limit of at least 4096")
    with caplog.at_level(logging.WARNING, logger="raftka.server"):
        assert raise_open_file_limit(soft + 1, needed=soft - 1) in (soft, soft + 1)
    assert "open file limit" not in caplog.text


def test_what_a_broker_needs_counts_its_partitions_and_connections(tmp_path: Path) -> None:
    for name in ("orders-0", "orders-1"):
        (tmp_path / name).mkdir()
    config = BrokerConfig(
        {
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "2",
            "share.coordinator.state.topic.num.partitions": "1",
            "max.connections": "100",
        },
        environ={},
    )
    needed = open_files_needed(config, [tmp_path])
    assert needed == 8 * FILES_PER_PARTITION + 100 + OPEN_FILES_HEADROOM
    unbounded = BrokerConfig({}, environ={})
    assert open_files_needed(unbounded, [tmp_path]) < 20_000  # a development machine's limit
