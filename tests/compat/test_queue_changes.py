"""Changes the HTTP queue API makes to queued messages without rewriting the log, on real
broker processes: a priority changed (`PATCH /queues/{name}/messages/{partition}/{offset}`)
and a message cancelled (`DELETE` of the same path) are honoured by the HTTP dequeue and by
confluent-kafka's ShareConsumer in the same group; a nack with `delay_ms` keeps the message
back until then without holding back the others, and a waiting dequeue gets it when due;
all three survive kill -9 of the broker, and a priority change and a cancellation, asked of
another broker, survive kill -9 of the partition's leader among three."""

from __future__ import annotations

import time
from typing import Any

import pytest
from brokers import Brokers
from clients import create_topic, unique, wait_until
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess, free_port
from test_http_queues import CONFIG, call, dequeue

WAIT_S = 60


@pytest.fixture(scope="module")
def served(module_brokers: Brokers) -> tuple[BrokerProcess, str]:
    address = f"127.0.0.1:{free_port()}"
    broker = module_brokers.broker(CONFIG | {"metrics.listen": address}, name="queue-changes")
    base = f"http://{address}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers")
    return broker, base


def enqueue(base: str, name: str, messages: list[dict[str, Any]]) -> list[int]:
    status, placed = call(base, "POST", f"/queues/{name}/messages", {"messages": messages})
    assert status == 201, placed
    return [m["offset"] for m in placed["messages"]]


def message(name: str, offset: int, partition: int = 0) -> str:
    return f"/queues/{name}/messages/{partition}/{offset}"


def problem(base: str, status: int, method: str, path: str, body: object = None) -> str:
    """The problem's type of a refusal with `status`."""
    got, answer = call(base, method, path, body)
    assert got == status, answer
    assert answer["status"] == status and answer["detail"]
    return str(answer["type"])


def test_a_changed_priority_and_a_cancelled_message_are_honoured(
    served: tuple[BrokerProcess, str],
) -> None:
    _, base = served
    name = unique("changes")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    assert enqueue(base, name, [{"value": f"m{i}", "priority": 5} for i in range(6)]) == list(
        range(6)
    )
    assert call(base, "PATCH", message(name, 4), {"priority": 0}) == (
        200,
        {"group": name, "partition": 0, "offset": 4, "state": "queued", "priority": 0},
    )
    assert call(base, "PATCH", message(name, 0), {"priority": 9})[0] == 200
    assert call(base, "DELETE", message(name, 2)) == (
        200,
        {"group": name, "partition": 0, "offset": 2, "state": "cancelled"},
    )
    got = dequeue(base, name, max=1, wait_ms=2000)
    assert [m["value"] for m in got] == ["m4"]
    # In flight: its priority may change (it counts when it is released), not be cancelled.
    assert call(base, "PATCH", message(name, 4), {"priority": 7})[1]["state"] == "in-flight"
    assert problem(base, 409, "DELETE", message(name, 4)).endswith("message-in-flight")
    assert call(base, "POST", f"/queues/{name}/nack", {"ids": [got[0]["id"]]})[0] == 200
    rest = dequeue(base, name, max=10, wait_ms=2000, ack=True)
    assert [m["value"] for m in rest] == ["m1", "m3", "m5", "m4", "m0"]
    # Done ones can be changed no more; the cancelled one is done too.
    for method, body in (("PATCH", {"priority": 1}), ("DELETE", None)):
        assert problem(base, 409, method, message(name, 2), body).endswith("message-done")
        assert problem(base, 409, method, message(name, 4), body).endswith("message-done")
    assert dequeue(base, name, max=10) == []


def test_another_group_and_a_share_consumer_see_the_groups_changes(
    served: tuple[BrokerProcess, str],
) -> None:
    """A change is the group's: a ShareConsumer of that group gets the new order, another
    group the messages as enqueued."""
    broker, base = served
    name, group = unique("changes-kafka"), unique("workers")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    enqueue(base, name, [{"value": f"m{i}", "priority": i} for i in range(5)])
    assert call(base, "PATCH", message(name, 4) + f"?group={group}", {"priority": -1})[0] == 200
    assert call(base, "DELETE", message(name, 1), {"group": group})[0] == 200
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 1,
        }
    )
    received: list[bytes] = []
    try:
        consumer.subscribe([name])
        deadline = time.monotonic() + WAIT_S
        while len(received) < 4:
            assert time.monotonic() < deadline, f"{received} after {WAIT_S} s"
            for m in consumer.poll(0.5):
                if m.error() is None:
                    received.append(m.value())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync(10)
        assert [m for m in consumer.poll(1.0) if m.error() is None] == []
    finally:
        consumer.close()
    assert received == [b"m4", b"m0", b"m2", b"m3"]
    untouched = dequeue(base, name, group=unique("others"), max=10, wait_ms=2000)
    assert [m["value"] for m in untouched] == [f"m{i}" for i in range(5)]


