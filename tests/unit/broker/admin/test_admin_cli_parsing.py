"""The admin CLI's pure parts: argument checks (exit 2), partition health, table layout."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime

import pytest

from raftka.broker.admin.common import print_table
from raftka.broker.admin.partitions import PartitionState
from raftka.broker.cli import _parser


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(list(argv))


def test_common_options_and_the_bootstrap_alias() -> None:
    args = parse("groups", "describe", "g", "--bootstrap", "h:1", "--output", "json")
    assert (args.bootstrap_servers, args.output, args.timeout) == ("h:1", "json", 15.0)
    args = parse("cluster", "status", "--bootstrap-servers", "a:1,b:2", "--timeout", "2.5")
    assert (args.bootstrap_servers, args.timeout) == ("a:1,b:2", 2.5)


def test_reset_offsets_arguments() -> None:
    args = parse("groups", "reset-offsets", "g", "--topic", "t:0,2", "--topic", "u",
                 "--to-datetime", "2026-01-31T12:00:00Z")  # fmt: skip
    assert args.topic == [("t", (0, 2)), ("u", ())]
    assert args.to_datetime == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert not args.execute
    assert parse("groups", "reset-offsets", "g", "--topic", "t", "--shift-by", "-3").shift_by == -3


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create"],
        ["topics", "create", "t", "--partitions", "0"],
        ["topics", "create", "t", "--replication-factor", "0"],
        ["topics", "create", "t", "--config", "novalue"],
        ["topics", "list", "--output", "yaml"],
        ["topics", "list", "--timeout", "0"],
        ["groups", "reset-offsets", "g", "--topic", "t"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["groups", "reset-offsets", "g", "--topic", "t:x", "--to-earliest"],
        ["groups", "delete"],
        ["cluster"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_partition_health() -> None:
    assert PartitionState("t", 0, 1, (1, 2, 3), (1, 2, 3)).status == "ok"
    assert PartitionState("t", 0, 1, (1, 2, 3), (1, 2)).status == "under-replicated"
    assert PartitionState("t", 0, -1, (1, 2, 3), (1, 2)).status == "offline"


def test_table_columns_are_aligned() -> None:
    out = io.StringIO()
    print_table(["A", "LONGER"], [["xyz", 1], ["q", None]], out)
    assert out.getvalue().splitlines() == ["A    LONGER", "xyz  1", "q    -"]
