"""The queue view of a share group (`raftka groups describe --http` and `raftka queues
describe --http`) against a real broker: a priority queue's share-partition with records
acknowledged and archived out of order by confluent-kafka's ShareConsumer, records it holds
acquired, one released by the HTTP API with a delay and one enqueued with a delay shows
exactly those counts, and a lag of the records not yet acknowledged or archived (not the log
end offset minus the start offset)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from brokers import Brokers
from clients import run_raftka, unique, wait_until
from confluent_kafka import AcknowledgeType, ShareConsumer
from harness import BrokerProcess, free_port
from test_http_queues import CONFIG, call, dequeue

WAIT_S = 60
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def served(module_brokers: Brokers) -> tuple[BrokerProcess, str]:
    address = f"127.0.0.1:{free_port()}"
    # Locks outlast the test's describes however slow the machine is.
    config = CONFIG | {
        "metrics.listen": address,
        "group.share.record.lock.duration.ms": "60000",
        "group.share.max.record.lock.duration.ms": "60000",
    }
    broker = module_brokers.broker(config, name="queue-view")
    base = f"http://{address}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers")
    return broker, base


def polled(consumer: ShareConsumer, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} records after {WAIT_S} s"
        got += [m for m in consumer.poll(0.5) if m.error() is None]
    return got


def cli(broker: BrokerProcess, base: str, *args: str) -> Any:
    result = run_raftka(
        *args, "--http", base, "--bootstrap-servers", broker.bootstrap, "--output", "json"
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_view_counts_available_delayed_acquired_and_done_records(
    served: tuple[BrokerProcess, str],
) -> None:
    broker, base = served
    name, group = unique("view"), unique("view-workers")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    # Offsets 0..9, the higher the offset the more urgent; offset 10 due in an hour.
    messages: list[dict[str, Any]] = [{"value": f"m{i}", "priority": 9 - i} for i in range(10)]
    messages.append({"value": "later", "priority": -1, "delay_ms": HOUR_MS})
    status, placed = call(base, "POST", f"/queues/{name}/messages", {"messages": messages})
    assert status == 201 and [m["offset"] for m in placed["messages"]] == list(range(11))

    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 3,
        }
    )
    try:
        consumer.subscribe([name])
        # The most urgent three (a fetch's records come in offset order).
        first = sorted(polled(consumer, 3), key=lambda m: -m.offset())
        assert [m.offset() for m in first] == [9, 8, 7]
        consumer.acknowledge(first[0], AcknowledgeType.ACCEPT)
        consumer.acknowledge(first[1], AcknowledgeType.ACCEPT)
        consumer.acknowledge(first[2], AcknowledgeType.REJECT)
        consumer.commit_sync(10)
        held = polled(consumer, 3)  # left acquired
        assert sorted(m.offset() for m in held) == [4, 5, 6]
        got = dequeue(base, name, group=group, max=1, wait_ms=2000)
        assert [(m["partition"], m["offset"]) for m in got] == [(0, 3)]
        nacked = {"group": group, "ids": [got[0]["id"]], "delay_ms": HOUR_MS}
        assert call(base, "POST", f"/queues/{name}/nack", nacked)[0] == 200

        # Done: 8 and 9 acknowledged, 7 archived; acquired: 4, 5, 6; delayed: 3 and 10;
        # available: 0, 1, 2. The start offset stays 0, the log end is 11.
        want = {
            "start_offset": 0,
            "log_end_offset": 11,
            "acknowledged": 2,
            "archived": 1,
            "lag": 8,
            "available": 3,
            "delayed": 2,
            "acquired": 3,
        }
        status, state = call(base, "GET", f"/queues/{name}/state?group={group}")
        assert status == 200, state
        (partition,) = state["partitions"]
        assert {k: partition[k] for k in want} == want

        def persisted() -> bool:
            rows = cli(broker, base, "groups", "describe", group)["partitions"]
            return [(r["acknowledged"], r["archived"]) for r in rows] == [(2, 1)]

        wait_until(persisted, 30, "the acknowledgements reach __share_group_state")
        (row,) = cli(broker, base, "groups", "describe", group)["partitions"]
        assert (row["topic"], row["partition"], row["start_offset"]) == (name, 0, 0)
        assert row["log_end_offset"] == 11
        assert {k: row[k] for k in ("lag", "available", "delayed", "acquired")} == {
            "lag": 8,
            "available": 3,
            "delayed": 2,
            "acquired": 3,
        }
        described = cli(broker, base, "queues", "describe", name)
        (mine,) = [g for g in described["groups"] if g["group"] == group]
        assert mine["waiting"] == 8 and mine["releases_delayed"] == 1
        assert {k: mine[k] for k in ("lag", "available", "delayed", "acquired")} == {
            "lag": 8,
            "available": 3,
            "delayed": 2,
            "acquired": 3,
        }
        table = run_raftka(
            "groups", "describe", group, "--http", base, "--bootstrap-servers", broker.bootstrap
        ).stdout
        header = table.splitlines()[2].split()
        assert header[-4:] == ["LAG", "AVAILABLE", "DELAYED", "ACQUIRED"]
        assert table.splitlines()[3].split()[-4:] == ["8", "3", "2", "3"]
    finally:
        consumer.close()
    # The consumer gone, its records are available again.
    status, state = call(base, "GET", f"/queues/{name}/state?group={group}")
    (partition,) = state["partitions"]
    assert (partition["acquired"], partition["available"], partition["delayed"]) == (0, 6, 2)


def test_a_group_without_state_and_an_unknown_queue(served: tuple[BrokerProcess, str]) -> None:
    broker, base = served
    name = unique("view-empty")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    status, state = call(base, "GET", f"/queues/{name}/state?group=nobody")
    assert status == 200 and state["partitions"] == [
        {"partition": 0, "leader": 1, "led_here": True, "state": "none"}  # node.id 1
    ]
    assert call(base, "GET", f"/queues/{unique('missing')}/state")[0] == 404