def test_bad_changes_are_refused_and_change_nothing(served: tuple[BrokerProcess, str]) -> None:
    _, base = served
    name, plain = unique("changes-bad"), unique("changes-fifo")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    assert call(base, "PUT", f"/queues/{plain}", {})[0] == 201
    enqueue(base, name, [{"value": "a", "priority": 3}, {"value": "b", "priority": 4}])
    enqueue(base, plain, [{"value": "a"}, {"value": "b"}])
    problem(base, 404, "PATCH", message("no-such-queue", 0), {"priority": 1})
    problem(base, 404, "PATCH", message(name, 2), {"priority": 1})  # past the end
    problem(base, 404, "PATCH", message(name, 0, partition=3), {"priority": 1})
    problem(base, 404, "DELETE", message(name, 99))
    problem(base, 400, "PATCH", message(name, 0), {"priority": "urgent"})
    problem(base, 400, "PATCH", message(name, 0), {"priority": 2**63})
    problem(base, 400, "PATCH", message(name, 0), {})
    problem(base, 400, "PATCH", f"/queues/{name}/messages/0/first", {"priority": 1})
    problem(base, 400, "PATCH", message(name, 0), {"priority": 1, "group": ""})
    problem(base, 405, "GET", message(name, 0))
    assert problem(base, 409, "PATCH", message(plain, 0), {"priority": 1}).endswith(
        "not-a-priority-queue"
    )
    # Nothing changed: both queues hand out their messages as enqueued.
    assert [m["value"] for m in dequeue(base, name, max=5, wait_ms=2000)] == ["a", "b"]
    assert [m["value"] for m in dequeue(base, plain, max=5, wait_ms=2000)] == ["a", "b"]
    # A fifo queue may cancel, though.
    other = unique("g")
    assert call(base, "DELETE", message(plain, 0), {"group": other})[0] == 200
    assert [m["value"] for m in dequeue(base, plain, group=other, max=5, wait_ms=2000)] == ["b"]


def test_a_nack_with_a_delay_keeps_the_message_back_until_then(
    served: tuple[BrokerProcess, str],
) -> None:
    _, base = served
    name = unique("delayed-nack")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    enqueue(base, name, [{"value": f"m{i}", "priority": 0} for i in range(3)])
    (first,) = dequeue(base, name, max=1, wait_ms=2000)
    assert first["value"] == "m0"
    status, answer = call(
        base, "POST", f"/queues/{name}/nack", {"ids": [first["id"]], "delay_ms": 1500}
    )
    assert status == 200 and answer["released"] == 1, answer
    due_ms = answer["available_at_ms"]
    # The others are not held back by it.
    others = dequeue(base, name, max=5, wait_ms=200, ack=True)
    answered_ms = int(time.time() * 1000)
    assert {"m1", "m2"} <= {m["value"] for m in others}
    if answered_ms < due_ms:
        assert [m["value"] for m in others] == ["m1", "m2"], "dealt before its delay ended"
    # A waiting dequeue gets it when it is due, not before (on a machine so slow that the
    # delay ended meanwhile, it came with the others).
    waited = [m for m in others if m["value"] == "m0"]
    received_ms = answered_ms
    deadline = time.monotonic() + WAIT_S
    while not waited:
        assert time.monotonic() < deadline, f"not dequeued {WAIT_S} s after its delay"
        waited = dequeue(base, name, max=5, wait_ms=5000, ack=True)
        received_ms = int(time.time() * 1000)
        assert not waited or received_ms >= due_ms, "dealt before its delay ended"
    assert [(m["value"], m["delivery_count"]) for m in waited] == [("m0", 2)]
    print(f"delayed nack: dequeued {received_ms - due_ms} ms after it became due")
    # Refusals change nothing.
    enqueue(base, name, [{"value": "again", "priority": 0}])
    (again,) = dequeue(base, name, max=1, wait_ms=2000)
    problem(base, 400, "POST", f"/queues/{name}/nack", {"ids": [again["id"]], "delay_ms": -1})
    plain = unique("fifo-nack")
    assert call(base, "PUT", f"/queues/{plain}", {})[0] == 201
    enqueue(base, plain, [{"value": "x"}])
    (held,) = dequeue(base, plain, max=1, wait_ms=2000)
    assert problem(
        base, 409, "POST", f"/queues/{plain}/nack", {"ids": [held["id"]], "delay_ms": 10}
    ).endswith("delays-not-honoured")
    # Both still locked to their ids: an ack takes.
    assert call(base, "POST", f"/queues/{name}/ack", {"ids": [again["id"]]}) == (200, {"acked": 1})
    assert call(base, "POST", f"/queues/{plain}/ack", {"ids": [held["id"]]}) == (200, {"acked": 1})
    # A fifo queue made to honour delays takes a delayed nack.
    delaying = unique("fifo-delays")
    assert call(base, "PUT", f"/queues/{delaying}", {"delays": "yes"})[0] == 400
    assert call(base, "PUT", f"/queues/{delaying}", {"delays": True})[0] == 201
    enqueue(base, delaying, [{"value": "x"}, {"value": "y"}])
    (x,) = dequeue(base, delaying, max=1, wait_ms=2000)
    nack = {"ids": [x["id"]], "delay_ms": 600_000}
    assert call(base, "POST", f"/queues/{delaying}/nack", nack)[0] == 200
    assert [m["value"] for m in dequeue(base, delaying, max=5, wait_ms=200)] == ["y"]


