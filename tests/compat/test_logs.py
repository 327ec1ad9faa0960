"""`raftka serve --log-format json`: every line a broker writes is one JSON object naming its
node, and the events of a produce and a consumer group name the partition and the group."""

from __future__ import annotations

import json
import time
import uuid

from clients import make_consumer, produce


def test_json_log_names_node_partition_and_group(broker_factory, new_topic):
    broker = broker_factory(extra_args=["--log-format", "json"])
    topic = new_topic(bootstrap=broker.bootstrap)
    produce(broker.bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(10)])

    group = f"logs-{uuid.uuid4().hex[:10]}"
    consumer = make_consumer(broker.bootstrap, group_id=group, enable_partition_eof=False)
    try:
        consumer.subscribe([topic])
        read = []
        deadline = time.monotonic() + 60
        while len(read) < 10:
            assert time.monotonic() < deadline, f"read {len(read)} of 10 records within 60 s"
            for message in consumer.consume(num_messages=10, timeout=1.0):
                assert message.error() is None, message.error()
                read.append(message)
        consumer.commit(message=read[-1], asynchronous=False)
    finally:
        consumer.close()
    broker.stop()

    events = []
    for number, line in enumerate(broker.log_path.read_text().splitlines(), 1):
        if line.startswith("=== harness"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AssertionError(
                f"broker.log line {number} is not JSON ({exc}): {line!r}"
            ) from None
        assert isinstance(event, dict), line
        assert event["node"] == 1, line
        assert {"ts", "level", "logger", "msg"} <= event.keys(), line
        events.append(event)

    about_partition = [e for e in events if e.get("partition") == f"{topic}-0"]
    about_group = [e for e in events if e.get("group") == group]
    assert about_partition, f"no line names partition {topic}-0"
    assert all(e.get("topic") == topic for e in about_partition), about_partition
    assert about_group, f"no line names group {group}"
    assert any("is stable at generation" in e["msg"] for e in about_group), about_group
    assert any(e["msg"].startswith("raftka: serving on") for e in events)
