"""Cluster metadata: records, batches, the image, validation, placement and snapshots."""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.cluster import (
    AlterTopicConfigs,
    BrokerRegistered,
    ConfigsChanged,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    MetadataImage,
    MetadataRecordError,
    PartitionsAdded,
    PlacementError,
    RegisterBroker,
    TopicCreated,
    TopicDeleted,
    UnregisterBroker,
    decode_metadata_batch,
    decode_metadata_batch_with_offsets,
    encode_batch,
    iter_log_records,
    place_replicas,
)
from raftka.broker.cluster.control.configs import validate_alter_configs
from raftka.broker.cluster.control.topics import (
    plan_create_topic,
    validate_create_partitions,
    validate_create_topic,
    validate_delete_topic,
)
from raftka.broker.cluster.records import decode_record
from raftka.broker.cluster.snapshot import SnapshotStore, load_snapshot, save_snapshot
from raftka.broker.cluster.validation import TopicError
from raftka.protocol.batch_builder import build_batch
from raftka.protocol.records import validate_produce_records

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")
TID2 = uuid.UUID("00000000-0000-0000-0000-000000000002")

ALL_RECORDS = [
    RegisterBroker(1, "127.0.0.1", 9092, "host-a", "inc-1"),
    RegisterBroker(2, "127.0.0.1", 9093, None, "inc-2"),
    UnregisterBroker(2),
    CreateTopic("t", TID, [[1, 2, 3], [2, 3, 1]], {"retention.ms": "1000"}),
    DeleteTopic(TID),
    AlterTopicConfigs(TID, {"cleanup.policy": "compact"}),
    CreatePartitions(TID, [[3, 1, 2]]),
]


# -- records -------------------------------------------------------------------------------


@pytest.mark.parametrize("record", ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_record_round_trip(record: object) -> None:
    cls = type(record)
    raw = record.to_bytes()  # type: ignore[attr-defined]
    assert json.loads(raw)["version"] == 1
    assert cls.from_bytes(raw) == record  # type: ignore[attr-defined]
    assert decode_record(cls.__name__.encode(), raw) == record


def test_lists_become_tuples() -> None:
    record = CreateTopic("t", str(TID), [[1, 2]], {})  # type: ignore[arg-type]
    assert record.topic_id == TID
    assert record.replicas == ((1, 2),)


def test_unknown_type_and_version_are_refused() -> None:
    with pytest.raises(MetadataRecordError, match="unknown metadata record type 'Frobnicate'"):
        decode_record(b"Frobnicate", b"{}")
    raw = json.loads(DeleteTopic(TID).to_bytes())
    raw["version"] = 99
    with pytest.raises(MetadataRecordError, match="version 99 is newer"):
        DeleteTopic.from_bytes(json.dumps(raw).encode())
    with pytest.raises(MetadataRecordError, match="lacks field 'topic_id'"):
        DeleteTopic.from_bytes(b'{"version": 1}')
    with pytest.raises(MetadataRecordError, match="not JSON"):
        DeleteTopic.from_bytes(b"\xff")
    with pytest.raises(MetadataRecordError, match="bad DeleteTopic"):
        DeleteTopic.from_bytes(b'{"version": 1, "topic_id": "nope"}')


def test_batch_round_trip_is_a_valid_kafka_batch() -> None:
    batch = encode_batch(ALL_RECORDS, timestamp_ms=1_700_000_000_000, base_offset=40)
    [header] = validate_produce_records(batch, 1 << 20)
    assert header.base_offset == 40
    assert decode_metadata_batch(batch) == ALL_RECORDS
    offsets = [offset for offset, _ in decode_metadata_batch_with_offsets(batch)]
    assert offsets == list(range(40, 40 + len(ALL_RECORDS)))


def test_batch_keys_are_type_names() -> None:
    from raftka.protocol.batch_builder import decode_batch as decode_kafka

    batch = encode_batch([DeleteTopic(TID), UnregisterBroker(3)])
    assert [r.key for r in decode_kafka(batch)] == [b"DeleteTopic", b"UnregisterBroker"]


def test_bad_batches() -> None:
    batch = bytearray(encode_batch([DeleteTopic(TID)]))
    batch[-1] ^= 0xFF
    with pytest.raises(MetadataRecordError, match="CRC"):
        decode_metadata_batch(bytes(batch))
    with pytest.raises(MetadataRecordError, match="unknown metadata record type"):
        decode_metadata_batch(build_batch([(b"Nope", b"{}")], 0))
    with pytest.raises(ValueError):
        encode_batch([])


def test_iter_log_records_skips_control_batches() -> None:
    first = encode_batch([RegisterBroker(1, "h", 1, None, "i")], base_offset=0)
    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"")], 0, base_offset=1))
    control[21:23] = (0x20).to_bytes(2, "big")  # control flag; CRC is not checked here
    last = encode_batch([DeleteTopic(TID)], base_offset=2)
    log = first + bytes(control) + last
    assert [offset for offset, _ in iter_log_records(log)] == [0, 2]


