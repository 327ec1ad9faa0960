"""`raftka partitions reassign` arguments."""

from __future__ import annotations

import argparse

import pytest

from raftka.broker.admin.reassign import parse_move


def test_moves_and_cancels_parse() -> None:
    assert parse_move("orders:3=2,3,4") == ("orders", 3, (2, 3, 4))
    assert parse_move("a:b:0=1") == ("a:b", 0, (1,))
    assert parse_move("orders:3") == ("orders", 3, None)


@pytest.mark.parametrize("text", ["orders", "orders:x=1", ":0=1", "orders:0=1,,2", "orders:-1=1"])
def test_bad_moves_are_usage_errors(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_move(text)
