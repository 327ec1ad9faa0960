"""The controller of a one-broker cluster: typed commands, their forwarded wire form, and a
metadata record that cannot be applied stopping the apply loop."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from kio.schema.errors import ErrorCode
from running_broker import run_with_broker

from raftka.broker.cluster.commands import (
    AlterConfigsCommand,
    CommandResult,
    CreatePartitionsCommand,
    CreateTopicCommand,
    DeleteTopicCommand,
)
from raftka.broker.cluster.controller import CONTROLLER_RPC, MetadataApplyError
from raftka.broker.cluster.records import CreateTopic, encode_batch
from raftka.broker.cluster.snapshot import load_snapshot
from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.server import Broker, Listener
from raftka.consensus.core import NotLeaderError

T = TypeVar("T")


def _broker(data_dir: Path) -> Broker:
    return Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), data_dir)


def _close(broker: Broker) -> None:
    broker.close()


def _run(broker: Broker, fn: Callable[[], Awaitable[T]]) -> T:
    """fn() with the broker registered and its Raft node and metadata applier running."""
    result: T = run_with_broker(broker, fn, register=True, timeout_s=20)
    return result


def test_commands_run_on_the_controller(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    controller = broker.controller

    async def scenario() -> list[CommandResult]:
        return [
            await controller.execute(CreateTopicCommand("t", 2, 1)),
            await controller.execute(CreateTopicCommand("t", 2, 1)),
            await controller.execute(AlterConfigsCommand("t", {"retention.ms": "5"})),
            await controller.execute(AlterConfigsCommand("t", {"retention.ms": "soon"})),
            await controller.execute(CreatePartitionsCommand("t", 3)),
            await controller.execute(CreateTopicCommand("v", 4, 1, validate_only=True)),
        ]

    try:
        created, again, altered, bad_config, grown, validated = _run(broker, scenario)
        topic = controller.image.topics["t"]
        assert created == CommandResult(
            topic_id=topic.topic_id, num_partitions=2, replication_factor=1
        )
        assert again == CommandResult.error(
            ErrorCode.topic_already_exists, "Topic 't' already exists."
        )
        assert altered == CommandResult()
        assert bad_config.error_code == ErrorCode.invalid_config
        assert grown == CommandResult()
        assert validated.error_code == ErrorCode.none and validated.num_partitions == 4
        assert topic.configs == {"retention.ms": "5"} and topic.num_partitions == 3
        assert "v" not in controller.image.topics
        local = broker.topics.get("t")
        assert local is not None and len(local.partitions) == 3
    finally:
        _close(broker)


def test_a_command_whose_controller_lost_its_role_is_run_again(tmp_path: Path) -> None:
    """A controller that loses its role while running a command answers NOT_CONTROLLER;
    the broker runs the command again at the next controller, as Kafka's brokers re-send a
    forwarded request so answered. (A decommission under load failed when the controller
    changed twice during its reassignments: "__consumer_offsets-34: NOT_CONTROLLER: this
    broker lost the controller role".)"""
    broker = _broker(tmp_path)
    controller = broker.controller
    handlers = controller._command_handlers
    create = handlers[CreateTopicCommand]
    calls = 0

    async def loses_the_role_once(command: Any) -> CommandResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise NotLeaderError(None)
        return await create(command)

    handlers[CreateTopicCommand] = loses_the_role_once

    async def scenario() -> CommandResult:
        return await controller.execute(CreateTopicCommand("t", 1, 1))

    try:
        created = _run(broker, scenario)
        assert calls == 2
        assert created.error_code == ErrorCode.none and "t" in controller.image.topics
    finally:
        _close(broker)


def test_a_topic_whose_creation_committed_before_the_role_was_lost_is_created(
    tmp_path: Path,
) -> None:
    """The controller appends a CreateTopics' records, they commit, and it loses the role
    before it answers: the command run again finds the topic it created and answers as its
    creation, not TOPIC_ALREADY_EXISTS. (A CreateTopics sent to a controller that had lost
    its quorum was answered "Topic ... already exists." once a new controller committed the
    former's entry.)"""
    broker = _broker(tmp_path)
    controller = broker.controller
    handlers = controller._command_handlers
    create = handlers[CreateTopicCommand]
    calls = 0

    async def loses_the_role_after_committing(command: Any) -> CommandResult:
        nonlocal calls
        calls += 1
        result = await create(command)
        if calls == 1:
            raise NotLeaderError(None)
        return result

    handlers[CreateTopicCommand] = loses_the_role_after_committing

    async def scenario() -> tuple[CommandResult, CommandResult]:
        created = await controller.execute(CreateTopicCommand("t", 2, 1))
        return created, await controller.execute(CreateTopicCommand("t", 2, 1))

    try:
        created, another = _run(broker, scenario)
        assert calls == 3
        topic = controller.image.topics["t"]
        assert created == CommandResult(
            topic_id=topic.topic_id, num_partitions=2, replication_factor=1
        )
        assert another == CommandResult.error(
            ErrorCode.topic_already_exists, "Topic 't' already exists."
        )
    finally:
        _close(broker)


def test_forwarded_commands_decode_and_answer_in_the_wire_form(tmp_path: Path) -> None:
    """What the controller answers a broker that forwards a command to it."""
    broker = _broker(tmp_path)
    controller = broker.controller

    async def scenario() -> list[tuple[int, bytes]]:
        forward = controller._serve_forward  # the handler the peer transport calls
        return [
            await forward(CONTROLLER_RPC, CreateTopicCommand("t", 1, 1).to_wire()),
            await forward(CONTROLLER_RPC, b'{"op": "delete_topic", "name": "t"}'),
            await forward(CONTROLLER_RPC, DeleteTopicCommand("t").to_wire()),
            await forward(CONTROLLER_RPC, b'{"op": "frobnicate", "name": "t"}'),
        ]

    try:
        answers = _run(broker, scenario)
        assert [status for status, _ in answers] == [0, 0, 0, 0]
        created, deleted, missing, unknown = (CommandResult.from_wire(raw) for _, raw in answers)
        assert created.error_code == ErrorCode.none and created.num_partitions == 1
        assert deleted == CommandResult(topic_id=created.topic_id)
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
        assert unknown.error_code == ErrorCode.invalid_request
        assert unknown.error_message is not None
        assert unknown.error_message.startswith("unknown controller operation")
    finally:
        _close(broker)


def test_a_record_that_cannot_be_applied_stops_the_apply_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A committed record this broker cannot apply (a topic config it does not know, as a
    newer controller might write) stops `apply_metadata` rather than leave the broker without
    the topic every other broker has."""
    broker = _broker(tmp_path)
    controller = broker.controller
    record = CreateTopic("t", uuid.uuid4(), ((broker.node_id,),), {"no.such.config": "1"})
    proposed_at: list[int] = []

    async def propose_and_wait() -> None:
        entry = controller.raft.propose(1, encode_batch([record]))
        proposed_at.append(entry.end_offset - 1)
        await trio.sleep_forever()

    caplog.set_level(logging.CRITICAL, logger="raftka.controller")
    try:
        with pytest.RaisesGroup(
            pytest.RaisesExc(
                MetadataApplyError,
                match="cannot apply metadata record CreateTopic",
                check=lambda exc: isinstance(exc.__cause__, ConfigError),
            )
        ):
            _run(broker, propose_and_wait)
        [offset] = proposed_at
        [logged] = [r for r in caplog.records if r.levelno == logging.CRITICAL]
        assert f"at offset {offset}" in logged.getMessage()
        assert "no.such.config" in logged.getMessage()
        assert "restart" in logged.getMessage()
        assert controller.image.applied_offset == offset  # the image took it ...
        assert broker.topics.get("t") is None  # ... this broker could not
        assert controller.diverged
    finally:
        _close(broker)
    # The image that is ahead of the broker is not saved: a restart applies the record again.
    assert load_snapshot(tmp_path).applied_offset < offset
