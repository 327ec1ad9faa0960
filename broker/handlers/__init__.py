"""Kafka API handlers, one module per API family, and the table ApiVersions advertises."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

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
    log_dirs,
    metadata,
    produce,
    producer_ids,
    quorum,
    reassignments,
    sasl,
    scram_credentials,
    share,
    share_admin,
    share_describe,
    topics_admin,
    txn,
    txn_markers,
)
from raftka.broker.services import ApiHandler
from raftka.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from raftka.broker.handlers.context import ApiEndpoint

# api key → handler; ApiVersions advertises exactly these ranges.
HANDLERS: Mapping[ApiKey, ApiEndpoint] = MappingProxyType(
    {
        ApiKey.PRODUCE: ApiHandler(3, 9, produce.handle_produce, produce.start_produce_together),
        ApiKey.FETCH: ApiHandler(4, 12, fetch.handle_fetch, fetch.start_fetch),
        ApiKey.LIST_OFFSETS: ApiHandler(1, 7, list_offsets.handle_list_offsets),
        ApiKey.METADATA: ApiHandler(0, 12, metadata.handle_metadata),
        ApiKey.OFFSET_COMMIT: ApiHandler(2, 9, groups.handle_offset_commit),
        ApiKey.OFFSET_FETCH: ApiHandler(1, 9, groups.handle_offset_fetch),
        ApiKey.FIND_COORDINATOR: ApiHandler(0, 4, groups.handle_find_coordinator),
        ApiKey.JOIN_GROUP: ApiHandler(0, 9, groups.handle_join_group),
        ApiKey.HEARTBEAT: ApiHandler(0, 4, groups.handle_heartbeat),
        ApiKey.LEAVE_GROUP: ApiHandler(0, 5, groups.handle_leave_group),
        ApiKey.SYNC_GROUP: ApiHandler(0, 5, groups.handle_sync_group),
        ApiKey.DESCRIBE_GROUPS: ApiHandler(0, 5, groups.handle_describe_groups),
        ApiKey.LIST_GROUPS: ApiHandler(0, 5, groups.handle_list_groups),
        ApiKey.SASL_HANDSHAKE: ApiHandler(0, 1, sasl.handle_sasl_handshake),
        ApiKey.API_VERSIONS: ApiHandler(0, 3, api_versions.handle_api_versions),
        ApiKey.CREATE_TOPICS: ApiHandler(2, 7, topics_admin.handle_create_topics),
        ApiKey.DELETE_TOPICS: ApiHandler(1, 6, topics_admin.handle_delete_topics),
        ApiKey.DELETE_RECORDS: ApiHandler(0, 2, topics_admin.handle_delete_records),
        ApiKey.INIT_PRODUCER_ID: ApiHandler(
            producer_ids.INIT_PRODUCER_ID_MIN_VERSION,
            producer_ids.INIT_PRODUCER_ID_MAX_VERSION,
            producer_ids.handle_init_producer_id,
        ),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: ApiHandler(
            2, 4, list_offsets.handle_offset_for_leader_epoch
        ),
        ApiKey.ADD_PARTITIONS_TO_TXN: ApiHandler(
            txn.ADD_PARTITIONS_MIN_VERSION,
            txn.ADD_PARTITIONS_MAX_VERSION,
            txn.handle_add_partitions_to_txn,
        ),
        ApiKey.ADD_OFFSETS_TO_TXN: ApiHandler(
            txn.ADD_OFFSETS_MIN_VERSION, txn.ADD_OFFSETS_MAX_VERSION, txn.handle_add_offsets_to_txn
        ),
        ApiKey.END_TXN: ApiHandler(
            txn.END_TXN_MIN_VERSION, txn.END_TXN_MAX_VERSION, txn.handle_end_txn
        ),
        ApiKey.WRITE_TXN_MARKERS: ApiHandler(1, 2, txn_markers.handle_write_txn_markers),
        ApiKey.TXN_OFFSET_COMMIT: ApiHandler(0, 3, groups.handle_txn_offset_commit),
        ApiKey.DESCRIBE_ACLS: ApiHandler(1, 3, acls.handle_describe_acls),
        ApiKey.CREATE_ACLS: ApiHandler(1, 3, acls.handle_create_acls),
        ApiKey.DELETE_ACLS: ApiHandler(1, 3, acls.handle_delete_acls),
        ApiKey.DESCRIBE_CONFIGS: ApiHandler(1, 4, configs.handle_describe_configs),
        ApiKey.ALTER_CONFIGS: ApiHandler(0, 2, configs.handle_alter_configs),
        ApiKey.CREATE_PARTITIONS: ApiHandler(0, 3, topics_admin.handle_create_partitions),
        ApiKey.DELETE_GROUPS: ApiHandler(0, 2, groups.handle_delete_groups),
        ApiKey.DESCRIBE_LOG_DIRS: ApiHandler(
            log_dirs.DESCRIBE_LOG_DIRS_MIN_VERSION,
            log_dirs.DESCRIBE_LOG_DIRS_MAX_VERSION,
            log_dirs.handle_describe_log_dirs,
        ),
        ApiKey.ALTER_REPLICA_LOG_DIRS: ApiHandler(1, 2, log_dirs.handle_alter_replica_log_dirs),
        ApiKey.ELECT_LEADERS: ApiHandler(0, 2, elect_leaders.handle_elect_leaders),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: ApiHandler(
            0, 1, configs.handle_incremental_alter_configs
        ),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: ApiHandler(
            0, 1, reassignments.handle_alter_partition_reassignments
        ),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: ApiHandler(
            0, 0, reassignments.handle_list_partition_reassignments
        ),
        ApiKey.OFFSET_DELETE: ApiHandler(0, 0, groups.handle_offset_delete),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: ApiHandler(
            0, 1, client_quotas.handle_describe_client_quotas
        ),
        ApiKey.ALTER_CLIENT_QUOTAS: ApiHandler(0, 1, client_quotas.handle_alter_client_quotas),
        ApiKey.SASL_AUTHENTICATE: ApiHandler(0, 2, sasl.handle_sasl_authenticate),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ApiHandler(
            0, 0, scram_credentials.handle_describe_user_scram_credentials
        ),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ApiHandler(
            0, 0, scram_credentials.handle_alter_user_scram_credentials
        ),
        ApiKey.DESCRIBE_QUORUM: ApiHandler(0, 2, quorum.handle_describe_quorum),
        ApiKey.DESCRIBE_CLUSTER: ApiHandler(0, 1, metadata.handle_describe_cluster),
        ApiKey.DESCRIBE_PRODUCERS: ApiHandler(
            txn.DESCRIBE_PRODUCERS_MIN_VERSION,
            txn.DESCRIBE_PRODUCERS_MAX_VERSION,
            txn.handle_describe_producers,
        ),
        ApiKey.UNREGISTER_BROKER: ApiHandler(0, 0, quorum.handle_unregister_broker),
        ApiKey.DESCRIBE_TRANSACTIONS: ApiHandler(
            txn.DESCRIBE_TRANSACTIONS_MIN_VERSION,
            txn.DESCRIBE_TRANSACTIONS_MAX_VERSION,
            txn.handle_describe_transactions,
        ),
        ApiKey.SHARE_GROUP_HEARTBEAT: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share.handle_share_group_heartbeat,
        ),
        ApiKey.SHARE_GROUP_DESCRIBE: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share_describe.handle_share_group_describe,
        ),
        ApiKey.SHARE_FETCH: ApiHandler(
            share.SHARE_API_MIN_VERSION, share.SHARE_API_MAX_VERSION, share.handle_share_fetch
        ),
        ApiKey.SHARE_ACKNOWLEDGE: ApiHandler(
            share.SHARE_API_MIN_VERSION,
            share.SHARE_API_MAX_VERSION,
            share.handle_share_acknowledge,
        ),
        ApiKey.LIST_TRANSACTIONS: ApiHandler(
            txn.LIST_TRANSACTIONS_MIN_VERSION,
            txn.LIST_TRANSACTIONS_MAX_VERSION,
            txn.handle_list_transactions,
        ),
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ApiHandler(
            0,
            share_admin.SHARE_OFFSETS_DESCRIBE_MAX_VERSION,
            share_admin.handle_describe_share_group_offsets,
        ),
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: ApiHandler(
            0, 0, share_admin.handle_alter_share_group_offsets
        ),
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: ApiHandler(
            0, 0, share_admin.handle_delete_share_group_offsets
        ),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: ApiHandler(
            0, 1, consumer_groups.handle_consumer_group_heartbeat
        ),
        ApiKey.CONSUMER_GROUP_DESCRIBE: ApiHandler(
            0, 1, consumer_groups.handle_consumer_group_describe
        ),
        ApiKey.ADD_RAFT_VOTER: ApiHandler(0, 1, quorum.handle_add_raft_voter),
        ApiKey.REMOVE_RAFT_VOTER: ApiHandler(0, 0, quorum.handle_remove_raft_voter),
    }
)
