"""The HTTP queue API (served on `metrics.listen`'s endpoint) of a real broker process,
driven by the standard library's HTTP client: a priority queue created, filled and
dequeued in priority order, acknowledged, released and rejected; an HTTP dequeue and
confluent-kafka's ShareConsumer in one share group see disjoint records; every bad input
gets a problem document and changes nothing; on a SASL broker Basic credentials are
checked and the Kafka port's ACLs apply."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from brokers import Brokers
from clients import unique, wait_until
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from harness import BrokerProcess, free_port
from secured import password, start_sasl_broker

CONFIG = {
    "group.share.record.lock.duration.ms": "15000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    "share.auto.offset.reset": "earliest",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.num.partitions": "2",
}


def call(
    base: str,
    method: str,
    path: str,
    body: object = None,
    *,
    raw: bytes | None = None,
    auth: tuple[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, the JSON answer) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.fixture(scope="module")
def served(module_brokers: Brokers) -> tuple[BrokerProcess, str]:
    address = f"127.0.0.1:{free_port()}"
    broker = module_brokers.broker(CONFIG | {"metrics.listen": address}, name="http-queues")
    base = f"http://{address}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers")
    return broker, base


def dequeue(base: str, name: str, **fields: Any) -> list[dict[str, Any]]:
    status, answer = call(base, "POST", f"/queues/{name}/dequeue", fields)
    assert status == 200, answer
    return list(answer["messages"])


def test_a_priority_queue_hands_out_the_most_urgent_first(served: tuple[Any, str]) -> None:
    _, base = served
    name = unique("prio")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201
    assert name in [q["name"] for q in call(base, "GET", "/queues")[1]["queues"]]
    messages = [{"value": f"p{p}", "priority": p} for p in (5, 1, 9, 3, 7)]
    status, placed = call(base, "POST", f"/queues/{name}/messages", {"messages": messages})
    assert status == 201 and [m["offset"] for m in placed["messages"]] == [0, 1, 2, 3, 4]

    got = dequeue(base, name, max=5, wait_ms=2000)
    assert [m["value"] for m in got] == ["p1", "p3", "p5", "p7", "p9"]
    assert all(m["delivery_count"] == 1 for m in got)

    # Ack the first; release the second (it comes back); reject the third (archived).
    assert call(base, "POST", f"/queues/{name}/ack", {"ids": [got[0]["id"]]}) == (
        200,
        {"acked": 1},
    )
    assert call(base, "POST", f"/queues/{name}/nack", {"ids": [got[1]["id"]]})[0] == 200
    assert call(base, "POST", f"/queues/{name}/reject", {"ids": [got[2]["id"]]})[0] == 200
    again = dequeue(base, name, max=5, wait_ms=2000)
    assert [(m["value"], m["delivery_count"]) for m in again] == [("p3", 2)]
    # Settled ids are stale now.
    status, problem = call(base, "POST", f"/queues/{name}/ack", {"ids": [got[0]["id"]]})
    assert status == 409 and problem["status"] == 409 and problem["title"]

    # ack=true: acknowledged at once, nothing left to hand out.
    assert call(base, "POST", f"/queues/{name}/nack", {"ids": [again[0]["id"]]})[0] == 200
    assert call(base, "POST", f"/queues/{name}/nack", {"ids": [m["id"] for m in got[3:]]})[0] == 200
    acked = dequeue(base, name, max=5, wait_ms=2000, ack=True)
    assert sorted(m["value"] for m in acked) == ["p3", "p7", "p9"]
    assert all(m["acked"] for m in acked) and not any(m["acked"] for m in got)
    assert dequeue(base, name, max=5) == []
    assert call(base, "DELETE", f"/queues/{name}")[0] == 200
    assert call(base, "POST", f"/queues/{name}/messages", {"value": "x"})[0] == 404


def test_http_and_a_share_consumer_in_one_group_get_disjoint_records(
    served: tuple[BrokerProcess, str],
) -> None:
    broker, base = served
    name, group = unique("shared"), unique("workers")
    assert call(base, "PUT", f"/queues/{name}", {})[0] == 201
    sent = [f"m{i}" for i in range(40)]
    assert (
        call(base, "POST", f"/queues/{name}/messages", {"messages": [{"value": v} for v in sent]})[
            0
        ]
        == 201
    )
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": 10,
        }
    )
    try:
        consumer.subscribe([name])
        by_http: list[str] = []
        by_kafka: list[str] = []

        def all_delivered() -> bool:
            for m in dequeue(base, name, group=group, max=7, wait_ms=200, ack=True):
                by_http.append(m["value"])
            for m in consumer.poll(0.5) or []:
                if m.error() is None:
                    by_kafka.append(m.value().decode())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            return len(by_http) + len(by_kafka) >= len(sent)

        wait_until(all_delivered, 60, "every record delivered once")
    finally:
        consumer.close()
    assert not set(by_http) & set(by_kafka)
    assert sorted(by_http + by_kafka) == sorted(sent)
    assert by_http


def test_concurrent_dequeues_with_ack_get_every_message_once(served: tuple[Any, str]) -> None:
    """Twenty threads dequeue with ack=true from one priority queue at once (so the
    broker serves many of them in one round: one fetch and one acknowledgement), asking
    for 1, 2 or 5 messages and waiting 0 or 300 ms: together they get every message once,
    each acknowledged at its first delivery, and each answer most urgent first."""
    _, base = served
    name = unique("crowd")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority", "partitions": 2})[0] == 201
    sent = [{"value": f"m{i}", "priority": (i * 37) % 11} for i in range(600)]
    for start in range(0, len(sent), 200):
        chunk = {"messages": sent[start : start + 200]}
        assert call(base, "POST", f"/queues/{name}/messages", chunk)[0] == 201
    got: list[dict[str, Any]] = []
    answers: list[list[dict[str, Any]]] = []
    problems: list[object] = []
    lock = threading.Lock()

    def dequeuer(n: int) -> None:
        fields = {"max": (1, 2, 5)[n % 3], "wait_ms": (0, 300)[n % 2], "ack": True}
        empty_in_a_row = 0
        while empty_in_a_row < 3:
            status, answer = call(base, "POST", f"/queues/{name}/dequeue", fields)
            with lock:
                if status != 200:
                    problems.append(answer)
                    return
                got.extend(answer["messages"])
                answers.append(answer["messages"])
                done = len(got) >= len(sent)
            empty_in_a_row = 0 if answer["messages"] else empty_in_a_row + 1
            if done and not answer["messages"]:
                return

    threads = [threading.Thread(target=dequeuer, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert problems == []
    values = [m["value"] for m in got]
    assert sorted(values) == sorted(m["value"] for m in sent)  # each once: none lost or twice
    assert all(m["acked"] and m["delivery_count"] == 1 for m in got)
    for answer in answers:
        priorities = [m["priority"] for m in answer]
        assert priorities == sorted(priorities)
    assert dequeue(base, name, max=5, wait_ms=200) == []
    status, state = call(base, "GET", f"/queues/{name}/state")
    assert status == 200 and [p["lag"] for p in state["partitions"]] == [0, 0]


def test_bad_input_gets_a_problem_and_changes_nothing(served: tuple[Any, str]) -> None:
    _, base = served
    name = unique("bad")
    assert call(base, "PUT", f"/queues/{name}", {"order": "priority"})[0] == 201

    def problem(status: int, method: str, path: str, body: object = None, **kw: Any) -> None:
        got, answer = call(base, method, path, body, **kw)
        assert got == status, answer
        assert {"type", "title", "status", "detail"} <= answer.keys() and answer["status"] == status

    problem(404, "POST", "/queues/no-such-queue/messages", {"value": "x"})
    problem(404, "POST", "/queues/no-such-queue/dequeue", {})
    problem(400, "POST", f"/queues/{name}/messages", {"value": "x", "priority": "high"})
    problem(
        400,
        "POST",
        f"/queues/{name}/messages",
        {"messages": [{"value": "ok"}, {"value": "x", "priority": 1.5}]},
    )
    problem(400, "POST", f"/queues/{name}/messages", raw=b"{not json")
    problem(413, "POST", f"/queues/{name}/messages", raw=b"{" + b" " * 70000 + b"}")
    problem(400, "POST", f"/queues/{name}/ack", {"ids": ["not-an-id"]})
    problem(400, "PUT", f"/queues/{unique('q')}", {"order": "random"})
    # A well-formed id this broker never dealt: stale.
    assert call(base, "POST", f"/queues/{name}/messages", {"value": "kept"})[0] == 201
    dealt = dequeue(base, name, wait_ms=2000)
    forged = dealt[0]["id"][:-4] + "AAAA"
    assert call(base, "POST", f"/queues/{name}/ack", {"ids": [forged]})[0] in (400, 409)
    foreign = base64.urlsafe_b64encode(
        json.dumps([name, "someone-else", name, 0, 0]).encode()
    ).decode()
    problem(409, "POST", f"/queues/{name}/ack", {"ids": [foreign]})
    # Nothing of that changed the queue: the one good message, still locked by its dealer.
    assert call(base, "POST", f"/queues/{name}/nack", {"ids": [dealt[0]["id"]]})[0] == 200
    assert [m["value"] for m in dequeue(base, name, max=10, wait_ms=2000)] == ["kept"]


def test_openapi_and_docs_are_served(served: tuple[Any, str]) -> None:
    _, base = served
    status, document = call(base, "GET", "/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.1")
    with urllib.request.urlopen(base + "/docs", timeout=10) as page:
        text = page.read().decode()
    assert "POST /queues/{name}/dequeue" in text and "<script" not in text


def test_basic_auth_on_a_sasl_broker(module_brokers: Brokers) -> None:
    address = f"127.0.0.1:{free_port()}"
    start_sasl_broker(
        module_brokers,
        ("admin", "alice"),
        config=CONFIG
        | {"metrics.listen": address, "connection.failed.authentication.delay.ms": "50"},
        name="http-queues-sasl",
    )
    base = f"http://{address}"
    admin = ("admin", password("admin"))
    wait_until(lambda: call(base, "GET", "/queues", auth=admin)[0] == 200, 30, "the API answers")
    name = unique("guarded")
    assert call(base, "PUT", f"/queues/{name}", {}, auth=admin)[0] == 201
    status, answer = call(base, "GET", "/queues")
    assert status == 401 and answer["status"] == 401
    assert call(base, "GET", "/queues", auth=("admin", "wrong"))[0] == 401
    alice = ("alice", password("alice"))
    assert call(base, "POST", f"/queues/{name}/messages", {"value": "x"}, auth=alice)[0] == 403
    assert call(base, "POST", f"/queues/{name}/dequeue", {}, auth=alice)[0] == 403
    assert (
        call(base, "PATCH", f"/queues/{name}/messages/0/0", {"priority": 1}, auth=alice)[0] == 403
    )
    assert call(base, "DELETE", f"/queues/{name}/messages/0/0", auth=alice)[0] == 403
    assert call(base, "POST", f"/queues/{name}/messages", {"value": "x"}, auth=admin)[0] == 201
    assert [m["value"] for m in dequeue_as(base, name, admin)] == ["x"]


def test_waiting_dequeues_of_two_users_are_each_authorized(module_brokers: Brokers) -> None:
    """Dequeues waiting together at one member are served together only when one user made
    them: while admin's dequeue waits on an empty queue, another of admin's and one of
    alice's (who may read the topic, not the group) arrive; alice's is refused as hers, and
    admin's two get one message each."""
    address = f"127.0.0.1:{free_port()}"
    sasl = start_sasl_broker(
        module_brokers,
        ("admin", "alice"),
        config=CONFIG | {"metrics.listen": address},
        name="http-queues-two-users",
    )
    base = f"http://{address}"
    admin, alice = ("admin", password("admin")), ("alice", password("alice"))
    wait_until(lambda: call(base, "GET", "/queues", auth=admin)[0] == 200, 30, "the API answers")
    name, group = unique("two-users"), unique("workers")
    assert call(base, "PUT", f"/queues/{name}", {}, auth=admin)[0] == 201
    binding = AclBinding(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    acls = AdminClient(sasl.client("admin"))
    for future in acls.create_acls([binding], request_timeout=20).values():
        future.result(timeout=20)
    answers: dict[str, tuple[int, Any]] = {}

    def waiting_dequeue(who: str, auth: tuple[str, str]) -> None:
        body = {"group": group, "wait_ms": 5000, "ack": True}
        answers[who] = call(base, "POST", f"/queues/{name}/dequeue", body, auth=auth)

    first = threading.Thread(target=waiting_dequeue, args=("admin 1", admin))
    first.start()
    state_path = f"/queues/{name}/state?group={group}"
    wait_until(
        lambda: call(base, "GET", state_path, auth=admin)[1]["partitions"][0]["state"] == "led",
        30,
        "admin's first dequeue has fetched (and waits)",
    )
    others = [
        threading.Thread(target=waiting_dequeue, args=("admin 2", admin)),
        threading.Thread(target=waiting_dequeue, args=("alice", alice)),
    ]
    for thread in others:
        thread.start()
    # Not a condition of the outcome: a moment for both to arrive while the first waits, so
    # that the next round finds them waiting together.
    time.sleep(0.5)
    two = {"messages": [{"value": "a"}, {"value": "b"}]}
    assert call(base, "POST", f"/queues/{name}/messages", two, auth=admin)[0] == 201
    for thread in [first, *others]:
        thread.join(60)
    status, refused = answers["alice"]
    assert status == 403 and refused["type"].endswith("forbidden"), refused
    got = [answers[who] for who in ("admin 1", "admin 2")]
    assert all(status == 200 for status, _ in got), got
    assert sorted(m["value"] for _, answer in got for m in answer["messages"]) == ["a", "b"]


def dequeue_as(base: str, name: str, auth: tuple[str, str]) -> list[dict[str, Any]]:
    status, answer = call(base, "POST", f"/queues/{name}/dequeue", {"wait_ms": 2000}, auth=auth)
    assert status == 200, answer
    return list(answer["messages"])


def test_rest_proxy_v3_produce_reaches_the_queue(served: tuple[BrokerProcess, str]) -> None:
    broker, base = served
    name = unique("rest")
    assert call(base, "PUT", f"/queues/{name}", {})[0] == 201
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster_id = admin.describe_cluster().result(timeout=30).cluster_id
    path = f"/v3/clusters/{cluster_id}/topics/{name}/records"
    record = {
        "key": {"type": "STRING", "data": "order-7"},
        "value": {"type": "JSON", "data": {"total": 12}},
        "headers": [{"name": "source", "value": base64.b64encode(b"web").decode()}],
    }
    status, report = call(base, "POST", path, record)
    assert status == 200 and report["error_code"] == 200, report
    assert (report["topic_name"], report["partition_id"], report["offset"]) == (name, 0, 0)
    assert report["value"] == {"type": "JSON", "size": len('{"total":12}')}
    (got,) = dequeue(base, name, wait_ms=2000, ack=True)
    assert (got["key"], got["value"], got["headers"]) == (
        "order-7",
        '{"total":12}',
        {"source": "web"},
    )
    # Refusals in REST Proxy's form.
    status, refused = call(base, "POST", f"/v3/clusters/nope/topics/{name}/records", record)
    assert status == 404 and refused["error_code"] == 404 and refused["message"]
    unknown = f"/v3/clusters/{cluster_id}/topics/no-such-topic/records"
    assert call(base, "POST", unknown, record)[1]["error_code"] == 404
    bad = {"value": {"type": "BINARY", "data": "not base64!"}}
    assert call(base, "POST", path, bad)[1]["error_code"] == 400
    assert dequeue(base, name) == []


def curl(*args: str) -> Any:
    """curl's JSON answer (the documented examples are curl commands)."""
    done = subprocess.run(
        ["curl", "--silent", "--show-error", *args], capture_output=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def test_the_documented_curl_example(served: tuple[Any, str]) -> None:
    """docs/queues.md's example, step by step, with curl."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/setup installs it when run as root)")
    _, api = served
    name = unique("tasks")
    curl("-X", "PUT", f"{api}/queues/{name}", "-d", '{"order": "priority", "partitions": 1}')
    messages = [
        {"value": "routine", "priority": 10},
        {"value": "urgent", "priority": 0},
        {"value": "later", "priority": 0, "delay_ms": 60000},
    ]
    placed = curl(
        "-X", "POST", f"{api}/queues/{name}/messages", "-d", json.dumps({"messages": messages})
    )
    assert len(placed["messages"]) == 3
    dealt = curl("-X", "POST", f"{api}/queues/{name}/dequeue", "-d", '{"max": 1, "wait_ms": 2000}')
    (urgent,) = dealt["messages"]
    assert (urgent["value"], urgent["priority"], urgent["delivery_count"]) == ("urgent", 0, 1)
    acked = curl(
        "-X", "POST", f"{api}/queues/{name}/ack", "-d", json.dumps({"ids": [urgent["id"]]})
    )
    assert acked == {"acked": 1}
    at_once = curl("-X", "POST", f"{api}/queues/{name}/dequeue", "-d", '{"ack": true}')
    assert [m["value"] for m in at_once["messages"]] == ["routine"]
    # "later" is not due for a minute.
    assert curl("-X", "POST", f"{api}/queues/{name}/dequeue", "-d", "{}")["messages"] == []
    changed = curl("-X", "PATCH", f"{api}/queues/{name}/messages/0/2", "-d", '{"priority": -1}')
    assert (changed["state"], changed["priority"]) == ("queued", -1)
    cancelled = curl("-X", "DELETE", f"{api}/queues/{name}/messages/0/2")
    assert cancelled["state"] == "cancelled"
    curl("-X", "POST", f"{api}/queues/{name}/messages", "-d", '{"value": "retry me"}')
    (dealt_again,) = curl("-X", "POST", f"{api}/queues/{name}/dequeue", "-d", '{"wait_ms": 2000}')[
        "messages"
    ]
    nack = {"ids": [dealt_again["id"]], "delay_ms": 30000}
    released = curl("-X", "POST", f"{api}/queues/{name}/nack", "-d", json.dumps(nack))
    assert released["released"] == 1 and released["available_at_ms"] > 0
    assert curl("-X", "POST", f"{api}/queues/{name}/dequeue", "-d", "{}")["messages"] == []
