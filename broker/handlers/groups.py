"""Consumer-group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch,
TxnOffsetCommit, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete (the consumer group
protocol's own APIs are in consumer_groups.py).

Each handler maps its request (any supported version) onto `broker.groups` and builds the
response with `build`, which keeps only the fields the version has. JoinGroup and SyncGroup
wait for the group; they run as their own tasks, so the connection's other requests go on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import (
    FindCoordinatorRequest as FindCoordinatorRequestV4,
)
from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveGroupRequestV0
from kio.schema.leave_group.v1.request import LeaveGroupRequest as LeaveGroupRequestV1
from kio.schema.leave_group.v2.request import LeaveGroupRequest as LeaveGroupRequestV2
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as OffsetFetchRequestV8
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest as OffsetFetchRequestV9

from raftka.broker.groups import OFFSETS_TOPIC, GroupCoordinator, Reply
from raftka.broker.groups.offsets import OFFSET_METADATA_MAX_BYTES
from raftka.broker.groups.records import OffsetValue, partition_for_group
from raftka.broker.handlers.common import (
    NO_THROTTLE,
    R,
    TopicAccess,
    denied_message,
    duration_ms,
    response_entity,
    response_module,
)
from raftka.broker.handlers.metadata import brokers_of, client_listener, partition_leader
from raftka.broker.handlers.share_admin import delete_share_groups
from raftka.broker.handlers.txn import ensure_transaction_state_topic, may_write_transaction
from raftka.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from raftka.broker.topics import Topic
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.protocol.messages.requests import (
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        FindCoordinatorRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        ListGroupsRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
        TxnOffsetCommitRequest,
    )
    from raftka.protocol.messages.responses import (
        DeleteGroupsResponse,
        DescribeGroupsResponse,
        FindCoordinatorResponse,
        HeartbeatResponse,
        JoinGroupResponse,
        LeaveGroupResponse,
        ListGroupsResponse,
        OffsetCommitResponse,
        OffsetDeleteResponse,
        OffsetFetchResponse,
        SyncGroupResponse,
        TxnOffsetCommitResponse,
    )


KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
NO_AUTHORIZED_OPERATIONS = -(2**31)


def _coordinator(context: RequestContext) -> GroupCoordinator:
    return context.services.groups


def _client_id(context: RequestContext) -> str:
    return context.header.client_id or ""


def _may(context: RequestContext, operation: AclOperation, group_id: str) -> bool:
    """May the request's principal do `operation` on the group?"""
    return context.authorize(operation, ResourceType.GROUP, group_id)


# -- FindCoordinator -----------------------------------------------------------------------


