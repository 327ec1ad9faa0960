"""The controller's ACL decisions: CreateAcls and DeleteAcls, binding by binding."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    AclOutcome,
    CommandResult,
    CreateAclsCommand,
    DeleteAclsCommand,
)
from raftka.broker.cluster.control.acls import create_acls, delete_acls
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import AddAclBinding, RemoveAclBinding
from raftka.broker.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    binding_codes,
)

READ_T = AclBinding(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermission.ALLOW,
)
WRITE_T = AclBinding(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.WRITE,
    AclPermission.ALLOW,
)
GROUP_ALL = AclBinding(
    ResourceType.GROUP,
    "g",
    PatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.ALL,
    AclPermission.ALLOW,
)
NO_PRINCIPAL_KIND = AclBinding(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "alice",
    "*",
    AclOperation.READ,
    AclPermission.ALLOW,
)


def _image(*bindings: AclBinding) -> MetadataImage:
    image = MetadataImage()
    for offset, binding in enumerate(bindings):
        image.apply(AddAclBinding(*binding_codes(binding)), offset)
    return image


def test_create_acls_appends_each_new_binding_once() -> None:
    image = _image(READ_T)
    command = CreateAclsCommand(
        tuple(binding_codes(b) for b in (READ_T, WRITE_T, WRITE_T, NO_PRINCIPAL_KIND, GROUP_ALL))
    )
    assert create_acls(image, command) == ControllerResult(
        (AddAclBinding(*binding_codes(WRITE_T)), AddAclBinding(*binding_codes(GROUP_ALL))),
        CommandResult(
            acl_outcomes=(
                AclOutcome(),
                AclOutcome(),
                AclOutcome(),
                AclOutcome(
                    ErrorCode.invalid_request,
                    "expected a string in format principalType:principalName but got alice",
                ),
                AclOutcome(),
            )
        ),
    )
    assert create_acls(image, CreateAclsCommand()) == ControllerResult(
        (), CommandResult(acl_outcomes=())
    )


def test_delete_acls_removes_what_the_filters_match_once() -> None:
    image = _image(READ_T, WRITE_T, GROUP_ALL)
    topics = AclBindingFilter(ResourceType.TOPIC).codes()
    bob = AclBindingFilter(principal="User:bob").codes()
    unknown = AclBindingFilter(ResourceType.UNKNOWN).codes()
    decision = delete_acls(image, DeleteAclsCommand((topics, bob, unknown)))
    assert decision.records == (
        RemoveAclBinding(*binding_codes(READ_T)),
        RemoveAclBinding(*binding_codes(WRITE_T)),
        RemoveAclBinding(*binding_codes(GROUP_ALL)),
    )
    assert decision.result.acl_outcomes == (
        AclOutcome(bindings=tuple(sorted(binding_codes(b) for b in (READ_T, WRITE_T)))),
        AclOutcome(bindings=tuple(sorted(binding_codes(b) for b in (WRITE_T, GROUP_ALL)))),
        AclOutcome(
            ErrorCode.invalid_request,
            "Unknown patternFilter: the resource type or pattern type is not known",
        ),
    )


def test_delete_acls_matching_nothing_appends_nothing() -> None:
    image = _image(READ_T)
    nobody = AclBindingFilter(principal="User:nobody").codes()
    assert delete_acls(image, DeleteAclsCommand((nobody,))) == ControllerResult(
        (), CommandResult(acl_outcomes=(AclOutcome(),))
    )
