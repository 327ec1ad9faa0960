"""Partition offsets through the Kafka protocol (ListOffsets): what the group, share-group,
backup and restore commands read before they describe or move committed offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raftka.broker.admin.common import Target


def list_offsets(
    target: Target, admin: Any, partitions: Sequence[tuple[str, int]], spec: Any
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
    target: Target, admin: Any, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Each partition's log-end offset (ListOffsets with OffsetSpec.latest)."""
    from confluent_kafka.admin import OffsetSpec

    return list_offsets(target, admin, partitions, OffsetSpec.latest())
