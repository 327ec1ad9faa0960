"""The records of v2 batches as the message browser shows them: offset, timestamp, key,
value and headers, decoded one batch at a time (decompressed within a bound), and values
rendered as text, pretty-printed JSON or hex.

Only the batches of one page are decoded; nothing here is on the data path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import NamedTuple

from raftka.protocol.compacted import records_section
from raftka.protocol.records import (
    MAGIC_V2,
    UnsupportedBatch,
    read_batch_header,
    read_varint,
)

#: A page decodes at most this much of one batch (a guard against compression bombs).
DECOMPRESSED_BYTES_MAX = 16 * 1024 * 1024
#: A value longer than this is cut for display (the page says so).
SHOWN_BYTES_MAX = 4096


class Record(NamedTuple):
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise UnsupportedBatch("record field runs past the batch")
    return buf[pos : pos + length], pos + length


def batch_records(partition: int, batch: bytes) -> Iterator[Record]:
    """The data records of one whole v2 batch (a control batch has none to show)."""
    header = read_batch_header(batch, 0)
    if batch[16] != MAGIC_V2:
        raise UnsupportedBatch(f"message format {batch[16]} is not shown")
    if header.is_control:
        return
    records = records_section(batch, DECOMPRESSED_BYTES_MAX)
    pos = 0
    for _ in range(header.records_count):
        length, body = read_varint(records, pos)
        end = body + length
        if length < 1 or end > len(records):
            raise UnsupportedBatch("malformed record length")
        timestamp_delta, field = read_varint(records, body + 1)
        offset_delta, field = read_varint(records, field)
        key, field = _bytes(records, field)
        value, field = _bytes(records, field)
        count, field = read_varint(records, field)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(max(count, 0)):
            name, field = _bytes(records, field)
            header_value, field = _bytes(records, field)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        timestamp = (
            header.max_timestamp if header.is_log_append_time else header.base_timestamp
        ) + (0 if header.is_log_append_time else timestamp_delta)
        yield Record(
            partition,
            header.base_offset + offset_delta,
            timestamp,
            key,
            value,
            tuple(headers),
        )
        pos = end


FORMATS = ("auto", "text", "json", "hex")


def render_value(value: bytes | None, form: str) -> tuple[str, str]:
    """(the form used, the value as text) for `form`: `text` (UTF-8, undecodable bytes
    replaced), `json` (pretty-printed; text when it is not JSON), `hex`, or `auto` (JSON
    when it parses as an object or array, text when it is printable UTF-8, else hex). Long
    values are cut at SHOWN_BYTES_MAX bytes (the form says `cut`)."""
    if value is None:
        return "null", "null"
    cut = len(value) > SHOWN_BYTES_MAX
    if form == "hex":
        return _cut("hex", cut), value[:SHOWN_BYTES_MAX].hex(" ")
    try:
        decoded: str | None = value.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if form in ("auto", "json") and decoded is not None and not cut:
        stripped = decoded.lstrip()
        if form == "json" or stripped[:1] in ("{", "["):
            try:
                return "json", json.dumps(json.loads(decoded), indent=2, ensure_ascii=False)
            except ValueError:
                pass
    if form == "auto" and (decoded is None or not _printable(decoded)):
        return _cut("hex", cut), value[:SHOWN_BYTES_MAX].hex(" ")
    shown = value[:SHOWN_BYTES_MAX].decode("utf-8", "replace")
    return _cut("text", cut), shown


def _cut(form: str, cut: bool) -> str:
    return f"{form}, first {SHOWN_BYTES_MAX} bytes" if cut else form


def _printable(decoded: str) -> bool:
    return all(ch.isprintable() or ch in "\t\r\n" for ch in decoded)
