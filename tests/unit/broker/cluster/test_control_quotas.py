"""The controller's client quota decisions (AlterClientQuotas for one entity)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterClientQuotaCommand
from raftka.broker.cluster.control.quotas import alter_client_quota
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import ClientQuota
from raftka.broker.quotas import CLIENT_ID, USER, quota_entity

ALICE = quota_entity([(USER, "alice")])


def _image() -> MetadataImage:
    image = MetadataImage()
    image.apply(ClientQuota(ALICE, "producer_byte_rate", 1000.0), 0)
    image.apply(ClientQuota(ALICE, "request_percentage", 50.0), 1)
    return image


def test_only_what_changes_is_appended_in_key_order() -> None:
    command = AlterClientQuotaCommand(
        ((USER, "alice"),),
        (
            ("request_percentage", 50.0),  # unchanged
            ("producer_byte_rate", None),  # removed
            ("consumer_byte_rate", 2000.0),  # new
            ("controller_mutation_rate", None),  # not set: nothing to remove
        ),
    )
    assert alter_client_quota(_image(), command) == ControllerResult(
        (
            ClientQuota(ALICE, "consumer_byte_rate", 2000.0),
            ClientQuota(ALICE, "producer_byte_rate", None),
        )
    )


def test_invalid_entities_and_values_are_refused() -> None:
    image = _image()
    cases = [
        (AlterClientQuotaCommand((), ()), "Invalid empty client quota entity"),
        (
            AlterClientQuotaCommand(((USER, "a"), (USER, "b")), ()),
            "Invalid client quota entity, duplicate entity entry user",
        ),
        (
            AlterClientQuotaCommand((("group", "g"),), ()),
            "Unhandled client quota entity type: group",
        ),
        (AlterClientQuotaCommand(((CLIENT_ID, ""),), ()), "Empty client-id not supported"),
        (
            AlterClientQuotaCommand(((USER, "a"),), (("producer_byte_rate", 0.0),)),
            "Quota producer_byte_rate must be greater than 0",
        ),
        (
            AlterClientQuotaCommand(((USER, "a"),), (("no_such_quota", None),)),
            "Invalid configuration key no_such_quota",
        ),
    ]
    for command, message in cases:
        assert alter_client_quota(image, command) == ControllerResult.error(
            ErrorCode.invalid_request, message
        ), command
