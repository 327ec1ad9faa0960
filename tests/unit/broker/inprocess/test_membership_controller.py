"""The membership commands on the controller of a one-broker cluster: a registration with a
Raft address from a broker outside the quorum makes it an observer (a learner of the
metadata group), unregistering removes it, and the refusals of voter changes and
unregistration."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode
from running_broker import run_with_broker

from raftka.broker.cluster.commands import (
    ChangeMetadataVotersCommand,
    CommandResult,
    CreateTopicCommand,
    DeleteTopicCommand,
    RegisterBrokerCommand,
    UnregisterBrokerCommand,
)
from raftka.broker.config import BrokerConfig
from raftka.broker.server import Broker, Listener


def test_observers_join_and_leave_and_refusals(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), tmp_path)
    controller = broker.controller
    seen: dict[str, object] = {}

    async def scenario() -> list[CommandResult]:
        results = [
            await controller.execute(ChangeMetadataVotersCommand("add", 9)),
            await controller.execute(ChangeMetadataVotersCommand("add", 1)),
            await controller.execute(ChangeMetadataVotersCommand("remove", 1)),
            await controller.execute(UnregisterBrokerCommand(9)),
            await controller.execute(UnregisterBrokerCommand(1)),
            await controller.execute(
                RegisterBrokerCommand(5, "127.0.0.1", 9095, None, "i", {}, ("127.0.0.1", 19095))
            ),
        ]
        status = controller.raft.status()
        seen["after_register"] = (status.voters, status.learners)
        seen["peer"] = broker.transport.peer_address(5)
        seen["raft_address"] = controller.image.brokers[5].raft_address
        results.append(await controller.execute(ChangeMetadataVotersCommand("remove", 5)))
        results.append(await controller.execute(CreateTopicCommand("t", -1, -1, ((0, (5,)),))))
        results.append(await controller.execute(UnregisterBrokerCommand(5)))
        results.append(await controller.execute(DeleteTopicCommand("t")))
        results.append(await controller.execute(UnregisterBrokerCommand(5)))
        status = controller.raft.status()
        seen["after_unregister"] = (status.voters, status.learners, set(controller.image.brokers))
        return results

    try:
        results = run_with_broker(broker, scenario, register=True, timeout_s=30)
    finally:
        broker.close()
    codes = [(r.error_code, r.error_message) for r in results]
    assert codes[0][0] == ErrorCode.broker_id_not_registered
    assert codes[1][0] == ErrorCode.duplicate_voter
    assert codes[2][0] == ErrorCode.invalid_request and "last voter" in str(codes[2][1])
    assert codes[3][0] == ErrorCode.broker_id_not_registered
    assert codes[4][0] == ErrorCode.invalid_request and "votes in the metadata" in str(codes[4][1])
    assert codes[5][0] == ErrorCode.none
    assert seen["after_register"] == ({1}, {5})
    assert seen["peer"] == ("127.0.0.1", 19095)
    assert seen["raft_address"] == ("127.0.0.1", 19095)
    assert codes[6][0] == ErrorCode.voter_not_found
    assert codes[7][0] == ErrorCode.none
    assert codes[8][0] == ErrorCode.invalid_request
    assert "still hosts 1 partition replicas (t-0)" in str(codes[8][1])
    assert codes[9][0] == codes[10][0] == ErrorCode.none
    assert seen["after_unregister"] == ({1}, set(), {1})