def _leader_of_key_partition(
    context: RequestContext, topic: Topic | None, key: str
) -> dict[str, object] | None:
    """The FindCoordinator answer naming the leader of `key`'s partition of an internal
    topic (Kafka's abs(hashCode) mod partitions), or None while it has no known leader."""
    if topic is None:
        return None
    services = context.services
    partition = topic.partitions[partition_for_group(key, len(topic.partitions))]
    leader, _epoch = partition_leader(services.controller, partition)
    for node_id, host, port, _rack in brokers_of(services, client_listener(context)):
        if node_id == leader:
            return {
                "node_id": node_id,
                "host": host,
                "port": port,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
    return None


def _no_coordinator(error: ErrorCode, message: str) -> dict[str, object]:
    return {"node_id": -1, "host": "", "port": -1, "error_code": error, "error_message": message}


async def handle_find_coordinator(
    context: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    entity: type[FindCoordinatorResponse] = response_entity(context)
    module = response_module(context)
    services = context.services
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)

    async def answer(key: str) -> dict[str, object]:
        # Asked before anything is looked up or created, as Kafka does.
        if key_type == KEY_TYPE_GROUP and not _may(context, AclOperation.DESCRIBE, key):
            return _no_coordinator(
                ErrorCode.group_authorization_failed,
                denied_message(context, AclOperation.DESCRIBE, ResourceType.GROUP, key),
            )
        if key_type == KEY_TYPE_TRANSACTION and not context.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
        ):
            return _no_coordinator(
                ErrorCode.transactional_id_authorization_failed,
                denied_message(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key),
            )
        if key_type == KEY_TYPE_GROUP:
            # Kafka creates the offsets topic when a coordinator is first looked up.
            await _coordinator(context).ensure_offsets_topic()
            found = _leader_of_key_partition(context, services.topics.get(OFFSETS_TOPIC), key)
            if found is not None:
                return found
            error = ErrorCode.coordinator_not_available
        elif key_type == KEY_TYPE_TRANSACTION:
            # The coordinator of a transactional id leads its __transaction_state
            # partition; Kafka creates the topic when a coordinator is first looked up.
            error = ErrorCode.coordinator_not_available
            state_topic = await ensure_transaction_state_topic(context)
            if not key:
                error = ErrorCode.invalid_request
            else:
                found = _leader_of_key_partition(context, state_topic, key)
                if found is not None:
                    return found
        else:
            error = ErrorCode.invalid_request
        return _no_coordinator(error, error.name.upper())

    if isinstance(request, FindCoordinatorRequestV4):
        coordinators = tuple(
            [
                build(module.Coordinator, key=key, **await answer(key))
                for key in request.coordinator_keys
            ]
        )
        return build(entity, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return build(entity, throttle_time=NO_THROTTLE, **await answer(request.key))


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------


async def handle_join_group(
    context: RequestContext, request: JoinGroupRequest
) -> JoinGroupResponse:
    entity: type[JoinGroupResponse] = response_entity(context)
    module = response_module(context)
    version = context.api_version
    if not _may(context, AclOperation.READ, request.group_id):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if version < 7 else None,
            leader="",
            skip_assignment=False,
            member_id="",
            members=(),
        )
    session_timeout_ms = duration_ms(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)
    await _coordinator(context).wait_for_write_room(request.group_id)
    outcome = _coordinator(context).join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=_client_id(context),
        client_host=f"/{context.client_host}",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=(
            session_timeout_ms if rebalance_timeout is None else duration_ms(rebalance_timeout)
        ),
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=version >= 4,
    )
    result = await outcome.wait() if isinstance(outcome, Reply) else outcome
    members = tuple(
        build(
            module.JoinGroupResponseMember,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=(result.protocol_name or "") if version < 7 else result.protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(
    context: RequestContext, request: SyncGroupRequest
) -> SyncGroupResponse:
    entity: type[SyncGroupResponse] = response_entity(context)
    if not _may(context, AclOperation.READ, request.group_id):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    await _coordinator(context).wait_for_write_room(request.group_id)
    outcome = _coordinator(context).sync_group(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    result = await outcome.wait() if isinstance(outcome, Reply) else outcome
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(context: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    entity: type[HeartbeatResponse] = response_entity(context)
    if not _may(context, AclOperation.READ, request.group_id):
        return build(
            entity, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed
        )
    error = _coordinator(context).heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return build(entity, throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(
    context: RequestContext, request: LeaveGroupRequest
) -> LeaveGroupResponse:
    entity: type[LeaveGroupResponse] = response_entity(context)
    module = response_module(context)
    if not _may(context, AclOperation.READ, request.group_id):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            members=(),
        )
    if isinstance(request, LeaveGroupRequestV0 | LeaveGroupRequestV1 | LeaveGroupRequestV2):
        top, errors = _coordinator(context).leave_group(
            request.group_id, [(request.member_id, None)]
        )
        error = top if top != ErrorCode.none else errors[0]
        return build(entity, throttle_time=NO_THROTTLE, error_code=error)
    identities = [(m.member_id, m.group_instance_id) for m in request.members]
    top, errors = _coordinator(context).leave_group(request.group_id, identities)
    members = tuple(
        build(
            module.MemberResponse,
            member_id=member_id,
            group_instance_id=instance_id,
            error_code=error,
        )
        for (member_id, instance_id), error in zip(identities, errors, strict=True)
    )
    return build(entity, throttle_time=NO_THROTTLE, error_code=top, members=members)


# -- offsets -------------------------------------------------------------------------------


def _offsets_to_commit(
    context: RequestContext, request: OffsetCommitRequest | TxnOffsetCommitRequest
) -> tuple[dict[tuple[str, int], ErrorCode], dict[tuple[str, int], OffsetValue]]:
    """(error per partition refused before the group is asked, offsets to commit) of an
    OffsetCommit or TxnOffsetCommit: partitions of topics without READ get
    TOPIC_AUTHORIZATION_FAILED, of unknown topics UNKNOWN_TOPIC_OR_PARTITION, too long
    metadata OFFSET_METADATA_TOO_LARGE."""
    topics = context.services.topics
    may_read = TopicAccess(context, AclOperation.READ)
    commit_ms = context.services.clock.wall_ms()
    errors: dict[tuple[str, int], ErrorCode] = {}
    valid: dict[tuple[str, int], OffsetValue] = {}
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not may_read(topic.name):
                errors[tp] = ErrorCode.topic_authorization_failed
            elif known is None or not 0 <= p.partition_index < len(known.partitions):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                valid[tp] = OffsetValue(
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    metadata,
                    commit_ms,
                )
    return errors, valid


def _commit_errors(
    errors: dict[tuple[str, int], ErrorCode],
    valid: dict[tuple[str, int], OffsetValue],
    group_error: ErrorCode,
) -> dict[tuple[str, int], ErrorCode]:
    """Every partition's answer: the group's for those it was asked to commit."""
    for tp in valid:
        errors[tp] = group_error
    if group_error == ErrorCode.invalid_group_id:
        errors = dict.fromkeys(errors, group_error)
    return errors


def _refused_commit(
    request: OffsetCommitRequest | TxnOffsetCommitRequest, error: ErrorCode
) -> dict[tuple[str, int], ErrorCode]:
    """Every partition of a commit refused as a whole answers `error`."""
    return {(t.name, p.partition_index): error for t in request.topics for p in t.partitions}


async def handle_offset_commit(
    context: RequestContext, request: OffsetCommitRequest
) -> OffsetCommitResponse:
    entity: type[OffsetCommitResponse] = response_entity(context)
    module = response_module(context)
    if not _may(context, AclOperation.READ, request.group_id):
        return _commit_response(
            entity,
            module.OffsetCommitResponseTopic,
            module.OffsetCommitResponsePartition,
            request,
            _refused_commit(request, ErrorCode.group_authorization_failed),
        )
    errors, valid = _offsets_to_commit(context, request)
    group_error = await _coordinator(context).commit_offsets(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        getattr(request, "group_instance_id", None),
        valid,
        context.api_version,
    )
    errors = _commit_errors(errors, valid, group_error)
    return _commit_response(
        entity,
        module.OffsetCommitResponseTopic,
        module.OffsetCommitResponsePartition,
        request,
        errors,
    )


async def handle_txn_offset_commit(
    context: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    """TxnOffsetCommit v0-3 (v3 carries the consumer's generation, member and instance ids,
    KIP-447): the offsets are written as a transactional batch of the producer and count
    once its transaction commits."""
    entity: type[TxnOffsetCommitResponse] = response_entity(context)
    module = response_module(context)
    refusal = None
    if not may_write_transaction(context, request.transactional_id):
        refusal = ErrorCode.transactional_id_authorization_failed
    elif not _may(context, AclOperation.READ, request.group_id):
        refusal = ErrorCode.group_authorization_failed
    if refusal is not None:
        return _commit_response(
            entity,
            module.TxnOffsetCommitResponseTopic,
            module.TxnOffsetCommitResponsePartition,
            request,
            _refused_commit(request, refusal),
        )
    errors, valid = _offsets_to_commit(context, request)
    coordinator = _coordinator(context)

    def verify() -> Awaitable[ErrorCode]:
        # Kafka 3.9 (KIP-890) asks the transaction coordinator whether the group's offsets
        # partition is in the producer's ongoing transaction; if not, nothing is written.
        return context.services.transactions.verify_offset_commit(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            (OFFSETS_TOPIC, coordinator.partition_for(request.group_id)),
        )

    group_error = await coordinator.commit_transactional_offsets(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        valid,
        verify,
    )
    errors = _commit_errors(errors, valid, group_error)
    return _commit_response(
        entity,
        module.TxnOffsetCommitResponseTopic,
        module.TxnOffsetCommitResponsePartition,
        request,
        errors,
    )


def _commit_response(
    entity: type[R],
    topic_entity: type[object],
    partition_entity: type[object],
    request: OffsetCommitRequest | TxnOffsetCommitRequest,
    errors: dict[tuple[str, int], ErrorCode],
) -> R:
    """An OffsetCommit or TxnOffsetCommit response: every requested partition's error."""
    response_topics = tuple(
        build(
            topic_entity,
            name=topic.name,
            partitions=tuple(
                build(
                    partition_entity,
                    partition_index=p.partition_index,
                    error_code=errors[(topic.name, p.partition_index)],
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return build(entity, throttle_time=NO_THROTTLE, topics=response_topics)


class FetchedTopic(Protocol):
    """A topic an OffsetFetch request asks for (its own entity in v1-7 and in v8+)."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> Sequence[int]: ...


def _fetch_group(
    context: RequestContext,
    group_id: str,
    topics: Iterable[FetchedTopic] | None,
    topic_type: type[object],
    partition_type: type[object],
    require_stable: bool = False,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, tuple[object, ...]]:
    may_describe = TopicAccess(context, AclOperation.DESCRIBE)
    wanted = (
        None
        if topics is None
        else [(t.name, index) for t in topics for index in t.partition_indexes]
    )
    # Offsets of topics the principal may not DESCRIBE are not told: a requested one
    # answers TOPIC_AUTHORIZATION_FAILED, "all topics" leaves them out (as Kafka).
    hidden: dict[tuple[str, int], None] = (
        {}
        if wanted is None or not may_describe.enabled
        else dict.fromkeys(tp for tp in wanted if not may_describe(tp[0]))
    )
    coordinator = _coordinator(context)
    offsets: dict[tuple[str, int], OffsetValue | None]
    if not _may(context, AclOperation.DESCRIBE, group_id):
        error, offsets = ErrorCode.group_authorization_failed, {}
    else:
        asked = None if wanted is None else [tp for tp in wanted if tp not in hidden]
        error, offsets = coordinator.fetch_offsets(group_id, asked, member)
        if wanted is None and may_describe.enabled:
            offsets = {tp: value for tp, value in offsets.items() if may_describe(tp[0])}
    partition_error = ErrorCode.none
    if error != ErrorCode.none and context.api_version < 2 and wanted is not None:
        # v0-1 have no group-level error code: each partition carries it (as in Kafka).
        offsets = dict.fromkeys(wanted)
        partition_error = error
    # KIP-447: a partition an open transaction committed an offset of is not stable yet.
    unstable = (
        coordinator.unstable_offsets(group_id, offsets)
        if require_stable and error == ErrorCode.none
        else set()
    )
    by_topic: dict[str, list[object]] = {}
    if error == ErrorCode.none:
        for topic, partition in hidden:
            by_topic.setdefault(topic, []).append(
                build(
                    partition_type,
                    partition_index=partition,
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=ErrorCode.topic_authorization_failed,
                )
            )
    for (topic, partition), stored in offsets.items():
        value = None if (topic, partition) in unstable else stored
        by_topic.setdefault(topic, []).append(
            build(
                partition_type,
                partition_index=partition,
                committed_offset=-1 if value is None else value.offset,
                committed_leader_epoch=-1 if value is None else value.leader_epoch,
                metadata="" if value is None else value.metadata,
                error_code=(
                    ErrorCode.unstable_offset_commit
                    if (topic, partition) in unstable
                    else partition_error
                ),
            )
        )
    return error, tuple(
        build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    )


async def handle_offset_fetch(
    context: RequestContext, request: OffsetFetchRequest
) -> OffsetFetchResponse:
    entity: type[OffsetFetchResponse] = response_entity(context)
    module = response_module(context)
    require_stable = bool(getattr(request, "require_stable", False))
    if isinstance(request, OffsetFetchRequestV8 | OffsetFetchRequestV9):
        groups = []
        for group in request.groups:
            error, topics = _fetch_group(
                context,
                group.group_id,
                group.topics,
                module.OffsetFetchResponseTopics,
                module.OffsetFetchResponsePartitions,
                require_stable,
                # v9 (KIP-848): the member asking, checked against a consumer group.
                (getattr(group, "member_id", None), getattr(group, "member_epoch", -1)),
            )
            groups.append(
                build(
                    module.OffsetFetchResponseGroup,
                    group_id=group.group_id,
                    topics=topics,
                    error_code=error,
                )
            )
        return build(entity, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, topics = _fetch_group(
        context,
        request.group_id,
        request.topics,
        module.OffsetFetchResponseTopic,
        module.OffsetFetchResponsePartition,
        require_stable,
    )
    return build(entity, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def handle_offset_delete(
    context: RequestContext, request: OffsetDeleteRequest
) -> OffsetDeleteResponse:
    entity: type[OffsetDeleteResponse] = response_entity(context)
    module = response_module(context)
    if not _may(context, AclOperation.DELETE, request.group_id):
        return build(
            entity,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            topics=(),
        )
    topics = context.services.topics
    may_read = TopicAccess(context, AclOperation.READ)
    refused: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int]] = []
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not may_read(topic.name):
                refused[tp] = ErrorCode.topic_authorization_failed
            elif known is None or not 0 <= p.partition_index < len(known.partitions):
                refused[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(tp)
    error, results = await _coordinator(context).delete_offsets(request.group_id, wanted)
    if error != ErrorCode.none:
        return build(entity, throttle_time=NO_THROTTLE, error_code=error, topics=())
    response_topics = tuple(
        build(
            module.OffsetDeleteResponseTopic,
            name=topic.name,
            partitions=tuple(
                build(
                    module.OffsetDeleteResponsePartition,
                    partition_index=p.partition_index,
                    error_code=(
                        refused.get((topic.name, p.partition_index))
                        or results[(topic.name, p.partition_index)]
                    ),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return build(
        entity, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=response_topics
    )


# -- listing, describing, deleting groups --------------------------------------------------


async def handle_list_groups(
    context: RequestContext, request: ListGroupsRequest
) -> ListGroupsResponse:
    entity: type[ListGroupsResponse] = response_entity(context)
    module = response_module(context)
    coordinator = _coordinator(context)
    listed = coordinator.list_typed_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    listed += coordinator.list_share_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    if not context.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Without DESCRIBE on the cluster, only the groups the principal may DESCRIBE.
        listed = [entry for entry in listed if _may(context, AclOperation.DESCRIBE, entry[0])]
    # Only the groups this broker coordinates; while some of them still load, Kafka says so.
    error = ErrorCode.coordinator_load_in_progress if coordinator.is_loading() else ErrorCode.none
    groups = tuple(
        build(
            module.ListedGroup,
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=state,
            group_type=group_type,
        )
        for group_id, protocol_type, state, group_type in listed
    )
    return build(entity, throttle_time=NO_THROTTLE, error_code=error, groups=groups)


async def handle_describe_groups(
    context: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    entity: type[DescribeGroupsResponse] = response_entity(context)
    module = response_module(context)
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    described = []
    for group_id in request.groups:
        if not _may(context, AclOperation.DESCRIBE, group_id):
            described.append(
                build(
                    module.DescribedGroup,
                    error_code=ErrorCode.group_authorization_failed,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=NO_AUTHORIZED_OPERATIONS,
                )
            )
            continue
        error, group = _coordinator(context).describe_group(group_id)
        members = tuple(
            build(
                module.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in group.members
        )
        described.append(
            build(
                module.DescribedGroup,
                error_code=error,
                group_id=group_id,
                group_state=group.state,
                protocol_type=group.protocol_type,
                protocol_data=group.protocol,
                members=members,
                authorized_operations=(
                    context.authorized_operations(ResourceType.GROUP, group_id)
                    if with_operations and error == ErrorCode.none
                    else NO_AUTHORIZED_OPERATIONS
                ),
            )
        )
    return build(entity, throttle_time=NO_THROTTLE, groups=tuple(described))


async def handle_delete_groups(
    context: RequestContext, request: DeleteGroupsRequest
) -> DeleteGroupsResponse:
    entity: type[DeleteGroupsResponse] = response_entity(context)
    module = response_module(context)
    names: list[str] = list(dict.fromkeys(request.groups_names))
    refused = [name for name in names if not _may(context, AclOperation.DELETE, name)]
    allowed = [name for name in names if name not in refused]
    shared = await delete_share_groups(context, allowed)
    results = await _coordinator(context).delete_groups(
        [name for name in allowed if name not in shared]
    )
    results.update(shared)
    results.update(dict.fromkeys(refused, ErrorCode.group_authorization_failed))
    return build(
        entity,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(module.DeletableGroupResult, group_id=group_id, error_code=error)
            for group_id, error in results.items()
        ),
    )
