"""The `compact` workload's checker: what log compaction promises, over a run's history.

The workload is the `log` workload's (`workload.start_workload`) with keyed producers
(`KeyedProducerWorker`: value `<process>-<n>` under key `compact_key(value)`, so every
producer writes every key) on a topic with `cleanup.policy=compact`, small segments and a
low dirty ratio, so the log cleaner runs again and again while the faults hit.

Compaction may remove a record only when a later record of its key exists, so the `log`
checker's `lost-write`, `unseen` and `poll-skip` do not hold as they are. What holds:

- `latest-lost`: the final read's last record of a key is at an offset below the highest
  offset of that key that was acknowledged or read during the run (the latest value of a key
  went missing, or the key went back to an older value).
- `key-order`: two acknowledged sends of one key by one producer, the later one (by the
  producer's sequence) at the lower offset: compaction would keep the older value.
- `unseen`: an acknowledged send whose offset is unknown (librdkafka's implicit
  acknowledgement) and that no poll returned, while the final read holds no record of its key.
- `poll-skip`: a consumer's reads jumped over an offset holding a record no later record of
  its key supersedes (a record compaction could not have removed). A skip of a record a
  later write superseded passes, whenever that write was made.
- as for `log`: `duplicate`, `inconsistent-offset` (offsets never change under compaction),
  `nonmonotonic-poll`, `commit-backwards`, `committed-backwards`, `final-read-incomplete`,
  and the run's own anomalies (`checker.check_run_events`).

`compacted` counts acknowledged records missing from the final read because a later record
of their key superseded them: the evidence that the cleaner ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from tests.chaos.checker import (
    CheckResult,
    check_commits,
    check_final_read_complete,
    check_offsets,
    check_polls,
    check_run_events,
    collect_log_ops,
)
from tests.chaos.history import Event
from tests.chaos.workload import compact_key

COMPACT_ANOMALY_KINDS = ("latest-lost", "key-order")


def _sequence(value: str) -> tuple[str, int]:
    process, n = value.rsplit("-", 1)
    return process, int(n)


def check_compact(events: Iterable[Event]) -> CheckResult:
    """Every invariant of a `compact` run's events (in recorded order)."""
    result = CheckResult()
    for kind in COMPACT_ANOMALY_KINDS:
        result.anomalies[kind] = 0
    events = list(events)
    check_run_events(events, result)
    ops = collect_log_ops(events, result)
    check_offsets(ops, result)

    # (partition, key) -> the highest offset known to hold a record of the key, by acks and
    # polls during the run (the final read is what is checked against it).
    highest: dict[tuple[int, str], tuple[int, str]] = {}
    for (partition, offset), values in ops.values_at.items():
        for value in values:
            key = (partition, compact_key(value))
            if key not in highest or offset > highest[key][0]:
                highest[key] = (offset, value)

    # A producer's later send of a key lands at a higher offset than its earlier ones.
    sends: dict[tuple[str, str], list[tuple[int, int, str]]] = defaultdict(list)
    for value, (_partition, offset, _send) in ops.acked.items():
        if offset is not None:
            process, n = _sequence(value)
            sends[(process, compact_key(value))].append((n, offset, value))
    for (process, key), written in sorted(sends.items()):
        written.sort()
        for (_n1, o1, v1), (_n2, o2, v2) in zip(written, written[1:], strict=False):
            if o2 <= o1:
                result.add(
                    "key-order",
                    {"process": process, "key": key, "earlier": [v1, o1], "later": [v2, o2]},
                )

    if check_final_read_complete(ops.final_read, result):
        final_latest: dict[tuple[int, str], int] = {}
        final_keys: set[str] = set()
        for partition, offset, value in ops.final_records:
            key = compact_key(value)
            final_keys.add(key)
            if offset > final_latest.get((partition, key), -1):
                final_latest[(partition, key)] = offset
        for (partition, key), (offset, value) in sorted(highest.items()):
            final = final_latest.get((partition, key))
            if final is None or final < offset:
                result.add(
                    "latest-lost",
                    {
                        "partition": partition,
                        "key": key,
                        "latest": [offset, value],
                        "acknowledged": value in ops.acked,
                        "final_latest_offset": final,
                    },
                )
        final_values = ops.final_values
        compacted = implicit_unread = 0
        for value, (partition, offset, send) in ops.acked.items():
            if value in final_values:
                continue
            key = compact_key(value)
            if offset is not None:
                if final_latest.get((partition, key), -1) > offset:
                    compacted += 1  # superseded; `latest-lost` covers the rest
            elif value in ops.read_values:
                continue  # its offset is known from a poll: in `highest`
            elif key in final_keys:
                implicit_unread += 1
            else:
                result.add(
                    "unseen",
                    {"value": value, "key": key, "partition": partition, "acked_at": send["t"]},
                )
        result.counts["compacted"] = compacted
        if implicit_unread:
            result.notes.append(
                f"{implicit_unread} implicitly acknowledged sends (no offset) never read; their"
                " keys are in the final read, at offsets the checker cannot compare"
            )

    # Offsets a consumer must not skip: those holding a key's highest known record.
    unsuperseded = {
        place: values
        for place, values in ops.values_at.items()
        if any(highest[(place[0], compact_key(v))][0] == place[1] for v in values)
    }
    check_polls(events, unsuperseded, result)
    check_commits(ops.commits, ops.observed, result)
    result.counts["keys"] = len({key for _p, key in highest})
    result.counts_line = (
        f"operations {result.operations}: sends {result.sends} (acknowledged "
        f"{result.acknowledged}, failed {result.failed}, unknown {result.unknown}), polls "
        f"{result.polls} ({result.records_read} records), commits {result.commits}; "
        f"{result.counts['keys']} keys, {result.counts.get('compacted', 0)} acknowledged "
        f"records compacted away; faults {result.faults}"
        + (
            f"; duplicates from client epoch bumps {result.client_duplicates}"
            if result.client_duplicates
            else ""
        )
    )
    return result
