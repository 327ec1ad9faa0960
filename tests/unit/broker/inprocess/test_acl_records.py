"""ACL bindings in the cluster metadata: their records, the image and its snapshots, the
controller commands that create and delete them, and their results on the wire."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from kio.schema.errors import ErrorCode
from running_broker import run_with_broker

from raftka.broker.cluster.commands import (
    AclOutcome,
    Command,
    CommandDecodeError,
    CommandResult,
    CreateAclsCommand,
    DeleteAclsCommand,
)
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    AddAclBinding,
    MetadataRecordError,
    RemoveAclBinding,
    decode_metadata_batch,
    encode_batch,
)
from raftka.broker.cluster.snapshot import image_from_dict, image_to_dict, load_snapshot
from raftka.broker.config import BrokerConfig
from raftka.broker.security.acl import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    binding_codes,
)
from raftka.broker.server import Broker, Listener

T = TypeVar("T")

READ_T = AclBinding(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermission.ALLOW,
)
DENY_PREFIX = AclBinding(
    ResourceType.TOPIC,
    "logs-",
    PatternType.PREFIXED,
    "User:*",
    "10.0.0.1",
    AclOperation.WRITE,
    AclPermission.DENY,
)
GROUP_ALL = AclBinding(
    ResourceType.GROUP,
    "*",
    PatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.ALL,
    AclPermission.ALLOW,
)


def test_records_round_trip_and_apply() -> None:
    records = [
        AddAclBinding(*binding_codes(READ_T)),
        AddAclBinding(*binding_codes(DENY_PREFIX)),
        AddAclBinding(*binding_codes(READ_T)),  # again: still stored once
        AddAclBinding(*binding_codes(GROUP_ALL)),
        RemoveAclBinding(*binding_codes(DENY_PREFIX)),
        RemoveAclBinding(*binding_codes(DENY_PREFIX)),  # gone already: nothing changes
    ]
    decoded = decode_metadata_batch(encode_batch(records))
    assert decoded == records
    image = MetadataImage()
    for offset, record in enumerate(decoded):
        assert image.apply(record, offset) == []
    assert sorted(image.acls, key=binding_codes) == [READ_T, GROUP_ALL]
    assert len(image.acls) == 2


def test_a_record_naming_no_valid_binding_is_skipped() -> None:
    image = MetadataImage()
    image.apply(AddAclBinding(2, "t", 3, "User:alice", "*", 99, 3), 0)  # unknown operation
    image.apply(AddAclBinding(1, "t", 3, "User:alice", "*", 3, 3), 1)  # resource type ANY
    image.apply(AddAclBinding(2, "t", 2, "User:alice", "*", 3, 3), 2)  # pattern type MATCH
    assert len(image.acls) == 0 and image.applied_offset == 2


def test_bad_record_fields_are_refused() -> None:
    with pytest.raises(MetadataRecordError, match="operation must be an integer"):
        AddAclBinding.from_bytes(
            b'{"version":1,"resource_type":2,"resource_name":"t","pattern_type":3,'
            b'"principal":"User:a","host":"*","operation":"READ","permission":3}'
        )
    with pytest.raises(MetadataRecordError, match="lacks field 'host'"):
        RemoveAclBinding.from_bytes(
            b'{"version":1,"resource_type":2,"resource_name":"t","pattern_type":3,'
            b'"principal":"User:a","operation":3,"permission":3}'
        )


def test_snapshot_keeps_acls_and_old_snapshots_still_load(tmp_path: Path) -> None:
    image = MetadataImage()
    for offset, binding in enumerate([READ_T, DENY_PREFIX, GROUP_ALL]):
        image.apply(AddAclBinding(*binding_codes(binding)), offset)
    restored = image_from_dict(image_to_dict(image))
    assert restored == image
    assert set(restored.acls) == {READ_T, DENY_PREFIX, GROUP_ALL}
    assert restored.acls.naming(ResourceType.TOPIC, "logs-1") == [DENY_PREFIX]
    old = image_to_dict(image)
    del old["acls"]  # written before ACLs existed
    assert len(image_from_dict(old).acls) == 0


def test_acl_commands_and_results_round_trip() -> None:
    create = CreateAclsCommand((binding_codes(READ_T), binding_codes(DENY_PREFIX)))
    delete = DeleteAclsCommand(((1, None, 1, None, None, 1, 1), (2, "t", 2, "User:a", "*", 3, 3)))
    for command in (create, delete):
        assert Command.from_wire(command.to_wire()) == command
    result = CommandResult(
        acl_outcomes=(
            AclOutcome(),
            AclOutcome(ErrorCode.invalid_request, "Invalid operation ANY"),
            AclOutcome(bindings=(binding_codes(READ_T), binding_codes(GROUP_ALL))),
        )
    )
    assert CommandResult.from_wire(result.to_wire()) == result
    assert CommandResult.from_wire(CommandResult().to_wire()).acl_outcomes is None
    with pytest.raises(CommandDecodeError, match="an ACL must be"):
        Command.from_wire(b'{"op": "create_acls", "bindings": [[2, "t", 3, null, "*", 3, 3]]}')
    with pytest.raises(CommandDecodeError, match="an ACL outcome"):
        CommandResult.from_wire(b'{"error_code": 0, "acl_outcomes": [[0, null]]}')


# -- the controller of a one-broker cluster ------------------------------------------------


def _run(broker: Broker, fn: Callable[[], Awaitable[T]]) -> T:
    """fn() with the broker registered and its Raft node and metadata applier running."""
    result: T = run_with_broker(broker, fn, register=True, timeout_s=20)
    return result


def _close(broker: Broker) -> None:
    broker.close()


def test_controller_creates_valid_bindings_and_deletes_by_filter(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path)
    controller = broker.controller
    invalid = [
        ((1, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType ANY"),
        ((2, "t", 2, "User:a", "*", 3, 3), "Invalid patternType MATCH"),
        ((2, "t", 3, "User:a", "*", 1, 3), "Invalid operation ANY"),
        ((2, "t", 3, "User:a", "*", 0, 3), "Invalid operation UNKNOWN"),
        ((2, "t", 3, "User:a", "*", 3, 1), "Invalid permissionType ANY"),
        ((2, "", 3, "User:a", "*", 3, 3), "Invalid empty resource name"),
        ((4, "c", 3, "User:a", "*", 7, 3), "The only valid name for the CLUSTER resource is"),
        ((2, "t", 3, "alice", "*", 3, 3), "principalType:principalName but got alice"),
    ]

    async def scenario() -> tuple[CommandResult, ...]:
        created = await controller.execute(
            CreateAclsCommand(
                (binding_codes(READ_T), binding_codes(READ_T), binding_codes(DENY_PREFIX))
                + tuple(codes for codes, _ in invalid)
                + (binding_codes(GROUP_ALL),)
            )
        )
        again = await controller.execute(CreateAclsCommand((binding_codes(READ_T),)))
        deleted = await controller.execute(
            DeleteAclsCommand(
                (
                    (2, "logs-x", 2, None, None, 1, 1),  # MATCH: the prefix applies
                    (2, None, 1, None, None, 4, 1),  # any topic, WRITE: the same one again
                    (2, "nothing", 3, None, None, 1, 1),
                    (0, None, 1, None, None, 1, 1),  # resource type UNKNOWN
                )
            )
        )
        return created, again, deleted

    try:
        created, again, deleted = _run(broker, scenario)
        assert created.acl_outcomes is not None
        outcomes = list(created.acl_outcomes)
        assert outcomes[:3] == [AclOutcome()] * 3 and outcomes[-1] == AclOutcome()
        for outcome, (_, message) in zip(outcomes[3:-1], invalid, strict=True):
            assert outcome.error_code == ErrorCode.invalid_request
            assert outcome.error_message is not None and message in outcome.error_message
        assert again.acl_outcomes == (AclOutcome(),)
        assert deleted.acl_outcomes is not None
        prefix, write, none, unknown = deleted.acl_outcomes
        assert prefix == AclOutcome(bindings=(binding_codes(DENY_PREFIX),))
        assert write == prefix
        assert none == AclOutcome()
        assert unknown.error_code == ErrorCode.invalid_request
        assert set(controller.image.acls) == {READ_T, GROUP_ALL}
    finally:
        _close(broker)
    assert set(load_snapshot(tmp_path).acls) == {READ_T, GROUP_ALL}
