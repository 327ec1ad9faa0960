"""One broker's HTTP queue API serves a whole queue whose partitions three brokers lead, on
real broker processes driven by the standard library's HTTP client: records enqueued at
it land on every partition, its dequeues hand out records of every partition, a message
it handed out is acknowledged or released at any broker, a priority changed and a message
cancelled at it on partitions other brokers lead are honoured; and with kill -9 of a
partition's leader in the middle, nothing acknowledged is handed out again and nothing
unacknowledged is lost (an id handed out before the kill is acknowledged or refused with
409, never a 500); on a SASL cluster each step is taken as the HTTP caller, so the
caller's ACLs decide at every broker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from clients import create_topic, unique, wait_until
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from harness import ClusterProcess, free_port
from secured import password, sasl_plain_client, sasl_plain_config
from test_http_queues import CONFIG, call, dequeue

WAIT_S = 90
PARTITIONS = 6
CLUSTER_CONFIG = CONFIG | {
    "offsets.topic.replication.factor": "3",
    "share.coordinator.state.topic.replication.factor": "3",
}


def start(cluster_factory: Any) -> tuple[ClusterProcess, dict[int, str]]:
    """Three brokers, each serving the queue API: node id -> its base URL."""
    cluster = cluster_factory(start=False)
    bases: dict[int, str] = {}
    for node in cluster.nodes:
        address = f"127.0.0.1:{free_port()}"
        bases[node.node_id] = f"http://{address}"
        node.config.update(CLUSTER_CONFIG | {"metrics.listen": address})
    cluster.start()
    for base in bases.values():
        wait_until(lambda b=base: call(b, "GET", "/queues")[0] == 200, 30, f"{base} answers")
    return cluster, bases


def queue(cluster: ClusterProcess, config: dict[str, str]) -> tuple[str, dict[int, int]]:
    """A new queue of PARTITIONS partitions on all three brokers, and each one's leader."""
    name = unique("spread")
    create_topic(cluster.bootstrap, name, PARTITIONS, config=config, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Each partition elects its leader among its replicas: the preferred ones (the first
    # replica, spread over the brokers by placement) are elected for the test to use.
    wanted = [TopicPartition(name, index) for index in range(PARTITIONS)]
    admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=30)

    def spread() -> bool:
        found = admin.list_topics(name, timeout=10).topics[name].partitions
        return all(p.leader == p.replicas[0] for p in found.values())

    wait_until(spread, 30, "the preferred leaders lead")
    found = admin.list_topics(name, timeout=10).topics[name].partitions
    leaders = {index: p.leader for index, p in found.items()}
    assert len(set(leaders.values())) == 3, f"the partitions' leaders: {leaders}"
    return name, leaders


def enqueue(base: str, name: str, values: list[str]) -> list[dict[str, Any]]:
    messages = [{"value": v, "priority": 5} for v in values]
    status, placed = call(base, "POST", f"/queues/{name}/messages", {"messages": messages})
    assert status == 201, placed
    return list(placed["messages"])


def settle(base: str, name: str, verb: str, ids: list[str], **fields: Any) -> tuple[int, Any]:
    return call(base, "POST", f"/queues/{name}/{verb}", {"ids": ids, **fields})


@pytest.mark.timeout(400)
def test_one_broker_serves_a_queue_that_three_lead(cluster_factory: Any) -> None:
    cluster, bases = start(cluster_factory)
    name, leaders = queue(cluster, {"share.delivery.order": "priority"})
    served = min(bases)
    base = bases[served]
    others = [bases[n] for n in sorted(bases) if n != served]

    values = [f"m{i}" for i in range(36)]
    placed = enqueue(base, name, values)
    assert {m["partition"] for m in placed} == set(range(PARTITIONS))
    where = {v: (m["partition"], m["offset"]) for v, m in zip(values, placed, strict=True)}

    # A priority changed and a message cancelled, each on a partition another broker leads.
    elsewhere = [v for v in values if leaders[where[v][0]] != served]
    raised = elsewhere[0]
    cancelled = next(v for v in elsewhere if leaders[where[v][0]] != leaders[where[raised][0]])
    raise_path = f"/queues/{name}/messages/{where[raised][0]}/{where[raised][1]}"
    # The share state's topic is created on first use: its leaders take a moment.
    wait_until(
        lambda: call(base, "PATCH", raise_path, {"priority": 0})[0] != 503,
        30,
        "the share state is readable",
    )
    status, changed = call(base, "PATCH", raise_path, {"priority": 0})
    assert status == 200 and changed["priority"] == 0 and changed["state"] == "queued", changed
    cancel_path = f"/queues/{name}/messages/{where[cancelled][0]}/{where[cancelled][1]}"
    status, answer = call(base, "DELETE", cancel_path)
    assert status == 200 and answer["state"] == "cancelled", answer
    status, answer = call(base, "DELETE", cancel_path)
    assert status == 409 and answer["type"].endswith("message-done"), answer

    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < len(values) - 1:
        assert time.monotonic() < deadline, f"{len(got)} of {len(values) - 1} dequeued"
        got += dequeue(base, name, max=10, wait_ms=2000)
    by_value = {m["value"]: m for m in got}
    assert len(by_value) == len(got), "a message was handed out twice"
    assert set(by_value) == set(values) - {cancelled}
    assert {m["partition"] for m in got} == set(range(PARTITIONS))
    assert by_value[raised]["priority"] == 0
    assert all(m["delivery_count"] == 1 for m in got)
    assert dequeue(base, name, max=10, wait_ms=300) == []

    # Acknowledged at the broker that handed them out, and at the two others.
    kept = [by_value[v] for v in sorted(by_value)[:2]]
    rest = [m["id"] for m in got if m not in kept]
    thirds = [rest[0::3], rest[1::3], rest[2::3]]
    for at, ids in zip([base, *others], thirds, strict=True):
        assert settle(at, name, "ack", ids) == (200, {"acked": len(ids)})
    status, stale = settle(others[0], name, "ack", [rest[0]])
    assert status == 409 and stale["type"].endswith("stale-id"), stale

    # Every broker shows the whole queue's state, each partition as its leader has it: all
    # messages in the logs, two held, none waiting.
    for at, node in ((base, served), (others[1], max(bases))):
        status, state = call(at, "GET", f"/queues/{name}/state")
        assert status == 200, state
        shown = {p["partition"]: p for p in state["partitions"]}
        assert sorted(shown) == list(range(PARTITIONS)), state
        for index, p in shown.items():
            assert p["state"] == "led" and p["leader"] == leaders[index], p
            assert p["led_here"] == (leaders[index] == node), p
        held = {by_value[v]["partition"] for v in sorted(by_value)[:2]}
        assert sum(p["acquired"] for p in shown.values()) == 2, state
        assert all(p["acquired"] > 0 for i, p in shown.items() if i in held), state
        assert sum(p["available"] + p["delayed"] for p in shown.values()) == 0, state
        assert sum(p["lag"] for p in shown.values()) == 2, state
        assert sum(p["log_end_offset"] for p in shown.values()) == len(values), state

    # One released at another broker with a delay, one at once: both come back.
    status, answer = settle(others[1], name, "nack", [kept[0]["id"]], delay_ms=1500)
    assert status == 200, answer
    due_ms = answer["available_at_ms"]
    assert settle(base, name, "nack", [kept[1]["id"]]) == (200, {"released": 1})
    again: list[dict[str, Any]] = []
    while len(again) < 2:
        assert time.monotonic() < deadline, f"{again} of the released two"
        for m in dequeue(base, name, max=10, wait_ms=2000):
            if m["value"] == kept[0]["value"]:
                assert int(time.time() * 1000) >= due_ms, "handed out before its delay ended"
            again.append(m)
    assert sorted((m["value"], m["delivery_count"]) for m in again) == sorted(
        (m["value"], 2) for m in kept
    )
    assert settle(others[0], name, "ack", [m["id"] for m in again]) == (200, {"acked": 2})
    assert dequeue(base, name, max=10, wait_ms=300) == []


@pytest.mark.timeout(400)
def test_a_killed_leader_loses_nothing_and_hands_out_nothing_acknowledged(
    cluster_factory: Any,
) -> None:
    cluster, bases = start(cluster_factory)
    name, leaders = queue(cluster, {})
    served = min(bases)
    base = bases[served]
    victim = next(n for n in sorted(set(leaders.values())) if n != served)

    values = [f"v{i}" for i in range(60)]
    assert {m["partition"] for m in enqueue(base, name, values)} == set(range(PARTITIONS))
    acked: set[str] = set()
    deadline = time.monotonic() + WAIT_S
    while len(acked) < 20:
        assert time.monotonic() < deadline, f"{len(acked)} acknowledged"
        for m in dequeue(base, name, max=5, wait_ms=2000):
            assert m["value"] not in acked
            assert settle(base, name, "ack", [m["id"]]) == (200, {"acked": 1})
            acked.add(m["value"])
    # Held unacknowledged at the kill: some of them locked at the broker killed.
    held: list[dict[str, Any]] = []
    while len(held) < 6 or all(leaders[m["partition"]] != victim for m in held):
        assert time.monotonic() < deadline, f"{len(held)} held"
        held += dequeue(base, name, max=2, wait_ms=2000)
    assert not any(m["value"] in acked for m in held)

    cluster.node(victim).kill()
    # Enqueued after the kill: routed to the new leaders.
    later = [f"v{i}" for i in range(60, 72)]
    assert {m["partition"] for m in enqueue(base, name, later)} == set(range(PARTITIONS))
    values += later
    # The held ids: acknowledged, or refused as stale (the lock died with its leader).
    for m in held:
        status, answer = settle(base, name, "ack", [m["id"]])
        assert status in (200, 409), answer
        if status == 200:
            acked.add(m["value"])
        else:
            assert answer["type"].endswith("stale-id"), answer
    while len(acked) < len(values):
        assert time.monotonic() < deadline, f"{sorted(set(values) - acked)} never acknowledged"
        for m in dequeue(base, name, max=10, wait_ms=1000):
            assert m["value"] not in acked, f"{m['value']} was acknowledged before"
            status, answer = settle(base, name, "ack", [m["id"]])
            assert status in (200, 409), answer
            if status == 200:
                acked.add(m["value"])
    assert acked == set(values)
    assert dequeue(base, name, max=10, wait_ms=300) == []


def allow(
    bootstrap: str, user: str, operation: AclOperation, kind: ResourceType, name: str
) -> None:
    binding = AclBinding(
        kind,
        name,
        ResourcePatternType.LITERAL,
        f"User:{user}",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )
    admin = AdminClient(sasl_plain_client(bootstrap, "admin"))
    for future in admin.create_acls([binding], request_timeout=20).values():
        future.result(timeout=20)


@pytest.mark.timeout(400)
def test_on_a_sasl_cluster_the_callers_acls_decide_at_every_leader(cluster_factory: Any) -> None:
    """The steps taken at other brokers are taken as the HTTP caller: a user without WRITE
    enqueues nothing, without READ on the group dequeues nothing, and with them gets the
    records of every partition."""
    cluster = cluster_factory(start=False)
    bases: dict[int, str] = {}
    sasl: dict[int, str] = {}
    for node in cluster.nodes:
        address, port = f"127.0.0.1:{free_port()}", free_port()
        bases[node.node_id], sasl[node.node_id] = f"http://{address}", f"127.0.0.1:{port}"
        node.config.update(
            sasl_plain_config(port, ("admin", "alice"), authorizer=True)
            | CLUSTER_CONFIG
            | {"metrics.listen": address}
        )
    cluster.start()
    admin, alice = ("admin", password("admin")), ("alice", password("alice"))
    served = min(bases)
    base = bases[served]
    for at in bases.values():
        wait_until(lambda b=at: call(b, "GET", "/queues", auth=admin)[0] == 200, 30, "answers")
    name, group = unique("guarded"), unique("workers")
    assert call(base, "PUT", f"/queues/{name}", {"partitions": PARTITIONS}, auth=admin)[0] == 201
    found = AdminClient(sasl_plain_client(sasl[served], "admin")).list_topics(name, timeout=10)
    leaders = {index: p.leader for index, p in found.topics[name].partitions.items()}
    assert len(set(leaders.values())) == 3, f"the partitions' leaders: {leaders}"

    messages = {"messages": [{"value": f"m{i}"} for i in range(12)]}
    allow(sasl[served], "alice", AclOperation.READ, ResourceType.TOPIC, name)
    enqueue_path, dequeue_path = f"/queues/{name}/messages", f"/queues/{name}/dequeue"
    wait_until(
        lambda: call(base, "POST", enqueue_path, messages, auth=alice)[0] == 403,
        30,
        "alice may see the queue, not write to it",
    )
    allow(sasl[served], "alice", AclOperation.WRITE, ResourceType.TOPIC, name)
    wait_until(
        lambda: call(base, "POST", enqueue_path, messages, auth=alice)[0] == 201,
        30,
        "every leader lets alice write",
    )
    status, answer = call(base, "POST", dequeue_path, {"group": group}, auth=alice)
    assert status == 403 and answer["type"].endswith("forbidden"), answer
    allow(sasl[served], "alice", AclOperation.READ, ResourceType.GROUP, group)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 12:
        assert time.monotonic() < deadline, f"{len(got)} of 12 dequeued"
        status, answer = call(
            base, "POST", dequeue_path, {"group": group, "max": 12, "wait_ms": 1000}, auth=alice
        )
        if status == 403:  # the group's ACL not yet on every broker
            continue
        assert status == 200, answer
        got += answer["messages"]
    assert sorted(m["value"] for m in got) == sorted(f"m{i}" for i in range(12))
    assert {m["partition"] for m in got} == set(range(PARTITIONS))
    other = bases[max(bases)]
    ids = {"ids": [m["id"] for m in got]}
    assert call(other, "POST", f"/queues/{name}/ack", ids)[0] == 401
    assert call(other, "POST", f"/queues/{name}/ack", ids, auth=alice) == (200, {"acked": 12})
