"""The controller's broker decisions: registration, unregistration, the producer-id floor."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    RaiseProducerIdFloorCommand,
    RegisterBrokerCommand,
    UnregisterBrokerCommand,
)
from raftka.broker.cluster.control.brokers import register_broker, unregister_broker
from raftka.broker.cluster.control.producer_ids import raise_producer_id_floor
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    CreateTopic,
    RaiseProducerIdFloor,
    RegisterBroker,
    UnregisterBroker,
)

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")


def _register(node: int, incarnation: str = "a") -> RegisterBrokerCommand:
    return RegisterBrokerCommand(
        node, "h", 9092, "r1", incarnation, {"PLAIN": ("h", 9092)}, ("h", 7000 + node)
    )


def test_a_registration_is_appended_once() -> None:
    image = MetadataImage()
    record = RegisterBroker(1, "h", 9092, "r1", "a", {"PLAIN": ("h", 9092)}, ("h", 7001))
    assert register_broker(image, _register(1)) == ControllerResult((record,))
    image.apply(record, 0)
    assert register_broker(image, _register(1)) == ControllerResult(), "a retried request"
    restarted = register_broker(image, _register(1, "b"))
    assert restarted.records == (
        RegisterBroker(1, "h", 9092, "r1", "b", {"PLAIN": ("h", 9092)}, ("h", 7001)),
    )


def test_unregister_a_broker_that_hosts_nothing_and_does_not_vote() -> None:
    image = MetadataImage()
    for node in (1, 2, 3):
        image.apply(RegisterBroker(node, "h", 9092, None, "i"), node)
    image.apply(CreateTopic("t", TID, [[1, 2]], {}), 10)
    voters = frozenset({1})
    assert unregister_broker(image, UnregisterBrokerCommand(3), voters) == ControllerResult(
        (UnregisterBroker(3),)
    )
    assert unregister_broker(image, UnregisterBrokerCommand(9), voters) == (
        ControllerResult.error(ErrorCode.broker_id_not_registered, "Broker 9 is not registered")
    )
    assert unregister_broker(image, UnregisterBrokerCommand(2), voters) == (
        ControllerResult.error(
            ErrorCode.invalid_request,
            "Broker 2 still hosts 1 partition replicas (t-0): move them off first (raftka"
            " cluster decommission 2)",
        )
    )
    assert unregister_broker(image, UnregisterBrokerCommand(3), frozenset({1, 3})) == (
        ControllerResult.error(
            ErrorCode.invalid_request,
            "Broker 3 votes in the metadata quorum: remove it first (raftka cluster"
            " remove-voter 3)",
        )
    )


def test_unregister_names_at_most_five_hosted_partitions() -> None:
    image = MetadataImage()
    image.apply(RegisterBroker(1, "h", 9092, None, "i"), 0)
    image.apply(CreateTopic("t", TID, [[1]] * 7, {}), 1)
    refused = unregister_broker(image, UnregisterBrokerCommand(1), frozenset())
    assert refused.result.error_message is not None
    assert "7 partition replicas (t-0, t-1, t-2, t-3, t-4 ...)" in refused.result.error_message


def test_producer_id_floor_only_rises() -> None:
    image = MetadataImage()
    assert raise_producer_id_floor(image, RaiseProducerIdFloorCommand(500)) == ControllerResult(
        (RaiseProducerIdFloor(500),)
    )
    image.apply(RaiseProducerIdFloor(500), 0)
    assert raise_producer_id_floor(image, RaiseProducerIdFloorCommand(500)) == ControllerResult()
    assert raise_producer_id_floor(image, RaiseProducerIdFloorCommand(10)) == ControllerResult()
    assert raise_producer_id_floor(image, RaiseProducerIdFloorCommand(-1)) == (
        ControllerResult.error(
            ErrorCode.invalid_request, "producer id floor must be a non-negative integer, not -1"
        )
    )
    flag = raise_producer_id_floor(image, RaiseProducerIdFloorCommand(True))
    assert flag.result.error_code == ErrorCode.invalid_request
