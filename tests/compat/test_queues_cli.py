"""`raftka queues list|create|describe|delete` run as a user runs it, against a real broker:
a queue created with its order is listed and described with it (read back with
confluent-kafka too), a share group's progress through it (acknowledged and cancelled
messages, a changed priority, a delayed nack, made through the HTTP queue API) shows in
`describe`, bad arguments exit 2 and refusals 1, and `delete` removes it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from brokers import Brokers
from clients import run_raftka, topic_configs, unique, wait_until
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess, free_port
from test_http_queues import CONFIG, call, dequeue


@pytest.fixture(scope="module")
def served(module_brokers: Brokers) -> tuple[BrokerProcess, str]:
    address = f"127.0.0.1:{free_port()}"
    broker = module_brokers.broker(CONFIG | {"metrics.listen": address}, name="queues-cli")
    base = f"http://{address}"
    wait_until(lambda: call(base, "GET", "/queues")[0] == 200, 30, "the queue API answers")
    return broker, base


def raftka(broker: BrokerProcess, *args: object) -> subprocess.CompletedProcess[str]:
    return run_raftka("queues", *args, "--bootstrap-servers", broker.bootstrap)


def ok(broker: BrokerProcess, *args: object) -> str:
    result = raftka(broker, *args)
    assert result.returncode == 0, f"raftka queues {args}: {result.returncode} {result.stderr}"
    return result.stdout


def as_json(broker: BrokerProcess, *args: object) -> Any:
    return json.loads(ok(broker, *args, "--output", "json"))


def test_create_list_describe_delete(served: tuple[BrokerProcess, str]) -> None:
    broker, base = served
    name, fair, plain = unique("cli-q"), unique("cli-fair"), unique("cli-fifo")
    created = ok(broker, "create", name, "--order", "priority", "--default-priority", 3,
                 "--partitions", 2)  # fmt: skip
    assert f"Created queue {name} (priority)." in created
    ok(broker, "create", fair, "--order", "fair", "--fair-key", "header:tenant")
    ok(broker, "create", plain, "--delays")
    configs = topic_configs(AdminClient({"bootstrap.servers": broker.bootstrap}), fair)
    assert configs["share.delivery.order"].value == "fair"
    assert configs["share.fair.key"].value == "header:tenant"

    listed = {q["name"]: q for q in as_json(broker, "list")["queues"]}
    assert (listed[name]["order"], listed[name]["partitions"]) == ("priority", 2)
    assert listed[name]["default_priority"] == 3
    assert (listed[fair]["order"], listed[fair]["fair_key"]) == ("fair", "header:tenant")
    assert (listed[plain]["order"], listed[plain]["delays"]) == ("fifo", True)
    rows = {line.split()[0]: line for line in ok(broker, "list").splitlines()}
    assert "priority (default 3)" in rows[name] and "fifo with delays" in rows[plain]
    assert "No share group has read it yet." in ok(broker, "describe", name)

    # A group's progress, made through the HTTP API: two acknowledged, one cancelled, one
    # given priority 0 and nacked with a delay.
    messages = [{"value": f"m{i}", "partition": 0} for i in range(5)]
    assert call(base, "POST", f"/queues/{name}/messages", {"messages": messages})[0] == 201
    assert len(dequeue(base, name, max=2, wait_ms=2000, ack=True)) == 2
    assert call(base, "DELETE", f"/queues/{name}/messages/0/2")[0] == 200
    assert call(base, "PATCH", f"/queues/{name}/messages/0/4", {"priority": 0})[0] == 200
    (urgent,) = dequeue(base, name, max=1, wait_ms=2000)
    assert urgent["offset"] == 4
    nack = {"ids": [urgent["id"]], "delay_ms": 600_000}
    assert call(base, "POST", f"/queues/{name}/nack", nack)[0] == 200

    described = as_json(broker, "describe", name)
    assert described["log_end_offsets"] == [5, 0]
    by_partition = {g["partition"]: g for g in described["groups"]}
    assert {g["group"] for g in described["groups"]} == {name}
    assert by_partition[1]["waiting"] == 0  # dequeued from, empty
    assert by_partition[0] == {
        "group": name,
        "partition": 0,
        "start_offset": 3,  # 0 and 1 acknowledged, 2 cancelled
        "log_end_offset": 5,
        "waiting": 2,
        "acknowledged": 0,
        "archived": 0,
        "priorities_changed": 1,
        "releases_delayed": 1,
    }
    table = ok(broker, "describe", name)
    assert "Order: priority (default 3)" in table and "RELEASES-DELAYED" in table

    deleted = ok(broker, "delete", name, fair, plain)
    assert f"Deleted queue {name}." in deleted
    remaining = {q["name"] for q in as_json(broker, "list")["queues"]}
    assert not {name, fair, plain} & remaining


def test_bad_arguments_exit_2_and_refusals_1(served: tuple[BrokerProcess, str]) -> None:
    broker, _ = served
    name = unique("cli-bad")
    for args in (
        ("create", name, "--order", "random"),
        ("create", name, "--default-priority", 1),  # a fifo queue has no priorities
        ("create", name, "--order", "fair", "--fair-key", "tenant"),
        ("create", name, "--order", "priority", "--delays"),
        ("create", name, "--order", "priority", "--default-priority", "soon"),
    ):
        result = raftka(broker, *args)
        assert result.returncode == 2, (args, result.stderr)
    assert name not in {q["name"] for q in as_json(broker, "list")["queues"]}
    ok(broker, "create", name)
    again = raftka(broker, "create", name)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    missing = raftka(broker, "describe", unique("no-such-queue"))
    assert missing.returncode == 1 and "no such queue" in missing.stderr
    assert raftka(broker, "delete", unique("no-such-queue")).returncode == 1
