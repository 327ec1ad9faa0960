"""A partition's append answer copied into the answer its caller holds (a queued write's)
takes every field, including any added later."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from raftka.broker.replica.types import AppendResult


def test_copy_from_takes_every_field() -> None:
    source = AppendResult(
        error_code=ErrorCode.invalid_record,
        error_message="bad",
        base_offset=7,
        log_append_time_ms=1_700_000_000_000,
        log_start_offset=3,
        record_errors=((0, "no"),),
        appended_bytes=100,
        appended_records=2,
    )
    defaults = AppendResult()
    # Every field differs from its default, so a field left out of the copy shows.
    for f in dataclasses.fields(AppendResult):
        assert getattr(source, f.name) != getattr(defaults, f.name), f.name
    defaults.copy_from(source)
    assert defaults == source
