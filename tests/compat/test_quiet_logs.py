"""A restart is quiet by default: loading `__consumer_offsets`' 50 partitions is told in one
summary line (not two lines a partition), its creation in no more, and the open-file-limit
warning stays away while the limit covers what the broker's partitions and connections need."""

from __future__ import annotations

import resource

import pytest
from brokers import Brokers
from clients import make_consumer, make_producer, unique, wait_until
from harness import BrokerProcess

SUMMARY = "coordinating the groups of 50 __consumer_offsets partitions"


def since_last_start(broker: BrokerProcess) -> list[str]:
    lines = broker.log_path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("=== ")]
    return lines[starts[-1] + 1 :]


def test_a_restart_tells_partition_loading_in_one_line(module_brokers: Brokers) -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        pytest.skip(f"an open file limit of {soft} is below what 50 partitions need")
    broker = module_brokers.broker(name="quiet-logs")
    topic = unique("quiet")
    producer = make_producer(broker.bootstrap)
    producer.produce(topic, b"a")
    assert producer.flush(30) == 0, "the record was not delivered"
    consumer = make_consumer(
        broker.bootstrap, **{"group.id": unique("quiet-g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        message = wait_until(lambda: consumer.poll(0.5), 60, "the record for the group")
        consumer.commit(message, asynchronous=False)
    finally:
        consumer.close()
    # The first group created `__consumer_offsets`: its 50 new, empty partitions are not
    # told one line each either.
    created = [line for line in since_last_start(broker) if "__consumer_offsets" in line]
    assert len(created) <= 2, "\n".join(created)
    broker.restart()
    wait_until(
        lambda: any(SUMMARY in line for line in since_last_start(broker)),
        60,
        "the groups to be loaded after the restart",
    )
    lines = since_last_start(broker)
    offsets_lines = [line for line in lines if "__consumer_offsets" in line]
    assert len(offsets_lines) <= 2, "\n".join(offsets_lines)
    assert not [line for line in lines if "open file limit" in line], "\n".join(lines)
