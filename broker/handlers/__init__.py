"""Kafka API handlers, one module per API family, and the table ApiVersions advertises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from raftka.broker.handlers import (
    acls,
    api_versions,
    client_quotas,
    configs,
    consumer_groups,
    elect_leaders,
    fetch,
    groups,
    list_offsets,
    metadata,
    produce,
    producer_ids,
    quorum,
    reassignments,
    sasl,
    scram_credentials,
    share,
    share_admin,
    topics_admin,
    txn,
    txn_markers,
)
from raftka.broker.services import RequestContext

# Request and response are kio entities of the request's version, which kio types as Any.
Handle = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    min_version: int
    max_version: int
    handle: Handle


# api key → handler; ApiVersions advertises exactly these ranges.
HANDLERS: Mapping[int, ApiHandler] = MappingProxyType(
    {
        0: ApiHandler(3, 9, produce.handle_produce),
        1: ApiHandler(4, 12, fetch.handle_fetch),
        2: ApiHandler(1, 7, list_offsets.handle_list_offsets),
        3: ApiHandler(0, 12, metadata.handle_metadata),
        8: ApiHandler(2, 9, groups.handle_offset_commit),
        9: ApiHandler(1, 9, groups.handle_offset_fetch),
        10: ApiHandler(0, 4, groups.handle_find_coordinator),
        11: ApiHandler(0, 9, groups.handle_join_group),
        12: ApiHandler(0, 4, groups.handle_heartbeat),
        13: ApiHandler(0, 5, groups.handle_leave_group),
        14: ApiHandler(0, 5, groups.handle_sync_group),
        15: ApiHandler(0, 5, groups.handle_describe_groups),
        16: ApiHandler(0, 5, groups.handle_list_groups),
        17: ApiHandler(0, 1, sasl.handle_sasl_handshake),
        18: ApiHandler(0, 3, api_versions.handle_api_versions),
        19: ApiHandler(2, 7, topics_admin.handle_create_topics),
        20: ApiHandler(1, 6, topics_admin.handle_delete_topics),
        21: ApiHandler(0, 2, topics_admin.handle_delete_records),
        22: ApiHandler(
            producer_ids.INIT_PRODUCER_ID_MIN_VERSION,
            producer_ids.INIT_PRODUCER_ID_MAX_VERSION,
            producer_ids.handle_init_producer_id,
        ),
        23: ApiHandler(2, 4, list_offsets.handle_offset_for_leader_epoch),
        24: ApiHandler(
            txn.ADD_PARTITIONS_MIN_VERSION,
            txn.ADD_PARTITIONS_MAX_VERSION,
            txn.handle_add_partitions_to_txn,
        ),
        25: ApiHandler(
            txn.ADD_OFFSETS_MIN_VERSION, txn.ADD_OFFSETS_MAX_VERSION, txn.handle_add_offsets_to_txn
        ),
        26: ApiHandler(txn.END_TXN_MIN_VERSION, txn.END_TXN_MAX_VERSION, txn.handle_end_txn),
        27: ApiHandler(1, 2, txn_markers.handle_write_txn_markers),
        28: ApiHandler(0, 3, groups.handle_txn_offset_commit),
        29: ApiHandler(1, 3, acls.handle_describe_acls),
        30: ApiHandler(1, 3, acls.handle_create_acls),
        31: ApiHandler(1, 3, acls.handle_delete_acls),
        32: ApiHandler(1, 4, configs.handle_describe_configs),
        33: ApiHandler(0, 2, configs.handle_alter_configs),
        37: ApiHandler(0, 3, topics_admin.handle_create_partitions),
        42: ApiHandler(0, 2, groups.handle_delete_groups),
        43: ApiHandler(0, 2, elect_leaders.handle_elect_leaders),
        44: ApiHandler(0, 1, configs.handle_incremental_alter_configs),
        45: ApiHandler(0, 1, reassignments.handle_alter_partition_reassignments),
        46: ApiHandler(0, 0, reassignments.handle_list_partition_reassignments),
        47: ApiHandler(0, 0, groups.handle_offset_delete),
        48: ApiHandler(0, 1, client_quotas.handle_describe_client_quotas),
        49: ApiHandler(0, 1, client_quotas.handle_alter_client_quotas),
        36: ApiHandler(0, 2, sasl.handle_sasl_authenticate),
        50: ApiHandler(0, 0, scram_credentials.handle_describe_user_scram_credentials),
        51: ApiHandler(0, 0, scram_credentials.handle_alter_user_scram_credentials),
        55: ApiHandler(0, 2, quorum.handle_describe_quorum),
        60: ApiHandler(0, 1, metadata.handle_describe_cluster),
        61: ApiHandler(
            txn.DESCRIBE_PRODUCERS_MIN_VERSION,
            txn.DESCRIBE_PRODUCERS_MAX_VERSION,
            txn.handle_describe_producers,
        ),
        64: ApiHandler(0, 0, quorum.handle_unregister_broker),
        65: ApiHandler(
            txn.DESCRIBE_TRANSACTIONS_MIN_VERSION,
            txn.DESCRIBE_TRANSACTIONS_MAX_VERSION,
            txn.handle_describe_transactions,
        ),
        76: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share.handle_share_group_heartbeat,
        ),
        77: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share.handle_share_group_describe,
        ),
        78: ApiHandler(
            share.SHARE_API_MIN_VERSION, share.SHARE_API_MAX_VERSION, share.handle_share_fetch
        ),
        79: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share.handle_share_acknowledge,
        ),
        66: ApiHandler(
            txn.LIST_TRANSACTIONS_MIN_VERSION,
            txn.LIST_TRANSACTIONS_MAX_VERSION,
            txn.handle_list_transactions,
        ),
        90: ApiHandler(
            0,
            share_admin.SHARE_OFFSETS_DESCRIBE_MAX_VERSION,
            share_admin.handle_describe_share_group_offsets,
        ),
        91: ApiHandler(0, 0, share_admin.handle_alter_share_group_offsets),
        92: ApiHandler(0, 0, share_admin.handle_delete_share_group_offsets),
        68: ApiHandler(0, 1, consumer_groups.handle_consumer_group_heartbeat),
        69: ApiHandler(0, 1, consumer_groups.handle_consumer_group_describe),
        80: ApiHandler(0, 1, quorum.handle_add_raft_voter),
        81: ApiHandler(0, 0, quorum.handle_remove_raft_voter),
    }
)
