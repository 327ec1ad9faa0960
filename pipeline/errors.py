"""Errors the raftka source and sink raise, and the one rule for reporting lost data."""

from __future__ import annotations

import logging

FAIL_ON_DATA_LOSS_HINT = (
    "Some data may have been lost because it is not on the broker any more: retention or "
    "DeleteRecords removed it, or the topic was deleted, before the query read it. If you "
    'want the query to go on in such cases, set the source option "failOnDataLoss" to '
    '"false".'
)


class SourceError(RuntimeError):
    """The broker could not be reached, or does not have what the options ask for."""


class DataLossError(SourceError):
    """Offsets a query must read are gone (failOnDataLoss=true)."""


def report_data_loss(message: str, fail_on_data_loss: bool, log: logging.Logger) -> None:
    """Raise `DataLossError(message)` when the query must fail on lost data; otherwise log
    `message` once as a warning and return, so the caller skips ahead."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_HINT}")
    log.warning("%s; skipping ahead (failOnDataLoss=false)", message)
