"""SCRAM credentials (Kafka's ScramControlManager): AlterUserScramCredentials for one user,
decided from the image without I/O."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterScramCredentialsCommand
from raftka.broker.cluster.control.result import ControllerResult, errors_as_results
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    DeleteScramCredential,
    MetadataRecord,
    UpsertScramCredential,
)
from raftka.broker.cluster.validation import (
    TopicError,
    check_scram_iterations,
    check_scram_mechanism,
)
from raftka.broker.security.scram import ScramMechanism


@errors_as_results
def alter_scram_credentials(
    image: MetadataImage, command: AlterScramCredentialsCommand
) -> ControllerResult:
    """The deletions, then the upsertions, as one batch; all or nothing: the first bad
    entry refuses the command (UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL, or
    RESOURCE_NOT_FOUND for a deletion of a credential that does not exist)."""
    records: list[MetadataRecord] = []
    for mechanism in command.deletions:
        check_scram_mechanism(mechanism)
        if (command.user, mechanism) not in image.scram_credentials:
            raise TopicError(
                ErrorCode.resource_not_found,
                f"Attempt to delete a user credential that does not exist: user "
                f"{command.user} has no {ScramMechanism(mechanism).mechanism_name} credential",
            )
        records.append(DeleteScramCredential(command.user, mechanism))
    for mechanism, iterations, salt, stored_key, server_key in command.upsertions:
        check_scram_mechanism(mechanism)
        check_scram_iterations(iterations)
        records.append(
            UpsertScramCredential(command.user, mechanism, iterations, salt, stored_key, server_key)
        )
    return ControllerResult(tuple(records))
