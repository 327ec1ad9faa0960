"""Small helpers shared by handlers."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from raftka.broker.security.acl import AclOperation, ResourceType
from raftka.protocol.api import response_type, schema_module

if TYPE_CHECKING:
    from raftka.broker.services import RequestContext as _RequestContext
    from raftka.broker.topics import Partition

    # These helpers use no coordinator, so serve a context of any.
    RequestContext = _RequestContext[object, object]

NO_THROTTLE = datetime.timedelta(0)
#: The response entity of the request being answered, in helpers that build it.
R = TypeVar("R")


def duration_ms(value: datetime.timedelta | int) -> int:
    """A kio duration (timedelta) or plain number as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


# Any: the entity is the request's version's, chosen at run time; a handler assigns it to
# the union of versions it answers (raftka.protocol.messages), so `build` returns that union.
def response_entity(context: RequestContext) -> type[Any]:
    """The response entity for the request being served."""
    return response_type(context.api_key, context.api_version)


def response_module(context: RequestContext) -> ModuleType:
    """The module of the response entity for the request being served (its nested classes)."""
    return schema_module(response_type(context.api_key, context.api_version))


def response_schema(context: RequestContext) -> tuple[type[Any], ModuleType]:
    """The response entity for the request being served and its module (nested classes)."""
    entity = response_entity(context)
    return entity, schema_module(entity)


def led_partition(partition: Partition | None, current_leader_epoch: int) -> Partition | ErrorCode:
    """`partition` when this broker leads it and may answer a leader-only request for it at
    `current_leader_epoch` (KIP-320 epoch fencing); otherwise the error Kafka answers."""
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if not partition.is_leader or partition.log is None:
        # KAFKA_STORAGE_ERROR when its log directory is offline here.
        return (
            ErrorCode.kafka_storage_error if partition.offline else ErrorCode.not_leader_or_follower
        )
    if 0 <= current_leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return partition


class TopicAccess:
    """Whether the request's principal may do one operation on each topic it names, asked
    of the authorizer once per topic per request (never per partition or record); always
    True when authorization is off."""

    __slots__ = ("_context", "_operation", "_answers", "enabled")

    def __init__(self, context: RequestContext, operation: AclOperation) -> None:
        self._context = context
        self._operation = operation
        self._answers: dict[str, bool] = {}
        self.enabled = context.services.authorizer.enabled

    def __call__(self, topic: str) -> bool:
        if not self.enabled:
            return True
        answer = self._answers.get(topic)
        if answer is None:
            answer = self._answers[topic] = self._context.authorize(
                self._operation, ResourceType.TOPIC, topic
            )
        return answer


def denied_message(
    context: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
) -> str:
    """The error message of a refused request: who was refused what, and what would allow it."""
    kind = resource_type.name.lower().replace("_", " ")
    who = context.principal
    return (
        f"{who} is not authorized to {operation.name} {kind} {name!r}; "
        f"an ACL allowing {who} {operation.name} on it is needed"
    )