# -- image ---------------------------------------------------------------------------------


def _image(*brokers: tuple[int, str | None]) -> MetadataImage:
    image = MetadataImage()
    for offset, (node_id, rack) in enumerate(brokers):
        image.apply(RegisterBroker(node_id, "127.0.0.1", 9091 + node_id, rack, "i"), offset)
    return image


def test_image_apply_sequence() -> None:
    image = MetadataImage()
    changes = image.apply(RegisterBroker(1, "h", 9092, "r1", "a"), 0)
    assert changes == [BrokerRegistered(image.brokers[1], None)]
    assert image.apply(RegisterBroker(1, "h", 9092, "r1", "a"), 1) == []  # same registration
    changes = image.apply(RegisterBroker(1, "h", 9092, "r1", "b"), 2)
    assert isinstance(changes[0], BrokerRegistered) and changes[0].previous is not None

    changes = image.apply(CreateTopic("t", TID, [[1]], {"retention.ms": "5"}), 3)
    assert changes == [TopicCreated("t", TID, ((1,),), {"retention.ms": "5"})]
    assert image.topics["t"] is image.topics_by_id[TID]

    changes = image.apply(AlterTopicConfigs(TID, {"segment.ms": "9"}), 4)
    assert changes == [ConfigsChanged("t", TID, {"segment.ms": "9"})]
    assert image.topics["t"].configs == {"segment.ms": "9"}

    changes = image.apply(CreatePartitions(TID, [[1], [1]]), 5)
    assert changes == [PartitionsAdded("t", TID, 1, ((1,), (1,)))]
    assert image.topics["t"].num_partitions == 3

    # Re-applying an offset at or below applied_offset changes nothing.
    assert image.apply(CreatePartitions(TID, [[1]]), 5) == []
    assert image.apply(DeleteTopic(TID), 2) == []
    assert image.topics["t"].num_partitions == 3
    assert image.applied_offset == 5

    changes = image.apply(DeleteTopic(TID), 6)
    assert changes == [TopicDeleted("t", TID, ((1,), (1,), (1,)))]
    assert image.topics == {} and image.topics_by_id == {}
    assert image.applied_offset == 6


def test_records_that_do_not_fit_are_skipped() -> None:
    image = _image((1, None))
    image.apply(CreateTopic("t", TID, [[1]], {}), 10)
    assert image.apply(CreateTopic("t", TID2, [[1]], {}), 11) == []
    assert image.apply(DeleteTopic(TID2), 12) == []
    assert image.apply(AlterTopicConfigs(TID2, {}), 13) == []
    assert image.apply(CreatePartitions(TID2, [[1]]), 14) == []
    assert image.apply(UnregisterBroker(7), 15) == []
    assert image.applied_offset == 15
    assert image.topics["t"].topic_id == TID


