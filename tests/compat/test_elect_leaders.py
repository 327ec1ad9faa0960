"""Preferred-leader election with real clients: ElectLeaders through the Java Admin,
confluent-kafka's AdminClient and `raftka cluster elect-leaders` on a 3-broker cluster
(leadership moves back to each partition's first replica after a broker restart, while an
acks=all producer loses nothing), automatic rebalancing with a short check interval, and
the ALTER-on-cluster ACL ElectLeaders needs."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import create_topic, run_raftka, wait_until
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from harness import ClusterProcess
from secured import password, sasl_plain_client, start_sasl_broker
from test_cluster import ContinuousProducer, check_acked_records, raw_metadata, read_partition

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
ELECTION_NOT_NEEDED = 84
CLUSTER_AUTHORIZATION_FAILED = 31
TIMEOUT_S = 30


def leadership(cluster: ClusterProcess, topic: str) -> dict[int, dict[str, Any]]:
    """partition -> {leader, replicas (in order, the first preferred), isr} from the first
    running broker that answers with a leader for every partition."""
    last: Exception | None = None
    for node in cluster.running():
        try:
            md = raw_metadata(node.bootstrap, [topic])
        except Exception as exc:  # noqa: BLE001 - the next node may answer
            last = exc
            continue
        (t,) = [t for t in md.topics if t.name == topic]
        found = {
            int(p.partition_index): {
                "leader": int(p.leader_id),
                "replicas": [int(r) for r in p.replica_nodes],
                "isr": sorted(int(r) for r in p.isr_nodes),
            }
            for p in t.partitions
        }
        if len(found) == PARTITIONS and all(s["leader"] >= 0 for s in found.values()):
            return found
    raise AssertionError(f"no broker reports a leader for every partition of {topic}") from last


def all_in_sync(cluster: ClusterProcess, topic: str) -> dict[int, dict[str, Any]] | None:
    state = leadership(cluster, topic)
    return state if all(len(s["isr"]) == 3 for s in state.values()) else None


def all_preferred(cluster: ClusterProcess, topic: str) -> dict[int, dict[str, Any]] | None:
    state = leadership(cluster, topic)
    return state if all(s["leader"] == s["replicas"][0] for s in state.values()) else None


def new_cluster_topic(cluster_factory: Any, config: dict[str, str]) -> tuple[ClusterProcess, str]:
    cluster = cluster_factory(config=config)
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    wait_until(lambda: all_in_sync(cluster, topic), 30, f"ISR of 3 for every partition of {topic}")
    return cluster, topic


def restart_broker_1(cluster: ClusterProcess, topic: str) -> None:
    """Stop broker 1 (its partitions' leadership moves to others), start it again and wait
    until it has caught up on every partition."""
    node = cluster.node(1)
    node.stop()
    state = wait_until(
        lambda: (
            (s := leadership(cluster, topic)) and all(p["leader"] != 1 for p in s.values()) and s
        ),
        15,
        "leadership away from the stopped broker 1",
    )
    assert all(p["leader"] != 1 for p in state.values()), state
    node.start()
    wait_until(lambda: all_in_sync(cluster, topic), 60, "broker 1 back in sync everywhere")


def elect(
    admin: AdminClient, election_type: ElectionType, tps: list[TopicPartition] | None
) -> dict:
    """(topic, partition) -> error code (None: elected) of one elect_leaders call."""
    # No request_timeout: confluent-kafka 2.16 raises SystemError for any keyword here.
    results = admin.elect_leaders(election_type, tps).result(timeout=TIMEOUT_S + 5)
    return {
        (tp.topic, tp.partition): None if error is None else _code(error)
        for tp, error in results.items()
    }


def _code(error: Any) -> int:
    """The error code of a KafkaError, or of the KafkaException carrying one."""
    return int(error.args[0].code() if isinstance(error, KafkaException) else error.code())


def test_preferred_election_moves_leadership_back_and_loses_nothing(
    cluster_factory, java_tool
) -> None:
    cluster, topic = new_cluster_topic(cluster_factory, {"auto.leader.rebalance.enable": "false"})
    state = leadership(cluster, topic)
    watched = min(p for p, s in state.items() if s["replicas"][0] == 1)
    producer = ContinuousProducer(cluster.bootstrap, topic, partition=watched, count=4000, rate=100)
    producer.start()

    restart_broker_1(cluster, topic)
    before = leadership(cluster, topic)
    moved = {p for p, s in before.items() if s["leader"] != s["replicas"][0]}
    assert watched in moved, before

    # The Java Admin (kafka-leader-election.sh's client), every partition: those that already
    # have their preferred leader are left out of the answer.
    rows = java_tool.json("elect-leaders", cluster.bootstrap, "preferred", "all", timeout=90)
    ours = [r for r in rows if r["topic"] == topic]
    assert all(r["error"] is None for r in ours), ours
    assert {r["partition"] for r in ours} == moved, (ours, before)
    after = wait_until(lambda: all_preferred(cluster, topic), 10, "preferred leaders everywhere")
    print(f"leaders before {before}\nleaders after {after}")

    # Asked again, partition by partition: nothing to do.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    again = elect(admin, ElectionType.PREFERRED, tps)
    assert again == {(topic, p): ELECTION_NOT_NEEDED for p in range(PARTITIONS)}, again

    # Unclean elections are refused: Raft never elects an out-of-date replica.
    unclean = elect(admin, ElectionType.UNCLEAN, tps[:2])
    assert unclean == {(topic, p): ELECTION_NOT_NEEDED for p in range(2)}, unclean
    [row] = java_tool.json("elect-leaders", cluster.bootstrap, "unclean", f"{topic}:0")
    assert row["error"] == "ELECTION_NOT_NEEDED" and "unclean" in row["message"], row

    # Its records spanned the restart and both elections: enough.
    producer.finish(stop=True)
    records = read_partition(cluster.bootstrap, topic, watched)
    duplicates = check_acked_records(producer, records, expect_no_duplicates=False)
    print(f"{len(producer.acked)} acked records all read back ({duplicates} duplicates)")


def test_raftka_cluster_elect_leaders(cluster_factory) -> None:
    cluster, topic = new_cluster_topic(cluster_factory, {"auto.leader.rebalance.enable": "false"})
    restart_broker_1(cluster, topic)
    bootstrap = cluster.node(2).bootstrap  # a broker that leads only some of them
    done = run_raftka("cluster", "elect-leaders", "--topic", topic, "--output", "json",
                      "--bootstrap-servers", bootstrap, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["partitions"]
    assert [r["partition"] for r in results] == list(range(PARTITIONS)), results
    assert {r["error"] for r in results} <= {None, "ELECTION_NOT_NEEDED"}, results
    assert any(r["error"] is None for r in results), results
    wait_until(lambda: all_preferred(cluster, topic), 10, "preferred leaders everywhere")

    table = run_raftka("cluster", "elect-leaders", "--topic", topic, "--partition", "0",
                       "--bootstrap-servers", bootstrap, timeout=90)  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "ELECTION_NOT_NEEDED" in table.stdout, table.stdout
    everything = run_raftka("cluster", "elect-leaders", "--all",
                            "--bootstrap-servers", bootstrap, timeout=90)  # fmt: skip
    assert everything.returncode == 0, everything.stderr
    assert "Every partition already has its preferred leader." in everything.stdout, (
        everything.stdout
    )
    unclean = run_raftka("cluster", "elect-leaders", "--topic", topic, "--partition", "1",
                         "--election-type", "unclean", "--bootstrap-servers", bootstrap,
                         timeout=90)  # fmt: skip
    assert unclean.returncode == 0, unclean.stderr
    assert "ELECTION_NOT_NEEDED" in unclean.stdout and "unclean" in unclean.stdout, unclean.stdout
    missing = run_raftka("cluster", "elect-leaders", "--topic", topic, "--partition", "99",
                         "--bootstrap-servers", bootstrap, timeout=90)  # fmt: skip
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.stdout, missing.stdout


def test_a_new_topic_is_led_by_its_preferred_replicas_from_the_start(cluster_factory) -> None:
    """As Kafka's controller makes a new partition's first replica its leader: each new
    partition's preferred replica campaigns at once, so with no rebalancing at all (it would
    move leaders only after 300 s by default, here never) the leaders are spread as placement
    spread the preferred replicas, two per broker, not by whose election timer fired first."""
    cluster = cluster_factory(config={"auto.leader.rebalance.enable": "false"})
    for replication_factor in (3, 2, 3):
        topic = f"new-rf{replication_factor}-{uuid.uuid4().hex[:8]}"
        create_topic(
            cluster.bootstrap, topic, partitions=PARTITIONS, replication_factor=replication_factor
        )
        state = wait_until(
            lambda topic=topic: all_preferred(cluster, topic),
            30,
            f"every partition of {topic} led by its preferred replica",
        )
        per_broker = {n: sum(1 for s in state.values() if s["leader"] == n) for n in (1, 2, 3)}
        assert per_broker == {1: 2, 2: 2, 3: 2}, state


def test_auto_rebalance_returns_leadership_after_a_restart(cluster_factory) -> None:
    cluster, topic = new_cluster_topic(
        cluster_factory, {"leader.imbalance.check.interval.seconds": "2"}
    )
    wait_until(lambda: all_preferred(cluster, topic), 60, "leaders rebalanced after creation")
    restart_broker_1(cluster, topic)
    state = wait_until(
        lambda: all_preferred(cluster, topic), 60, "leaders rebalanced by themselves"
    )
    assert sum(1 for s in state.values() if s["leader"] == 1) == sum(
        1 for s in state.values() if s["replicas"][0] == 1
    ), state
    assert "handing leadership to its preferred replica" in "".join(
        n.log_tail(400) for n in cluster.nodes
    )


# -- the ACL ElectLeaders needs ------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(module_brokers: Brokers) -> str:
    """One broker with the StandardAuthorizer and a SASL_PLAINTEXT listener; its address."""
    users = ("admin", "alice")
    return start_sasl_broker(module_brokers, users, name="elect-acl-broker").address


def sasl_admin(address: str, user: str) -> AdminClient:
    return AdminClient(sasl_plain_client(address, user))


def test_elect_leaders_needs_alter_on_the_cluster(secured: str) -> None:
    admin = sasl_admin(secured, "admin")
    topic = f"elect-acl-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT_S)
    tps = [TopicPartition(topic, 0)]
    alice = sasl_admin(secured, "alice")
    with pytest.raises(KafkaException) as refused:
        elect(alice, ElectionType.PREFERRED, tps)
    assert refused.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED, refused.value
    cli = run_raftka("cluster", "elect-leaders", "--topic", topic, "--partition", "0",
                     "--bootstrap-servers", secured, "--security-protocol", "SASL_PLAINTEXT",
                     "--sasl-mechanism", "PLAIN", "--sasl-username", "alice",
                     "--sasl-password", password("alice"), timeout=90)  # fmt: skip
    assert cli.returncode == 1, cli.stdout
    assert "CLUSTER_AUTHORIZATION_FAILED" in cli.stderr and "ALTER" in cli.stderr, cli.stderr

    binding = AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
        "User:alice", "*", AclOperation.ALTER, AclPermissionType.ALLOW,
    )  # fmt: skip
    admin.create_acls([binding])[binding].result(timeout=TIMEOUT_S)
    allowed = wait_until(
        lambda: (r := _try_elect(alice, tps)) != CLUSTER_AUTHORIZATION_FAILED and r,
        15,
        "alice allowed once granted ALTER on the cluster",
    )
    assert allowed == {(topic, 0): ELECTION_NOT_NEEDED}, allowed


def _try_elect(admin: AdminClient, tps: list[TopicPartition]) -> Any:
    try:
        return elect(admin, ElectionType.PREFERRED, tps)
    except KafkaException as exc:
        return exc.args[0].code()
