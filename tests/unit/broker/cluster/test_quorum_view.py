"""The controller's view of the metadata quorum as it travels to a broker that forwarded a
DescribeQuorum."""

from __future__ import annotations

import json

import pytest

from raftka.broker.cluster.quorum import QuorumView


def test_a_view_comes_back_as_it_was_sent() -> None:
    ends = {1: 1200, 3: 1250, 5: 0}
    contact = {1: (1_700_000_000_100, 1_700_000_000_000), 3: (1_700_000_000_200,) * 2, 5: (-1, -1)}
    view = QuorumView(3, 7, 1200, frozenset({1, 3, 5}), frozenset({2}), ends, contact)
    assert QuorumView.from_wire(view.to_wire()) == view


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", json.dumps({"leader_id": 1}).encode(), b'{"leader_id": "x"}'],
)
def test_what_is_not_a_view_is_refused(raw: bytes) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        QuorumView.from_wire(raw)