def test_apply_a_decoded_log_gives_the_same_image_everywhere() -> None:
    records = [
        RegisterBroker(1, "h", 1, None, "a"),
        RegisterBroker(2, "h", 2, None, "a"),
        CreateTopic("t", TID, [[1, 2]], {}),
        CreatePartitions(TID, [[2, 1]]),
    ]
    log = encode_batch(records[:2], base_offset=0) + encode_batch(records[2:], base_offset=2)
    a, b = MetadataImage(), MetadataImage()
    for offset, record in iter_log_records(log):
        a.apply(record, offset)
        b.apply(record, offset)
        b.apply(record, offset)
    assert a == b
    assert a.leader_counts() == {1: 1, 2: 1}
    assert a.partitions_of(2) == [("t", 0), ("t", 1)]


# -- validation ----------------------------------------------------------------------------


def _error(fn: object, *args: object, **kwargs: object) -> TopicError:
    with pytest.raises(TopicError) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    return info.value


def test_validate_create_topic_errors() -> None:
    image = _image((1, None), (2, None))
    image.apply(CreateTopic("taken", TID, [[1]], {}), 10)

    err = _error(validate_create_topic, image, "taken", 1, 1)
    assert (err.error_code, err.message) == (
        ErrorCode.topic_already_exists,
        "Topic 'taken' already exists.",
    )
    err = _error(validate_create_topic, image, "bad name!", 1, 1)
    assert err.error_code == ErrorCode.invalid_topic_exception
    assert "contains a character other than" in err.message
    err = _error(validate_create_topic, image, "", 1, 1)
    assert err.error_code == ErrorCode.invalid_topic_exception
    image.apply(CreateTopic("a.b", TID2, [[1]], {}), 11)
    err = _error(validate_create_topic, image, "a_b", 1, 1)
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_topic_exception,
        "Topic 'a_b' collides with existing topic: a.b",
    )

    err = _error(validate_create_topic, image, "t", 0, 1)
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_partitions,
        "Number of partitions was set to an invalid non-positive value.",
    )
    err = _error(validate_create_topic, image, "t", -2, 1)
    assert err.error_code == ErrorCode.invalid_partitions

    err = _error(validate_create_topic, image, "t", 1, 0)
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_replication_factor,
        "Replication factor must be larger than 0, or -1 to use the default value.",
    )
    err = _error(validate_create_topic, image, "t", 1, 3)
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered.",
    )
    # Only live brokers count.
    err = _error(validate_create_topic, image, "t", 1, 2, live_brokers=[1])
    assert err.error_code == ErrorCode.invalid_replication_factor
    assert "only 1 broker(s)" in err.message
    err = _error(validate_create_topic, image, "t", -1, -1, default_replication_factor=3)
    assert err.error_code == ErrorCode.invalid_replication_factor

    err = _error(validate_create_topic, image, "t", 1, 1, configs={"no.such": "1"})
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_config,
        "Unknown topic config name: no.such",
    )
    err = _error(validate_create_topic, image, "t", 1, 1, configs={"retention.ms": "x"})
    assert err.error_code == ErrorCode.invalid_config
    err = _error(validate_create_topic, image, "t", 1, 1, configs={"retention.ms": None})
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_config,
        "Null value not supported for topic configs: retention.ms",
    )


