"""The checker: Jepsen's Kafka invariants over a run's history.

Anomaly kinds (each counted; any one fails the run):

- `lost-write`: an acknowledged send whose value no poll ever returned, although polls
  returned a later offset of the same partition.
  librdkafka may acknowledge a send with no offset (records of a batch whose answer was
  lost, acknowledged by a later batch's success: its "implicit ack"); those are held to
  the final read by value only.
- `unseen`: an acknowledged send missing from the final read (faults over, cluster healed,
  every partition read from the beginning to its high watermark).
- `duplicate`: one value at two or more offsets (from acks and polls together), unless the
  log shows each copy written under a different producer epoch: librdkafka bumps the epoch of
  an idempotent producer after message timeouts and then re-sends records that may already
  be stored (confluentinc/librdkafka#4953), which no broker can tell from new records.
  Those are counted as `client_duplicates`, not anomalies; the epoch bumps are in clients.log
  and the history (`client-epoch` events).
- `inconsistent-offset`: one offset holding two or more values (from acks and polls).
- `nonmonotonic-poll`: a consumer read an offset at or below one it had already read from that
  partition in the same assignment epoch (an `assign` event starts a new epoch).
- `poll-skip`: a consumer's consecutive reads of a partition jumped over an offset that some
  ack or poll shows holds a record (gaps of control batches hold none, so they pass).
- `commit-backwards`: a group's acknowledged commit of a partition is lower than one
  acknowledged before it was sent.
- `committed-backwards`: committed offsets read back (OffsetFetch) went down, or were below a
  commit acknowledged before the read was sent.
- `final-read-incomplete`: the final read did not reach every high watermark in time.
- `replica-divergence`: a partition's replicas were not byte-identical once quiet.
- `voters-not-restored`: a run that changed the metadata quorum's voters (the `membership`
  nemesis) ended with a voter set other than every broker.
- `node-crash`: a broker exited without a nemesis stopping it; `unclean-stop`: a SIGTERM
  did not end in a clean exit; `workload-error`: a client thread died.
- `client-protocol-error`: a client could not parse a broker's response (librdkafka's
  PROTOERR), so it never saw that response's error codes.

`check(events)` returns a `CheckResult`; `check_history(events)` picks the checker of the
run's workload (this one, `txn.check_txn`, `share.check_share` or `compact.check_compact`);
`python -m tests.chaos.checker HISTORY` checks a history file again.
"""

from __future__ import annotations

import bisect
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.history import Event, read_history

#: Anomalies of the run itself, whatever its workload (`check_run_events`).
RUN_ANOMALY_KINDS = (
    "replica-divergence",
    "voters-not-restored",
    "node-crash",
    "unclean-stop",
    "workload-error",
    "client-protocol-error",
)
ANOMALY_KINDS = (
    "lost-write",
    "unseen",
    "duplicate",
    "inconsistent-offset",
    "nonmonotonic-poll",
    "poll-skip",
    "commit-backwards",
    "committed-backwards",
    "final-read-incomplete",
    *RUN_ANOMALY_KINDS,
)
EXAMPLES_PER_KIND = 8


@dataclass
class CheckResult:
    """Counts of operations and anomalies, with a few examples of each anomaly."""

    operations: int = 0
    sends: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    polls: int = 0
    records_read: int = 0
    commits: int = 0
    faults: int = 0
    client_duplicates: int = 0
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALY_KINDS, 0))
    examples: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)
    #: Another workload's counts, in place of the sends/polls/commits line of the report.
    counts_line: str | None = None
    #: Another workload's counts by name (JSON and the summary tables).
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def anomaly_count(self) -> int:
        return sum(self.anomalies.values())

    @property
    def valid(self) -> bool:
        return self.anomaly_count == 0

    def add(self, kind: str, example: Any) -> None:
        self.anomalies[kind] += 1
        if len(self.examples[kind]) < EXAMPLES_PER_KIND:
            self.examples[kind].append(example)

    def report(self) -> str:
        """Counts, then every anomaly kind found with its examples."""
        counts_line = self.counts_line
        if counts_line is None:
            counts_line = (
                f"operations {self.operations}: sends {self.sends} (acknowledged "
                f"{self.acknowledged}, failed {self.failed}, unknown {self.unknown}), polls "
                f"{self.polls} ({self.records_read} records), commits {self.commits}; "
                f"faults {self.faults}"
                + (
                    f"; duplicates from client epoch bumps {self.client_duplicates}"
                    if self.client_duplicates
                    else ""
                )
            )
        lines = [
            counts_line,
            "anomalies: "
            + (", ".join(f"{k} {v}" for k, v in self.anomalies.items() if v) or "none"),
        ]
        for kind, examples in self.examples.items():
            lines.append(f"  {kind} (first {len(examples)} of {self.anomalies[kind]}):")
            lines += [f"    {example}" for example in examples]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "operations": self.operations,
            "sends": self.sends,
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "unknown": self.unknown,
            "polls": self.polls,
            "records_read": self.records_read,
            "commits": self.commits,
            "faults": self.faults,
            "client_duplicates": self.client_duplicates,
            **self.counts,
            "anomalies": self.anomalies,
            "examples": dict(self.examples),
            "notes": self.notes,
        }


