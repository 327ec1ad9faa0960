"""The cluster's producer-id floor (a part of Kafka's ProducerIdControlManager), decided
from the image without I/O."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import RaiseProducerIdFloorCommand
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import RaiseProducerIdFloor


def raise_producer_id_floor(
    image: MetadataImage, command: RaiseProducerIdFloorCommand
) -> ControllerResult:
    """The floor rises to `command.floor`; a floor at or below the current one appends
    nothing. INVALID_REQUEST for a negative or non-integer floor."""
    if isinstance(command.floor, bool) or command.floor < 0:
        return ControllerResult.error(
            ErrorCode.invalid_request,
            f"producer id floor must be a non-negative integer, not {command.floor}",
        )
    if command.floor > image.producer_id_floor:
        return ControllerResult((RaiseProducerIdFloor(command.floor),))
    return ControllerResult()
