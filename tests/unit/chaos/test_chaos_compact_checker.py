"""The compaction checker over hand-made histories: what it counts as an anomaly and what not
(see tests/chaos/compact.py). Values are `<process>-<n>`, their key `k<n mod 32>`."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import check_history
from tests.chaos.compact import check_compact
from tests.chaos.workload import COMPACT_KEYS, compact_key

Event = dict[str, Any]
WORKLOAD: Event = {"t": 0.0, "type": "workload", "name": "compact"}


def send(t: float, value: str, offset: int | None, partition: int = 0) -> Event:
    return {
        "t": t,
        "type": "send",
        "process": value.rsplit("-", 1)[0],
        "value": value,
        "t0": t - 0.01,
        "outcome": "ok",
        "partition": partition,
        "offset": offset,
    }


def poll(t: float, process: str, records: list[list[Any]]) -> Event:
    return {"t": t, "type": "poll", "process": process, "records": records}


def final_read(t: float, records: list[list[Any]], high_watermark: int) -> list[Event]:
    return [
        {"t": t, "type": "assign", "process": "final", "partitions": [0], "how": "assign"},
        poll(t, "final", records),
        {
            "t": t,
            "type": "final-read",
            "complete": True,
            "high_watermarks": {"0": high_watermark},
            "positions": {"0": high_watermark},
        },
    ]


# Two writes of key k1 (p0-1, p1-33) and one of k2 (p0-2), then k1 again (p0-33).
K1_OLD, K2, K1_OTHER, K1_NEW = "p0-1", "p0-2", "p1-33", "p0-33"
SENDS = [send(1.0, K1_OLD, 0), send(1.1, K2, 1), send(1.2, K1_OTHER, 2), send(1.3, K1_NEW, 3)]


def test_the_keys_are_shared_by_every_producer() -> None:
    assert compact_key(K1_OLD) == compact_key(K1_OTHER) == compact_key(K1_NEW) == "k1"
    assert compact_key(f"p2-{COMPACT_KEYS}") == "k0"


def test_superseded_records_compacted_away_are_not_lost() -> None:
    events = [
        WORKLOAD,
        *SENDS,
        # A consumer read before the cleaning, another after it skipped the superseded ones.
        poll(2.0, "a0", [[0, 0, K1_OLD], [0, 1, K2], [0, 2, K1_OTHER], [0, 3, K1_NEW]]),
        {"t": 2.5, "type": "assign", "process": "a0", "partitions": [0], "how": "assign"},
        poll(3.0, "a0", [[0, 1, K2], [0, 3, K1_NEW]]),
        *final_read(4.0, [[0, 1, K2], [0, 3, K1_NEW]], 4),
    ]
    result = check_history(events)
    assert result.valid, result.report()
    assert result.counts["compacted"] == 2
    assert result.counts["keys"] == 2
    assert "2 acknowledged records compacted away" in result.report()


def test_a_keys_latest_value_missing_from_the_final_read_is_lost() -> None:
    # The cleaner kept the older value of k1 and removed the latest: the key went back.
    result = check_compact([WORKLOAD, *SENDS, *final_read(4.0, [[0, 1, K2], [0, 2, K1_OTHER]], 4)])
    assert result.anomalies["latest-lost"] == 1, result.report()
    (example,) = result.examples["latest-lost"]
    assert example["key"] == "k1" and example["latest"] == [3, K1_NEW]
    assert example["final_latest_offset"] == 2

    # A key missing altogether.
    gone = check_compact([WORKLOAD, *SENDS, *final_read(4.0, [[0, 3, K1_NEW]], 4)])
    assert gone.anomalies["latest-lost"] == 1, gone.report()
    assert gone.examples["latest-lost"][0]["key"] == "k2"


def test_a_value_read_during_the_run_holds_the_final_read_to_its_offset() -> None:
    # p2-1 (k1) was never acknowledged (unknown outcome) but a consumer read it at offset 4:
    # it was committed, so the final read must hold k1 at offset 4 or later.
    unknown = {**send(1.4, "p2-1", None), "outcome": "unknown", "partition": None}
    events = [
        WORKLOAD,
        *SENDS,
        unknown,
        poll(2.0, "a0", [[0, 4, "p2-1"]]),
        *final_read(4.0, [[0, 1, K2], [0, 3, K1_NEW]], 5),
    ]
    result = check_compact(events)
    assert result.anomalies["latest-lost"] == 1, result.report()
    assert result.examples["latest-lost"][0]["acknowledged"] is False


def test_a_producers_later_write_of_a_key_at_a_lower_offset_is_out_of_order() -> None:
    events = [
        WORKLOAD,
        send(1.0, K1_OLD, 5),
        send(1.1, K1_NEW, 4),
        *final_read(4.0, [[0, 4, K1_NEW], [0, 5, K1_OLD]], 6),
    ]
    result = check_compact(events)
    assert result.anomalies["key-order"] == 1, result.report()
    assert result.examples["key-order"][0]["later"] == [K1_NEW, 4]


def test_a_skip_over_a_record_nothing_supersedes_is_a_poll_skip() -> None:
    events = [
        WORKLOAD,
        *SENDS,
        # Offset 1 (k2) is k2's only record: compaction cannot have removed it.
        poll(2.0, "a0", [[0, 0, K1_OLD], [0, 2, K1_OTHER], [0, 3, K1_NEW]]),
        *final_read(4.0, [[0, 1, K2], [0, 3, K1_NEW]], 4),
    ]
    result = check_compact(events)
    assert result.anomalies["poll-skip"] == 1, result.report()
    assert result.examples["poll-skip"][0]["skipped"] == 1


def test_an_implicit_acknowledgement_is_unseen_only_when_its_key_is_gone() -> None:
    events = [
        WORKLOAD,
        send(1.0, K1_OLD, 0),
        send(1.1, "p0-3", None),  # key k3, no offset, never read
        send(1.2, K1_NEW, 2),
    ]
    missing = check_compact([*events, *final_read(4.0, [[0, 2, K1_NEW]], 3)])
    assert missing.anomalies["unseen"] == 1, missing.report()

    # k3 written again later: the implicit one may have been superseded; a note, no anomaly.
    superseded = check_compact(
        [*events, send(1.3, "p1-35", 3), *final_read(4.0, [[0, 2, K1_NEW], [0, 3, "p1-35"]], 4)]
    )
    assert superseded.valid, superseded.report()
    assert any("implicitly acknowledged" in note for note in superseded.notes)


def test_offsets_never_change_under_compaction() -> None:
    events = [WORKLOAD, *SENDS, *final_read(4.0, [[0, 1, K2], [0, 3, "p2-99"]], 4)]
    result = check_compact(events)
    assert result.anomalies["inconsistent-offset"] == 1, result.report()


def test_voters_not_restored_fails_any_workloads_run() -> None:
    events = [
        *SENDS,
        *final_read(4.0, [[0, 0, K1_OLD], [0, 1, K2], [0, 2, K1_OTHER], [0, 3, K1_NEW]], 4),
    ]
    whole = {"t": 3.0, "type": "quorum", "voters": [1, 2, 3], "observers": [], "want": [1, 2, 3]}
    assert check_history([*events, whole]).valid
    short = {**whole, "voters": [1, 3], "observers": [2]}
    for history in ([*events, short], [WORKLOAD, *events, short]):
        result = check_history(history)
        assert result.anomalies["voters-not-restored"] == 1, result.report()
