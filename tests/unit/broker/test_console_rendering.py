"""The console's pure parts: escaping, record decoding for the message browser, value
rendering, consumer assignments and the browser's query parameters."""

from __future__ import annotations

import struct

import pytest

from raftka.broker.clock import ManualClock
from raftka.broker.console.groups import assignment_text, decode_assignment
from raftka.broker.console.html import Html, tag, text, url, void
from raftka.broker.console.messages import (
    PAGE_BYTES_MAX,
    READ_BYTES,
    READ_BYTES_MIN,
    READS_MAX,
    parse_positions,
    parse_timestamp,
    read_budget,
)
from raftka.broker.console.operations import hanging_verdict
from raftka.broker.console.records import (
    SHOWN_BYTES_MAX,
    batch_records,
    render_value,
)
from raftka.broker.console.sessions import COOKIE, SESSION_IDLE_S, Sessions, set_cookie
from raftka.broker.console.share_inflight import deliveries_text
from raftka.broker.console.throughput import Rate, Throughput, chart
from raftka.broker.console.view import PageError
from raftka.broker.metrics import BrokerMetrics
from raftka.broker.share.partition import RecordState, SharePartition, StateBatch
from raftka.protocol.batch_builder import build_batch
from raftka.protocol.record_headers import whole_batches


def test_text_from_the_cluster_is_escaped_and_markup_is_not() -> None:
    assert text("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert tag("td", "a&b", Html("<b>x</b>")) == "<td>a&amp;b<b>x</b></td>"
    assert tag("a", "t", href='/x?"y"', class_="c") == (
        '<a href="/x?&quot;y&quot;" class="c">t</a>'
    )
    assert void("input", name="n", value="<v>", placeholder=None) == (
        '<input name="n" value="&lt;v&gt;">'
    )
    assert url("/t", {"a": "1 2", "b": None}) == "/t?a=1+2"


def test_records_of_batches_are_decoded_with_offsets_and_timestamps() -> None:
    first = build_batch([(b"k1", b"v1"), (None, b"v2")], 1_700_000_000_000, base_offset=10)
    second = build_batch([(b"k3", None)], 1_700_000_000_500, base_offset=12)
    chunk = first + second + second[:20]  # a torn tail is left out
    batches = list(whole_batches(chunk))
    assert len(batches) == 2
    records = [r for batch in batches for r in batch_records(3, batch)]
    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (3, 10, b"k1", b"v1"),
        (3, 11, None, b"v2"),
        (3, 12, b"k3", None),
    ]
    assert records[2].timestamp_ms == 1_700_000_000_500
    assert records[0].headers == ()


def test_control_batches_have_no_records_to_show() -> None:
    marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], 1, control=True)
    assert list(batch_records(0, marker)) == []


