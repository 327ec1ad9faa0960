"""The Kafka APIs the console reads through: the broker's own handlers, called in-process
with a request context of the console's principal, so a page sees what a client of that
principal would (the same ACL checks, the same answers) without a socket.

Each function builds one request of a version this broker serves, awaits its handler and
returns the kio response entity; a handler's Kafka error stays in the response for the page
to show.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.alter_share_group_offsets.v0 import request as alter_share_offsets
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.consumer_group_describe.v0 import request as consumer_group_describe
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.describe_client_quotas.v1 import request as describe_quotas
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_groups.v5 import request as describe_groups
from kio.schema.describe_producers.v0 import request as describe_producers
from kio.schema.describe_share_group_offsets.v1 import request as share_offsets
from kio.schema.describe_transactions.v0 import request as describe_transactions
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.list_groups.v5 import request as list_groups
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments
from kio.schema.list_transactions.v0 import request as list_transactions
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_fetch.v7 import request as offset_fetch
from kio.schema.produce.v9 import request as produce
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.share_group_describe.v1 import request as share_group_describe
from kio.static.primitive import f64, i8, i16, i32

from raftka.broker.handlers.metadata import partition_leader
from raftka.broker.security.acl import AclBinding
from raftka.broker.security.scram import ScramMechanism, salted_password
from raftka.broker.services import RequestContext
from raftka.protocol.api import build
from raftka.protocol.api_keys import ApiKey
from raftka.protocol.batch_builder import build_batch

if TYPE_CHECKING:
    from raftka.broker.console.remote_calls import RemoteCalls
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.security.session import ClientSession

CLIENT_ID = "raftka-console"
RESOURCE_TOPIC = 2
#: ListOffsets' special timestamps and the replica id of a debugging client, which any
#: replica answers from its own log (so the console shows a follower's offsets too).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
DEBUGGING_REPLICA_ID = -2
CONSUMER_REPLICA_ID = -1
#: IncrementalAlterConfigs' operations.
CONFIG_SET = 0
CONFIG_DELETE = 1
#: The ACL filters' "any" (resource type, pattern type, operation, permission).
ANY = 1
#: A produced record is acknowledged by every in-sync replica (acks=all).
ACKS_ALL = -1
#: How long an admin request may wait for the controller.
ADMIN_TIMEOUT = datetime.timedelta(seconds=8)

Response = Any  # Any: a kio response entity of the version asked for


class Caller:
    """Calls this broker's handlers as the console's principal, from `client_host`."""

    def __init__(
        self,
        services: BrokerServices,
        client_host: str,
        session: ClientSession | None = None,
        remote: RemoteCalls | None = None,
        node: int | None = None,
    ) -> None:
        self.services = services
        self.client_host = client_host
        self.session = session
        self.remote = remote
        #: Another broker whose handlers answer (None: this broker's).
        self.node = node

    def at(self, node: int) -> Caller:
        """The same principal's calls answered by broker `node`; without peer calls, or for
        this broker, this broker's."""
        here = node == self.services.identity.node_id or self.remote is None
        if (None if here else node) == self.node:
            return self
        return Caller(
            self.services, self.client_host, self.session, self.remote, None if here else node
        )

    def context(self, api_key: int, api_version: int) -> RequestContext[Any, Any]:
        """A request context as the connection would make for this principal's request."""
        header = RequestHeader(
            request_api_key=i16(api_key),
            request_api_version=i16(api_version),
            correlation_id=i32(0),
            client_id=CLIENT_ID,
        )
        return RequestContext(
            services=self.services,
            header=header,
            api_key=api_key,
            api_version=api_version,
            client_host=self.client_host,
            client_port=0,
            session=self.session,
        )

    async def call(self, request: Any) -> Response:  # Any: a kio request entity
        if self.node is not None and self.remote is not None:
            return await self.remote.call(self.node, self.session, self.client_host, request)
        api_key = ApiKey(request.__api_key__)
        handler = self.services.handlers[api_key]
        answer = await handler.serve(self.context(api_key, request.__version__), request)
        if answer is None:
            raise RuntimeError(f"{api_key.name} answered nothing")
        return answer

    async def metadata(self, topics: Sequence[str] | None = None) -> Response:
        """Metadata of every topic the principal may describe (or of `topics`)."""
        wanted = (
            None
            if topics is None
            else tuple(
                build(metadata.MetadataRequestTopic, name=name, topic_id=None) for name in topics
            )
        )
        return await self.call(
            build(
                metadata.MetadataRequest,
                topics=wanted,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )

    async def topic_configs(self, topic: str) -> Response:
        resource = build(
            describe_configs.DescribeConfigsResource,
            resource_type=RESOURCE_TOPIC,
            resource_name=topic,
            configuration_keys=None,
        )
        return await self.call(
            build(
                describe_configs.DescribeConfigsRequest,
                resources=(resource,),
                include_synonyms=False,
                include_documentation=True,
            )
        )

    async def list_offsets(
        self, topic: str, partitions: Sequence[int], timestamp: int, replica_id: int
    ) -> dict[int, tuple[int, int]]:
        """Partition -> (Kafka error code, offset) for `timestamp` (or EARLIEST/LATEST), each
        asked of the partition's leader (a consumer's ListOffsets is answered there only)."""
        by_leader: dict[int, list[int]] = {}
        for index in partitions:
            partition = self.services.topics.partition(topic, index)
            leader = -1
            if partition is not None:
                leader, _ = partition_leader(self.services.controller, partition)
            by_leader.setdefault(leader, []).append(index)
        answers: dict[int, tuple[int, int]] = {}
        for leader, indexes in sorted(by_leader.items()):
            request = build(
                list_offsets.ListOffsetsRequest,
                replica_id=replica_id,
                isolation_level=0,
                topics=(
                    build(
                        list_offsets.ListOffsetsTopic,
                        name=topic,
                        partitions=tuple(
                            build(
                                list_offsets.ListOffsetsPartition,
                                partition_index=index,
                                current_leader_epoch=-1,
                                timestamp=timestamp,
                            )
                            for index in indexes
                        ),
                    ),
                ),
            )
            try:
                response = await (self.at(leader) if leader >= 0 else self).call(request)
            except OSError:
                answers |= {i: (int(ErrorCode.leader_not_available), -1) for i in indexes}
                continue
            answers |= {
                int(p.partition_index): (int(p.error_code), int(p.offset))
                for t in response.topics
                for p in t.partitions
            }
        return answers

    async def group_coordinator(self, group_id: str) -> int:
        """The broker coordinating `group_id` (FindCoordinator), -1 when none is known."""
        response = await self.call(
            build(
                find_coordinator.FindCoordinatorRequest,
                key_type=i8(0),
                coordinator_keys=(group_id,),
            )
        )
        (found,) = response.coordinators
        return int(found.node_id) if found.error_code == ErrorCode.none else -1

    async def list_groups(self) -> Response:
        return await self.call(build(list_groups.ListGroupsRequest, states_filter=()))

    async def describe_groups(self, group_ids: Sequence[str]) -> Response:
        return await self.call(
            build(
                describe_groups.DescribeGroupsRequest,
                groups=tuple(group_ids),
                include_authorized_operations=False,
            )
        )

    async def describe_consumer_groups(self, group_ids: Sequence[str]) -> Response:
        """ConsumerGroupDescribe: groups of the consumer protocol (KIP-848)."""
        return await self.call(
            build(
                consumer_group_describe.ConsumerGroupDescribeRequest,
                group_ids=tuple(group_ids),
                include_authorized_operations=False,
            )
        )

    async def describe_share_groups(self, group_ids: Sequence[str]) -> Response:
        """ShareGroupDescribe: share groups (KIP-932), their members and assignments."""
        return await self.call(
            build(
                share_group_describe.ShareGroupDescribeRequest,
                group_ids=tuple(group_ids),
                include_authorized_operations=False,
            )
        )

    async def share_offsets(self, group_id: str) -> Response:
        """DescribeShareGroupOffsets (v1, with lag) of every partition the share group has
        state for."""
        return await self.call(
            build(
                share_offsets.DescribeShareGroupOffsetsRequest,
                groups=(
                    build(
                        share_offsets.DescribeShareGroupOffsetsRequestGroup,
                        group_id=group_id,
                        topics=None,
                    ),
                ),
            )
        )

    async def alter_share_offsets(
        self, group_id: str, topic: str, offsets: dict[int, int]
    ) -> Response:
        """AlterShareGroupOffsets: the share group's start offset of each partition (the
        group must have no members)."""
        wanted = build(
            alter_share_offsets.AlterShareGroupOffsetsRequestTopic,
            topic_name=topic,
            partitions=tuple(
                build(
                    alter_share_offsets.AlterShareGroupOffsetsRequestPartition,
                    partition_index=i32(partition),
                    start_offset=offset,
                )
                for partition, offset in sorted(offsets.items())
            ),
        )
        return await self.call(
            build(
                alter_share_offsets.AlterShareGroupOffsetsRequest,
                group_id=group_id,
                topics=(wanted,),
            )
        )

    async def committed_offsets(self, group_id: str) -> Response:
        """OffsetFetch of every partition the group has committed an offset for."""
        return await self.call(
            build(offset_fetch.OffsetFetchRequest, group_id=group_id, topics=None)
        )

    async def acls(self) -> Response:
        """Every ACL binding the principal may describe (DescribeAcls, all filters ANY)."""
        return await self.call(
            build(
                describe_acls.DescribeAclsRequest,
                resource_type_filter=ANY,
                resource_name_filter=None,
                pattern_type_filter=ANY,
                principal_filter=None,
                host_filter=None,
                operation=ANY,
                permission_type=ANY,
            )
        )

    async def scram_users(self) -> Response:
        return await self.call(
            build(describe_scram.DescribeUserScramCredentialsRequest, users=None)
        )

    async def client_quotas(self) -> Response:
        return await self.call(
            build(describe_quotas.DescribeClientQuotasRequest, components=(), strict=False)
        )

    async def reassignments(self) -> Response:
        return await self.call(
            build(
                list_reassignments.ListPartitionReassignmentsRequest,
                timeout=ADMIN_TIMEOUT,
                topics=None,
            )
        )

    async def transactions(self) -> Response:
        return await self.call(
            build(
                list_transactions.ListTransactionsRequest,
                state_filters=(),
                producer_id_filters=(),
            )
        )

    async def describe_transactions(self, transactional_ids: Sequence[str]) -> Response:
        return await self.call(
            build(
                describe_transactions.DescribeTransactionsRequest,
                transactional_ids=tuple(transactional_ids),
            )
        )

    async def describe_producers(self, partitions: dict[str, list[int]]) -> Response:
        """The producers each partition's leader tracks, with the first offset of each
        one's open transaction (DescribeProducers, KIP-664; READ on each topic)."""
        return await self.call(
            build(
                describe_producers.DescribeProducersRequest,
                topics=tuple(
                    build(
                        describe_producers.TopicRequest,
                        name=name,
                        partition_indexes=tuple(i32(i) for i in indexes),
                    )
                    for name, indexes in sorted(partitions.items())
                ),
            )
        )

    # -- changes (each subject to the ACLs its API checks) ------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> Response:
        topic = build(
            create_topics.CreatableTopic,
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=(),
            configs=(),
        )
        return await self.call(
            build(
                create_topics.CreateTopicsRequest,
                topics=(topic,),
                timeout=ADMIN_TIMEOUT,
                validate_only=False,
            )
        )

    async def create_partitions(self, name: str, count: int) -> Response:
        topic = build(
            create_partitions.CreatePartitionsTopic, name=name, count=count, assignments=None
        )
        return await self.call(
            build(
                create_partitions.CreatePartitionsRequest,
                topics=(topic,),
                timeout=ADMIN_TIMEOUT,
                validate_only=False,
            )
        )

    async def alter_topic_config(self, topic: str, name: str, value: str | None) -> Response:
        """Set `name` on the topic, or remove its override when `value` is None."""
        config = build(
            alter_configs.AlterableConfig,
            name=name,
            config_operation=CONFIG_SET if value is not None else CONFIG_DELETE,
            value=value,
        )
        resource = build(
            alter_configs.AlterConfigsResource,
            resource_type=RESOURCE_TOPIC,
            resource_name=topic,
            configs=(config,),
        )
        return await self.call(
            build(
                alter_configs.IncrementalAlterConfigsRequest,
                resources=(resource,),
                validate_only=False,
            )
        )

    async def delete_records(self, topic: str, partition: int, offset: int) -> Response:
        """Records of `partition` before `offset` (-1: the high watermark) go."""
        wanted = build(
            delete_records.DeleteRecordsTopic,
            name=topic,
            partitions=(
                build(
                    delete_records.DeleteRecordsPartition, partition_index=partition, offset=offset
                ),
            ),
        )
        return await self.call(
            build(delete_records.DeleteRecordsRequest, topics=(wanted,), timeout=ADMIN_TIMEOUT)
        )

    async def delete_topic(self, name: str) -> Response:
        state = build(delete_topics.DeleteTopicState, name=name, topic_id=None)
        return await self.call(
            build(delete_topics.DeleteTopicsRequest, topics=(state,), timeout=ADMIN_TIMEOUT)
        )

    async def commit_offsets(self, group_id: str, topic: str, offsets: dict[int, int]) -> Response:
        """OffsetCommit as an admin client makes it (no member, generation -1): what Kafka
        accepts for a group without members."""
        wanted = build(
            offset_commit.OffsetCommitRequestTopic,
            name=topic,
            partitions=tuple(
                build(
                    offset_commit.OffsetCommitRequestPartition,
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
                for partition, offset in sorted(offsets.items())
            ),
        )
        return await self.call(
            build(
                offset_commit.OffsetCommitRequest,
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=(wanted,),
            )
        )

    async def produce(
        self, topic: str, partition: int, key: bytes | None, value: bytes, timestamp_ms: int
    ) -> Response:
        """One record, acks=all, as a producer without idempotence sends it."""
        return await self.produce_batches(
            topic, [(partition, build_batch([(key, value)], timestamp_ms))]
        )

    async def produce_batches(self, topic: str, batches: Sequence[tuple[int, bytes]]) -> Response:
        """One record batch per partition (partition, batch bytes) in one Produce, acks=all,
        as a producer without idempotence sends them."""
        data = tuple(
            build(produce.PartitionProduceData, index=partition, records=records)
            for partition, records in batches
        )
        return await self.call(
            build(
                produce.ProduceRequest,
                transactional_id=None,
                acks=ACKS_ALL,
                timeout=ADMIN_TIMEOUT,
                topic_data=(build(produce.TopicProduceData, name=topic, partition_data=data),),
            )
        )

    # -- security changes (ALTER on the cluster, as for a client) -----------------------

    async def create_acl(self, binding: AclBinding) -> Response:
        """CreateAcls of one binding."""
        creation = build(
            create_acls.AclCreation,
            resource_type=i8(binding.resource_type),
            resource_name=binding.resource_name,
            resource_pattern_type=i8(binding.pattern_type),
            principal=binding.principal,
            host=binding.host,
            operation=i8(binding.operation),
            permission_type=i8(binding.permission),
        )
        return await self.call(build(create_acls.CreateAclsRequest, creations=(creation,)))

    async def delete_acl(self, binding: AclBinding) -> Response:
        """DeleteAcls of exactly one binding (a filter matching only it)."""
        matching = build(
            delete_acls.DeleteAclsFilter,
            resource_type_filter=i8(binding.resource_type),
            resource_name_filter=binding.resource_name,
            pattern_type_filter=i8(binding.pattern_type),
            principal_filter=binding.principal,
            host_filter=binding.host,
            operation=i8(binding.operation),
            permission_type=i8(binding.permission),
        )
        return await self.call(build(delete_acls.DeleteAclsRequest, filters=(matching,)))

    async def set_scram_password(
        self, user: str, mechanism: ScramMechanism, password: str, iterations: int
    ) -> Response:
        """AlterUserScramCredentials upserting `user`'s credential: the password is salted
        here, as a client salts it, and never sent on."""
        salt = os.urandom(32)
        upsertion = build(
            alter_scram.ScramCredentialUpsertion,
            name=user,
            mechanism=i8(mechanism),
            iterations=i32(iterations),
            salt=salt,
            salted_password=salted_password(mechanism, password, salt, iterations),
        )
        return await self.call(
            build(
                alter_scram.AlterUserScramCredentialsRequest, deletions=(), upsertions=(upsertion,)
            )
        )

    async def delete_scram_credential(self, user: str, mechanism: ScramMechanism) -> Response:
        deletion = build(alter_scram.ScramCredentialDeletion, name=user, mechanism=i8(mechanism))
        return await self.call(
            build(
                alter_scram.AlterUserScramCredentialsRequest, deletions=(deletion,), upsertions=()
            )
        )

    async def alter_quota(
        self, entity: Sequence[tuple[str, str | None]], key: str, value: float | None
    ) -> Response:
        """AlterClientQuotas of one key of one entity (`value` None: remove it)."""
        entry = build(
            alter_quotas.EntryData,
            entity=tuple(
                alter_quotas.EntityData(entity_type=kind, entity_name=name) for kind, name in entity
            ),
            ops=(
                build(
                    alter_quotas.OpData,
                    key=key,
                    value=f64(value or 0.0),
                    remove=value is None,
                ),
            ),
        )
        return await self.call(
            build(alter_quotas.AlterClientQuotasRequest, entries=(entry,), validate_only=False)
        )
