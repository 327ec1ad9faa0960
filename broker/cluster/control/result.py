"""What a per-area controller function returns: the records to append and the answer.

Kafka's ControllerResult: computed from the image alone (no I/O), before anything is
proposed. The controller appends `records` as one metadata batch, waits until they are
applied, and answers `result`; no records, nothing is appended. A refused command has no
records and an error result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec

from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import CommandResult
from raftka.broker.cluster.records import MetadataRecord
from raftka.broker.cluster.validation import TopicError

P = ParamSpec("P")


@dataclass(frozen=True)
class ControllerResult:
    """The records a command appends (in this order, as one batch) and its answer."""

    records: tuple[MetadataRecord, ...] = ()
    result: CommandResult = CommandResult()

    @classmethod
    def error(cls, error_code: ErrorCode, message: str) -> ControllerResult:
        """A refusal: nothing appended, Kafka's error code and message answered."""
        return cls((), CommandResult.error(error_code, message))


def errors_as_results(
    decide: Callable[P, ControllerResult],
) -> Callable[P, ControllerResult]:
    """`decide`, with a TopicError it raises returned as an error result."""

    @functools.wraps(decide)
    def run(*args: P.args, **kwargs: P.kwargs) -> ControllerResult:
        try:
            return decide(*args, **kwargs)
        except TopicError as exc:
            return ControllerResult.error(exc.error_code, exc.message)

    return run
