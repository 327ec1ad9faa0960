"""`build`: one call serves every version of an entity, and a misspelled field is refused."""

import datetime

import pytest
from kio.schema.describe_acls.v1.response import DescribeAclsResponse as DescribeAclsResponseV1
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v0.response import MetadataResponseBroker as MetadataResponseBrokerV0
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12

from raftka.protocol.api import build


def test_a_field_of_another_version_is_dropped() -> None:
    # allow_auto_topic_creation arrived in v4: a v0 request is built without it.
    both = {
        "topics": (),
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    for _ in range(2):  # worked out on the first call, taken from the cache on the second
        v0 = build(MetadataRequestV0, **both)
        v12 = build(MetadataRequestV12, **both)
        assert v0 == MetadataRequestV0(topics=())
        assert v12.allow_auto_topic_creation is False


def test_a_field_no_version_has_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(TypeError, match=r"DescribeAclsResponse has no field eror_code"):
            build(
                DescribeAclsResponseV1,
                throttle_time=datetime.timedelta(0),
                eror_code=ErrorCode.none,
                error_message=None,
                resources=(),
            )


def test_a_nested_entity_is_checked_against_its_own_versions() -> None:
    # rack is a field of MetadataResponseBroker from v1 on: dropped from a v0 one.
    broker = build(MetadataResponseBrokerV0, node_id=1, host="h", port=9092, rack="r")
    assert broker == MetadataResponseBrokerV0(node_id=1, host="h", port=9092)
    with pytest.raises(TypeError, match=r"MetadataResponseBroker has no field hostname "):
        build(MetadataResponseBrokerV0, node_id=1, hostname="h", port=9092, rack="r")
