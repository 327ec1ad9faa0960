"""The pure parts of `raftka backup|restore`: manifest bookkeeping, where a run starts, the
gap retention leaves, and how batches are rewritten for a restore-mode topic."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import crc32c
import pytest

from raftka.broker.admin import restore, wire
from raftka.broker.admin.backup_format import (
    CONTROL_LEADER_CHANGE,
    Batch,
    Manifest,
    Range,
    contiguous_ranges,
    control_type,
    leader_change_batch,
    next_range_start,
    read_batches,
    restorable,
    restore_stream,
    split_batches,
)
from raftka.broker.admin.common import AdminError
from raftka.broker.admin.wire import LeaderUnavailable
from raftka.broker.cli import _parser
from raftka.protocol.batch_builder import build_batch, decode_batch

CONTROL_KRAFT_VOTERS = 6


def data_batch(base: int, count: int) -> Batch:
    raw = bytearray(
        build_batch([(b"k", b"v")] * count, 1_700_000_000_000, producer_id=7, base_sequence=base)
    )
    struct.pack_into(">q", raw, 0, base)
    return Batch(base, base + count - 1, bytes(raw))


def control(base: int, last: int, kind: int) -> Batch:
    raw = bytearray(build_batch([(struct.pack(">hh", 0, kind), b"payload")], 5))
    struct.pack_into(">q", raw, 0, base)
    struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 0x20)
    struct.pack_into(">i", raw, 23, last - base)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return Batch(base, last, bytes(raw))


def spans(batches: list[Batch]) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in batches]


# -- batches -------------------------------------------------------------------------------


def test_split_batches_trims_a_trailing_partial_batch() -> None:
    first, second = data_batch(0, 3), data_batch(3, 2)
    batches, used = split_batches(first.raw + second.raw[:-5])
    assert spans(batches) == [(0, 2)] and used == len(first.raw)
    batches, used = split_batches(first.raw + second.raw)
    assert spans(batches) == [(0, 2), (3, 4)] and used == len(first.raw) + len(second.raw)


def test_read_batches_refuses_a_file_with_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "0.batches"
    path.write_bytes(data_batch(0, 2).raw + data_batch(2, 2).raw)
    assert spans(list(read_batches(path))) == [(0, 1), (2, 3)]
    path.write_bytes(data_batch(0, 2).raw + b"\0\0\0")
    with pytest.raises(AdminError, match="not a whole batch"):
        list(read_batches(path))


def test_leader_change_batch_spans_the_offsets_and_has_a_valid_crc() -> None:
    batch = leader_change_batch(10, 14, 123)
    assert (batch.base_offset, batch.last_offset) == (10, 14) and batch.is_control
    assert control_type(batch) == CONTROL_LEADER_CHANGE
    (record,) = decode_batch(batch.raw)  # checks the CRC
    assert record.offset == 10 and record.timestamp_ms == 123
    assert struct.unpack_from(">i", batch.raw, 23)[0] == 4


def test_only_unknown_control_batches_are_replaced() -> None:
    data = data_batch(0, 3)
    assert restorable(data) is data
    for kept in (0, 1, CONTROL_LEADER_CHANGE):
        batch = control(4, 4, kept)
        assert restorable(batch) is batch
    voters = control(5, 7, CONTROL_KRAFT_VOTERS)
    replaced = restorable(voters)
    assert (replaced.base_offset, replaced.last_offset) == (5, 7)
    assert control_type(replaced) == CONTROL_LEADER_CHANGE
    assert decode_batch(replaced.raw)[0].timestamp_ms == 5  # the original's timestamp


# -- restore stream ------------------------------------------------------------------------


def test_restore_stream_fills_the_prefix_and_holes_with_leader_change_batches() -> None:
    batches = [data_batch(5, 3), data_batch(8, 2), data_batch(12, 1)]
    out = list(restore_stream(batches, 5, 0))
    assert spans(out) == [(0, 4), (5, 7), (8, 9), (10, 11), (12, 12)]
    assert [control_type(b) for b in out] == [2, None, None, 2, None]


def test_restore_stream_resumes_after_what_the_log_already_holds() -> None:
    batches = [data_batch(0, 3), data_batch(3, 2), data_batch(5, 4)]
    assert spans(list(restore_stream(batches, 0, 5))) == [(5, 8)]
    assert list(restore_stream(batches, 0, 9)) == []
    with pytest.raises(AdminError, match="inside the backup's batch 3..4"):
        list(restore_stream(batches, 0, 4))


def test_restore_stream_of_an_empty_range_past_zero_covers_it_with_one_batch() -> None:
    assert spans(list(restore_stream([], 40, 0))) == [(0, 39)]
    assert list(restore_stream([], 0, 0)) == []


def test_restore_stream_refuses_overlapping_batches() -> None:
    with pytest.raises(AdminError, match="overlap"):
        list(restore_stream([data_batch(0, 3), data_batch(2, 3)], 0, 0))


# -- runs and gaps -------------------------------------------------------------------------


def test_next_range_start_continues_or_records_the_retention_gap() -> None:
    assert next_range_start(None, 0) == (0, None)
    assert next_range_start(None, 30) == (30, None)  # full copy from the log start
    assert next_range_start(100, 20) == (100, None)
    assert next_range_start(100, 100) == (100, None)
    assert next_range_start(100, 150) == (150, (100, 150))


def r(start: int, end: int, gap: tuple[int, int] | None = None) -> Range:
    return Range(start, end, start, f"f{start}", gap=gap)


def test_contiguous_ranges_keeps_the_newest_unbroken_run() -> None:
    plan = contiguous_ranges([r(0, 10), r(10, 25), r(25, 25)])
    assert (plan.start, plan.end, plan.dropped_gap) == (0, 25, None)
    assert len(plan.ranges) == 3
    plan = contiguous_ranges([r(0, 10), r(10, 25), r(40, 60, gap=(25, 40)), r(60, 70)])
    assert (plan.start, plan.end, plan.dropped_gap) == (40, 70, (25, 40))
    assert [x.start for x in plan.ranges] == [40, 60]


def run(run_id: str, topics: dict[str, dict[str, object]]) -> dict[str, object]:
    return {"run": run_id, "time": "t", "kind": "full", "topics": topics, "notes": []}


def test_manifest_round_trip_latest_ranges_and_recreated_topics(tmp_path: Path) -> None:
    manifest = Manifest.new(tmp_path, "cluster-1")
    manifest.add_run(
        run(
            "r1",
            {
                "a": {"topic_id": "A1", "fresh": True, "partitions": {"0": r(0, 10).as_json()}},
                "b": {"topic_id": "B1", "fresh": True, "partitions": {"0": r(0, 5).as_json()}},
            },
        )
    )
    manifest.add_run(
        run(
            "r2",
            {
                "a": {"topic_id": "A1", "fresh": False, "partitions": {"0": r(10, 20).as_json()}},
                # b was deleted and created again: copied from its start, the old runs no longer
                # belong to it
                "b": {"topic_id": "B2", "fresh": True, "partitions": {"0": r(0, 3).as_json()}},
            },
        )
    )
    manifest.save()
    loaded = Manifest.load(tmp_path)
    assert loaded.cluster_id == "cluster-1" and [x["run"] for x in loaded.runs] == ["r1", "r2"]
    latest = loaded.latest_ranges()
    assert latest[("a", 0)] == ("A1", r(10, 20)) and latest[("b", 0)] == ("B2", r(0, 3))
    assert loaded.topic_ids() == {"a": "A1", "b": "B2"}
    assert loaded.partition_ranges("a") == {0: [r(0, 10), r(10, 20)]}
    assert loaded.partition_ranges("b") == {0: [r(0, 3)]}


def test_runs_missing_from_the_manifest_are_strays(tmp_path: Path) -> None:
    manifest = Manifest.new(tmp_path, None)
    manifest.add_run(run("r1", {}))
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r2").mkdir()
    assert [p.name for p in manifest.stray_runs()] == ["r2"]


def test_manifest_load_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(AdminError, match="does not exist"):
        Manifest.load(tmp_path / "nowhere")
    with pytest.raises(AdminError, match="not a raftka backup"):
        Manifest.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 99, "runs": []}))
    with pytest.raises(AdminError, match="format 99"):
        Manifest.load(tmp_path)


# -- command line --------------------------------------------------------------------------


def test_backup_and_restore_arguments(tmp_path: Path) -> None:
    args = _parser().parse_args(["backup", str(tmp_path / "new"), "--topics", "a, b"])
    assert (args.directory, args.topics, args.full) == (tmp_path / "new", ["a", "b"], False)
    Manifest.new(tmp_path, None).save()
    args = _parser().parse_args(["restore", str(tmp_path), "--replication-factor", "1"])
    assert (args.directory, args.replication_factor, args.topics) == (tmp_path, 1, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["restore", "{tmp}/nowhere"], "does not exist"),
        (["restore", "{tmp}"], "is not a raftka backup"),
        (["restore", "{tmp}/file"], "does not exist"),
        (["backup", "{tmp}/file"], "is not a directory"),
        (["backup", "{tmp}", "--topics", ","], "expected TOPIC"),
        (["restore", "{tmp}/backup", "--replication-factor", "0"], "at least 1"),
    ],
)
def test_bad_backup_and_restore_arguments_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "file").write_text("")
    Manifest.new(tmp_path / "backup", None).save()
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args([a.format(tmp=tmp_path) for a in argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# -- restore of one partition against the restore-mode contract ---------------------------


class RestoreModeLog:
    """A partition in restore mode as the broker contract states it: batches are appended at
    their own base offset, which must be the log end; DeleteRecords moves the log start."""

    def __init__(self, lose_answer_of_append: int | None = None) -> None:
        self.batches: list[Batch] = []
        self.log_start = 0
        self.appends = 0
        self.lose_answer_of_append = lose_answer_of_append

    def log_end(self, topic: str, partition: int) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    def append(self, topic: str, partition: int, batches: list[Batch]) -> None:
        end = self.log_end(topic, partition)
        for batch in batches:
            assert batch.base_offset == end, f"batch starts at {batch.base_offset}, log ends {end}"
            assert not batch.is_control or control_type(batch) in (0, 1, 2)
            end = batch.last_offset + 1
        self.batches += batches
        self.appends += 1
        if self.appends == self.lose_answer_of_append:
            raise LeaderUnavailable("gave up (the answer was lost, the write landed)")

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        assert offset <= self.log_end(topic, partition)
        self.log_start = offset


class NoProgress:
    def update(self, n: int) -> None:
        pass


def backup_dir(tmp_path: Path, runs: list[list[Batch]], start: int) -> tuple[Manifest, Range]:
    ranges = []
    for i, batches in enumerate(runs):
        path = tmp_path / f"run{i}.batches"
        path.write_bytes(b"".join(b.raw for b in batches))
        first = start if i == 0 else ranges[-1].end
        ranges.append(Range(first, batches[-1].last_offset + 1, batches[0].base_offset, path.name))
    return Manifest.new(tmp_path, None), ranges


@pytest.mark.parametrize("lose_answer_of_append", [None, 2])
def test_restore_partition_appends_at_the_backup_offsets_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lose_answer_of_append: int | None
) -> None:
    monkeypatch.setattr(restore, "PRODUCE_BYTES", 200)  # several requests
    monkeypatch.setattr(wire, "RETRY_PAUSE_S", 0)
    runs = [
        [data_batch(3, 2), control(5, 6, CONTROL_KRAFT_VOTERS), data_batch(7, 3)],
        [data_batch(10, 4), data_batch(16, 1)],  # offsets 14, 15: gone to compaction
    ]
    manifest, ranges = backup_dir(tmp_path, runs, start=4)
    plan = contiguous_ranges(ranges)
    log = RestoreModeLog(lose_answer_of_append)
    restore.restore_partition(manifest, log, "t", 0, plan, NoProgress())
    assert spans(log.batches) == [(0, 2), (3, 4), (5, 6), (7, 9), (10, 13), (14, 15), (16, 16)]
    assert (log.log_start, log.log_end("t", 0)) == (4, 17) == (plan.start, plan.end)
    originals = {b.base_offset: b.raw for run in runs for b in run if not b.is_control}
    assert [b.raw for b in log.batches if b.base_offset in originals] == list(originals.values())

    # Run again (an interrupted restore re-run): nothing is appended twice.
    restore.restore_partition(manifest, log, "t", 0, plan, NoProgress())
    assert log.log_end("t", 0) == 17 and len(log.batches) == 7


def test_restore_plan_takes_topics_from_every_run_but_not_deleted_ones(tmp_path: Path) -> None:
    manifest = Manifest.new(tmp_path, None)
    layout = {
        "r1": ["a", "b", "c"],
        "r2": ["a"],  # a run with --topics a: b and c keep their first run
        "r3": ["a", "b"],  # c deleted in between
    }
    ends = {"a": 0, "b": 0, "c": 0}
    for run_id, names in layout.items():
        starts = dict(ends)
        ends.update({n: ends[n] + 10 for n in names})
        manifest.add_run(
            {
                **run(
                    run_id,
                    {
                        n: {"topic_id": n, "fresh": run_id == "r1", "partitions": {
                            "0": r(starts[n], ends[n]).as_json()
                        }}
                        for n in names
                    },
                ),
                "deleted_topics": ["c"] if run_id == "r3" else [],
            }
        )  # fmt: skip
        topics_doc = [
            {"name": n, "partitions": 1, "replication_factor": 3, "configs": {"x": run_id}}
            for n in names
        ]
        (tmp_path / "runs" / run_id).mkdir(parents=True)
        (tmp_path / "runs" / run_id / "topics.json").write_text(json.dumps(topics_doc))
        (tmp_path / "runs" / run_id / "groups.json").write_text(json.dumps({"g": [run_id]}))
    plans, groups = restore.plan_restore(manifest, None)
    assert [(p.name, p.configs["x"]) for p in plans] == [("a", "r3"), ("b", "r3")]
    assert [(p.plans[0].start, p.plans[0].end) for p in plans] == [(0, 30), (0, 20)]
    assert groups == {"g": ["r3"]}
    with pytest.raises(AdminError, match="not in the backup: c"):
        restore.plan_restore(manifest, ["a", "c"])
