"""Controller commands and results: their wire form, and what a broker sends today."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from raftka.broker.cluster.commands import (
    COMMAND_TYPES,
    AlterBrokerConfigsCommand,
    AlterClientQuotaCommand,
    AlterConfigsCommand,
    AlterGroupConfigsCommand,
    AlterScramCredentialsCommand,
    ChangeMetadataVotersCommand,
    Command,
    CommandDecodeError,
    CommandResult,
    CompleteReassignmentCommand,
    CreateAclsCommand,
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteAclsCommand,
    DeleteTopicCommand,
    RaiseProducerIdFloorCommand,
    ReassignPartitionCommand,
    RegisterBrokerCommand,
    UnregisterBrokerCommand,
)

TID = uuid.UUID("00000000-0000-0000-0000-000000000001")

COMMANDS: list[Command] = [
    CreateTopicCommand("t", 3, 2),
    CreateTopicCommand("t", 3, 2, topic_id=TID),
    CreateTopicCommand(
        "t",
        -1,
        -1,
        assignments=((0, (1, 2)), (1, (2, 1))),
        configs={"retention.ms": "5", "cleanup.policy": None},
        validate_only=True,
    ),
    DeleteTopicCommand("t"),
    AlterConfigsCommand("t", {"retention.ms": "7"}, validate_only=True),
    CreatePartitionsCommand("t", 4),
    CreatePartitionsCommand("t", 3, ((3, 1),), validate_only=True),
    RegisterBrokerCommand(1, "127.0.0.1", 9092, "rack-a", "inc"),
    RegisterBrokerCommand(2, "127.0.0.1", 9093, None, "inc"),
    RaiseProducerIdFloorCommand(123456790),
    AlterScramCredentialsCommand("alice", (1,), ((2, 4096, "c2FsdA==", "c3Q=", "c2s="),)),
    AlterScramCredentialsCommand("bob"),
    CreateAclsCommand(((2, "t", 3, "User:alice", "*", 3, 3),)),
    DeleteAclsCommand(((1, None, 1, "User:alice", None, 1, 1),)),
    AlterClientQuotaCommand(
        (("client-id", None), ("user", "alice")),
        (("producer_byte_rate", 1024.0), ("request_percentage", None)),
    ),
    ReassignPartitionCommand("t", 0, (2, 3, 4)),
    ReassignPartitionCommand("t", 1, None),
    CompleteReassignmentCommand("t", 0, (2, 3, 4)),
    AlterBrokerConfigsCommand("", {"leader.replication.throttled.rate": "1000"}),
    AlterBrokerConfigsCommand("2", {"leader.replication.throttled.rate": None}, True),
    AlterGroupConfigsCommand("g", {"share.auto.offset.reset": "earliest"}, True),
    RegisterBrokerCommand(4, "127.0.0.1", 9094, None, "inc", {}, ("127.0.0.1", 19094)),
    ChangeMetadataVotersCommand("add", 4),
    ChangeMetadataVotersCommand("remove", 1),
    UnregisterBrokerCommand(1),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_command_round_trip(command: Command) -> None:
    assert Command.from_wire(command.to_wire()) == command
    assert json.loads(command.to_wire())["op"] == command.OP


def test_every_command_type_is_registered_by_its_op() -> None:
    assert {type(c) for c in COMMANDS} == set(COMMAND_TYPES.values())
    assert all(COMMAND_TYPES[cls.OP] is cls for cls in COMMAND_TYPES.values())


# What handlers of the previous release sent: plain JSON objects, optional keys left out.
EARLIER_WIRE = [
    (
        {"op": "create_topic", "name": "a", "num_partitions": -1, "replication_factor": -1},
        CreateTopicCommand("a", -1, -1),
    ),
    (
        {
            "op": "create_topic",
            "name": "a",
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [[0, [1, 2]]],
            "configs": {"retention.ms": None},
            "validate_only": False,
        },
        CreateTopicCommand("a", -1, -1, ((0, (1, 2)),), {"retention.ms": None}),
    ),
    ({"op": "delete_topic", "name": "a"}, DeleteTopicCommand("a")),
    (
        {"op": "alter_configs", "name": "a", "configs": {}, "validate_only": True},
        AlterConfigsCommand("a", {}, validate_only=True),
    ),
    (
        {
            "op": "create_partitions",
            "name": "a",
            "count": 2,
            "assignments": None,
            "validate_only": False,
        },
        CreatePartitionsCommand("a", 2),
    ),
    (
        {
            "op": "register_broker",
            "node_id": 1,
            "host": "h",
            "port": 1,
            "rack": None,
            "incarnation_id": "x",
        },
        RegisterBrokerCommand(1, "h", 1, None, "x"),
    ),
]


@pytest.mark.parametrize("wire, command", EARLIER_WIRE, ids=lambda v: str(v)[:30])
def test_earlier_wire_form_decodes(wire: dict[str, object], command: Command) -> None:
    assert Command.from_wire(json.dumps(wire).encode()) == command


@pytest.mark.parametrize("wire, command", EARLIER_WIRE, ids=lambda v: str(v)[:30])
def test_wire_form_keeps_every_earlier_field(wire: dict[str, object], command: Command) -> None:
    """An earlier broker reads `command["field"]` for these: each must be there, same value."""
    sent = json.loads(command.to_wire())
    for name, value in wire.items():
        if value is not None:
            assert sent[name] == value, name


def test_a_created_topic_is_identified_once_per_request() -> None:
    """The id is chosen when the broker first sends the command, and kept by every resend
    (a validate-only request creates nothing, so it is not given one)."""
    command = CreateTopicCommand("t", 1, 1)
    sent = command.identified()
    assert sent.topic_id is not None and sent.identified() is sent
    assert Command.from_wire(sent.to_wire()) == sent
    assert CreateTopicCommand("t", 1, 1).identified().topic_id != sent.topic_id
    validate = CreateTopicCommand("t", 1, 1, validate_only=True)
    assert validate.identified() is validate
    delete = DeleteTopicCommand("t")
    assert delete.identified() is delete


def test_unknown_op_and_bad_fields_are_refused() -> None:
    with pytest.raises(CommandDecodeError, match="unknown controller operation .*'frobnicate'"):
        Command.from_wire(b'{"op": "frobnicate"}')
    with pytest.raises(CommandDecodeError, match="unknown controller operation"):
        Command.from_wire(b'{"name": "t"}')
    with pytest.raises(CommandDecodeError, match="field 'name' is missing"):
        Command.from_wire(b'{"op": "delete_topic"}')
    with pytest.raises(CommandDecodeError, match="field 'count' must be an integer"):
        Command.from_wire(b'{"op": "create_partitions", "name": "t", "count": "2"}')
    with pytest.raises(CommandDecodeError, match="field 'configs' is missing"):
        Command.from_wire(b'{"op": "alter_configs", "name": "t"}')
    with pytest.raises(CommandDecodeError, match="field 'configs' must be an object"):
        Command.from_wire(b'{"op": "alter_configs", "name": "t", "configs": {"a": 1}}')
    with pytest.raises(CommandDecodeError, match="field 'assignments'"):
        Command.from_wire(
            b'{"op": "create_topic", "name": "t", "num_partitions": -1, '
            b'"replication_factor": -1, "assignments": [[0, ["x"]]]}'
        )
    with pytest.raises(CommandDecodeError, match="field 'topic_id' must be a UUID"):
        Command.from_wire(
            b'{"op": "create_topic", "name": "t", "num_partitions": -1, '
            b'"replication_factor": -1, "topic_id": "x"}'
        )
    with pytest.raises(CommandDecodeError, match="not JSON"):
        Command.from_wire(b"\xff")
    with pytest.raises(CommandDecodeError, match="not a JSON object"):
        Command.from_wire(b"[1]")


RESULTS = [
    CommandResult(),
    CommandResult.error(ErrorCode.topic_already_exists, "Topic 't' already exists."),
    CommandResult(topic_id=TID, num_partitions=3, replication_factor=2),
    CommandResult(topic_id=TID),
]


@pytest.mark.parametrize("result", RESULTS)
def test_result_round_trip(result: CommandResult) -> None:
    assert CommandResult.from_wire(result.to_wire()) == result


def test_result_wire_form_is_the_earlier_one() -> None:
    created = CommandResult(topic_id=TID, num_partitions=3, replication_factor=2)
    assert json.loads(created.to_wire()) == {
        "error_code": 0,
        "error_message": None,
        "topic_id": str(TID),
        "num_partitions": 3,
        "replication_factor": 2,
    }
    earlier = b'{"error_code": 36, "error_message": "Topic \'t\' already exists."}'
    assert CommandResult.from_wire(earlier) == CommandResult.error(
        ErrorCode.topic_already_exists, "Topic 't' already exists."
    )
    with pytest.raises(CommandDecodeError, match="controller result"):
        CommandResult.from_wire(b'{"error_code": 0, "topic_id": "nope"}')


def test_metadata_image_imports_no_io() -> None:
    """The image, its records and validation are pure: no trio, lmdb, Raft or log."""
    # HYPOTHESIS_NO_PLUGINS: kio imports hypothesis when it is installed (tests), and
    # hypothesis would load trio's plugin; a broker install has no hypothesis.
    code = (
        "import sys, broker.cluster.image, broker.cluster.commands\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'trio', 'lmdb', 'consensus', 'log'})\n"
        "assert not loaded, loaded\n"
    )
    env = dict(os.environ, HYPOTHESIS_NO_PLUGINS="1")
    root = Path(__file__).resolve().parents[4]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env=env)
