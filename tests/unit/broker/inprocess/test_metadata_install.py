"""A metadata snapshot installed from the controller (this broker needed offsets below the
metadata log's start): the image is replaced, saved, and the broker's topics reconciled with
it as a start-up from a snapshot would."""

from __future__ import annotations

import uuid
from pathlib import Path

import trio
from running_broker import run_with_broker

from raftka.broker.cluster.commands import CreateTopicCommand
from raftka.broker.cluster.control.configs import validate_alter_configs
from raftka.broker.cluster.control.reassignment import validate_reassignment
from raftka.broker.cluster.control.topics import (
    plan_create_topic,
    validate_create_partitions,
    validate_delete_topic,
)
from raftka.broker.cluster.records import ClientQuota, CompleteReassignment, RegisterBroker
from raftka.broker.cluster.snapshot import deserialize, serialize
from raftka.broker.config import BrokerConfig
from raftka.broker.server import Broker, Listener
from raftka.consensus.types import Snapshot


def _broker(data_dir: Path) -> Broker:
    return Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), data_dir)


def _close(broker: Broker) -> None:
    broker.close()


def test_installed_snapshot_replaces_the_image_and_reconciles_topics(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    controller = broker.controller

    async def scenario() -> None:
        await controller.execute(CreateTopicCommand("kept", 2, 1))
        await controller.execute(CreateTopicCommand("doomed", 1, 1))
        doomed_dir = broker.topics.get("doomed").partitions[0].log.directory  # type: ignore[union-attr]
        assert doomed_dir.is_dir()
        # The controller's image, further along: doomed deleted, kept grown and
        # reconfigured, a new topic and a quota.
        image = deserialize(serialize(controller.image), "test")
        offset = image.applied_offset + 100
        records = [
            validate_delete_topic(image, "doomed"),
            validate_create_partitions(image, "kept", 3),
            validate_alter_configs(image, "kept", {"retention.ms": "60000"}),
            plan_create_topic(image, "fresh", uuid.uuid4(), 2, 1),
            ClientQuota((("user", "alice"),), "producer_byte_rate", 1024.0),
        ]
        for record in records:
            offset += 1
            image.apply(record, offset)
        raw = serialize(image)
        controller._install_snapshot(Snapshot(offset + 1, 1, frozenset({1}), raw))

        assert controller.image.applied_offset == offset
        assert controller.image.client_quotas[(("user", "alice"),)] == {
            "producer_byte_rate": 1024.0
        }

        # The apply task reconciles the topics with the new image.
        def hosted(name: str, partitions: int) -> bool:
            topic = broker.topics.get(name)
            return (
                topic is not None
                and len(topic.partitions) == partitions
                and all(p.log is not None for p in topic.partitions)
            )

        with trio.fail_after(10):
            while not (
                hosted("kept", 3)
                and broker.topics.topics["kept"].config.get_int("retention.ms") == 60000
                and hosted("fresh", 2)
                and broker.topics.get("doomed") is None
                and not doomed_dir.exists()
            ):
                await trio.sleep(0.02)

    try:
        run_with_broker(broker, scenario, register=True, timeout_s=20)
        # Saved before the log was emptied: the retained snapshot and the image.
        retained = controller.snapshots.load_retained()
        assert retained is not None and retained[0] == controller.image.applied_offset + 1
        assert controller.snapshots.load().applied_offset == controller.image.applied_offset
    finally:
        _close(broker)


def test_installed_snapshot_moves_replicas_as_its_reassignments_say(tmp_path: Path) -> None:
    """A partition moved off this broker while it was behind: the installed image lists it
    elsewhere, so its copy here goes."""
    broker = _broker(tmp_path)
    controller = broker.controller

    async def scenario() -> None:
        await controller.execute(CreateTopicCommand("moved", 1, 1))
        moved_dir = broker.topics.get("moved").partitions[0].log.directory  # type: ignore[union-attr]
        assert moved_dir.is_dir()
        image = deserialize(serialize(controller.image), "test")
        topic_id = image.topics["moved"].topic_id
        offset = image.applied_offset
        records = [RegisterBroker(2, "127.0.0.1", 9093, None, "incarnation-2")]
        for record in records:
            offset += 1
            image.apply(record, offset)
        for record in (
            validate_reassignment(image, "moved", 0, [2]),
            CompleteReassignment(topic_id, 0, (2,)),
        ):
            assert record is not None
            offset += 1
            image.apply(record, offset)
        assert image.topics["moved"].replicas[0] == (2,)
        controller._install_snapshot(Snapshot(offset + 1, 1, frozenset({1}), serialize(image)))

        with trio.fail_after(10):
            while moved_dir.exists() or broker.topics.get("moved").partitions[0].log is not None:  # type: ignore[union-attr]
                await trio.sleep(0.02)
        assert broker.topics.get("moved").partitions[0].replicas == (2,)  # type: ignore[union-attr]

    try:
        run_with_broker(broker, scenario, register=True, timeout_s=20)
    finally:
        _close(broker)
