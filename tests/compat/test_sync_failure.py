"""A failed fsync stops the broker: no retry, no acknowledgement of what it held back, and
every record acknowledged before it is there after a restart.

After a failed fsync Linux may have dropped the pages it could not write, so a retry that
succeeds proves nothing; Kafka takes the log directory offline and halts when it has no
other. The fault is real: libfiu's POSIX preload library (Debian's fiu-utils, installed by
scripts/setup) makes the broker process's fsync calls fail with EIO once `fiu-ctrl` enables
it, while the broker runs.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from clients import consume, produce
from harness import BrokerProcess
from required import missing_client

#: Every sync call of the C library fails (fsync, fdatasync, msync) with EIO.
FAIL_SYNCS = "enable name=posix/io/sync/*,failinfo=5"


class FaultInjectedBroker(BrokerProcess):
    """A broker started under `fiu-run -x`: its failure points can be enabled while it runs."""

    def command(self) -> list[str]:
        return ["fiu-run", "-x", *super().command()]


@pytest.mark.timeout(180)
def test_a_failed_fsync_stops_the_broker_and_loses_nothing_acknowledged(new_topic, tmp_path):
    if shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None:
        missing_client("fiu-run/fiu-ctrl (Debian's fiu-utils) not installed")
    broker = FaultInjectedBroker(base_dir=tmp_path / "broker")
    try:
        broker.start()
        # flush.messages=1: every acknowledgement waits for the fsync of its batch.
        topic = new_topic(partitions=1, config={"flush.messages": "1"}, bootstrap=broker.bootstrap)
        acknowledged = [{"value": f"synced-{i}".encode()} for i in range(50)]
        assert not produce(broker.bootstrap, topic, acknowledged, acks="all").errors

        subprocess.run(["fiu-ctrl", "-c", FAIL_SYNCS, str(broker.pid)], check=True)
        held = produce(
            broker.bootstrap,
            topic,
            [{"value": b"never-synced"}],
            acks="all",
            retries=0,
            timeout=30,
            **{"message.timeout.ms": 10_000, "enable.idempotence": False},
        )
        assert held.errors, "a record was acknowledged though its fsync failed"

        deadline = time.monotonic() + 30
        while broker.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert broker.returncode == 1, (
            f"the broker went on after a failed fsync:\n{broker.log_tail()}"
        )
        log = broker.log_tail(20)
        assert f"fsync of the logs of {topic}-0 failed" in log, log
        assert "retrying" not in log

        # Restarted on a disk that works again: every acknowledged record is there.
        restarted = BrokerProcess(base_dir=tmp_path / "broker", port=broker.port)
        restarted.start()
        try:
            got = consume(restarted.bootstrap, topic, [0], start=0, timeout=60)[0]
            values = [m.value() for m in got]
            assert values[: len(acknowledged)] == [r["value"] for r in acknowledged]
        finally:
            restarted.stop()
    finally:
        broker.kill()
