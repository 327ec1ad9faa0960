"""ACL bindings (Kafka's AclControlManager): CreateAcls and DeleteAcls, decided from the
image without I/O. Each binding or filter is answered on its own; the valid ones change
the image in one batch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    AclOutcome,
    CommandResult,
    CreateAclsCommand,
    DeleteAclsCommand,
)
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import AddAclBinding, MetadataRecord, RemoveAclBinding
from raftka.broker.security.acl import (
    AclBinding,
    AclBindingFilter,
    binding_codes,
    binding_from_codes,
    check_new_binding,
)


def create_acls(image: MetadataImage, command: CreateAclsCommand) -> ControllerResult:
    """One record per new binding (one stored already, or twice in the command, once);
    an invalid binding's outcome is INVALID_REQUEST and it is left out."""
    records: list[MetadataRecord] = []
    new: set[AclBinding] = set()
    outcomes = []
    for codes in command.bindings:
        binding = binding_from_codes(*codes)
        problem = check_new_binding(binding)
        if problem is not None:
            outcomes.append(AclOutcome(ErrorCode.invalid_request, problem))
            continue
        if binding not in image.acls and binding not in new:
            new.add(binding)
            records.append(AddAclBinding(*binding_codes(binding)))
        outcomes.append(AclOutcome())
    return ControllerResult(tuple(records), CommandResult(acl_outcomes=tuple(outcomes)))


def delete_acls(image: MetadataImage, command: DeleteAclsCommand) -> ControllerResult:
    """One record per stored binding some filter matches (once, however many match it);
    each filter's outcome lists the bindings it matched, an invalid one INVALID_REQUEST."""
    removed: set[AclBinding] = set()
    records: list[MetadataRecord] = []
    outcomes = []
    for codes in command.filters:
        acl_filter = AclBindingFilter.from_codes(*codes)
        problem = acl_filter.problem()
        if problem is not None:
            outcomes.append(AclOutcome(ErrorCode.invalid_request, problem))
            continue
        matched = acl_filter.select(image.acls)
        for binding in matched:
            if binding not in removed:
                removed.add(binding)
                records.append(RemoveAclBinding(*binding_codes(binding)))
        outcomes.append(AclOutcome(bindings=tuple(binding_codes(b) for b in matched)))
    return ControllerResult(tuple(records), CommandResult(acl_outcomes=tuple(outcomes)))