def test_validate_manual_assignments() -> None:
    image = _image((1, None), (2, None))
    v = functools.partial(validate_create_topic, image)
    assert v("t", -1, -1, [(0, [1, 2]), (1, [2, 1])]) == [[1, 2], [2, 1]]
    cases = [
        ([(0, [])], "The manual partition assignment includes an empty replica list."),
        (
            [(0, [1, 3])],
            "The manual partition assignment includes broker 3, but no such broker is registered.",
        ),
        ([(0, [2, 2])], "The manual partition assignment includes the broker 2 more than once."),
        (
            [(0, [1, 2]), (1, [1])],
            "The manual partition assignment includes a partition with 1 replica(s), but this "
            "is not consistent with previous partitions, which have 2 replica(s).",
        ),
        ([(0, [1]), (0, [2])], "Found multiple manual partition assignments for partition 0"),
        ([(0, [1]), (2, [2])], "partitions should be a consecutive 0-based integer sequence"),
    ]
    for assignments, message in cases:
        err = _error(v, "t", -1, -1, assignments)
        assert (err.error_code, err.message) == (ErrorCode.invalid_replica_assignment, message)
    err = _error(v, "t", -1, -1, [(0, [2])], live_brokers=[1])
    assert err.message == (
        "All brokers specified in the manual partition assignment for partition 0 are fenced "
        "or in controlled shutdown."
    )
    err = _error(v, "t", -1, 2, [(0, [1])])
    assert err.error_code == ErrorCode.invalid_request
    err = _error(v, "t", 1, -1, [(0, [1])])
    assert err.error_code == ErrorCode.invalid_request


def test_plan_create_topic_places_and_keeps_configs() -> None:
    image = _image((1, None), (2, None), (3, None))
    record = plan_create_topic(image, "t", TID, 3, 2, configs={"retention.ms": "10"})
    assert record == CreateTopic("t", TID, [[1, 2], [2, 3], [3, 1]], {"retention.ms": "10"})
    assert validate_create_topic(image, "u", -1, -1, default_num_partitions=2) == [[1], [2]]


def test_validate_create_partitions_delete_and_alter() -> None:
    image = _image((1, None), (2, None), (3, None))
    image.apply(CreateTopic("t", TID, [[1, 2], [2, 3]], {}), 10)

    record = validate_create_partitions(image, "t", 4)
    assert record.topic_id == TID
    assert len(record.new_replicas) == 2
    assert all(len(set(r)) == 2 for r in record.new_replicas)
    assert validate_create_partitions(image, "t", 3, [[3, 1]]).new_replicas == ((3, 1),)

    err = _error(validate_create_partitions, image, "t", 2)
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_partitions,
        "Topic already has 2 partition(s).",
    )
    err = _error(validate_create_partitions, image, "t", 1)
    assert err.message == "The topic t currently has 2 partition(s); 1 would not be an increase."
    err = _error(validate_create_partitions, image, "t", 4, [[1, 2]])
    assert (err.error_code, err.message) == (
        ErrorCode.invalid_replica_assignment,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
    )
    err = _error(validate_create_partitions, image, "t", 3, [[1]])
    assert err.error_code == ErrorCode.invalid_replica_assignment
    err = _error(validate_create_partitions, image, "nope", 3)
    assert err.error_code == ErrorCode.unknown_topic_or_partition

    assert validate_delete_topic(image, "t") == DeleteTopic(TID)
    assert _error(validate_delete_topic, image, "nope").error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert validate_alter_configs(image, "t", {"retention.ms": "7"}) == AlterTopicConfigs(
        TID, {"retention.ms": "7"}
    )
    err = _error(validate_alter_configs, image, "t", {"retention.ms": "soon"})
    assert err.error_code == ErrorCode.invalid_config


# -- placement -----------------------------------------------------------------------------


def _leaders(assignment: list[list[int]]) -> Counter[int]:
    return Counter(replicas[0] for replicas in assignment)


def test_placement_spreads_leaders_and_replicas() -> None:
    brokers = [(1, None), (2, None), (3, None)]
    assignment = place_replicas(6, 3, brokers, {}, None)
    assert len(assignment) == 6
    assert _leaders(assignment) == {1: 2, 2: 2, 3: 2}
    assert all(sorted(r) == [1, 2, 3] for r in assignment)
    # Followers are spread too: each broker is second replica twice.
    assert Counter(r[1] for r in assignment) == {1: 2, 2: 2, 3: 2}


