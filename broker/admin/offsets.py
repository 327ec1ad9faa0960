"""Partition offsets through the Kafka protocol (ListOffsets): what the group, share-group,
backup and restore commands read before they describe or move committed offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from raftka.broker.admin.common import Target

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, OffsetSpec


def list_offsets(
    target: Target, admin: AdminClient, partitions: Sequence[tuple[str, int]], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    """ListOffsets for every partition with one OffsetSpec (earliest, latest, a timestamp)."""
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=target.timeout_s
    )
    return {
        (tp.topic, tp.partition): target.result(f, f"offsets of {tp.topic}[{tp.partition}]").offset
        for tp, f in futures.items()
    }


def log_end_offsets(
    target: Target, admin: AdminClient, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Each partition's log-end offset (ListOffsets with OffsetSpec.latest)."""
    return list_offsets(target, admin, partitions, latest_spec())


def earliest_spec() -> OffsetSpec:
    """OffsetSpec.earliest(), typed: confluent-kafka leaves the classmethod unannotated."""
    from confluent_kafka.admin import OffsetSpec

    return cast("OffsetSpec", OffsetSpec.earliest())  # type: ignore[no-untyped-call]


def latest_spec() -> OffsetSpec:
    """OffsetSpec.latest(), typed: confluent-kafka leaves the classmethod unannotated."""
    from confluent_kafka.admin import OffsetSpec

    return cast("OffsetSpec", OffsetSpec.latest())  # type: ignore[no-untyped-call]
