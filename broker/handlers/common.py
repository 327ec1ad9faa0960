"""Small helpers shared by handlers."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.api import response_type, schema_module

NO_THROTTLE = datetime.timedelta(0)


def response_schema(context: Any) -> tuple[type[Any], ModuleType]:
    """The response entity for the request being served and its module (nested classes)."""
    entity = response_type(context.api_key, context.api_version)
    return entity, schema_module(entity)


def leader_error(partition: Any, current_leader_epoch: int) -> ErrorCode | None:
    """Why this broker cannot answer a leader-only request for `partition` (KIP-320 epoch
    fencing included), or None when it can."""
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if not partition.is_leader or partition.log is None:
        return ErrorCode.not_leader_or_follower
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return None
