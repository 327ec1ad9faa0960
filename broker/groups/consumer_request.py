"""ConsumerGroupHeartbeat as the consumer-group machine takes it: the request, its answer,
and Kafka's checks of the request's fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import re2
from kio.schema.errors import ErrorCode

from raftka.broker.groups.assignors import Assignment
from raftka.broker.groups.consumer_state import TopicPartitions
from raftka.broker.groups.consumer_target import compile_regex

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def validate_request(request: HeartbeatRequest, version: int, assignors: Iterable[str]) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat's fields; HeartbeatError (INVALID_REQUEST
    or UNSUPPORTED_ASSIGNOR) names the bad one."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.invalid_request, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if version >= 1 and not request.member_id:
        raise invalid("MemberId can't be empty: the consumer chooses it from version 1 on.")
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or any(request.owned.values()):
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        has_names = bool(request.subscribed_topic_names)
        if not has_names and request.subscribed_topic_regex is None:
            raise invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid(f"MemberEpoch {epoch} is invalid.")
    if request.subscribed_topic_regex is not None:
        if version < 1:
            raise invalid("SubscribedTopicRegex needs version 1.")
        try:
            compile_regex(request.subscribed_topic_regex)
        except re2.error as exc:
            reason = b"".join(a for a in exc.args if isinstance(a, bytes)).decode(errors="replace")
            raise HeartbeatError(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex {request.subscribed_topic_regex!r} is invalid "
                f"(RE2 syntax, as in Kafka): {reason or exc}",
            ) from exc
    known = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in known:
        raise HeartbeatError(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(known)}.",
        )