def _int_keys(offsets: dict[str, int]) -> dict[int, int]:
    """JSON object keys are strings; partitions are ints."""
    return {int(p): int(o) for p, o in offsets.items()}


def duplicated_values(events: Iterable[Event]) -> dict[str, set[tuple[int, int]]]:
    """{value: its (partition, offset)s} for values at more than one offset."""
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for event in events:
        if event["type"] == "send" and event["outcome"] == "ok":
            if event["offset"] is not None:  # an implicit acknowledgement names none
                places[event["value"]].add((event["partition"], event["offset"]))
        elif event["type"] == "poll":
            for partition, offset, value in event["records"]:
                places[value].add((partition, offset))
    return {value: where for value, where in places.items() if len(where) > 1}


def check_run_events(events: list[Event], result: CheckResult) -> None:
    """What every workload's run records besides its operations: faults, replicas that
    differ, brokers that crashed or stopped uncleanly, client threads that died, responses
    a client could not parse, fatal client errors."""
    protocol_examples: list[dict[str, Any]] = []
    protocol_failures: int | None = None  # from the summary event, when there is one
    for event in events:
        kind = event["type"]
        if kind == "nemesis" and event["phase"] == "start":
            result.faults += 1
        elif kind == "replicas":
            for diff in event.get("diffs", []):
                result.add("replica-divergence", diff)
            if not event.get("compared", True):
                result.notes.append(f"replicas not compared: {event.get('detail')}")
        elif kind == "quorum" and sorted(event["voters"]) != sorted(event["want"]):
            result.add(
                "voters-not-restored",
                {"voters": event["voters"], "observers": event["observers"], "want": event["want"]},
            )
        elif kind == "node-exit":
            tail = event.get("log_tail", "").strip().splitlines()[-3:]
            result.add(
                "node-crash",
                {"t": event["t"], "node": event["node"], "code": event["code"], "log": tail},
            )
        elif kind == "unclean-stop":
            result.add(
                "unclean-stop",
                {"t": event["t"], "node": event["node"], "detail": event["detail"][:500]},
            )
        elif kind == "workload-error":
            result.add("workload-error", {"process": event["process"], "error": event["error"]})
        elif kind == "client-protocol-error":
            protocol_examples.append(
                {"t": event["t"], "process": event["process"], "detail": event["detail"]}
            )
        elif kind == "client-protocol-errors":
            protocol_failures = sum(event["failures"].values())
        elif kind == "client-fatal":
            result.notes.append(f"{event['process']}: fatal client error {event['error']}")
    for example in protocol_examples:
        result.add("client-protocol-error", example)
    if protocol_failures is not None:
        result.anomalies["client-protocol-error"] = protocol_failures


