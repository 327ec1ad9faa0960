"""flush.messages=1: a produce is acknowledged only after its fsync.

Each flush job writes the partition's recovery-point-offset-checkpoint once its fsyncs are
done, so right after an acknowledgement that file must already cover the acknowledged
records. With Kafka's default policy nothing is fsynced yet, and the file lags.
"""

from __future__ import annotations

import pytest
from clients import make_producer

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"


def _recovery_point(broker, topic: str) -> int:
    path = broker.data_dir / f"{topic}-0" / RECOVERY_POINT_FILE
    return int(path.read_text()) if path.exists() else 0


@pytest.mark.parametrize("acks", ["1", "all"])
def test_flush_messages_1_acknowledges_after_fsync(broker_factory, new_topic, acks):
    broker = broker_factory()
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap, config={"flush.messages": "1"})
    producer = make_producer(broker.bootstrap, acks=acks, **{"linger.ms": 0})
    acked: list = []
    for i in range(20):
        acked.clear()
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda e, m: acked.append((e, m)))
        producer.flush(10)
        [(error, message)] = acked
        assert error is None, error
        assert _recovery_point(broker, topic) > message.offset(), (i, message.offset())


def test_default_policy_does_not_wait_for_fsync(broker_factory, new_topic):
    broker = broker_factory()
    topic = new_topic(partitions=1, bootstrap=broker.bootstrap)
    producer = make_producer(broker.bootstrap, acks="all", **{"linger.ms": 0})
    acked = []
    for i in range(20):
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda e, m: acked.append(e))
        producer.flush(10)
    assert acked == [None] * 20
    assert _recovery_point(broker, topic) < 20  # acknowledged from the page cache


def test_flush_ms_fsyncs_an_idle_partition_on_schedule(broker_factory, new_topic):
    """flush.ms set on one topic: its partitions are fsynced within that interval after a
    write, with nothing else arriving; a topic under Kafka's default policy beside it is not."""
    import time

    broker = broker_factory()
    scheduled = new_topic(partitions=1, bootstrap=broker.bootstrap, config={"flush.ms": "200"})
    default = new_topic(partitions=1, bootstrap=broker.bootstrap)
    producer = make_producer(broker.bootstrap, acks="1", **{"linger.ms": 0})
    for topic in (scheduled, default):
        for i in range(5):
            producer.produce(topic, f"r{i}".encode())
    assert producer.flush(10) == 0
    deadline = time.monotonic() + 10
    while _recovery_point(broker, scheduled) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _recovery_point(broker, scheduled) == 5
    assert _recovery_point(broker, default) == 0
