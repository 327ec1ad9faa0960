"""kcat (librdkafka 2.0 command-line client) against the broker: metadata, produce, consume."""

from __future__ import annotations

import json
import re
import subprocess

from clients import strictly_increasing


def _kcat(kcat_bin: str, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    proc = subprocess.run(
        [kcat_bin, *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    )
    return proc.stdout.decode()


def test_metadata_lists_broker_and_topic(kcat_bin, bootstrap, new_topic):
    topic = new_topic(partitions=3)
    out = _kcat(kcat_bin, "-b", bootstrap, "-L", "-m", "15")
    assert re.search(r"^ \d+ brokers?:$", out, re.M), out
    assert re.search(r"^  broker -?\d+ at \S+:\d+", out, re.M), out
    assert f'topic "{topic}" with 3 partitions:' in out, out
    for p in range(3):
        assert re.search(rf"^    partition {p}, leader \d+, replicas: \S+, isrs: \S+", out, re.M)

    md = json.loads(_kcat(kcat_bin, "-b", bootstrap, "-L", "-J", "-t", topic, "-m", "15"))
    broker_ids = {b["id"] for b in md["brokers"]}
    assert broker_ids
    for b in md["brokers"]:
        assert re.fullmatch(r"\S+:\d+", b["name"]), b
    [t] = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    for p in t["partitions"]:
        assert p["leader"] in broker_ids
        assert p["leader"] in {r["id"] for r in p["replicas"]}
        assert p["leader"] in {r["id"] for r in p["isrs"]}


def test_produce_then_consume_lines(kcat_bin, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    lines = [f"line {i} with some text" for i in range(200)]
    _kcat(kcat_bin, "-b", bootstrap, "-P", "-t", topic, "-p", "0", stdin="\n".join(lines) + "\n")
    out = _kcat(kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e")
    assert out.splitlines() == lines


def test_produce_then_consume_with_keys(kcat_bin, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    pairs = [(f"key{i}", f"value {i}") for i in range(100)]
    data = "".join(f"{k}:{v}\n" for k, v in pairs)
    _kcat(kcat_bin, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K:", stdin=data)
    out = _kcat(
        kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-K:"
    )
    assert out == data
    # The same data with explicit formatting, offsets included.
    out = _kcat(
        kcat_bin,
        "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
        "-f", "%p|%o|%k|%s\n",
    )  # fmt: skip
    rows = [line.split("|") for line in out.splitlines()]
    assert [(k, v) for _p, _o, k, v in rows] == pairs
    offsets = [int(o) for _p, o, _k, _v in rows]
    assert strictly_increasing(offsets)
    assert {p for p, _o, _k, _v in rows} == {"0"}


def test_compressed_produce_and_consume(kcat_bin, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    lines = [f"compressed line {i}" for i in range(300)]
    _kcat(
        kcat_bin, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-z", "snappy",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    out = _kcat(kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e")
    assert out.splitlines() == lines


def test_consume_relative_to_end_and_exact_offset(kcat_bin, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    lines = [f"msg {i}" for i in range(50)]
    _kcat(kcat_bin, "-b", bootstrap, "-P", "-t", topic, "-p", "0", stdin="\n".join(lines) + "\n")
    # The last 5 (ListOffsets latest, then fetch from end - 5).
    out = _kcat(kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-5", "-e")
    assert out.splitlines() == lines[-5:]
    # From an absolute offset, with a record count limit.
    out = _kcat(
        kcat_bin, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "10", "-c", "3",
        "-f", "%o %s\n",
    )  # fmt: skip
    # A fresh topic's offsets start at 0, so offset 10 holds the 11th line.
    assert out.splitlines() == [f"{i} {lines[i]}" for i in (10, 11, 12)]