@dataclass
class LogOps:
    """What the sends, polls and commits of a `log`-style history say, gathered once."""

    #: value -> (partition, offset or None, send event) of every acknowledged send
    acked: dict[str, tuple[int, int | None, Event]] = field(default_factory=dict)
    offsets_of_value: dict[str, set[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(set)
    )
    values_at: dict[tuple[int, int], set[str]] = field(default_factory=lambda: defaultdict(set))
    read_values: set[str] = field(default_factory=set)
    #: (partition, offset, value) of the final read
    final_records: list[tuple[int, int, str]] = field(default_factory=list)
    max_read_offset: dict[int, int] = field(default_factory=dict)
    final_read: Event | None = None
    commits: list[Event] = field(default_factory=list)
    observed: list[Event] = field(default_factory=list)
    #: value -> [[partition, offset, producer id, producer epoch, sequence]] from the log
    provenance: dict[str, list[list[int]]] = field(default_factory=dict)

    @property
    def final_values(self) -> set[str]:
        return {value for _p, _o, value in self.final_records}


def collect_log_ops(events: list[Event], result: CheckResult) -> LogOps:
    """Gather sends, polls, commits and the final read; counts them into `result`."""
    ops = LogOps()
    for event in events:
        kind = event["type"]
        if kind == "send":
            result.sends += 1
            outcome = event["outcome"]
            if outcome == "ok":
                result.acknowledged += 1
                partition, offset = event["partition"], event["offset"]
                ops.acked[event["value"]] = (partition, offset, event)
                # librdkafka acknowledges records of a batch whose answer was lost once a
                # later batch of the same idempotent producer succeeds (its "implicit
                # ack"), with no offset: such a record is held to the final read by value.
                if offset is not None:
                    ops.offsets_of_value[event["value"]].add((partition, offset))
                    ops.values_at[(partition, offset)].add(event["value"])
            elif outcome == "failed":
                result.failed += 1
            else:
                result.unknown += 1
        elif kind == "poll":
            result.polls += 1
            for partition, offset, value in event["records"]:
                result.records_read += 1
                ops.offsets_of_value[value].add((partition, offset))
                ops.values_at[(partition, offset)].add(value)
                ops.read_values.add(value)
                if event["process"] == "final":
                    ops.final_records.append((partition, offset, value))
                if offset > ops.max_read_offset.get(partition, -1):
                    ops.max_read_offset[partition] = offset
        elif kind == "commit":
            result.commits += 1
            ops.commits.append(event)
        elif kind == "committed":
            ops.observed.append(event)
        elif kind == "final-read":
            ops.final_read = event
        elif kind == "provenance":
            ops.provenance.update(event["duplicates"])
    result.operations = result.sends + result.polls + result.commits + len(ops.observed)
    return ops


def check_offsets(ops: LogOps, result: CheckResult) -> None:
    """Duplicates (one value at two offsets) and inconsistent offsets (one offset, two
    values), from acks and polls together."""
    for value, places in ops.offsets_of_value.items():
        if len(places) <= 1:
            continue
        writers = ops.provenance.get(value, [])
        epochs = {(w[2], w[3]) for w in writers}
        if len(writers) == len(places) and len(epochs) == len(writers):
            result.client_duplicates += 1
            continue
        result.add(
            "duplicate",
            {"value": value, "offsets": sorted(places), "pid_epoch_seq": [w[2:] for w in writers]},
        )
    for (partition, offset), values in ops.values_at.items():
        if len(values) > 1:
            result.add(
                "inconsistent-offset",
                {"partition": partition, "offset": offset, "values": sorted(values)},
            )


def check_final_read_complete(final_read: Event | None, result: CheckResult) -> bool:
    """Whether the history has a final read; one that did not reach every high watermark
    is `final-read-incomplete`."""
    if final_read is None:
        result.add("final-read-incomplete", {"detail": "no final read in the history"})
        return False
    if not final_read["complete"]:
        result.add(
            "final-read-incomplete",
            {
                "high_watermarks": final_read["high_watermarks"],
                "positions": final_read["positions"],
            },
        )
    return True


def check(events: Iterable[Event]) -> CheckResult:
    """Every invariant over one run's events (in recorded order)."""
    result = CheckResult()
    events = list(events)
    check_run_events(events, result)
    ops = collect_log_ops(events, result)
    check_offsets(ops, result)

    # Lost writes: acknowledged, never read, though later offsets of the partition were.
    for value, (partition, offset, send) in sorted(ops.acked.items(), key=_ack_order):
        if offset is None:
            continue  # no offset to compare; `unseen` still holds it to the final read
        if value not in ops.read_values and ops.max_read_offset.get(partition, -1) > offset:
            result.add(
                "lost-write",
                {
                    "value": value,
                    "partition": partition,
                    "offset": offset,
                    "acked_at": send["t"],
                    "max_read_offset": ops.max_read_offset[partition],
                },
            )

    # Acknowledged writes missing from the final read.
    if check_final_read_complete(ops.final_read, result):
        final_values = ops.final_values
        for value, (partition, offset, send) in sorted(ops.acked.items(), key=_ack_order):
            if value not in final_values:
                result.add(
                    "unseen",
                    {
                        "value": value,
                        "partition": partition,
                        "offset": offset,
                        "acked_at": send["t"],
                    },
                )

    check_polls(events, ops.values_at, result)
    check_commits(ops.commits, ops.observed, result)
    return result


def _ack_order(item: tuple[str, tuple[int, int | None, Event]]) -> tuple[int, int]:
    """Acknowledged sends by partition and offset, those without an offset first."""
    partition, offset, _ = item[1]
    return partition, -1 if offset is None else offset


def check_polls(
    events: list[Event], values_at: dict[tuple[int, int], set[str]], result: CheckResult
) -> None:
    """Non-monotonic polls and skips, per consumer and partition within an assignment epoch."""
    known: dict[int, list[int]] = defaultdict(list)  # offsets that hold a record
    for partition, offset in values_at:
        known[partition].append(offset)
    for offsets in known.values():
        offsets.sort()
    last: dict[tuple[str, int], int] = {}  # (process, partition) -> last offset read
    for event in events:
        if event["type"] == "assign":
            process = event["process"]
            for key in [k for k in last if k[0] == process]:
                del last[key]
            continue
        if event["type"] != "poll":
            continue
        process = event["process"]
        for partition, offset, _value in event["records"]:
            previous = last.get((process, partition))
            last[(process, partition)] = offset
            if previous is None:
                continue
            where = {"process": process, "partition": partition, "t": event["t"]}
            if offset <= previous:
                result.add("nonmonotonic-poll", {**where, "offset": offset, "previous": previous})
            elif offset > previous + 1:
                offsets = known[partition]
                i = bisect.bisect_right(offsets, previous)
                if i < len(offsets) and offsets[i] < offset:
                    result.add(
                        "poll-skip",
                        {**where, "from": previous, "to": offset, "skipped": offsets[i]},
                    )


def check_commits(commits: list[Event], observed: list[Event], result: CheckResult) -> None:
    """Acknowledged commits and committed offsets read back never go down in real time."""
    # (group, partition) -> acknowledged commits as (completed at, offset, event)
    acked: dict[tuple[str, int], list[tuple[float, int, Event]]] = defaultdict(list)
    for event in commits:
        if event["outcome"] == "ok":
            for partition, offset in _int_keys(event["offsets"]).items():
                acked[(event["group"], partition)].append((event["t"], offset, event))
    for entries in acked.values():
        entries.sort(key=lambda e: e[0])

    def highest_acked_before(key: tuple[str, int], t: float) -> tuple[int, Event | None]:
        best, best_event = -1, None
        for completed, offset, event in acked.get(key, []):
            if completed >= t:
                break
            if offset > best:
                best, best_event = offset, event
        return best, best_event

    for (group, partition), entries in acked.items():
        for _completed, offset, event in entries:
            before, before_event = highest_acked_before((group, partition), event["t0"])
            if offset < before:
                result.add(
                    "commit-backwards",
                    {
                        "group": group,
                        "partition": partition,
                        "offset": offset,
                        "process": event["process"],
                        "t0": event["t0"],
                        "earlier": before,
                        "earlier_by": before_event["process"] if before_event else None,
                    },
                )

    seen: dict[tuple[str, int], tuple[int, float]] = {}
    for event in observed:
        for partition, offset in _int_keys(event["offsets"]).items():
            key = (event["group"], partition)
            if key in seen and offset < seen[key][0]:
                result.add(
                    "committed-backwards",
                    {
                        "group": event["group"],
                        "partition": partition,
                        "read": offset,
                        "t": event["t"],
                        "earlier_read": seen[key][0],
                        "earlier_t": seen[key][1],
                    },
                )
            before, _ = highest_acked_before(key, event["t0"])
            if offset < before:
                result.add(
                    "committed-backwards",
                    {
                        "group": event["group"],
                        "partition": partition,
                        "read": offset,
                        "t": event["t"],
                        "acknowledged_commit": before,
                    },
                )
            if key not in seen or offset >= seen[key][0]:
                seen[key] = (offset, event["t"])


def check_history(events: Iterable[Event]) -> CheckResult:
    """The checker of the run's workload (its `workload` event; the log workload without)."""
    events = list(events)
    workload = next((e["name"] for e in events if e["type"] == "workload"), "log")
    if workload == "txn":
        from tests.chaos.txn import check_txn

        return check_txn(events)
    if workload == "share":
        from tests.chaos.share import check_share

        return check_share(events)
    if workload == "compact":
        from tests.chaos.compact import check_compact

        return check_compact(events)
    return check(events)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.chaos.checker HISTORY.jsonl", file=sys.stderr)
        return 2
    result = check_history(read_history(Path(argv[0])))
    print(result.report())
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
