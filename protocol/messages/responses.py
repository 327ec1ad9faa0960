"""kio's response entities of each API raftka serves, one union per API over the versions
its handler takes (the table in raftka/broker/handlers/__init__.py; a unit test keeps the two
the same). For annotations only: the names exist while type checking, so that loading this
module at run time imports none of kio's schema modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    import kio.schema.add_offsets_to_txn.v0.response
    import kio.schema.add_offsets_to_txn.v1.response
    import kio.schema.add_offsets_to_txn.v2.response
    import kio.schema.add_offsets_to_txn.v3.response
    import kio.schema.add_offsets_to_txn.v4.response
    import kio.schema.add_partitions_to_txn.v0.response
    import kio.schema.add_partitions_to_txn.v1.response
    import kio.schema.add_partitions_to_txn.v2.response
    import kio.schema.add_partitions_to_txn.v3.response
    import kio.schema.add_partitions_to_txn.v4.response
    import kio.schema.add_partitions_to_txn.v5.response
    import kio.schema.add_raft_voter.v0.response
    import kio.schema.add_raft_voter.v1.response
    import kio.schema.alter_client_quotas.v0.response
    import kio.schema.alter_client_quotas.v1.response
    import kio.schema.alter_configs.v0.response
    import kio.schema.alter_configs.v1.response
    import kio.schema.alter_configs.v2.response
    import kio.schema.alter_partition_reassignments.v0.response
    import kio.schema.alter_partition_reassignments.v1.response
    import kio.schema.alter_replica_log_dirs.v1.response
    import kio.schema.alter_replica_log_dirs.v2.response
    import kio.schema.alter_share_group_offsets.v0.response
    import kio.schema.alter_user_scram_credentials.v0.response
    import kio.schema.api_versions.v0.response
    import kio.schema.api_versions.v1.response
    import kio.schema.api_versions.v2.response
    import kio.schema.api_versions.v3.response
    import kio.schema.consumer_group_describe.v0.response
    import kio.schema.consumer_group_describe.v1.response
    import kio.schema.consumer_group_heartbeat.v0.response
    import kio.schema.consumer_group_heartbeat.v1.response
    import kio.schema.create_acls.v1.response
    import kio.schema.create_acls.v2.response
    import kio.schema.create_acls.v3.response
    import kio.schema.create_partitions.v0.response
    import kio.schema.create_partitions.v1.response
    import kio.schema.create_partitions.v2.response
    import kio.schema.create_partitions.v3.response
    import kio.schema.create_topics.v2.response
    import kio.schema.create_topics.v3.response
    import kio.schema.create_topics.v4.response
    import kio.schema.create_topics.v5.response
    import kio.schema.create_topics.v6.response
    import kio.schema.create_topics.v7.response
    import kio.schema.delete_acls.v1.response
    import kio.schema.delete_acls.v2.response
    import kio.schema.delete_acls.v3.response
    import kio.schema.delete_groups.v0.response
    import kio.schema.delete_groups.v1.response
    import kio.schema.delete_groups.v2.response
    import kio.schema.delete_records.v0.response
    import kio.schema.delete_records.v1.response
    import kio.schema.delete_records.v2.response
    import kio.schema.delete_share_group_offsets.v0.response
    import kio.schema.delete_topics.v1.response
    import kio.schema.delete_topics.v2.response
    import kio.schema.delete_topics.v3.response
    import kio.schema.delete_topics.v4.response
    import kio.schema.delete_topics.v5.response
    import kio.schema.delete_topics.v6.response
    import kio.schema.describe_acls.v1.response
    import kio.schema.describe_acls.v2.response
    import kio.schema.describe_acls.v3.response
    import kio.schema.describe_client_quotas.v0.response
    import kio.schema.describe_client_quotas.v1.response
    import kio.schema.describe_cluster.v0.response
    import kio.schema.describe_cluster.v1.response
    import kio.schema.describe_configs.v1.response
    import kio.schema.describe_configs.v2.response
    import kio.schema.describe_configs.v3.response
    import kio.schema.describe_configs.v4.response
    import kio.schema.describe_groups.v0.response
    import kio.schema.describe_groups.v1.response
    import kio.schema.describe_groups.v2.response
    import kio.schema.describe_groups.v3.response
    import kio.schema.describe_groups.v4.response
    import kio.schema.describe_groups.v5.response
    import kio.schema.describe_log_dirs.v1.response
    import kio.schema.describe_log_dirs.v2.response
    import kio.schema.describe_log_dirs.v3.response
    import kio.schema.describe_log_dirs.v4.response
    import kio.schema.describe_producers.v0.response
    import kio.schema.describe_quorum.v0.response
    import kio.schema.describe_quorum.v1.response
    import kio.schema.describe_quorum.v2.response
    import kio.schema.describe_share_group_offsets.v0.response
    import kio.schema.describe_share_group_offsets.v1.response
    import kio.schema.describe_transactions.v0.response
    import kio.schema.describe_user_scram_credentials.v0.response
    import kio.schema.elect_leaders.v0.response
    import kio.schema.elect_leaders.v1.response
    import kio.schema.elect_leaders.v2.response
    import kio.schema.end_txn.v0.response
    import kio.schema.end_txn.v1.response
    import kio.schema.end_txn.v2.response
    import kio.schema.end_txn.v3.response
    import kio.schema.end_txn.v4.response
    import kio.schema.end_txn.v5.response
    import kio.schema.fetch.v4.response
    import kio.schema.fetch.v5.response
    import kio.schema.fetch.v6.response
    import kio.schema.fetch.v7.response
    import kio.schema.fetch.v8.response
    import kio.schema.fetch.v9.response
    import kio.schema.fetch.v10.response
    import kio.schema.fetch.v11.response
    import kio.schema.fetch.v12.response
    import kio.schema.find_coordinator.v0.response
    import kio.schema.find_coordinator.v1.response
    import kio.schema.find_coordinator.v2.response
    import kio.schema.find_coordinator.v3.response
    import kio.schema.find_coordinator.v4.response
    import kio.schema.heartbeat.v0.response
    import kio.schema.heartbeat.v1.response
    import kio.schema.heartbeat.v2.response
    import kio.schema.heartbeat.v3.response
    import kio.schema.heartbeat.v4.response
    import kio.schema.incremental_alter_configs.v0.response
    import kio.schema.incremental_alter_configs.v1.response
    import kio.schema.init_producer_id.v0.response
    import kio.schema.init_producer_id.v1.response
    import kio.schema.init_producer_id.v2.response
    import kio.schema.init_producer_id.v3.response
    import kio.schema.init_producer_id.v4.response
    import kio.schema.init_producer_id.v5.response
    import kio.schema.join_group.v0.response
    import kio.schema.join_group.v1.response
    import kio.schema.join_group.v2.response
    import kio.schema.join_group.v3.response
    import kio.schema.join_group.v4.response
    import kio.schema.join_group.v5.response
    import kio.schema.join_group.v6.response
    import kio.schema.join_group.v7.response
    import kio.schema.join_group.v8.response
    import kio.schema.join_group.v9.response
    import kio.schema.leave_group.v0.response
    import kio.schema.leave_group.v1.response
    import kio.schema.leave_group.v2.response
    import kio.schema.leave_group.v3.response
    import kio.schema.leave_group.v4.response
    import kio.schema.leave_group.v5.response
    import kio.schema.list_groups.v0.response
    import kio.schema.list_groups.v1.response
    import kio.schema.list_groups.v2.response
    import kio.schema.list_groups.v3.response
    import kio.schema.list_groups.v4.response
    import kio.schema.list_groups.v5.response
    import kio.schema.list_offsets.v1.response
    import kio.schema.list_offsets.v2.response
    import kio.schema.list_offsets.v3.response
    import kio.schema.list_offsets.v4.response
    import kio.schema.list_offsets.v5.response
    import kio.schema.list_offsets.v6.response
    import kio.schema.list_offsets.v7.response
    import kio.schema.list_partition_reassignments.v0.response
    import kio.schema.list_transactions.v0.response
    import kio.schema.list_transactions.v1.response
    import kio.schema.metadata.v0.response
    import kio.schema.metadata.v1.response
    import kio.schema.metadata.v2.response
    import kio.schema.metadata.v3.response
    import kio.schema.metadata.v4.response
    import kio.schema.metadata.v5.response
    import kio.schema.metadata.v6.response
    import kio.schema.metadata.v7.response
    import kio.schema.metadata.v8.response
    import kio.schema.metadata.v9.response
    import kio.schema.metadata.v10.response
    import kio.schema.metadata.v11.response
    import kio.schema.metadata.v12.response
    import kio.schema.offset_commit.v2.response
    import kio.schema.offset_commit.v3.response
    import kio.schema.offset_commit.v4.response
    import kio.schema.offset_commit.v5.response
    import kio.schema.offset_commit.v6.response
    import kio.schema.offset_commit.v7.response
    import kio.schema.offset_commit.v8.response
    import kio.schema.offset_commit.v9.response
    import kio.schema.offset_delete.v0.response
    import kio.schema.offset_fetch.v1.response
    import kio.schema.offset_fetch.v2.response
    import kio.schema.offset_fetch.v3.response
    import kio.schema.offset_fetch.v4.response
    import kio.schema.offset_fetch.v5.response
    import kio.schema.offset_fetch.v6.response
    import kio.schema.offset_fetch.v7.response
    import kio.schema.offset_fetch.v8.response
    import kio.schema.offset_fetch.v9.response
    import kio.schema.offset_for_leader_epoch.v2.response
    import kio.schema.offset_for_leader_epoch.v3.response
    import kio.schema.offset_for_leader_epoch.v4.response
    import kio.schema.produce.v3.response
    import kio.schema.produce.v4.response
    import kio.schema.produce.v5.response
    import kio.schema.produce.v6.response
    import kio.schema.produce.v7.response
    import kio.schema.produce.v8.response
    import kio.schema.produce.v9.response
    import kio.schema.remove_raft_voter.v0.response
    import kio.schema.sasl_authenticate.v0.response
    import kio.schema.sasl_authenticate.v1.response
    import kio.schema.sasl_authenticate.v2.response
    import kio.schema.sasl_handshake.v0.response
    import kio.schema.sasl_handshake.v1.response
    import kio.schema.share_acknowledge.v1.response
    import kio.schema.share_fetch.v1.response
    import kio.schema.share_group_describe.v1.response
    import kio.schema.share_group_heartbeat.v1.response
    import kio.schema.sync_group.v0.response
    import kio.schema.sync_group.v1.response
    import kio.schema.sync_group.v2.response
    import kio.schema.sync_group.v3.response
    import kio.schema.sync_group.v4.response
    import kio.schema.sync_group.v5.response
    import kio.schema.txn_offset_commit.v0.response
    import kio.schema.txn_offset_commit.v1.response
    import kio.schema.txn_offset_commit.v2.response
    import kio.schema.txn_offset_commit.v3.response
    import kio.schema.unregister_broker.v0.response
    import kio.schema.write_txn_markers.v1.response
    import kio.schema.write_txn_markers.v2.response

    AddOffsetsToTxnResponse: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v1.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v2.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v3.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v4.response.AddOffsetsToTxnResponse
    )

    AddPartitionsToTxnResponse: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v1.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v2.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v3.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v4.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v5.response.AddPartitionsToTxnResponse
    )

    AddRaftVoterResponse: TypeAlias = (
        kio.schema.add_raft_voter.v0.response.AddRaftVoterResponse
        | kio.schema.add_raft_voter.v1.response.AddRaftVoterResponse
    )

    AlterClientQuotasResponse: TypeAlias = (
        kio.schema.alter_client_quotas.v0.response.AlterClientQuotasResponse
        | kio.schema.alter_client_quotas.v1.response.AlterClientQuotasResponse
    )

    AlterConfigsResponse: TypeAlias = (
        kio.schema.alter_configs.v0.response.AlterConfigsResponse
        | kio.schema.alter_configs.v1.response.AlterConfigsResponse
        | kio.schema.alter_configs.v2.response.AlterConfigsResponse
    )

    AlterPartitionReassignmentsResponse: TypeAlias = (
        kio.schema.alter_partition_reassignments.v0.response.AlterPartitionReassignmentsResponse
        | kio.schema.alter_partition_reassignments.v1.response.AlterPartitionReassignmentsResponse
    )

    AlterReplicaLogDirsResponse: TypeAlias = (
        kio.schema.alter_replica_log_dirs.v1.response.AlterReplicaLogDirsResponse
        | kio.schema.alter_replica_log_dirs.v2.response.AlterReplicaLogDirsResponse
    )

    AlterShareGroupOffsetsResponse: TypeAlias = (
        kio.schema.alter_share_group_offsets.v0.response.AlterShareGroupOffsetsResponse
    )

    AlterUserScramCredentialsResponse: TypeAlias = (
        kio.schema.alter_user_scram_credentials.v0.response.AlterUserScramCredentialsResponse
    )

    ApiVersionsResponse: TypeAlias = (
        kio.schema.api_versions.v0.response.ApiVersionsResponse
        | kio.schema.api_versions.v1.response.ApiVersionsResponse
        | kio.schema.api_versions.v2.response.ApiVersionsResponse
        | kio.schema.api_versions.v3.response.ApiVersionsResponse
    )

    ConsumerGroupDescribeResponse: TypeAlias = (
        kio.schema.consumer_group_describe.v0.response.ConsumerGroupDescribeResponse
        | kio.schema.consumer_group_describe.v1.response.ConsumerGroupDescribeResponse
    )

    ConsumerGroupHeartbeatResponse: TypeAlias = (
        kio.schema.consumer_group_heartbeat.v0.response.ConsumerGroupHeartbeatResponse
        | kio.schema.consumer_group_heartbeat.v1.response.ConsumerGroupHeartbeatResponse
    )

    CreateAclsResponse: TypeAlias = (
        kio.schema.create_acls.v1.response.CreateAclsResponse
        | kio.schema.create_acls.v2.response.CreateAclsResponse
        | kio.schema.create_acls.v3.response.CreateAclsResponse
    )

    CreatePartitionsResponse: TypeAlias = (
        kio.schema.create_partitions.v0.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v1.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v2.response.CreatePartitionsResponse
        | kio.schema.create_partitions.v3.response.CreatePartitionsResponse
    )

    CreateTopicsResponse: TypeAlias = (
        kio.schema.create_topics.v2.response.CreateTopicsResponse
        | kio.schema.create_topics.v3.response.CreateTopicsResponse
        | kio.schema.create_topics.v4.response.CreateTopicsResponse
        | kio.schema.create_topics.v5.response.CreateTopicsResponse
        | kio.schema.create_topics.v6.response.CreateTopicsResponse
        | kio.schema.create_topics.v7.response.CreateTopicsResponse
    )

    DeleteAclsResponse: TypeAlias = (
        kio.schema.delete_acls.v1.response.DeleteAclsResponse
        | kio.schema.delete_acls.v2.response.DeleteAclsResponse
        | kio.schema.delete_acls.v3.response.DeleteAclsResponse
    )

    DeleteGroupsResponse: TypeAlias = (
        kio.schema.delete_groups.v0.response.DeleteGroupsResponse
        | kio.schema.delete_groups.v1.response.DeleteGroupsResponse
        | kio.schema.delete_groups.v2.response.DeleteGroupsResponse
    )

    DeleteRecordsResponse: TypeAlias = (
        kio.schema.delete_records.v0.response.DeleteRecordsResponse
        | kio.schema.delete_records.v1.response.DeleteRecordsResponse
        | kio.schema.delete_records.v2.response.DeleteRecordsResponse
    )

    DeleteShareGroupOffsetsResponse: TypeAlias = (
        kio.schema.delete_share_group_offsets.v0.response.DeleteShareGroupOffsetsResponse
    )

    DeleteTopicsResponse: TypeAlias = (
        kio.schema.delete_topics.v1.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v2.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v3.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v4.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v5.response.DeleteTopicsResponse
        | kio.schema.delete_topics.v6.response.DeleteTopicsResponse
    )

    DescribeAclsResponse: TypeAlias = (
        kio.schema.describe_acls.v1.response.DescribeAclsResponse
        | kio.schema.describe_acls.v2.response.DescribeAclsResponse
        | kio.schema.describe_acls.v3.response.DescribeAclsResponse
    )

    DescribeClientQuotasResponse: TypeAlias = (
        kio.schema.describe_client_quotas.v0.response.DescribeClientQuotasResponse
        | kio.schema.describe_client_quotas.v1.response.DescribeClientQuotasResponse
    )

    DescribeClusterResponse: TypeAlias = (
        kio.schema.describe_cluster.v0.response.DescribeClusterResponse
        | kio.schema.describe_cluster.v1.response.DescribeClusterResponse
    )

    DescribeConfigsResponse: TypeAlias = (
        kio.schema.describe_configs.v1.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v2.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v3.response.DescribeConfigsResponse
        | kio.schema.describe_configs.v4.response.DescribeConfigsResponse
    )

    DescribeGroupsResponse: TypeAlias = (
        kio.schema.describe_groups.v0.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v1.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v2.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v3.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v4.response.DescribeGroupsResponse
        | kio.schema.describe_groups.v5.response.DescribeGroupsResponse
    )

    DescribeLogDirsResponse: TypeAlias = (
        kio.schema.describe_log_dirs.v1.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v2.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v3.response.DescribeLogDirsResponse
        | kio.schema.describe_log_dirs.v4.response.DescribeLogDirsResponse
    )
    DescribeProducersResponse: TypeAlias = (
        kio.schema.describe_producers.v0.response.DescribeProducersResponse
    )

    DescribeQuorumResponse: TypeAlias = (
        kio.schema.describe_quorum.v0.response.DescribeQuorumResponse
        | kio.schema.describe_quorum.v1.response.DescribeQuorumResponse
        | kio.schema.describe_quorum.v2.response.DescribeQuorumResponse
    )

    DescribeShareGroupOffsetsResponse: TypeAlias = (
        kio.schema.describe_share_group_offsets.v0.response.DescribeShareGroupOffsetsResponse
        | kio.schema.describe_share_group_offsets.v1.response.DescribeShareGroupOffsetsResponse
    )

    DescribeTransactionsResponse: TypeAlias = (
        kio.schema.describe_transactions.v0.response.DescribeTransactionsResponse
    )

    DescribeUserScramCredentialsResponse: TypeAlias = (
        kio.schema.describe_user_scram_credentials.v0.response.DescribeUserScramCredentialsResponse
    )

    ElectLeadersResponse: TypeAlias = (
        kio.schema.elect_leaders.v0.response.ElectLeadersResponse
        | kio.schema.elect_leaders.v1.response.ElectLeadersResponse
        | kio.schema.elect_leaders.v2.response.ElectLeadersResponse
    )

    EndTxnResponse: TypeAlias = (
        kio.schema.end_txn.v0.response.EndTxnResponse
        | kio.schema.end_txn.v1.response.EndTxnResponse
        | kio.schema.end_txn.v2.response.EndTxnResponse
        | kio.schema.end_txn.v3.response.EndTxnResponse
        | kio.schema.end_txn.v4.response.EndTxnResponse
        | kio.schema.end_txn.v5.response.EndTxnResponse
    )

    FetchResponse: TypeAlias = (
        kio.schema.fetch.v4.response.FetchResponse
        | kio.schema.fetch.v5.response.FetchResponse
        | kio.schema.fetch.v6.response.FetchResponse
        | kio.schema.fetch.v7.response.FetchResponse
        | kio.schema.fetch.v8.response.FetchResponse
        | kio.schema.fetch.v9.response.FetchResponse
        | kio.schema.fetch.v10.response.FetchResponse
        | kio.schema.fetch.v11.response.FetchResponse
        | kio.schema.fetch.v12.response.FetchResponse
    )

    FindCoordinatorResponse: TypeAlias = (
        kio.schema.find_coordinator.v0.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v1.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v2.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v3.response.FindCoordinatorResponse
        | kio.schema.find_coordinator.v4.response.FindCoordinatorResponse
    )

    HeartbeatResponse: TypeAlias = (
        kio.schema.heartbeat.v0.response.HeartbeatResponse
        | kio.schema.heartbeat.v1.response.HeartbeatResponse
        | kio.schema.heartbeat.v2.response.HeartbeatResponse
        | kio.schema.heartbeat.v3.response.HeartbeatResponse
        | kio.schema.heartbeat.v4.response.HeartbeatResponse
    )

    IncrementalAlterConfigsResponse: TypeAlias = (
        kio.schema.incremental_alter_configs.v0.response.IncrementalAlterConfigsResponse
        | kio.schema.incremental_alter_configs.v1.response.IncrementalAlterConfigsResponse
    )

    InitProducerIdResponse: TypeAlias = (
        kio.schema.init_producer_id.v0.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v1.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v2.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v3.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v4.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v5.response.InitProducerIdResponse
    )

    JoinGroupResponse: TypeAlias = (
        kio.schema.join_group.v0.response.JoinGroupResponse
        | kio.schema.join_group.v1.response.JoinGroupResponse
        | kio.schema.join_group.v2.response.JoinGroupResponse
        | kio.schema.join_group.v3.response.JoinGroupResponse
        | kio.schema.join_group.v4.response.JoinGroupResponse
        | kio.schema.join_group.v5.response.JoinGroupResponse
        | kio.schema.join_group.v6.response.JoinGroupResponse
        | kio.schema.join_group.v7.response.JoinGroupResponse
        | kio.schema.join_group.v8.response.JoinGroupResponse
        | kio.schema.join_group.v9.response.JoinGroupResponse
    )

    LeaveGroupResponse: TypeAlias = (
        kio.schema.leave_group.v0.response.LeaveGroupResponse
        | kio.schema.leave_group.v1.response.LeaveGroupResponse
        | kio.schema.leave_group.v2.response.LeaveGroupResponse
        | kio.schema.leave_group.v3.response.LeaveGroupResponse
        | kio.schema.leave_group.v4.response.LeaveGroupResponse
        | kio.schema.leave_group.v5.response.LeaveGroupResponse
    )

    ListGroupsResponse: TypeAlias = (
        kio.schema.list_groups.v0.response.ListGroupsResponse
        | kio.schema.list_groups.v1.response.ListGroupsResponse
        | kio.schema.list_groups.v2.response.ListGroupsResponse
        | kio.schema.list_groups.v3.response.ListGroupsResponse
        | kio.schema.list_groups.v4.response.ListGroupsResponse
        | kio.schema.list_groups.v5.response.ListGroupsResponse
    )

    ListOffsetsResponse: TypeAlias = (
        kio.schema.list_offsets.v1.response.ListOffsetsResponse
        | kio.schema.list_offsets.v2.response.ListOffsetsResponse
        | kio.schema.list_offsets.v3.response.ListOffsetsResponse
        | kio.schema.list_offsets.v4.response.ListOffsetsResponse
        | kio.schema.list_offsets.v5.response.ListOffsetsResponse
        | kio.schema.list_offsets.v6.response.ListOffsetsResponse
        | kio.schema.list_offsets.v7.response.ListOffsetsResponse
    )

    ListPartitionReassignmentsResponse: TypeAlias = (
        kio.schema.list_partition_reassignments.v0.response.ListPartitionReassignmentsResponse
    )

    ListTransactionsResponse: TypeAlias = (
        kio.schema.list_transactions.v0.response.ListTransactionsResponse
        | kio.schema.list_transactions.v1.response.ListTransactionsResponse
    )

    MetadataResponse: TypeAlias = (
        kio.schema.metadata.v0.response.MetadataResponse
        | kio.schema.metadata.v1.response.MetadataResponse
        | kio.schema.metadata.v2.response.MetadataResponse
        | kio.schema.metadata.v3.response.MetadataResponse
        | kio.schema.metadata.v4.response.MetadataResponse
        | kio.schema.metadata.v5.response.MetadataResponse
        | kio.schema.metadata.v6.response.MetadataResponse
        | kio.schema.metadata.v7.response.MetadataResponse
        | kio.schema.metadata.v8.response.MetadataResponse
        | kio.schema.metadata.v9.response.MetadataResponse
        | kio.schema.metadata.v10.response.MetadataResponse
        | kio.schema.metadata.v11.response.MetadataResponse
        | kio.schema.metadata.v12.response.MetadataResponse
    )

    OffsetCommitResponse: TypeAlias = (
        kio.schema.offset_commit.v2.response.OffsetCommitResponse
        | kio.schema.offset_commit.v3.response.OffsetCommitResponse
        | kio.schema.offset_commit.v4.response.OffsetCommitResponse
        | kio.schema.offset_commit.v5.response.OffsetCommitResponse
        | kio.schema.offset_commit.v6.response.OffsetCommitResponse
        | kio.schema.offset_commit.v7.response.OffsetCommitResponse
        | kio.schema.offset_commit.v8.response.OffsetCommitResponse
        | kio.schema.offset_commit.v9.response.OffsetCommitResponse
    )

    OffsetDeleteResponse: TypeAlias = kio.schema.offset_delete.v0.response.OffsetDeleteResponse

    OffsetFetchResponse: TypeAlias = (
        kio.schema.offset_fetch.v1.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v2.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v3.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v4.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v5.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v6.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v7.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v8.response.OffsetFetchResponse
        | kio.schema.offset_fetch.v9.response.OffsetFetchResponse
    )

    OffsetForLeaderEpochResponse: TypeAlias = (
        kio.schema.offset_for_leader_epoch.v2.response.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v3.response.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v4.response.OffsetForLeaderEpochResponse
    )

    ProduceResponse: TypeAlias = (
        kio.schema.produce.v3.response.ProduceResponse
        | kio.schema.produce.v4.response.ProduceResponse
        | kio.schema.produce.v5.response.ProduceResponse
        | kio.schema.produce.v6.response.ProduceResponse
        | kio.schema.produce.v7.response.ProduceResponse
        | kio.schema.produce.v8.response.ProduceResponse
        | kio.schema.produce.v9.response.ProduceResponse
    )

    RemoveRaftVoterResponse: TypeAlias = (
        kio.schema.remove_raft_voter.v0.response.RemoveRaftVoterResponse
    )

    SaslAuthenticateResponse: TypeAlias = (
        kio.schema.sasl_authenticate.v0.response.SaslAuthenticateResponse
        | kio.schema.sasl_authenticate.v1.response.SaslAuthenticateResponse
        | kio.schema.sasl_authenticate.v2.response.SaslAuthenticateResponse
    )

    SaslHandshakeResponse: TypeAlias = (
        kio.schema.sasl_handshake.v0.response.SaslHandshakeResponse
        | kio.schema.sasl_handshake.v1.response.SaslHandshakeResponse
    )

    ShareAcknowledgeResponse: TypeAlias = (
        kio.schema.share_acknowledge.v1.response.ShareAcknowledgeResponse
    )

    ShareFetchResponse: TypeAlias = kio.schema.share_fetch.v1.response.ShareFetchResponse

    ShareGroupDescribeResponse: TypeAlias = (
        kio.schema.share_group_describe.v1.response.ShareGroupDescribeResponse
    )

    ShareGroupHeartbeatResponse: TypeAlias = (
        kio.schema.share_group_heartbeat.v1.response.ShareGroupHeartbeatResponse
    )

    SyncGroupResponse: TypeAlias = (
        kio.schema.sync_group.v0.response.SyncGroupResponse
        | kio.schema.sync_group.v1.response.SyncGroupResponse
        | kio.schema.sync_group.v2.response.SyncGroupResponse
        | kio.schema.sync_group.v3.response.SyncGroupResponse
        | kio.schema.sync_group.v4.response.SyncGroupResponse
        | kio.schema.sync_group.v5.response.SyncGroupResponse
    )

    TxnOffsetCommitResponse: TypeAlias = (
        kio.schema.txn_offset_commit.v0.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v1.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v2.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v3.response.TxnOffsetCommitResponse
    )

    UnregisterBrokerResponse: TypeAlias = (
        kio.schema.unregister_broker.v0.response.UnregisterBrokerResponse
    )

    WriteTxnMarkersResponse: TypeAlias = (
        kio.schema.write_txn_markers.v1.response.WriteTxnMarkersResponse
        | kio.schema.write_txn_markers.v2.response.WriteTxnMarkersResponse
    )
