"""A full disk: writes are refused with KAFKA_STORAGE_ERROR and change nothing, reads go on,
and the broker takes writes again by itself once space returns, its log intact.

The broker's data directory is a small tmpfs filled up by a filler file, so it needs root (as
CI has) to mount one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import consume, produce, wait_until, watermarks
from confluent_kafka import KafkaError
from required import missing_client

from tests.chaos.cluster import FILLER_NAME, fill_disk

FILESYSTEM_BYTES = 24 << 20


@contextlib.contextmanager
def small_filesystem(path: Path) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FILESYSTEM_BYTES}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        missing_client(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write a filler file until the filesystem refuses more."""
    filler = path / "filler"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(chunk)
    return filler


@pytest.mark.timeout(240)
def test_full_disk_refuses_writes_keeps_reads_and_recovers(broker_factory, new_topic, tmp_path):
    if os.geteuid() != 0:
        missing_client("a full-disk test mounts a tmpfs: run as root")
    with small_filesystem(tmp_path / "disk") as disk:
        broker = broker_factory(data_dir=disk / "data")
        topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
        before = [{"value": f"before-{i}".encode()} for i in range(500)]
        assert not produce(broker.bootstrap, topic, before, acks="all").errors

        filler = fill(disk)
        refused = produce(
            broker.bootstrap,
            topic,
            [{"value": b"x" * 20_000} for _ in range(20)],
            acks="all",
            retries=0,
            timeout=30,
            **{"message.timeout.ms": 20_000, "enable.idempotence": False},
        )
        codes = {report.error.code() for report in refused.reports if report.error}
        assert KafkaError.KAFKA_STORAGE_ERROR in codes, refused.reports[:3]
        assert all(r.error for r in refused.reports), "a write was acknowledged on a full disk"

        # Reads go on, and the refused writes left nothing behind.
        got = consume(broker.bootstrap, topic, [0], start=0, timeout=60)[0]
        assert [m.value() for m in got] == [r["value"] for r in before]
        assert watermarks(broker.bootstrap, topic, 0)[1] == 500

        filler.unlink()
        after = [{"value": f"after-{i}".encode()} for i in range(500)]

        def accepted() -> bool:
            result = produce(broker.bootstrap, topic, after[:1], acks="all", timeout=20)
            return not result.errors

        wait_until(accepted, timeout=60, what="writes accepted again once space returned")
        assert not produce(broker.bootstrap, topic, after[1:], acks="all").errors

        broker.stop()
        broker.start()
        got = consume(broker.bootstrap, topic, [0], start=0, timeout=60)[0]
        values = [m.value() for m in got]
        assert values == [r["value"] for r in before + after]
        offsets = [m.offset() for m in got]
        assert offsets == sorted(set(offsets))
        broker.stop()  # while its filesystem is still mounted


@pytest.mark.timeout(240)
def test_a_broker_stopped_while_its_disk_is_full_exits_cleanly_and_recovers(
    broker_factory, new_topic, tmp_path
):
    """SIGTERM on a full disk: no log can be marked cleanly shut down, so each is left for
    the next start to recover, and the broker still exits 0 (it did stop as asked; the
    metadata log's failed close used to end it with a traceback and exit code 1)."""
    if os.geteuid() != 0:
        missing_client("a full-disk test mounts a tmpfs: run as root")
    with small_filesystem(tmp_path / "disk") as disk:
        broker = broker_factory(data_dir=disk / "data")
        topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
        sent = [{"value": f"v-{i}".encode()} for i in range(2000)]
        assert not produce(broker.bootstrap, topic, sent, acks="all").errors

        fill_disk(disk, FILESYSTEM_BYTES)  # down to the last byte
        broker.stop()  # raises unless the broker exits 0
        assert "not closed cleanly" in broker.log_tail(200)

        (disk / FILLER_NAME).unlink()
        broker.start()
        got = consume(broker.bootstrap, topic, [0], start=0, timeout=60)[0]
        assert [m.value() for m in got] == [r["value"] for r in sent]
        broker.stop()  # while its filesystem is still mounted
