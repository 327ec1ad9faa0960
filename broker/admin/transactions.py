"""`raftka transactions list|describe`: transactional ids seen through the Kafka protocol,
printing what kafka-transactions.sh prints.

`list` asks every broker (ListTransactions: each answers for the ids it coordinates);
`describe` finds the id's coordinator (FindCoordinator, key type TRANSACTION) and asks it
(DescribeTransactions). confluent-kafka's AdminClient has neither, so both use the wire
client.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from typing import TextIO

from kio.schema.describe_transactions.v0 import response as describe_v0
from kio.static.primitive import i64

from raftka.broker.admin.common import AdminError, Document, Target, print_table
from raftka.broker.admin.wire import Entity, Fields, WireCluster, WireError

LIST_TRANSACTIONS_KEY = 66
DESCRIBE_TRANSACTIONS_KEY = 65
FIND_COORDINATOR_KEY = 10
KEY_TYPE_TRANSACTION = 1
# Errors a coordinator answers while it moves or loads: asked again until the timeout.
RETRIABLE = {"coordinator_load_in_progress", "not_coordinator", "coordinator_not_available"}


def _schema_variant(
    entity: type[Entity], changes: dict[str, tuple[object, dict[str, str]]]
) -> type[Entity]:
    """A copy of kio entity `entity` whose fields in `changes` get another (type, metadata)."""
    hints = typing.get_type_hints(entity)
    fields: list[tuple[str, object, dataclasses.Field[object]]] = []
    for f in dataclasses.fields(entity):
        kind, metadata = changes.get(f.name, (hints[f.name], dict(f.metadata)))
        fields.append((f.name, kind, dataclasses.field(metadata=metadata)))
    namespace = {
        name: getattr(entity, name)
        for name in ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")
    }
    return dataclasses.make_dataclass(
        entity.__name__, fields, namespace=namespace, frozen=True, slots=True, kw_only=True
    )


# DescribeTransactions v0 as Kafka sends it: TransactionStartTimeMs is -1 while no transaction
# is ongoing, which kio's datetime field refuses; read it as a plain int64.
_DescribeState = _schema_variant(
    describe_v0.TransactionState, {"transaction_start_time": (i64, {"kafka_type": "int64"})}
)
DescribeTransactionsResponseV0 = _schema_variant(
    describe_v0.DescribeTransactionsResponse,
    {"transaction_states": (tuple.__class_getitem__((_DescribeState, ...)), {})},
)


def _error_name(code: object) -> str:
    return str(getattr(code, "name", code))


def list_transactions(target: Target) -> Document:
    with WireCluster(target) as cluster:
        cluster.metadata()
        rows: dict[str, Document] = {}
        errors = []
        for node_id in sorted(cluster.brokers):
            try:
                response = cluster.to_node(node_id).request(
                    LIST_TRANSACTIONS_KEY, {"state_filters": (), "producer_id_filters": ()}
                )
            except WireError as exc:
                errors.append(f"broker {node_id}: {exc}")
                continue
            if response.error_code:
                errors.append(f"broker {node_id}: {_error_name(response.error_code).upper()}")
                continue
            for entry in response.transaction_states:
                rows[entry.transactional_id] = {
                    "transactional_id": entry.transactional_id,
                    "coordinator": node_id,
                    "producer_id": int(entry.producer_id),
                    "state": entry.transaction_state,
                }
    return {"transactions": [rows[t] for t in sorted(rows)], "errors": errors}


def print_list(document: Document, out: TextIO) -> None:
    print_table(
        ["TRANSACTIONAL_ID", "COORDINATOR", "PRODUCER_ID", "STATE"],
        [
            [t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]]
            for t in document["transactions"]
        ],
        out,
    )
    for error in document["errors"]:
        print(f"warning: {error}", file=out)


def _coordinator(cluster: WireCluster, transactional_id: str) -> int:
    connection = cluster.any_connection()
    version = connection.version_for(FIND_COORDINATOR_KEY)
    keys: Fields = (
        {"coordinator_keys": (transactional_id,)} if version >= 4 else {"key": transactional_id}
    )
    response = connection.request(
        FIND_COORDINATOR_KEY, {"key_type": KEY_TYPE_TRANSACTION, **keys}, version=version
    )
    found = response.coordinators[0] if hasattr(response, "coordinators") else response
    if found.error_code:
        raise AdminError(
            f"{_error_name(found.error_code).upper()}: no coordinator for transactional id "
            f"'{transactional_id}' yet"
        )
    return int(found.node_id)


def describe_transaction(target: Target, transactional_id: str) -> Document:
    deadline = time.monotonic() + target.timeout_s
    with WireCluster(target) as cluster:
        while True:
            cluster.metadata()
            try:
                node_id = _coordinator(cluster, transactional_id)
                response = cluster.to_node(node_id).request(
                    DESCRIBE_TRANSACTIONS_KEY,
                    {"transactional_ids": (transactional_id,)},
                    version=0,
                    response_cls=DescribeTransactionsResponseV0,
                )
                state = response.transaction_states[0]
                error = _error_name(state.error_code)
            except AdminError as exc:
                if time.monotonic() > deadline:
                    raise
                error, state = str(exc), None
            if state is not None and error not in RETRIABLE:
                break
            if time.monotonic() > deadline:
                raise AdminError(f"{error.upper()}: transactional id '{transactional_id}'")
            time.sleep(0.2)
    if error == "transactional_id_not_found":
        raise AdminError(
            f"TRANSACTIONAL_ID_NOT_FOUND: transactional id '{transactional_id}' does not exist"
        )
    if error != "none":
        raise AdminError(f"{error.upper()}: cannot describe '{transactional_id}'")
    start_ms = int(state.transaction_start_time)
    return {
        "transactional_id": transactional_id,
        "coordinator": node_id,
        "producer_id": int(state.producer_id),
        "producer_epoch": int(state.producer_epoch),
        "state": state.transaction_state,
        "timeout_ms": round(state.transaction_timeout.total_seconds() * 1000),
        "start_time_ms": start_ms if start_ms >= 0 else None,
        "partitions": [
            {"topic": topic.topic, "partition": int(p)}
            for topic in state.topics
            for p in topic.partitions
        ],
    }


def print_describe(document: Document, out: TextIO) -> None:
    start = document["start_time_ms"]
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in document["partitions"])
    print_table(
        [
            "COORDINATOR",
            "TRANSACTIONAL_ID",
            "PRODUCER_ID",
            "PRODUCER_EPOCH",
            "STATE",
            "TIMEOUT_MS",
            "START_TIME_MS",
            "PARTITIONS",
        ],
        [
            [
                document["coordinator"],
                document["transactional_id"],
                document["producer_id"],
                document["producer_epoch"],
                document["state"],
                document["timeout_ms"],
                "None" if start is None else start,
                partitions or "None",
            ]
        ],
        out,
    )
