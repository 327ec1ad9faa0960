"""Responses decided together leave together: on a leader of three replicas, Produce
requests (acks=all) pipelined on one connection are acknowledged by one commit, and their
answers go out in one send, not one send each (`raftka_response_sends_total`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from clients import RawConnection, create_topic, unique, wait_until
from confluent_kafka.admin import AdminClient
from harness import free_port
from test_metrics import scrape
from test_request_order import _produce_request, _send_at_once

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from batches import encode_batch  # noqa: E402

PIPELINED = 5
SENDS = "raftka_response_sends_total", ()
PRODUCED = "kafka_network_requestmetrics_requests_total", (("request", "Produce"),)


def _produce(topic: str, value: bytes) -> Any:
    batch = encode_batch([(None, value)], base_timestamp=int(time.time() * 1000))
    return _produce_request(topic, batch)


def test_acknowledgements_of_one_commit_leave_in_one_send(cluster_factory: Any) -> None:
    from kio.schema.produce.v9.response import ProduceResponse

    metrics = {}
    cluster = cluster_factory(start=False)
    for node in cluster.nodes:
        metrics[node.node_id] = f"127.0.0.1:{free_port()}"
        node.config["metrics.listen"] = metrics[node.node_id]
    cluster.start()
    bootstrap = cluster.bootstrap
    topic = unique("sends")
    create_topic(bootstrap, topic, partitions=1, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader = wait_until(
        lambda: (
            (p := admin.list_topics(topic, timeout=5).topics[topic].partitions[0]).leader >= 0
            and len(p.isrs) == 3
            and p.leader
        ),
        30,
        f"a leader of {topic}-0 with three replicas in sync",
    )
    (node,) = (n for n in cluster.nodes if n.node_id == leader)
    with RawConnection(node.bootstrap, timeout=30) as conn:

        def accepted() -> bool:
            conn.send_request(_produce(topic, b"first"))
            answer = conn.recv_response(ProduceResponse)
            return answer.responses[0].partition_responses[0].error_code == 0

        wait_until(accepted, 30, f"a first record accepted by {topic}-0's leader")
        before = scrape(metrics[leader])
        # One write: the leader reads the requests together, proposes their batches in one
        # turn and replicates them in one message, so one commit acknowledges them all.
        first_id = _send_at_once(conn, [_produce(topic, b"r%d" % n) for n in range(PIPELINED)])
        answers = []
        for correlation_id in range(first_id, first_id + PIPELINED):
            conn.correlation_id = correlation_id
            answers.append(conn.recv_response(ProduceResponse))
    codes = [a.responses[0].partition_responses[0].error_code for a in answers]
    offsets = [a.responses[0].partition_responses[0].base_offset for a in answers]
    assert codes == [0] * PIPELINED, codes
    assert offsets == sorted(offsets) and len(set(offsets)) == PIPELINED, offsets
    after = scrape(metrics[leader])
    assert after[PRODUCED] - before[PRODUCED] == PIPELINED
    assert after[SENDS] - before[SENDS] == 1, (
        f"{after[SENDS] - before[SENDS]:.0f} sends for {PIPELINED} acknowledgements of one "
        "commit on one connection"
    )
