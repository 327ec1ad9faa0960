"""Small helpers shared by handlers."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from raftka.protocol.api import response_type, schema_module

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext
    from raftka.broker.topics import Partition

NO_THROTTLE = datetime.timedelta(0)


def duration_ms(value: datetime.timedelta | int) -> int:
    """A kio duration (timedelta) or plain number as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def response_schema(context: RequestContext) -> tuple[type[Any], ModuleType]:
    """The response entity for the request being served and its module (nested classes)."""
    entity = response_type(context.api_key, context.api_version)
    return entity, schema_module(entity)


def led_partition(partition: Partition | None, current_leader_epoch: int) -> Partition | ErrorCode:
    """`partition` when this broker leads it and may answer a leader-only request for it at
    `current_leader_epoch` (KIP-320 epoch fencing); otherwise the error Kafka answers."""
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if not partition.is_leader or partition.log is None:
        return ErrorCode.not_leader_or_follower
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return partition
