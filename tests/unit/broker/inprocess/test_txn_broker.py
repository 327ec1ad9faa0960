"""The transaction coordinator as a broker wires it: its peer RPCs share the controller's
forward handler, next to the controller's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from kio.schema.errors import ErrorCode

from raftka.broker.config import BROKER_CONFIGS, BrokerConfig
from raftka.broker.server import Broker, Listener
from raftka.broker.txn import TXN_MARKERS_RPC, TXN_VERIFY_RPC, TransactionCoordinator


def _broker(data_dir: Path) -> Broker:
    return Broker(BrokerConfig({}, environ={}), Listener("127.0.0.1", 0), data_dir)


def _close(broker: Broker) -> None:
    broker.close()


def test_txn_rpcs_are_served_through_the_controllers_registry(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    forward = broker.controller._serve_forward  # the handler the peer transport calls

    async def scenario() -> list[tuple[int, bytes]]:
        return [
            await forward(TXN_VERIFY_RPC, json.dumps(["tx", 1, 0, "t", 0]).encode()),
            await forward(TXN_VERIFY_RPC, b"not json"),
            await forward(TXN_MARKERS_RPC, b"{}"),
            await forward("__nobody", b""),
        ]

    try:
        assert isinstance(broker.transactions, TransactionCoordinator)
        verified, garbled, bad_markers, unknown = trio.run(scenario)
        # This broker leads no __transaction_state partition: not the coordinator.
        assert verified == (0, str(int(ErrorCode.not_coordinator)).encode())
        assert garbled[0] == bad_markers[0] == unknown[0] == ErrorCode.invalid_request
        assert unknown[1] == b"unknown rpc __nobody"
        with pytest.raises(ValueError, match="already served"):
            broker.controller.register_rpc(TXN_VERIFY_RPC, broker.controller._serve_forward)
    finally:
        _close(broker)


def test_a_broker_that_fails_to_start_releases_its_data_directory(tmp_path: Path) -> None:
    bad = BrokerConfig({"metrics.listen": "no port here"}, environ={})
    with pytest.raises(ValueError, match="metrics.listen"):
        Broker(bad, Listener("127.0.0.1", 0), tmp_path)
    broker = _broker(tmp_path)  # the lock and the Raft store were released
    _close(broker)


def test_transaction_configs_read_at_start_are_static() -> None:
    transaction_keys = [k for k in BROKER_CONFIGS if k.startswith("transaction.")]
    assert "transaction.max.timeout.ms" in transaction_keys
    assert all(BROKER_CONFIGS[k].read_only for k in transaction_keys)