def test_changes_and_a_delayed_nack_survive_kill_9(broker_factory: Any) -> None:
    address = f"127.0.0.1:{free_port()}"
    broker = broker_factory(CONFIG | {"metrics.listen": address})
    base = f"http://{address}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers")
    name = unique("changes-restart")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    enqueue(base, name, [{"value": f"m{i}", "priority": 5} for i in range(6)])
    assert call(base, "PATCH", message(name, 5), {"priority": 0})[0] == 200
    assert call(base, "DELETE", message(name, 1))[0] == 200
    (nacked,) = dequeue(base, name, max=1, wait_ms=2000)
    assert nacked["value"] == "m5"
    status, answer = call(
        base, "POST", f"/queues/{name}/nack", {"ids": [nacked["id"]], "delay_ms": 8000}
    )
    assert status == 200, answer
    due_ms = answer["available_at_ms"]
    broker.kill()
    broker.start()
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers again")
    got = dequeue(base, name, max=10, wait_ms=2000, ack=True)
    if int(time.time() * 1000) < due_ms:  # answered before the delay ended
        assert [m["value"] for m in got] == ["m0", "m2", "m3", "m4"]
    later: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) + len(later) < 5:
        assert time.monotonic() < deadline, f"{got + later} after {WAIT_S} s"
        later += dequeue(base, name, max=10, wait_ms=5000, ack=True)
        assert not later or int(time.time() * 1000) >= due_ms
    assert sorted(m["value"] for m in got + later) == ["m0", "m2", "m3", "m4", "m5"]


@pytest.mark.timeout(300)
def test_changes_survive_kill_9_of_the_leader_of_three(cluster_factory: Any) -> None:
    """The changes, asked of a broker that does not lead the partition, are made at its
    leader; after kill -9 of that leader the new one honours them for a ShareConsumer."""
    cluster = cluster_factory(start=False)
    addresses: dict[int, str] = {}
    for node in cluster.nodes:
        addresses[node.node_id] = f"127.0.0.1:{free_port()}"
        node.config.update(CONFIG | {"metrics.listen": addresses[node.node_id]})
        node.config["offsets.topic.replication.factor"] = "3"
    cluster.start()
    name, group = unique("changes-failover"), unique("workers")
    create_topic(
        cluster.bootstrap, name, config={"share.delivery.order": "priority"}, replication_factor=3
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leader = admin.list_topics(name, timeout=10).topics[name].partitions[0].leader
    other = next(a for n, a in addresses.items() if n != leader)
    base = f"http://{other}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "a follower's queue API")
    enqueue(base, name, [{"value": f"m{i}", "priority": 5} for i in range(8)])
    # The share state's topic is created on first use: its leaders take a moment.
    wait_until(
        lambda: call(base, "PATCH", message(name, 6), {"priority": 0, "group": group})[0] != 503,
        30,
        "the share state is readable",
    )
    assert call(base, "PATCH", message(name, 6), {"priority": 0, "group": group})[0] == 200
    assert call(base, "PATCH", message(name, 0), {"priority": 9, "group": group})[0] == 200
    assert call(base, "DELETE", message(name, 3), {"group": group})[0] == 200
    cluster.node(leader).kill()
    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": survivors,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 1,
        }
    )
    received: list[bytes] = []
    try:
        consumer.subscribe([name])
        deadline = time.monotonic() + WAIT_S * 2
        while len(received) < 7:
            assert time.monotonic() < deadline, f"{received} after the failover"
            for m in consumer.poll(0.5):
                if m.error() is None:
                    received.append(m.value())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync(10)
    finally:
        consumer.close()
    assert received == [b"m6", b"m1", b"m2", b"m4", b"m5", b"m7", b"m0"]
