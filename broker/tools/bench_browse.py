"""How long the web console takes to show a page of a large topic's messages (`scripts/bench
--browse`): the newest records, pages from the log's start, middle and end by offset, and
from the middle by timestamp, each fetched several times over HTTP as a browser would; the
median time of each and the bytes of log the page says it read."""

from __future__ import annotations

import re
import statistics
import time
import urllib.parse
import urllib.request
from typing import Any

#: Page loads per position; the median is reported.
LOADS = 5
PAGE_RECORDS = 50
_LOG_READ = re.compile(r'id="log-read"[^>]*>This page read ([\d,]+) bytes of log')
# A row of the messages table: partition, offset, timestamp.
_ROW = re.compile(r"<tr><td>\d+</td><td>(\d+)</td><td>([^<]+)</td>")


def _load(url: str) -> tuple[float, int, list[tuple[int, str]]]:
    """(seconds, bytes of log read, (offset, timestamp) of each record shown) of one load."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        body = answer.read().decode()
    elapsed = time.perf_counter() - started
    read = _LOG_READ.search(body)
    if read is None:
        raise RuntimeError(f"{url}: not a message page of the console (no log-read figure)")
    rows = [(int(offset), stamp) for offset, stamp in _ROW.findall(body)]
    return elapsed, int(read.group(1).replace(",", "")), rows


def browse_report(console: str, topic: str, records: int) -> dict[str, Any]:
    """Time the console at `console` (HOST:PORT or URL) showing pages of partition 0 of
    `topic`, which holds `records` records (the last page by timestamp starts at the
    middle record's). Prints a line per page and returns the figures."""
    base = console if "://" in console else f"http://{console}"
    path = f"{base}/topics/{urllib.parse.quote(topic)}/messages"
    pages: dict[str, dict[str, Any]] = {
        "newest": {"mode": "newest"},
        "offset 0": {"mode": "offset", "offset": 0},
        f"offset {records // 2:,}": {"mode": "offset", "offset": records // 2},
        f"offset {records - PAGE_RECORDS:,}": {
            "mode": "offset",
            "offset": max(records - PAGE_RECORDS, 0),
        },
    }
    report: dict[str, Any] = {}
    print(f"browse: {topic} ({records:,} records) on the console at {base}, {LOADS} loads each")
    middle_stamp = None
    pages["timestamp (middle)"] = {"mode": "timestamp"}
    for name, query in pages.items():
        if query["mode"] == "timestamp":
            if middle_stamp is None:
                continue
            query["timestamp"] = middle_stamp
        url = path + "?" + urllib.parse.urlencode({"partition": 0, "limit": PAGE_RECORDS, **query})
        loads = [_load(url) for _ in range(LOADS)]
        if query.get("offset") == records // 2 and loads[-1][2]:
            middle_stamp = loads[-1][2][0][1]
        median_ms = statistics.median(seconds for seconds, _, _ in loads) * 1000
        read = loads[-1][1]
        shown = loads[-1][2]
        report[name] = {"median_ms": median_ms, "log_bytes_read": read, "records": len(shown)}
        first = f"from offset {shown[0][0]:,}" if shown else "no records"
        print(
            f"  {name:<22} {median_ms:8.1f} ms median   {len(shown):3d} records {first:<22} "
            f"{read:>10,} bytes of log read"
        )
    return report