def test_placement_rack_aware() -> None:
    brokers = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]
    racks = dict(brokers)
    for rf in (2, 3):
        assignment = place_replicas(12, rf, brokers, {}, None)
        for replicas in assignment:
            assert len(set(replicas)) == rf
            assert len({racks[b] for b in replicas}) == rf
        assert _leaders(assignment) == dict.fromkeys(range(1, 7), 2)
    # More replicas than racks: every rack is used, brokers still distinct.
    two_racks = [(1, "a"), (2, "a"), (3, "b"), (4, "b")]
    for replicas in place_replicas(8, 3, two_racks, {}, None):
        assert len(set(replicas)) == 3
        assert {dict(two_racks)[b] for b in replicas} == {"a", "b"}


def test_placement_spreads_leaders_across_topics() -> None:
    image = _image((1, None), (2, None), (3, None))
    first = plan_create_topic(image, "a", TID, 2, 1)
    image.apply(first, 10)
    second = plan_create_topic(image, "b", TID2, 1, 1)
    assert {first.replicas[0][0], first.replicas[1][0], second.replicas[0][0]} == {1, 2, 3}
    # Directly: the least-loaded broker leads first.
    assert place_replicas(3, 1, [(1, None), (2, None), (3, None)], {1: 5, 2: 0, 3: 1}) == [
        [2],
        [3],
        [1],
    ]


def test_placement_is_deterministic_and_start_overrides() -> None:
    brokers = [(3, "x"), (1, "y"), (2, "x"), (4, "y")]
    runs = {str(place_replicas(8, 2, brokers, {1: 1}, None)) for _ in range(5)}
    assert len(runs) == 1
    assert place_replicas(8, 2, list(reversed(brokers)), {1: 1}) == place_replicas(
        8, 2, brokers, {1: 1}
    )
    assert place_replicas(2, 1, [(1, None), (2, None)], {}, start=1) == [[2], [1]]


def test_placement_errors() -> None:
    with pytest.raises(PlacementError, match="only 2 broker"):
        place_replicas(1, 3, [(1, None), (2, None)], {})
    with pytest.raises(PlacementError):
        place_replicas(1, 0, [(1, None)], {})
    assert place_replicas(0, 1, [(1, None)], {}) == []


# -- snapshots -----------------------------------------------------------------------------


def test_snapshot_round_trip(tmp_path: Path) -> None:
    assert load_snapshot(tmp_path) == MetadataImage()
    assert not (tmp_path / "cluster-metadata.lmdb").exists()

    image = _image((1, "r1"), (2, None))
    image.apply(CreateTopic("t", TID, [[1, 2], [2, 1]], {"retention.ms": "5"}), 5)
    save_snapshot(tmp_path, image)
    loaded = load_snapshot(tmp_path)
    assert loaded == image
    assert loaded.applied_offset == 5
    assert loaded.topics["t"] is loaded.topics_by_id[TID]
    assert loaded.brokers[1].rack == "r1"
    # Replay after the snapshot: old offsets are no-ops, new ones apply.
    assert loaded.apply(CreateTopic("t", TID, [[1]], {}), 5) == []
    assert loaded.apply(DeleteTopic(TID), 6)

    with SnapshotStore(tmp_path) as store:
        store.save(loaded)
        assert store.load() == loaded
    assert load_snapshot(tmp_path).topics == {}


def test_the_metadata_logs_name_is_refused_and_an_old_record_of_it_skipped() -> None:
    image = MetadataImage()
    image.apply(RegisterBroker(1, "h", 9092, None, "a"), 0)
    with pytest.raises(TopicError) as refused:
        plan_create_topic(image, "__cluster_metadata", uuid.uuid4(), 1, 1)
    assert refused.value.error_code == ErrorCode.invalid_request
    assert "prohibited" in refused.value.message
    # A record of it written before the refusal existed is skipped, not hosted: hosting it
    # would collide with the metadata Raft group and stop the broker on every start.
    assert image.apply(CreateTopic("__cluster_metadata", uuid.uuid4(), [[1]], {}), 1) == []
    assert "__cluster_metadata" not in image.topics