@pytest.mark.parametrize(
    ("value", "form", "expected"),
    [
        (b'{"a":[1,2]}', "auto", ("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')),
        (b"plain words", "auto", ("text", "plain words")),
        (b"\x00\xff", "auto", ("hex", "00 ff")),
        (b"abc", "hex", ("hex", "61 62 63")),
        (b"not json", "json", ("text", "not json")),
        (b'{"a":1}', "text", ("text", '{"a":1}')),
        (None, "auto", ("null", "null")),
    ],
)
def test_values_are_rendered_as_text_json_or_hex(
    value: bytes | None, form: str, expected: tuple[str, str]
) -> None:
    assert render_value(value, form) == expected


def test_long_values_are_cut_and_say_so() -> None:
    form, shown = render_value(b"x" * (SHOWN_BYTES_MAX + 10), "auto")
    assert form == f"text, first {SHOWN_BYTES_MAX} bytes"
    assert len(shown) == SHOWN_BYTES_MAX


def _assignment(topics: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic, partitions in topics.items():
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(">i", len(partitions)) + b"".join(
            struct.pack(">i", p) for p in partitions
        )
    return out + struct.pack(">i", -1)  # no user data


def test_consumer_assignments_are_decoded() -> None:
    decoded = decode_assignment(_assignment({"orders": [2, 0], "audit": [1]}))
    assert decoded == {"orders": [2, 0], "audit": [1]}
    assert assignment_text(decoded) == "audit: 1; orders: 0, 2"
    assert decode_assignment(b"\x00") is None


def test_browser_parameters_are_checked() -> None:
    assert parse_positions("0:15,2:7") == {0: 15, 2: 7}
    with pytest.raises(PageError):
        parse_positions("0:x")
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000
    with pytest.raises(PageError):
        parse_timestamp("yesterday")


def test_throughput_is_the_rate_between_samples_and_is_charted() -> None:
    metrics = BrokerMetrics({})
    clock = ManualClock(100.0)
    throughput = Throughput(metrics, clock)
    throughput.sample()
    metrics.produced("orders", 5000, 50)
    metrics.fetched("orders", 10000)
    clock.advance(5)
    throughput.sample()
    assert throughput.rates() == [Rate(105.0, 1000.0, 10.0, 2000.0)]
    drawn = chart(throughput.rates(), clock.now_s())
    assert drawn.count("<polyline") == 2
    assert 'id="peak-in">1000 B/s<' in drawn
    assert "No samples" in chart([], clock.now_s())


def test_a_page_of_many_partitions_shares_a_bounded_read() -> None:
    assert read_budget(1) == (READ_BYTES, READS_MAX)
    read_bytes, reads = read_budget(1000)
    assert (read_bytes, reads) == (READ_BYTES_MIN, 1)
    for partitions in (1, 3, 16, 100, 256):
        read_bytes, reads = read_budget(partitions)
        assert read_bytes * reads * partitions <= PAGE_BYTES_MAX


def test_sessions_expire_when_idle_and_are_bounded() -> None:
    clock = ManualClock(0.0)
    sessions = Sessions(clock)
    token = sessions.open("alice")
    cookie = f"other=1; {COOKIE}={token}"
    found = sessions.find(cookie)
    assert found is not None and found[1].user == "alice"
    clock.advance(SESSION_IDLE_S - 1)
    assert sessions.find(cookie) is not None  # used: its idle time starts again
    clock.advance(SESSION_IDLE_S - 1)
    assert sessions.find(cookie) is not None
    clock.advance(SESSION_IDLE_S + 1)
    assert sessions.find(cookie) is None
    assert sessions.find(None) is None
    assert sessions.find(f"{COOKIE}=forged") is None
    again = sessions.open("alice")
    sessions.close(again)
    assert sessions.find(f"{COOKIE}={again}") is None
    assert set_cookie("t", False)[1] == f"{COOKIE}=t; Path=/; HttpOnly; SameSite=Strict"
    assert set_cookie("t", True)[1] == f"{COOKIE}=t; Path=/; HttpOnly; SameSite=Strict; Secure"


def test_a_share_partitions_records_in_flight_are_counted_by_delivery_count() -> None:
    state = SharePartition(
        10,
        [
            StateBatch(10, 12, RecordState.AVAILABLE, 2),
            StateBatch(13, 19, RecordState.ACKNOWLEDGED, 1),
            StateBatch(20, 20, RecordState.ARCHIVED, 5),
        ],
    )
    assert deliveries_text(state) == "1: 7, 2: 3, 5: 1"
    assert deliveries_text(SharePartition(4)) == "none"


def test_an_open_transaction_hangs_past_the_longest_timeout_without_a_coordinator() -> None:
    """As kafka-transactions.sh find-hanging: a candidate once its producer wrote nothing for
    longer than transaction.max.timeout.ms, hanging when no coordinator has it open."""
    max_ms = 900_000
    assert hanging_verdict(max_ms, max_ms, coordinator_open=False) == "open"
    assert hanging_verdict(5_000, max_ms, coordinator_open=True) == "open"
    late_but_known = hanging_verdict(max_ms + 1, max_ms, coordinator_open=True)
    assert late_but_known == "open past transaction.max.timeout.ms (its coordinator has it open)"
    hanging = hanging_verdict(max_ms + 1, max_ms, coordinator_open=False)
    assert isinstance(hanging, Html) and hanging.startswith('<span class="bad">hanging:')
