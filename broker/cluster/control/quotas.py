"""Client quotas (Kafka's ClientQuotaControlManager): AlterClientQuotas for one entity,
decided from the image without I/O."""

from __future__ import annotations

from raftka.broker.cluster.commands import AlterClientQuotaCommand
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import ClientQuota
from raftka.broker.quotas import QuotaRequestError, validate_entity, validate_ops


def alter_client_quota(image: MetadataImage, command: AlterClientQuotaCommand) -> ControllerResult:
    """One record per quota key whose value changes, in key order; an invalid entity or
    change refuses the command with the error quota validation gives."""
    try:
        entity = validate_entity(command.entity)
        changes = validate_ops(command.changes)
    except QuotaRequestError as exc:
        return ControllerResult.error(exc.error_code, exc.message)
    current = image.client_quotas.get(entity, {})
    # Only what changes is written, as Kafka's controller does.
    return ControllerResult(
        tuple(
            ClientQuota(entity, key, value)
            for key, value in sorted(changes.items())
            if (value is None and key in current)
            or (value is not None and current.get(key) != value)
        )
    )
