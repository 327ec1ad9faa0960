"""The controller's SCRAM credential decisions (AlterUserScramCredentials for one user)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import AlterScramCredentialsCommand
from raftka.broker.cluster.control.result import ControllerResult
from raftka.broker.cluster.control.scram import alter_scram_credentials
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import DeleteScramCredential, UpsertScramCredential

SHA256, SHA512 = 1, 2
SALT, STORED, SERVER = "c2FsdA==", "c3RvcmVk", "c2VydmVy"


def _image() -> MetadataImage:
    image = MetadataImage()
    image.apply(UpsertScramCredential("alice", SHA256, 4096, SALT, STORED, SERVER), 0)
    return image


def test_deletions_then_upsertions_in_one_batch() -> None:
    command = AlterScramCredentialsCommand(
        "alice", deletions=(SHA256,), upsertions=((SHA512, 8192, SALT, STORED, SERVER),)
    )
    assert alter_scram_credentials(_image(), command) == ControllerResult(
        (
            DeleteScramCredential("alice", SHA256),
            UpsertScramCredential("alice", SHA512, 8192, SALT, STORED, SERVER),
        )
    )
    assert alter_scram_credentials(_image(), AlterScramCredentialsCommand("bob")) == (
        ControllerResult()
    )


def test_one_bad_entry_refuses_the_whole_command() -> None:
    image = _image()
    missing = AlterScramCredentialsCommand("alice", deletions=(SHA512,))
    assert alter_scram_credentials(image, missing) == ControllerResult.error(
        ErrorCode.resource_not_found,
        "Attempt to delete a user credential that does not exist: user alice has no "
        "SCRAM-SHA-512 credential",
    )
    cases = [
        (AlterScramCredentialsCommand("a", deletions=(3,)), ErrorCode.unsupported_sasl_mechanism),
        (
            AlterScramCredentialsCommand("a", upsertions=((9, 4096, SALT, STORED, SERVER),)),
            ErrorCode.unsupported_sasl_mechanism,
        ),
        (
            AlterScramCredentialsCommand("a", upsertions=((SHA256, 10, SALT, STORED, SERVER),)),
            ErrorCode.unacceptable_credential,
        ),
        (
            AlterScramCredentialsCommand(
                "a",
                upsertions=(
                    (SHA256, 4096, SALT, STORED, SERVER),
                    (SHA512, 1 << 20, SALT, STORED, SERVER),
                ),
            ),
            ErrorCode.unacceptable_credential,
        ),
    ]
    for command, code in cases:
        decision = alter_scram_credentials(image, command)
        assert (decision.records, decision.result.error_code) == ((), code), command
