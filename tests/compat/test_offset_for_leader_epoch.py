"""OffsetForLeaderEpoch across leader kills in a 3-broker cluster, against what a librdkafka
consumer fetched.

On each new leader epoch librdkafka asks the leader for the end offset of the epoch of the
last batch it fetched, and seeks back to any answer below its fetch position, dropping the
records it had queued (`rd_kafka_toppar_handle_OffsetForLeaderEpoch`). A consumer only
fetches committed records, so after every leader change the new leader must answer each
epoch the consumer has seen with an epoch no higher than the one asked and an end offset
past every record of that epoch or an earlier one; and the consumer must end up with every
acknowledged record.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from clients import RawConnection, create_topic, make_consumer, wait_until
from harness import ClusterProcess
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.static.primitive import i32
from test_cluster import ContinuousProducer, partition_state, wait_new_leader

pytestmark = pytest.mark.timeout(300)


class EpochConsumer(threading.Thread):
    """An assign consumer of partition 0 from offset 0, as the chaos workload's: records
    each polled record's offset and the leader epoch of its batch."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = make_consumer(bootstrap, enable_partition_eof=False)
        self.topic = topic
        self.polled: list[tuple[int, int]] = []  # (offset, leader epoch)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.exc: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import TopicPartition

        try:
            self.consumer.assign([TopicPartition(self.topic, 0, 0)])
            while not self.stopping.is_set():
                for message in self.consumer.consume(100, 0.2):
                    if message.error() is not None:
                        continue  # transient (a leader change); librdkafka retries
                    epoch = message.leader_epoch()
                    with self.lock:
                        self.polled.append((message.offset(), -1 if epoch is None else epoch))
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
            self.exc = exc
        finally:
            self.consumer.close()

    def reach(self) -> dict[int, int]:
        """The largest polled offset of each leader epoch seen."""
        with self.lock:
            polled = list(self.polled)
        reach: dict[int, int] = {}
        for offset, epoch in polled:
            reach[epoch] = max(reach.get(epoch, -1), offset)
        return reach

    def finish(self) -> list[tuple[int, int]]:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), "consumer thread did not finish"
        if self.exc is not None:
            raise self.exc
        return self.polled


def end_offsets(bootstrap: str, topic: str, epochs: list[int]) -> dict[int, tuple[int, int, int]]:
    """epoch -> (error code, answered epoch, end offset) from the broker at `bootstrap`."""
    request = epoch_v4.OffsetForLeaderEpochRequest(
        replica_id=i32(-1),
        topics=(
            epoch_v4.OffsetForLeaderTopic(
                topic=topic,
                partitions=tuple(
                    epoch_v4.OffsetForLeaderPartition(
                        partition=i32(0), current_leader_epoch=i32(-1), leader_epoch=i32(e)
                    )
                    for e in epochs
                ),
            ),
        ),
    )
    with RawConnection(bootstrap, timeout=10) as conn:
        conn.send_request(request)
        response = conn.recv_response(OffsetForLeaderEpochResponse)
    (answer,) = response.topics
    return {
        e: (int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for e, p in zip(epochs, answer.partitions, strict=True)
    }


def check_answers(
    cluster: ClusterProcess, topic: str, state: dict[str, Any], reach: dict[int, int]
) -> int:
    """The leader's answer for every epoch from the first to the last the consumer saw is
    past every polled record of that epoch or an earlier one; returns how many it checked."""
    epochs = sorted(e for e in reach if e >= 0)
    if not epochs:
        return 0
    asked = list(range(epochs[0], epochs[-1] + 1))
    leader = cluster.node(state["leader"]).bootstrap

    def answered() -> dict[int, tuple[int, int, int]] | None:
        answers = end_offsets(leader, topic, asked)
        # Until the new leader has taken over it may still answer NOT_LEADER_OR_FOLLOWER.
        return answers if all(code == 0 for code, _, _ in answers.values()) else None

    answers = wait_until(answered, 30, f"OffsetForLeaderEpoch answered by {state['leader']}")
    highest = -1
    for epoch in asked:
        highest = max(highest, reach.get(epoch, -1))
        _, epoch_answered, end = answers[epoch]
        assert 0 <= epoch_answered <= epoch and end > highest, (
            f"leader {state['leader']} (epoch {state['epoch']}) answers epoch {epoch} with"
            f" epoch {epoch_answered}, end offset {end}; the consumer polled offset"
            f" {highest} of epoch <= {epoch} (every answer: {answers})"
        )
    return len(asked)


def test_leader_answers_past_what_the_consumer_fetched_across_leader_kills(
    cluster_factory,
) -> None:
    cluster = cluster_factory()
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    state = wait_until(
        lambda: (
            (s := partition_state(cluster.nodes[0].bootstrap, topic)) and len(s["isr"]) == 3 and s
        ),
        15,
        "ISR of 3",
    )
    producer = ContinuousProducer(
        cluster.bootstrap, topic, count=3000, rate=200, **{"enable.idempotence": True}
    )
    consumer = EpochConsumer(cluster.bootstrap, topic)
    consumer.start()
    producer.start()
    kills = checked = 0
    for round_ in range(1, 4):
        wanted = 400 * round_
        wait_until(
            lambda wanted=wanted: len(producer.acked) >= wanted,
            60,
            f"{wanted} records acknowledged",
        )
        victim = cluster.node(state["leader"])
        victim.kill()
        kills += 1
        survivors = [n for n in cluster.nodes if n is not victim]
        state, _ = wait_new_leader(survivors, topic, state["leader"], state["epoch"], timeout=20)
        checked += check_answers(cluster, topic, state, consumer.reach())
        victim.start()
        leader = cluster.node(state["leader"]).bootstrap
        state = wait_until(
            lambda leader=leader: (
                (s := partition_state(leader, topic)) and len(s["isr"]) == 3 and s
            ),
            60,
            "the restarted broker back in the ISR",
        )
        checked += check_answers(cluster, topic, state, consumer.reach())
    producer.finish()
    acked = set(producer.acked.values())
    wait_until(
        lambda: max((o for o, _ in consumer.polled), default=-1) >= max(acked),
        60,
        "the consumer at the last acknowledged offset",
    )
    checked += check_answers(cluster, topic, state, consumer.reach())
    polled = consumer.finish()
    offsets = [o for o, _ in polled]
    assert offsets == sorted(set(offsets)), "the consumer went back or saw an offset twice"
    missed = sorted(acked - set(offsets))
    assert not missed, f"{len(missed)} acknowledged offsets never polled: {missed[:20]}"
    epochs = sorted({e for _, e in polled})
    print(
        f"\n{kills} leader kills; {len(offsets)} records polled under epochs {epochs};"
        f" {checked} OffsetForLeaderEpoch answers checked"
    )
    assert len(epochs) >= 2, "the consumer saw no leader change, so nothing was validated"
