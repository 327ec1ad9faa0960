"""A broker that was stopped while topics were created and deleted, and the metadata log
was truncated behind a snapshot, catches up from the controller's snapshot: its Metadata
lists the created topics and not the deleted ones, and it dropped its replica of a topic
deleted while it was away."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from clients import create_topic, wait_until
from confluent_kafka.admin import AdminClient
from harness import ClusterNode
from test_cluster import raw_metadata

pytestmark = pytest.mark.timeout(180)

METADATA_DIR = "__cluster_metadata-0"


def metadata_segment_bases(node: ClusterNode) -> list[int]:
    return sorted(int(p.stem) for p in (Path(node.data_dir) / METADATA_DIR).glob("*.log"))


def topic_names(node: ClusterNode) -> set[str]:
    return {str(t.name) for t in raw_metadata(node.bootstrap).topics}


def test_stopped_broker_catches_up_from_a_metadata_snapshot(cluster_factory) -> None:
    cluster = cluster_factory(
        config={
            "metadata.log.segment.bytes": "1024",
            "metadata.log.max.snapshot.interval.ms": "200",
            "metadata.log.max.record.bytes.between.snapshots": "1024",
            "auto.leader.rebalance.enable": "false",
        }
    )
    prefix = f"meta-{uuid.uuid4().hex[:6]}"
    doomed = f"{prefix}-doomed"
    create_topic(cluster.bootstrap, doomed, partitions=1, replication_factor=3)
    away = cluster.nodes[-1]
    wait_until(
        lambda: (Path(away.data_dir) / f"{doomed}-0").is_dir(),
        30,
        f"broker {away.node_id} to host a replica of {doomed}",
    )
    away.stop()
    others = [n for n in cluster.nodes if n is not away]
    end_before = metadata_segment_bases(away)[-1]

    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in others)})
    created = [f"{prefix}-new-{i}" for i in range(6)]
    for name in created:
        create_topic(admin_bootstrap(others), name, partitions=2, replication_factor=3)
    temporary = [f"{prefix}-tmp-{i}" for i in range(3)]
    for name in temporary:
        create_topic(admin_bootstrap(others), name, partitions=1, replication_factor=3)
    for future in admin.delete_topics([doomed, *temporary], operation_timeout=30).values():
        future.result(timeout=35)

    # Both remaining brokers truncate their metadata log behind a snapshot, past
    # everything the stopped broker has.
    wait_until(
        lambda: all(metadata_segment_bases(n)[0] > end_before for n in others),
        30,
        "the metadata log truncated behind a snapshot on the running brokers",
    )

    away.start()
    expected_gone = {doomed, *temporary}

    def caught_up() -> bool:
        names = topic_names(away)
        return set(created) <= names and not names & expected_gone

    wait_until(caught_up, 30, f"broker {away.node_id} to list exactly the surviving topics")
    # It caught up from the snapshot (its own log now starts past what it had), and its
    # replica of the deleted topic is gone while those of the new topics exist.
    assert metadata_segment_bases(away)[0] > end_before
    wait_until(
        lambda: not (Path(away.data_dir) / f"{doomed}-0").exists(),
        30,
        f"broker {away.node_id} to delete its replica of {doomed}",
    )
    for name in created:
        for partition in (0, 1):
            assert (Path(away.data_dir) / f"{name}-{partition}").is_dir()


def admin_bootstrap(nodes: list[ClusterNode]) -> str:
    return ",".join(n.bootstrap for n in nodes)
