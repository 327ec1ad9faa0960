"""The transactional checker over hand-made histories: what it counts as an anomaly and what
not (see tests/chaos/txn.py)."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import check_history
from tests.chaos.txn import check_txn

Event = dict[str, Any]


def txn(t: float, name: str, outcome: str, records: list[tuple[int, int]]) -> Event:
    """A transaction `name` of records [partition, offset]; values are `<name>-<i>`."""
    return {
        "t": t,
        "type": "txn",
        "process": "x0",
        "txn": name,
        "t0": t - 0.05,
        "intent": "abort" if outcome == "aborted" else "commit",
        "outcome": outcome,
        "records": [[f"{name}-{i}", p, o, None] for i, (p, o) in enumerate(records)],
        "errors": [] if outcome != "unknown" else ["commit: _TIMED_OUT retriable"],
    }


def poll(t: float, process: str, records: list[list[Any]]) -> Event:
    return {"t": t, "type": "poll", "process": process, "records": records}


def final_read(t: float, records: list[list[Any]]) -> list[Event]:
    high = {str(p): max(o for q, o, _ in records if q == p) + 2 for p, _, _ in records}
    return [
        {"t": t, "type": "assign", "process": "final", "partitions": [0, 1], "how": "assign"},
        poll(t, "final", records),
        {
            "t": t,
            "type": "final-read",
            "complete": True,
            "high_watermarks": high,
            "positions": high,
        },
    ]


# Two committed transactions over partitions 0 and 1, one aborted between them.
COMMITTED_A = txn(1.0, "x0-t1", "committed", [(0, 0), (0, 1), (1, 0)])
ABORTED = txn(2.0, "x0-t2", "aborted", [(0, 3), (1, 2)])
COMMITTED_B = txn(3.0, "x0-t3", "committed", [(0, 6), (1, 4)])
VISIBLE = [
    [0, 0, "x0-t1-0"],
    [0, 1, "x0-t1-1"],
    [1, 0, "x0-t1-2"],
    [0, 6, "x0-t3-0"],
    [1, 4, "x0-t3-1"],
]


def test_committed_visible_and_aborted_invisible_is_valid() -> None:
    events = [
        {"t": 0.0, "type": "workload", "name": "txn"},
        COMMITTED_A,
        ABORTED,
        COMMITTED_B,
        {"t": 3.5, "type": "assign", "process": "c0", "partitions": [0, 1], "how": "assign"},
        # During the run a committed transaction may show on one partition first.
        poll(3.5, "c0", [[0, 0, "x0-t1-0"], [0, 1, "x0-t1-1"], [0, 6, "x0-t3-0"]]),
        *final_read(5.0, VISIBLE),
    ]
    result = check_history(events)
    assert result.counts["committed"] == 2 and result.counts["aborted"] == 1
    assert result.valid, result.report()


def test_a_transaction_visible_on_one_partition_only_is_partial() -> None:
    result = check_txn([COMMITTED_A, ABORTED, COMMITTED_B, *final_read(5.0, VISIBLE[:2])])
    assert result.anomalies["txn-partial"] == 1, result.report()  # t1 lacks partition 1
    assert result.anomalies["txn-lost"] == 1, result.report()  # t3: nothing at all


def test_an_unknown_outcome_may_be_all_or_nothing_but_never_part() -> None:
    unknown = txn(4.0, "x0-t4", "unknown", [(0, 8), (1, 6)])
    base = [COMMITTED_A, ABORTED, COMMITTED_B, unknown]
    assert check_txn([*base, *final_read(5.0, VISIBLE)]).valid
    everything = [*VISIBLE, [0, 8, "x0-t4-0"], [1, 6, "x0-t4-1"]]
    assert check_txn([*base, *final_read(5.0, everything)]).valid
    part = check_txn([*base, *final_read(5.0, [*VISIBLE, [1, 6, "x0-t4-1"]])])
    assert part.anomalies["txn-partial"] == 1, part.report()
    # Seen by a read_committed consumer during the run, so it committed: then it must stay.
    seen = check_txn([*base, poll(4.5, "c0", [[0, 8, "x0-t4-0"]]), *final_read(5.0, VISIBLE)])
    assert seen.anomalies["txn-lost"] == 1, seen.report()


def test_an_aborted_record_read_committed_is_an_anomaly() -> None:
    during = check_txn(
        [COMMITTED_A, ABORTED, COMMITTED_B, poll(2.5, "c0", [[1, 2, "x0-t2-1"]])]
        + final_read(5.0, VISIBLE)
    )
    assert during.anomalies["aborted-read"] == 1, during.report()
    at_end = check_txn(
        [COMMITTED_A, ABORTED, COMMITTED_B, *final_read(5.0, [*VISIBLE, [0, 3, "x0-t2-0"]])]
    )
    assert at_end.anomalies["aborted-read"] == 1, at_end.report()


def test_a_record_read_twice_or_written_by_no_transaction_is_an_anomaly() -> None:
    twice = check_txn(
        [COMMITTED_A, ABORTED, COMMITTED_B, *final_read(5.0, [*VISIBLE, [1, 5, "x0-t3-1"]])]
    )
    assert twice.anomalies["duplicate"] == 1, twice.report()
    phantom = check_txn(
        [COMMITTED_A, ABORTED, COMMITTED_B, *final_read(5.0, [*VISIBLE, [1, 7, "nobody"]])]
    )
    assert phantom.anomalies["phantom-read"] == 1, phantom.report()


def test_a_read_committed_consumer_skipping_a_committed_record_is_an_anomaly() -> None:
    events = [
        COMMITTED_A,
        ABORTED,
        COMMITTED_B,
        {"t": 3.5, "type": "assign", "process": "c0", "partitions": [0, 1], "how": "assign"},
        # Offsets 2-5 of partition 0 hold a marker and aborted records: skipping them is right.
        poll(3.5, "c0", [[0, 0, "x0-t1-0"], [0, 1, "x0-t1-1"], [0, 6, "x0-t3-0"]]),
        *final_read(5.0, VISIBLE),
    ]
    assert check_txn(events).valid
    skipping = [*events[:3], events[3], poll(3.5, "c0", [[0, 0, "x0-t1-0"], [0, 6, "x0-t3-0"]])]
    result = check_txn([*skipping, *final_read(5.0, VISIBLE)])
    assert result.anomalies["poll-skip"] == 1, result.report()


def test_no_final_read_or_an_incomplete_one_fails() -> None:
    assert check_txn([COMMITTED_A]).anomalies["final-read-incomplete"] == 1
    events = [COMMITTED_A, *final_read(5.0, VISIBLE[:3])]
    events[-1] = {**events[-1], "complete": False}
    assert check_txn(events).anomalies["final-read-incomplete"] == 1
