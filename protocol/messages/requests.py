"""kio's request entities of each API raftka serves, one union per API over the versions
its handler takes (the table in raftka/broker/handlers/__init__.py; a unit test keeps the two
the same). For annotations only: the names exist while type checking, so that loading this
module at run time imports none of kio's schema modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    import kio.schema.add_offsets_to_txn.v0.request
    import kio.schema.add_offsets_to_txn.v1.request
    import kio.schema.add_offsets_to_txn.v2.request
    import kio.schema.add_offsets_to_txn.v3.request
    import kio.schema.add_offsets_to_txn.v4.request
    import kio.schema.add_partitions_to_txn.v0.request
    import kio.schema.add_partitions_to_txn.v1.request
    import kio.schema.add_partitions_to_txn.v2.request
    import kio.schema.add_partitions_to_txn.v3.request
    import kio.schema.add_partitions_to_txn.v4.request
    import kio.schema.add_partitions_to_txn.v5.request
    import kio.schema.add_raft_voter.v0.request
    import kio.schema.add_raft_voter.v1.request
    import kio.schema.alter_client_quotas.v0.request
    import kio.schema.alter_client_quotas.v1.request
    import kio.schema.alter_configs.v0.request
    import kio.schema.alter_configs.v1.request
    import kio.schema.alter_configs.v2.request
    import kio.schema.alter_partition_reassignments.v0.request
    import kio.schema.alter_partition_reassignments.v1.request
    import kio.schema.alter_replica_log_dirs.v1.request
    import kio.schema.alter_replica_log_dirs.v2.request
    import kio.schema.alter_share_group_offsets.v0.request
    import kio.schema.alter_user_scram_credentials.v0.request
    import kio.schema.api_versions.v0.request
    import kio.schema.api_versions.v1.request
    import kio.schema.api_versions.v2.request
    import kio.schema.api_versions.v3.request
    import kio.schema.consumer_group_describe.v0.request
    import kio.schema.consumer_group_describe.v1.request
    import kio.schema.consumer_group_heartbeat.v0.request
    import kio.schema.consumer_group_heartbeat.v1.request
    import kio.schema.create_acls.v1.request
    import kio.schema.create_acls.v2.request
    import kio.schema.create_acls.v3.request
    import kio.schema.create_partitions.v0.request
    import kio.schema.create_partitions.v1.request
    import kio.schema.create_partitions.v2.request
    import kio.schema.create_partitions.v3.request
    import kio.schema.create_topics.v2.request
    import kio.schema.create_topics.v3.request
    import kio.schema.create_topics.v4.request
    import kio.schema.create_topics.v5.request
    import kio.schema.create_topics.v6.request
    import kio.schema.create_topics.v7.request
    import kio.schema.delete_acls.v1.request
    import kio.schema.delete_acls.v2.request
    import kio.schema.delete_acls.v3.request
    import kio.schema.delete_groups.v0.request
    import kio.schema.delete_groups.v1.request
    import kio.schema.delete_groups.v2.request
    import kio.schema.delete_records.v0.request
    import kio.schema.delete_records.v1.request
    import kio.schema.delete_records.v2.request
    import kio.schema.delete_share_group_offsets.v0.request
    import kio.schema.delete_topics.v1.request
    import kio.schema.delete_topics.v2.request
    import kio.schema.delete_topics.v3.request
    import kio.schema.delete_topics.v4.request
    import kio.schema.delete_topics.v5.request
    import kio.schema.delete_topics.v6.request
    import kio.schema.describe_acls.v1.request
    import kio.schema.describe_acls.v2.request
    import kio.schema.describe_acls.v3.request
    import kio.schema.describe_client_quotas.v0.request
    import kio.schema.describe_client_quotas.v1.request
    import kio.schema.describe_cluster.v0.request
    import kio.schema.describe_cluster.v1.request
    import kio.schema.describe_configs.v1.request
    import kio.schema.describe_configs.v2.request
    import kio.schema.describe_configs.v3.request
    import kio.schema.describe_configs.v4.request
    import kio.schema.describe_groups.v0.request
    import kio.schema.describe_groups.v1.request
    import kio.schema.describe_groups.v2.request
    import kio.schema.describe_groups.v3.request
    import kio.schema.describe_groups.v4.request
    import kio.schema.describe_groups.v5.request
    import kio.schema.describe_log_dirs.v1.request
    import kio.schema.describe_log_dirs.v2.request
    import kio.schema.describe_log_dirs.v3.request
    import kio.schema.describe_log_dirs.v4.request
    import kio.schema.describe_producers.v0.request
    import kio.schema.describe_quorum.v0.request
    import kio.schema.describe_quorum.v1.request
    import kio.schema.describe_quorum.v2.request
    import kio.schema.describe_share_group_offsets.v0.request
    import kio.schema.describe_share_group_offsets.v1.request
    import kio.schema.describe_transactions.v0.request
    import kio.schema.describe_user_scram_credentials.v0.request
    import kio.schema.elect_leaders.v0.request
    import kio.schema.elect_leaders.v1.request
    import kio.schema.elect_leaders.v2.request
    import kio.schema.end_txn.v0.request
    import kio.schema.end_txn.v1.request
    import kio.schema.end_txn.v2.request
    import kio.schema.end_txn.v3.request
    import kio.schema.end_txn.v4.request
    import kio.schema.end_txn.v5.request
    import kio.schema.fetch.v4.request
    import kio.schema.fetch.v5.request
    import kio.schema.fetch.v6.request
    import kio.schema.fetch.v7.request
    import kio.schema.fetch.v8.request
    import kio.schema.fetch.v9.request
    import kio.schema.fetch.v10.request
    import kio.schema.fetch.v11.request
    import kio.schema.fetch.v12.request
    import kio.schema.find_coordinator.v0.request
    import kio.schema.find_coordinator.v1.request
    import kio.schema.find_coordinator.v2.request
    import kio.schema.find_coordinator.v3.request
    import kio.schema.find_coordinator.v4.request
    import kio.schema.heartbeat.v0.request
    import kio.schema.heartbeat.v1.request
    import kio.schema.heartbeat.v2.request
    import kio.schema.heartbeat.v3.request
    import kio.schema.heartbeat.v4.request
    import kio.schema.incremental_alter_configs.v0.request
    import kio.schema.incremental_alter_configs.v1.request
    import kio.schema.init_producer_id.v0.request
    import kio.schema.init_producer_id.v1.request
    import kio.schema.init_producer_id.v2.request
    import kio.schema.init_producer_id.v3.request
    import kio.schema.init_producer_id.v4.request
    import kio.schema.init_producer_id.v5.request
    import kio.schema.join_group.v0.request
    import kio.schema.join_group.v1.request
    import kio.schema.join_group.v2.request
    import kio.schema.join_group.v3.request
    import kio.schema.join_group.v4.request
    import kio.schema.join_group.v5.request
    import kio.schema.join_group.v6.request
    import kio.schema.join_group.v7.request
    import kio.schema.join_group.v8.request
    import kio.schema.join_group.v9.request
    import kio.schema.leave_group.v0.request
    import kio.schema.leave_group.v1.request
    import kio.schema.leave_group.v2.request
    import kio.schema.leave_group.v3.request
    import kio.schema.leave_group.v4.request
    import kio.schema.leave_group.v5.request
    import kio.schema.list_groups.v0.request
    import kio.schema.list_groups.v1.request
    import kio.schema.list_groups.v2.request
    import kio.schema.list_groups.v3.request
    import kio.schema.list_groups.v4.request
    import kio.schema.list_groups.v5.request
    import kio.schema.list_offsets.v1.request
    import kio.schema.list_offsets.v2.request
    import kio.schema.list_offsets.v3.request
    import kio.schema.list_offsets.v4.request
    import kio.schema.list_offsets.v5.request
    import kio.schema.list_offsets.v6.request
    import kio.schema.list_offsets.v7.request
    import kio.schema.list_partition_reassignments.v0.request
    import kio.schema.list_transactions.v0.request
    import kio.schema.list_transactions.v1.request
    import kio.schema.metadata.v0.request
    import kio.schema.metadata.v1.request
    import kio.schema.metadata.v2.request
    import kio.schema.metadata.v3.request
    import kio.schema.metadata.v4.request
    import kio.schema.metadata.v5.request
    import kio.schema.metadata.v6.request
    import kio.schema.metadata.v7.request
    import kio.schema.metadata.v8.request
    import kio.schema.metadata.v9.request
    import kio.schema.metadata.v10.request
    import kio.schema.metadata.v11.request
    import kio.schema.metadata.v12.request
    import kio.schema.offset_commit.v2.request
    import kio.schema.offset_commit.v3.request
    import kio.schema.offset_commit.v4.request
    import kio.schema.offset_commit.v5.request
    import kio.schema.offset_commit.v6.request
    import kio.schema.offset_commit.v7.request
    import kio.schema.offset_commit.v8.request
    import kio.schema.offset_commit.v9.request
    import kio.schema.offset_delete.v0.request
    import kio.schema.offset_fetch.v1.request
    import kio.schema.offset_fetch.v2.request
    import kio.schema.offset_fetch.v3.request
    import kio.schema.offset_fetch.v4.request
    import kio.schema.offset_fetch.v5.request
    import kio.schema.offset_fetch.v6.request
    import kio.schema.offset_fetch.v7.request
    import kio.schema.offset_fetch.v8.request
    import kio.schema.offset_fetch.v9.request
    import kio.schema.offset_for_leader_epoch.v2.request
    import kio.schema.offset_for_leader_epoch.v3.request
    import kio.schema.offset_for_leader_epoch.v4.request
    import kio.schema.produce.v3.request
    import kio.schema.produce.v4.request
    import kio.schema.produce.v5.request
    import kio.schema.produce.v6.request
    import kio.schema.produce.v7.request
    import kio.schema.produce.v8.request
    import kio.schema.produce.v9.request
    import kio.schema.remove_raft_voter.v0.request
    import kio.schema.sasl_authenticate.v0.request
    import kio.schema.sasl_authenticate.v1.request
    import kio.schema.sasl_authenticate.v2.request
    import kio.schema.sasl_handshake.v0.request
    import kio.schema.sasl_handshake.v1.request
    import kio.schema.share_acknowledge.v1.request
    import kio.schema.share_fetch.v1.request
    import kio.schema.share_group_describe.v1.request
    import kio.schema.share_group_heartbeat.v1.request
    import kio.schema.sync_group.v0.request
    import kio.schema.sync_group.v1.request
    import kio.schema.sync_group.v2.request
    import kio.schema.sync_group.v3.request
    import kio.schema.sync_group.v4.request
    import kio.schema.sync_group.v5.request
    import kio.schema.txn_offset_commit.v0.request
    import kio.schema.txn_offset_commit.v1.request
    import kio.schema.txn_offset_commit.v2.request
    import kio.schema.txn_offset_commit.v3.request
    import kio.schema.unregister_broker.v0.request
    import kio.schema.write_txn_markers.v1.request
    import kio.schema.write_txn_markers.v2.request

    AddOffsetsToTxnRequest: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v1.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v2.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v3.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v4.request.AddOffsetsToTxnRequest
    )

    AddPartitionsToTxnRequest: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v1.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v2.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v3.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v4.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v5.request.AddPartitionsToTxnRequest
    )

    AddRaftVoterRequest: TypeAlias = (
        kio.schema.add_raft_voter.v0.request.AddRaftVoterRequest
        | kio.schema.add_raft_voter.v1.request.AddRaftVoterRequest
    )

    AlterClientQuotasRequest: TypeAlias = (
        kio.schema.alter_client_quotas.v0.request.AlterClientQuotasRequest
        | kio.schema.alter_client_quotas.v1.request.AlterClientQuotasRequest
    )

    AlterConfigsRequest: TypeAlias = (
        kio.schema.alter_configs.v0.request.AlterConfigsRequest
        | kio.schema.alter_configs.v1.request.AlterConfigsRequest
        | kio.schema.alter_configs.v2.request.AlterConfigsRequest
    )

    AlterPartitionReassignmentsRequest: TypeAlias = (
        kio.schema.alter_partition_reassignments.v0.request.AlterPartitionReassignmentsRequest
        | kio.schema.alter_partition_reassignments.v1.request.AlterPartitionReassignmentsRequest
    )

    AlterReplicaLogDirsRequest: TypeAlias = (
        kio.schema.alter_replica_log_dirs.v1.request.AlterReplicaLogDirsRequest
        | kio.schema.alter_replica_log_dirs.v2.request.AlterReplicaLogDirsRequest
    )

    AlterShareGroupOffsetsRequest: TypeAlias = (
        kio.schema.alter_share_group_offsets.v0.request.AlterShareGroupOffsetsRequest
    )

    AlterUserScramCredentialsRequest: TypeAlias = (
        kio.schema.alter_user_scram_credentials.v0.request.AlterUserScramCredentialsRequest
    )

    ApiVersionsRequest: TypeAlias = (
        kio.schema.api_versions.v0.request.ApiVersionsRequest
        | kio.schema.api_versions.v1.request.ApiVersionsRequest
        | kio.schema.api_versions.v2.request.ApiVersionsRequest
        | kio.schema.api_versions.v3.request.ApiVersionsRequest
    )

    ConsumerGroupDescribeRequest: TypeAlias = (
        kio.schema.consumer_group_describe.v0.request.ConsumerGroupDescribeRequest
        | kio.schema.consumer_group_describe.v1.request.ConsumerGroupDescribeRequest
    )

    ConsumerGroupHeartbeatRequest: TypeAlias = (
        kio.schema.consumer_group_heartbeat.v0.request.ConsumerGroupHeartbeatRequest
        | kio.schema.consumer_group_heartbeat.v1.request.ConsumerGroupHeartbeatRequest
    )

    CreateAclsRequest: TypeAlias = (
        kio.schema.create_acls.v1.request.CreateAclsRequest
        | kio.schema.create_acls.v2.request.CreateAclsRequest
        | kio.schema.create_acls.v3.request.CreateAclsRequest
    )

    CreatePartitionsRequest: TypeAlias = (
        kio.schema.create_partitions.v0.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v1.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v2.request.CreatePartitionsRequest
        | kio.schema.create_partitions.v3.request.CreatePartitionsRequest
    )

    CreateTopicsRequest: TypeAlias = (
        kio.schema.create_topics.v2.request.CreateTopicsRequest
        | kio.schema.create_topics.v3.request.CreateTopicsRequest
        | kio.schema.create_topics.v4.request.CreateTopicsRequest
        | kio.schema.create_topics.v5.request.CreateTopicsRequest
        | kio.schema.create_topics.v6.request.CreateTopicsRequest
        | kio.schema.create_topics.v7.request.CreateTopicsRequest
    )

    DeleteAclsRequest: TypeAlias = (
        kio.schema.delete_acls.v1.request.DeleteAclsRequest
        | kio.schema.delete_acls.v2.request.DeleteAclsRequest
        | kio.schema.delete_acls.v3.request.DeleteAclsRequest
    )

    DeleteGroupsRequest: TypeAlias = (
        kio.schema.delete_groups.v0.request.DeleteGroupsRequest
        | kio.schema.delete_groups.v1.request.DeleteGroupsRequest
        | kio.schema.delete_groups.v2.request.DeleteGroupsRequest
    )

    DeleteRecordsRequest: TypeAlias = (
        kio.schema.delete_records.v0.request.DeleteRecordsRequest
        | kio.schema.delete_records.v1.request.DeleteRecordsRequest
        | kio.schema.delete_records.v2.request.DeleteRecordsRequest
    )

    DeleteShareGroupOffsetsRequest: TypeAlias = (
        kio.schema.delete_share_group_offsets.v0.request.DeleteShareGroupOffsetsRequest
    )

    DeleteTopicsRequest: TypeAlias = (
        kio.schema.delete_topics.v1.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v2.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v3.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v4.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v5.request.DeleteTopicsRequest
        | kio.schema.delete_topics.v6.request.DeleteTopicsRequest
    )

    DescribeAclsRequest: TypeAlias = (
        kio.schema.describe_acls.v1.request.DescribeAclsRequest
        | kio.schema.describe_acls.v2.request.DescribeAclsRequest
        | kio.schema.describe_acls.v3.request.DescribeAclsRequest
    )

    DescribeClientQuotasRequest: TypeAlias = (
        kio.schema.describe_client_quotas.v0.request.DescribeClientQuotasRequest
        | kio.schema.describe_client_quotas.v1.request.DescribeClientQuotasRequest
    )

    DescribeClusterRequest: TypeAlias = (
        kio.schema.describe_cluster.v0.request.DescribeClusterRequest
        | kio.schema.describe_cluster.v1.request.DescribeClusterRequest
    )

    DescribeConfigsRequest: TypeAlias = (
        kio.schema.describe_configs.v1.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v2.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v3.request.DescribeConfigsRequest
        | kio.schema.describe_configs.v4.request.DescribeConfigsRequest
    )

    DescribeGroupsRequest: TypeAlias = (
        kio.schema.describe_groups.v0.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v1.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v2.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v3.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v4.request.DescribeGroupsRequest
        | kio.schema.describe_groups.v5.request.DescribeGroupsRequest
    )

    DescribeLogDirsRequest: TypeAlias = (
        kio.schema.describe_log_dirs.v1.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v2.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v3.request.DescribeLogDirsRequest
        | kio.schema.describe_log_dirs.v4.request.DescribeLogDirsRequest
    )
    DescribeProducersRequest: TypeAlias = (
        kio.schema.describe_producers.v0.request.DescribeProducersRequest
    )

    DescribeQuorumRequest: TypeAlias = (
        kio.schema.describe_quorum.v0.request.DescribeQuorumRequest
        | kio.schema.describe_quorum.v1.request.DescribeQuorumRequest
        | kio.schema.describe_quorum.v2.request.DescribeQuorumRequest
    )

    DescribeShareGroupOffsetsRequest: TypeAlias = (
        kio.schema.describe_share_group_offsets.v0.request.DescribeShareGroupOffsetsRequest
        | kio.schema.describe_share_group_offsets.v1.request.DescribeShareGroupOffsetsRequest
    )

    DescribeTransactionsRequest: TypeAlias = (
        kio.schema.describe_transactions.v0.request.DescribeTransactionsRequest
    )

    DescribeUserScramCredentialsRequest: TypeAlias = (
        kio.schema.describe_user_scram_credentials.v0.request.DescribeUserScramCredentialsRequest
    )

    ElectLeadersRequest: TypeAlias = (
        kio.schema.elect_leaders.v0.request.ElectLeadersRequest
        | kio.schema.elect_leaders.v1.request.ElectLeadersRequest
        | kio.schema.elect_leaders.v2.request.ElectLeadersRequest
    )

    EndTxnRequest: TypeAlias = (
        kio.schema.end_txn.v0.request.EndTxnRequest
        | kio.schema.end_txn.v1.request.EndTxnRequest
        | kio.schema.end_txn.v2.request.EndTxnRequest
        | kio.schema.end_txn.v3.request.EndTxnRequest
        | kio.schema.end_txn.v4.request.EndTxnRequest
        | kio.schema.end_txn.v5.request.EndTxnRequest
    )

    FetchRequest: TypeAlias = (
        kio.schema.fetch.v4.request.FetchRequest
        | kio.schema.fetch.v5.request.FetchRequest
        | kio.schema.fetch.v6.request.FetchRequest
        | kio.schema.fetch.v7.request.FetchRequest
        | kio.schema.fetch.v8.request.FetchRequest
        | kio.schema.fetch.v9.request.FetchRequest
        | kio.schema.fetch.v10.request.FetchRequest
        | kio.schema.fetch.v11.request.FetchRequest
        | kio.schema.fetch.v12.request.FetchRequest
    )

    FindCoordinatorRequest: TypeAlias = (
        kio.schema.find_coordinator.v0.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v1.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v2.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v3.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v4.request.FindCoordinatorRequest
    )

    HeartbeatRequest: TypeAlias = (
        kio.schema.heartbeat.v0.request.HeartbeatRequest
        | kio.schema.heartbeat.v1.request.HeartbeatRequest
        | kio.schema.heartbeat.v2.request.HeartbeatRequest
        | kio.schema.heartbeat.v3.request.HeartbeatRequest
        | kio.schema.heartbeat.v4.request.HeartbeatRequest
    )

    IncrementalAlterConfigsRequest: TypeAlias = (
        kio.schema.incremental_alter_configs.v0.request.IncrementalAlterConfigsRequest
        | kio.schema.incremental_alter_configs.v1.request.IncrementalAlterConfigsRequest
    )

    InitProducerIdRequest: TypeAlias = (
        kio.schema.init_producer_id.v0.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v1.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v2.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v3.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v4.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v5.request.InitProducerIdRequest
    )

    JoinGroupRequest: TypeAlias = (
        kio.schema.join_group.v0.request.JoinGroupRequest
        | kio.schema.join_group.v1.request.JoinGroupRequest
        | kio.schema.join_group.v2.request.JoinGroupRequest
        | kio.schema.join_group.v3.request.JoinGroupRequest
        | kio.schema.join_group.v4.request.JoinGroupRequest
        | kio.schema.join_group.v5.request.JoinGroupRequest
        | kio.schema.join_group.v6.request.JoinGroupRequest
        | kio.schema.join_group.v7.request.JoinGroupRequest
        | kio.schema.join_group.v8.request.JoinGroupRequest
        | kio.schema.join_group.v9.request.JoinGroupRequest
    )

    LeaveGroupRequest: TypeAlias = (
        kio.schema.leave_group.v0.request.LeaveGroupRequest
        | kio.schema.leave_group.v1.request.LeaveGroupRequest
        | kio.schema.leave_group.v2.request.LeaveGroupRequest
        | kio.schema.leave_group.v3.request.LeaveGroupRequest
        | kio.schema.leave_group.v4.request.LeaveGroupRequest
        | kio.schema.leave_group.v5.request.LeaveGroupRequest
    )

    ListGroupsRequest: TypeAlias = (
        kio.schema.list_groups.v0.request.ListGroupsRequest
        | kio.schema.list_groups.v1.request.ListGroupsRequest
        | kio.schema.list_groups.v2.request.ListGroupsRequest
        | kio.schema.list_groups.v3.request.ListGroupsRequest
        | kio.schema.list_groups.v4.request.ListGroupsRequest
        | kio.schema.list_groups.v5.request.ListGroupsRequest
    )

    ListOffsetsRequest: TypeAlias = (
        kio.schema.list_offsets.v1.request.ListOffsetsRequest
        | kio.schema.list_offsets.v2.request.ListOffsetsRequest
        | kio.schema.list_offsets.v3.request.ListOffsetsRequest
        | kio.schema.list_offsets.v4.request.ListOffsetsRequest
        | kio.schema.list_offsets.v5.request.ListOffsetsRequest
        | kio.schema.list_offsets.v6.request.ListOffsetsRequest
        | kio.schema.list_offsets.v7.request.ListOffsetsRequest
    )

    ListPartitionReassignmentsRequest: TypeAlias = (
        kio.schema.list_partition_reassignments.v0.request.ListPartitionReassignmentsRequest
    )

    ListTransactionsRequest: TypeAlias = (
        kio.schema.list_transactions.v0.request.ListTransactionsRequest
        | kio.schema.list_transactions.v1.request.ListTransactionsRequest
    )

    MetadataRequest: TypeAlias = (
        kio.schema.metadata.v0.request.MetadataRequest
        | kio.schema.metadata.v1.request.MetadataRequest
        | kio.schema.metadata.v2.request.MetadataRequest
        | kio.schema.metadata.v3.request.MetadataRequest
        | kio.schema.metadata.v4.request.MetadataRequest
        | kio.schema.metadata.v5.request.MetadataRequest
        | kio.schema.metadata.v6.request.MetadataRequest
        | kio.schema.metadata.v7.request.MetadataRequest
        | kio.schema.metadata.v8.request.MetadataRequest
        | kio.schema.metadata.v9.request.MetadataRequest
        | kio.schema.metadata.v10.request.MetadataRequest
        | kio.schema.metadata.v11.request.MetadataRequest
        | kio.schema.metadata.v12.request.MetadataRequest
    )

    OffsetCommitRequest: TypeAlias = (
        kio.schema.offset_commit.v2.request.OffsetCommitRequest
        | kio.schema.offset_commit.v3.request.OffsetCommitRequest
        | kio.schema.offset_commit.v4.request.OffsetCommitRequest
        | kio.schema.offset_commit.v5.request.OffsetCommitRequest
        | kio.schema.offset_commit.v6.request.OffsetCommitRequest
        | kio.schema.offset_commit.v7.request.OffsetCommitRequest
        | kio.schema.offset_commit.v8.request.OffsetCommitRequest
        | kio.schema.offset_commit.v9.request.OffsetCommitRequest
    )

    OffsetDeleteRequest: TypeAlias = kio.schema.offset_delete.v0.request.OffsetDeleteRequest

    OffsetFetchRequest: TypeAlias = (
        kio.schema.offset_fetch.v1.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v2.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v3.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v4.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v5.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v6.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v7.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v8.request.OffsetFetchRequest
        | kio.schema.offset_fetch.v9.request.OffsetFetchRequest
    )

    OffsetForLeaderEpochRequest: TypeAlias = (
        kio.schema.offset_for_leader_epoch.v2.request.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v3.request.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v4.request.OffsetForLeaderEpochRequest
    )

    ProduceRequest: TypeAlias = (
        kio.schema.produce.v3.request.ProduceRequest
        | kio.schema.produce.v4.request.ProduceRequest
        | kio.schema.produce.v5.request.ProduceRequest
        | kio.schema.produce.v6.request.ProduceRequest
        | kio.schema.produce.v7.request.ProduceRequest
        | kio.schema.produce.v8.request.ProduceRequest
        | kio.schema.produce.v9.request.ProduceRequest
    )

    RemoveRaftVoterRequest: TypeAlias = (
        kio.schema.remove_raft_voter.v0.request.RemoveRaftVoterRequest
    )

    SaslAuthenticateRequest: TypeAlias = (
        kio.schema.sasl_authenticate.v0.request.SaslAuthenticateRequest
        | kio.schema.sasl_authenticate.v1.request.SaslAuthenticateRequest
        | kio.schema.sasl_authenticate.v2.request.SaslAuthenticateRequest
    )

    SaslHandshakeRequest: TypeAlias = (
        kio.schema.sasl_handshake.v0.request.SaslHandshakeRequest
        | kio.schema.sasl_handshake.v1.request.SaslHandshakeRequest
    )

    ShareAcknowledgeRequest: TypeAlias = (
        kio.schema.share_acknowledge.v1.request.ShareAcknowledgeRequest
    )

    ShareFetchRequest: TypeAlias = kio.schema.share_fetch.v1.request.ShareFetchRequest

    ShareGroupDescribeRequest: TypeAlias = (
        kio.schema.share_group_describe.v1.request.ShareGroupDescribeRequest
    )

    ShareGroupHeartbeatRequest: TypeAlias = (
        kio.schema.share_group_heartbeat.v1.request.ShareGroupHeartbeatRequest
    )

    SyncGroupRequest: TypeAlias = (
        kio.schema.sync_group.v0.request.SyncGroupRequest
        | kio.schema.sync_group.v1.request.SyncGroupRequest
        | kio.schema.sync_group.v2.request.SyncGroupRequest
        | kio.schema.sync_group.v3.request.SyncGroupRequest
        | kio.schema.sync_group.v4.request.SyncGroupRequest
        | kio.schema.sync_group.v5.request.SyncGroupRequest
    )

    TxnOffsetCommitRequest: TypeAlias = (
        kio.schema.txn_offset_commit.v0.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v1.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v2.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v3.request.TxnOffsetCommitRequest
    )

    UnregisterBrokerRequest: TypeAlias = (
        kio.schema.unregister_broker.v0.request.UnregisterBrokerRequest
    )

    WriteTxnMarkersRequest: TypeAlias = (
        kio.schema.write_txn_markers.v1.request.WriteTxnMarkersRequest
        | kio.schema.write_txn_markers.v2.request.WriteTxnMarkersRequest
    )
