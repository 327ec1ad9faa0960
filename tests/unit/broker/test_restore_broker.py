"""Broker side of `raftka restore`: the restore-mode topic config, restore validation of
produce records, entry kinds of restored control batches, the cluster's producer id floor
(command, record, image, snapshot, allocator) and a follower accepting an append whose
leader no longer knows the epoch of the batch before its log start."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import crc32c
import pytest
import trio

from raftka.broker.cluster.commands import Command, RaiseProducerIdFloorCommand
from raftka.broker.cluster.image import MetadataImage
from raftka.broker.cluster.records import (
    MetadataRecordError,
    RaiseProducerIdFloor,
    decode_metadata_batch,
    encode_batch,
)
from raftka.broker.cluster.snapshot import (
    image_from_dict,
    image_to_dict,
    load_snapshot,
    save_snapshot,
)
from raftka.broker.config import (
    RESTORE_IN_PROGRESS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    TopicConfig,
    validate_topic_configs,
)
from raftka.broker.producer_ids import (
    NODE_ID_SPACE,
    ProducerIdAllocator,
    first_sequence_at_or_above,
)
from raftka.broker.replication import (
    CONTROL_LEADER_CHANGE,
    control_batch,
    entry_kind_of,
)
from raftka.consensus import (
    Entry,
    EntryKind,
    MemoryRaftLog,
    Message,
    MessageType,
    RaftConfig,
    RaftCore,
)
from raftka.protocol.batch_builder import build_batch, control_record_type
from raftka.protocol.records import (
    CONTROL_FLAG_MASK,
    INVALID_RECORD,
    InvalidRecords,
    read_batch_header,
    validate_produce_records,
)

# -- the topic config -----------------------------------------------------------------------


def test_restore_config_accepts_true_and_false_only() -> None:
    assert validate_topic_configs({RESTORE_IN_PROGRESS: "true"}) == {RESTORE_IN_PROGRESS: "true"}
    assert validate_topic_configs({RESTORE_IN_PROGRESS: "false"}) == {RESTORE_IN_PROGRESS: "false"}
    with pytest.raises(ConfigError, match="raftka.restore.in.progress: must be one of true, false"):
        validate_topic_configs({RESTORE_IN_PROGRESS: "yes"})


def test_restore_config_defaults_to_false_with_no_broker_synonym() -> None:
    config = TopicConfig(BrokerConfig({}), {})
    assert config.get_str(RESTORE_IN_PROGRESS) == "false"
    assert config.source(RESTORE_IN_PROGRESS) is ConfigSource.DEFAULT_CONFIG
    assert config.synonyms(RESTORE_IN_PROGRESS) == []
    overridden = TopicConfig(BrokerConfig({}), {RESTORE_IN_PROGRESS: "true"})
    assert overridden.get_str(RESTORE_IN_PROGRESS) == "true"
    assert overridden.source(RESTORE_IN_PROGRESS) is ConfigSource.DYNAMIC_TOPIC_CONFIG


# -- restore validation of produce records ----------------------------------------------------


def _with_attributes(batch: bytes, set_bits: int, last_offset_delta: int | None = None) -> bytes:
    raw = bytearray(batch)
    attributes = struct.unpack_from(">h", raw, 21)[0] | set_bits
    struct.pack_into(">h", raw, 21, attributes)
    if last_offset_delta is not None:
        struct.pack_into(">i", raw, 23, last_offset_delta)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def _control(
    control_type: int, base_offset: int = 0, last_offset_delta: int | None = None
) -> bytes:
    batch = build_batch(
        [(struct.pack(">hh", 0, control_type), b"\0" * 6)], 1000, base_offset=base_offset
    )
    return _with_attributes(batch, CONTROL_FLAG_MASK, last_offset_delta)


def test_restore_validation_takes_several_batches_controls_and_spans() -> None:
    data = build_batch([(None, b"a"), (None, b"b")], 1000, base_offset=0)
    span = _control(CONTROL_LEADER_CHANGE, base_offset=2, last_offset_delta=997)
    headers = validate_produce_records(data + span, 1 << 20, produce_version=9, restore=True)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 1), (2, 999)]
    with pytest.raises(InvalidRecords, match="exactly one record batch"):
        validate_produce_records(data + data, 1 << 20, produce_version=9)
    with pytest.raises(InvalidRecords, match="clients may not write control batches"):
        validate_produce_records(span, 1 << 20, produce_version=9)


def test_restore_validation_refuses_a_batch_too_short_for_its_records() -> None:
    short = _with_attributes(build_batch([(None, b"a"), (None, b"b")], 1000), 0, 0)
    with pytest.raises(InvalidRecords, match="lastOffsetDelta 0 cannot hold recordsCount 2") as exc:
        validate_produce_records(short, 1 << 20, produce_version=9, restore=True)
    assert exc.value.error_code == INVALID_RECORD


def test_restore_validation_refuses_a_partial_trailing_batch() -> None:
    data = build_batch([(None, b"a")], 1000)
    with pytest.raises(InvalidRecords, match="truncated batch") as exc:
        validate_produce_records(data + data[:-2], 1 << 20, produce_version=9, restore=True)
    assert exc.value.error_code == 2  # CORRUPT_MESSAGE


# -- entry kinds of restored control batches ---------------------------------------------------


def test_only_a_batch_identical_to_a_no_op_is_a_noop_entry() -> None:
    noop = control_batch(EntryKind.NOOP, b"")
    assert entry_kind_of(read_batch_header(noop), noop) == (EntryKind.NOOP, b"")
    for control_type in (0, 1, CONTROL_LEADER_CHANGE):
        restored = _control(control_type)
        assert control_record_type(restored) == control_type
        assert entry_kind_of(read_batch_header(restored), restored) == (EntryKind.DATA, restored)
    span = _control(CONTROL_LEADER_CHANGE, last_offset_delta=999)
    assert entry_kind_of(read_batch_header(span), span) == (EntryKind.DATA, span)
    voters = control_batch(EntryKind.CONFIG, b"1,2,3")
    assert entry_kind_of(read_batch_header(voters), voters) == (EntryKind.CONFIG, b"1,2,3")
    assert control_record_type(build_batch([(None, b"a")], 1000)) is None  # no control key


# -- the producer id floor -----------------------------------------------------------------------


def test_raise_producer_id_floor_command_round_trips() -> None:
    command = RaiseProducerIdFloorCommand(floor=123456790)
    wire = command.to_wire()
    assert json.loads(wire) == {"op": "raise_producer_id_floor", "floor": 123456790}
    assert Command.from_wire(wire) == command
    with pytest.raises(ValueError, match="field 'floor' must be an integer"):
        Command.from_wire(b'{"op":"raise_producer_id_floor","floor":"7"}')


def test_raise_producer_id_floor_record_round_trips_and_rejects_bad_floors() -> None:
    record = RaiseProducerIdFloor(42)
    assert decode_metadata_batch(encode_batch([record])) == [record]
    with pytest.raises(MetadataRecordError, match="floor must be a non-negative integer"):
        RaiseProducerIdFloor.from_bytes(b'{"version":1,"floor":-1}')


def test_image_keeps_the_highest_floor_and_snapshots_it(tmp_path: Path) -> None:
    image = MetadataImage()
    assert image.producer_id_floor == 0
    assert image.apply(RaiseProducerIdFloor(500), 0) == []
    image.apply(RaiseProducerIdFloor(100), 1)  # a lower floor changes nothing
    assert (image.producer_id_floor, image.applied_offset) == (500, 1)
    save_snapshot(tmp_path, image)
    assert load_snapshot(tmp_path).producer_id_floor == 500
    older = image_to_dict(image)
    del older["producer_id_floor"]  # a snapshot written before the floor existed
    assert image_from_dict(older).producer_id_floor == 0


def test_first_sequence_at_or_above_the_floor() -> None:
    assert first_sequence_at_or_above(0, 1) == 0
    assert first_sequence_at_or_above(1, 1) == 0
    assert first_sequence_at_or_above(2, 1) == 1
    floor = 123456790
    sequence = first_sequence_at_or_above(floor, 3)
    assert sequence * NODE_ID_SPACE + 3 >= floor > (sequence - 1) * NODE_ID_SPACE + 3


def test_allocator_never_hands_out_an_id_below_the_floor(tmp_path: Path) -> None:
    floor = [0]

    async def take(allocator: ProducerIdAllocator, count: int) -> list[int]:
        return [await allocator.next_producer_id() for _ in range(count)]

    allocator = ProducerIdAllocator(
        tmp_path / "ids", node_id=2, block_size=10, floor=lambda: floor[0]
    )
    before = trio.run(take, allocator, 3)
    assert before == [2, NODE_ID_SPACE + 2, 2 * NODE_ID_SPACE + 2]
    floor[0] = 123456789 + 1  # raised in the middle of a block
    after = trio.run(take, allocator, 12)  # crosses into a new block
    assert min(after) >= floor[0]
    assert after == sorted(set(after)) and all(i % NODE_ID_SPACE == 2 for i in after)
    allocator.close()
    # Persisted: a restart (even one that has not yet learned the floor) continues above.
    floor[0] = 0
    again = ProducerIdAllocator(tmp_path / "ids", node_id=2, block_size=10, floor=lambda: floor[0])
    assert trio.run(take, again, 1)[0] > max(after)
    again.close()


def test_allocator_floor_inside_the_current_block(tmp_path: Path) -> None:
    floor = [0]

    async def take(allocator: ProducerIdAllocator, count: int) -> list[int]:
        return [await allocator.next_producer_id() for _ in range(count)]

    allocator = ProducerIdAllocator(
        tmp_path / "ids", node_id=0, block_size=100, floor=lambda: floor[0]
    )
    assert trio.run(take, allocator, 1) == [0]
    floor[0] = 5 * NODE_ID_SPACE  # sequence 5, still inside the reserved block [0, 100)
    assert trio.run(take, allocator, 2) == [5 * NODE_ID_SPACE, 6 * NODE_ID_SPACE]
    allocator.close()


# -- Raft: an append after the leader's log start passed the previous batch ------------------


def _follower() -> RaftCore:
    config = RaftConfig(node_id=2, group="g", voters=frozenset({1, 2, 3}))
    return RaftCore(config, MemoryRaftLog())


def _append(
    core: RaftCore, prev_offset: int, prev_epoch: int, entries: list[Entry], hw: int
) -> Message:
    core.step(
        Message(
            group="g",
            type=MessageType.APPEND,
            from_id=1,
            to=2,
            term=1,
            prev_offset=prev_offset,
            prev_epoch=prev_epoch,
            entries=tuple(entries),
            high_watermark=hw,
            at_leader_end=True,
        )
    )
    ready = core.ready()
    stable = core.log.stable
    assert isinstance(stable, MemoryRaftLog)
    if ready.truncate_to is not None:
        stable.truncate_to(ready.truncate_to)
    stable.append(ready.entries)
    core.advance(ready)
    (response,) = [m for m in ready.messages if m.type is MessageType.APPEND_RESPONSE]
    return response


def test_follower_takes_an_append_after_a_committed_batch_the_leader_deleted() -> None:
    """The leader's log start passed offset 999 (DeleteRecords to its log end), so it names
    epoch 0 for it; the follower's high watermark says that batch is committed, so the
    append matches."""
    follower = _follower()
    span = Entry(0, 999, 1, b"")
    assert _append(follower, -1, 0, [span], 0).match_end == 1000
    assert _append(follower, 999, 1, [], 1000).match_end == 1000  # the new high watermark
    response = _append(follower, 999, 0, [Entry(1000, 1001, 1, b"")], 1000)
    assert (response.reject, response.match_end) == (False, 1002)


def test_follower_still_checks_the_epoch_of_an_uncommitted_previous_batch() -> None:
    follower = _follower()
    _append(follower, -1, 0, [Entry(0, 999, 1, b"")], 0)
    response = _append(follower, 999, 0, [Entry(1000, 1000, 1, b"")], 0)
    assert response.reject
