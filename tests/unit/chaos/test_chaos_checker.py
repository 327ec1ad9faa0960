"""The chaos checker over small histories: what it counts as an anomaly and what not."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import check

Event = dict[str, Any]


def send(t: float, value: str, partition: int, offset: int | None) -> Event:
    return {
        "t": t,
        "type": "send",
        "process": "p0",
        "value": value,
        "t0": t - 0.01,
        "outcome": "ok",
        "partition": partition,
        "offset": offset,
    }


def final_read(t: float, records: list[list[Any]], high_watermark: int) -> list[Event]:
    return [
        {"t": t, "type": "assign", "process": "final", "partitions": [0], "how": "assign"},
        {"t": t, "type": "poll", "process": "final", "records": records},
        {
            "t": t,
            "type": "final-read",
            "complete": True,
            "high_watermarks": {"0": high_watermark},
            "positions": {"0": high_watermark},
        },
    ]


def test_an_implicitly_acknowledged_send_without_an_offset_is_held_to_the_final_read() -> None:
    # librdkafka acknowledges a batch whose answer was lost once a later batch of the same
    # producer succeeds, and reports no offset for its records (seed 864626807 had one).
    events = [
        send(1.0, "p0-1", 0, 0),
        send(2.0, "p0-2", 0, None),
        send(2.0, "p0-3", 0, 2),
        *final_read(3.0, [[0, 0, "p0-1"], [0, 1, "p0-2"], [0, 2, "p0-3"]], 3),
    ]
    result = check(events)
    assert result.acknowledged == 3
    assert result.valid, result.report()

    missing = check([*events[:3], *final_read(3.0, [[0, 0, "p0-1"], [0, 2, "p0-3"]], 3)])
    assert missing.anomalies["unseen"] == 1, missing.report()
