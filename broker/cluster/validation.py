"""Kafka's rules for topic names, partition counts, replica assignments and config overrides.

Pure checks (no I/O, no trio): the controller applies them before it proposes a metadata
record, and the Metadata handler checks a name before it auto-creates a topic. A broken rule
raises `TopicError` with the error code and message Kafka answers.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from raftka.broker.config import ConfigError, validate_topic_configs
from raftka.broker.security.scram import ITERATIONS_MAX, ITERATIONS_MIN, ScramMechanism

TOPIC_NAME_MAX_LENGTH = 249
MAX_PARTITIONS = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicError(Exception):
    """A topic operation that Kafka answers with an error code and message."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules (kafka.common.internals.Topic.validate)."""
    if not name:
        raise TopicError(
            ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise TopicError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LENGTH} characters",
        )
    if not _LEGAL_TOPIC.match(name):
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )


#: The metadata Raft group's name (its log folder is `__cluster_metadata-0`): never a topic.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def check_not_reserved(name: str) -> None:
    """Kafka's KRaft controller refuses to create the metadata log's topic."""
    if name == CLUSTER_METADATA_TOPIC:
        raise TopicError(
            ErrorCode.invalid_request,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        )


def check_no_null_configs(configs: Mapping[str, str | None]) -> None:
    """INVALID_CONFIG naming every override whose value is null."""
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        raise TopicError(
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: " + ",".join(nulls),
        )


def validate_topic_config_values(configs: Mapping[str, str | None]) -> None:
    """INVALID_CONFIG for an unknown topic config name or a value it does not accept."""
    try:
        validate_topic_configs(configs)
    except ConfigError as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None


def check_scram_mechanism(mechanism: int) -> ScramMechanism:
    """The mechanism of a KIP-554 mechanism number; TopicError UNSUPPORTED_SASL_MECHANISM."""
    if mechanism not in set(ScramMechanism):
        raise TopicError(
            ErrorCode.unsupported_sasl_mechanism,
            f"Unknown SCRAM mechanism {mechanism}: 1 is SCRAM-SHA-256, 2 is SCRAM-SHA-512",
        )
    return ScramMechanism(mechanism)


def check_scram_iterations(iterations: int) -> None:
    """Kafka's bounds; TopicError UNACCEPTABLE_CREDENTIAL outside them."""
    if iterations < ITERATIONS_MIN:
        raise TopicError(
            ErrorCode.unacceptable_credential,
            f"Too few iterations: {iterations} (at least {ITERATIONS_MIN})",
        )
    if iterations > ITERATIONS_MAX:
        raise TopicError(
            ErrorCode.unacceptable_credential,
            f"Too many iterations: {iterations} (at most {ITERATIONS_MAX})",
        )


def validate_assignment(
    registered: Collection[int], replicas: Sequence[int], replication_factor: int | None
) -> None:
    """A manual replica list as Kafka's ReplicationControlManager checks it
    (validateManualPartitionAssignment): not empty, only `registered` brokers, none twice,
    and `replication_factor` replicas when that is given. INVALID_REPLICA_ASSIGNMENT."""
    if not replicas:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for node_id in sorted(replicas):
        if node_id not in registered:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {node_id}, but no such "
                "broker is registered.",
            )
        if node_id == previous:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {node_id} more than once.",
            )
        previous = node_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).",
        )
