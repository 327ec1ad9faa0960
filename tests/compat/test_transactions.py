"""The transaction coordinator with real clients: confluent-kafka's transactional producer
(init_transactions, fencing by a second instance), FindCoordinator(TRANSACTION) on a
3-node cluster, Describe/ListTransactions, and bad input over a raw socket.

Commit and abort of transactions with data need the partition leaders' markers, which land
with WriteTxnMarkers; these tests cover what the coordinator answers by itself.
"""

from __future__ import annotations

import datetime
import json
import time
import uuid
from typing import Any

import pytest
from brokers import Brokers
from clients import (
    RawConnection,
    create_topic,
    find_transaction_coordinator,
    partition_for,
    run_raftka,
    wait_until,
)
from harness import BrokerProcess, ClusterProcess

STATE_PARTITIONS = 5
CONFIG = {
    "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    "transaction.max.timeout.ms": "120000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

NONE = 0
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_NOT_FOUND = 105
PRODUCER_FENCED = 90
RETRIABLE = frozenset({NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, 15})


@pytest.fixture(scope="module")
def txn_broker(module_brokers: Brokers) -> BrokerProcess:
    return module_brokers.broker(CONFIG, name="txn-broker")


def call(bootstrap: str, request: Any, response_cls: type) -> Any:
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        return conn.recv_response(response_cls)


def init_producer_id(
    bootstrap: str, transactional_id: str, timeout_ms: int = 60_000, version: int = 4
) -> Any:
    """InitProducerId, retried while the coordinator loads or a transaction ends."""
    import importlib

    req = importlib.import_module(f"kio.schema.init_producer_id.v{version}.request")
    resp = importlib.import_module(f"kio.schema.init_producer_id.v{version}.response")
    request = req.InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
    )
    find_transaction_coordinator(bootstrap, transactional_id)
    deadline = time.monotonic() + 30
    while True:
        answer = call(bootstrap, request, resp.InitProducerIdResponse)
        if int(answer.error_code) not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def describe(bootstrap: str, transactional_id: str, retriable: frozenset[int] = RETRIABLE) -> Any:
    """DescribeTransactions v0 of one id (its start time as Kafka's int64 milliseconds),
    retried for up to 30 s while the answer's error is `retriable` (its coordinator
    loads or moves)."""
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

    from raftka.broker.admin.transactions import DescribeTransactionsResponseV0

    find_transaction_coordinator(bootstrap, transactional_id)
    deadline = time.monotonic() + 30
    while True:
        answer = call(
            bootstrap,
            DescribeTransactionsRequest(transactional_ids=(transactional_id,)),
            DescribeTransactionsResponseV0,
        )
        [state] = answer.transaction_states
        if int(state.error_code) not in retriable or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def end_txn(bootstrap: str, transactional_id: str, pid: int, epoch: int, version: int) -> int:
    import importlib

    req = importlib.import_module(f"kio.schema.end_txn.v{version}.request")
    resp = importlib.import_module(f"kio.schema.end_txn.v{version}.response")
    answer = call(
        bootstrap,
        req.EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=True,
        ),
        resp.EndTxnResponse,
    )
    return int(answer.error_code)


def add_partitions_v3(
    bootstrap: str, transactional_id: str, pid: int, epoch: int, topics: dict[str, list[int]]
) -> dict[tuple[str, int], int]:
    from kio.schema.add_partitions_to_txn.v3.request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    from kio.schema.add_partitions_to_txn.v3.response import AddPartitionsToTxnResponse

    answer = call(
        bootstrap,
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(
                AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()
            ),
        ),
        AddPartitionsToTxnResponse,
    )
    return {
        (topic.name, int(p.partition_index)): int(p.partition_error_code)
        for topic in answer.results_by_topic_v3_and_below
        for p in topic.results_by_partition
    }


# -- confluent-kafka --------------------------------------------------------------------------


def test_init_transactions_and_a_second_instance_fences_the_first(txn_broker: BrokerProcess):
    from confluent_kafka import KafkaException, Producer

    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(txn_broker.bootstrap, topic)
    transactional_id = f"app-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": txn_broker.bootstrap, "transactional.id": transactional_id}
    first = Producer(conf)
    first.init_transactions(30)
    second = Producer(conf)
    second.init_transactions(30)
    state = describe(txn_broker.bootstrap, transactional_id)
    assert (int(state.error_code), state.transaction_state) == (NONE, "Empty")
    assert int(state.producer_epoch) == 1

    first.begin_transaction()
    first.produce(topic, b"from the fenced instance")
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.name() == "_FENCED", error
    # Nothing of the fenced producer entered the transaction.
    state = describe(txn_broker.bootstrap, transactional_id)
    assert (state.transaction_state, state.topics) == ("Empty", ())


# -- raw requests: the coordinator's answers --------------------------------------------------


def test_describe_and_list_transactions(txn_broker: BrokerProcess):
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    from kio.schema.list_transactions.v1.response import ListTransactionsResponse

    transactional_id = f"listed-{uuid.uuid4().hex[:8]}"
    init = init_producer_id(txn_broker.bootstrap, transactional_id, timeout_ms=45_000)
    assert int(init.error_code) == NONE
    state = describe(txn_broker.bootstrap, transactional_id)
    assert int(state.error_code) == NONE
    assert (state.transaction_state, int(state.producer_id), int(state.producer_epoch)) == (
        "Empty",
        int(init.producer_id),
        0,
    )
    assert state.transaction_timeout == datetime.timedelta(seconds=45)
    assert int(describe(txn_broker.bootstrap, "never-seen").error_code) == (
        TRANSACTIONAL_ID_NOT_FOUND
    )

    def listed(**filters: Any) -> Any:
        return call(
            txn_broker.bootstrap, ListTransactionsRequest(**filters), ListTransactionsResponse
        )

    everything = listed(state_filters=(), producer_id_filters=())
    assert int(everything.error_code) == NONE
    assert transactional_id in {t.transactional_id for t in everything.transaction_states}
    by_id = listed(state_filters=(), producer_id_filters=(int(init.producer_id),))
    assert [(t.transactional_id, t.transaction_state) for t in by_id.transaction_states] == [
        (transactional_id, "Empty")
    ]
    ongoing = listed(state_filters=("Ongoing", "Bogus"), producer_id_filters=())
    assert ongoing.unknown_state_filters == ("Bogus",)
    assert transactional_id not in {t.transactional_id for t in ongoing.transaction_states}

    result = run_raftka(
        "transactions", "list", "--bootstrap-servers", txn_broker.bootstrap, "--output", "json"
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["transactions"]
    assert {
        "transactional_id": transactional_id,
        "coordinator": 1,
        "producer_id": int(init.producer_id),
        "state": "Empty",
    } in rows
    result = run_raftka(
        "transactions", "describe", transactional_id, "--bootstrap-servers", txn_broker.bootstrap
    )
    assert result.returncode == 0, result.stderr
    assert transactional_id in result.stdout and "Empty" in result.stdout
    missing = run_raftka(
        "transactions", "describe", "never-seen", "--bootstrap-servers", txn_broker.bootstrap
    )
    assert missing.returncode != 0
    assert "never-seen" in missing.stderr


def test_bad_input_gets_kafkas_errors_and_changes_nothing(txn_broker: BrokerProcess):
    bootstrap = txn_broker.bootstrap
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    transactional_id = f"bad-{uuid.uuid4().hex[:8]}"

    too_long = init_producer_id(bootstrap, transactional_id, timeout_ms=120_001)
    assert int(too_long.error_code) == INVALID_TRANSACTION_TIMEOUT
    assert int(describe(bootstrap, transactional_id).error_code) == TRANSACTIONAL_ID_NOT_FOUND

    assert end_txn(bootstrap, f"unknown-{transactional_id}", 1, 0, 3) == (
        INVALID_PRODUCER_ID_MAPPING
    )

    init = init_producer_id(bootstrap, transactional_id)
    assert int(init.error_code) == NONE
    pid = int(init.producer_id)
    # A stale epoch: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (Kafka).
    assert end_txn(bootstrap, transactional_id, pid, 7, 3) == PRODUCER_FENCED
    assert end_txn(bootstrap, transactional_id, pid, 7, 1) == INVALID_PRODUCER_EPOCH
    assert end_txn(bootstrap, transactional_id, pid + 1, 0, 3) == INVALID_PRODUCER_ID_MAPPING
    # Nothing to end yet.
    assert end_txn(bootstrap, transactional_id, pid, 0, 3) == INVALID_TXN_STATE

    errors = add_partitions_v3(
        bootstrap, transactional_id, pid, 0, {topic: [0, 1, 9], "no-such-topic-x": [0]}
    )
    assert errors == {
        (topic, 0): OPERATION_NOT_ATTEMPTED,
        (topic, 1): OPERATION_NOT_ATTEMPTED,
        (topic, 9): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic-x", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    stale = add_partitions_v3(bootstrap, transactional_id, pid, 3, {topic: [0]})
    assert stale == {(topic, 0): PRODUCER_FENCED}

    state = describe(bootstrap, transactional_id)
    assert (state.transaction_state, int(state.producer_epoch), state.topics) == ("Empty", 0, ())

    # The good request then works: the transaction is Ongoing with the partition.
    assert add_partitions_v3(bootstrap, transactional_id, pid, 0, {topic: [1]}) == {
        (topic, 1): NONE
    }
    state = describe(bootstrap, transactional_id)
    assert state.transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in state.topics] == [(topic, (1,))]

    # AddOffsetsToTxn adds the group's __consumer_offsets partition.
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.add_offsets_to_txn.v3.response import AddOffsetsToTxnResponse

    added = call(
        bootstrap,
        AddOffsetsToTxnRequest(
            transactional_id=transactional_id, producer_id=pid, producer_epoch=0, group_id="g"
        ),
        AddOffsetsToTxnResponse,
    )
    assert int(added.error_code) == NONE
    offsets_partition = partition_for("g", 50)  # offsets.topic.num.partitions
    topics = {t.topic: t.partitions for t in describe(bootstrap, transactional_id).topics}
    assert topics == {topic: (1,), "__consumer_offsets": (offsets_partition,)}


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    txn_broker: BrokerProcess,
):
    bootstrap = txn_broker.bootstrap
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    transactional_id = f"slow-{uuid.uuid4().hex[:8]}"
    init = init_producer_id(bootstrap, transactional_id, timeout_ms=1500)
    pid = int(init.producer_id)
    assert add_partitions_v3(bootstrap, transactional_id, pid, 0, {topic: [0]}) == {
        (topic, 0): NONE
    }

    def aborted() -> Any:
        state = describe(bootstrap, transactional_id)
        return state if state.transaction_state in ("PrepareAbort", "CompleteAbort") else None

    state = wait_until(aborted, 30, "the coordinator aborts the timed-out transaction")
    assert int(state.producer_epoch) == 1  # bumped: the producer at epoch 0 is fenced
    assert end_txn(bootstrap, transactional_id, pid, 0, 3) == PRODUCER_FENCED


# -- a 3-node cluster ----------------------------------------------------------------------------


def coordinator_answer(bootstrap: str, transactional_id: str) -> Any:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse

    answer = call(
        bootstrap,
        FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,)),
        FindCoordinatorResponse,
    )
    [coordinator] = answer.coordinators
    return coordinator


def state_partition_leaders(bootstrap: str) -> dict[int, int]:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    answer = call(
        bootstrap,
        MetadataRequest(
            topics=(MetadataRequestTopic(name="__transaction_state", topic_id=uuid.UUID(int=0)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        MetadataResponse,
    )
    [topic] = answer.topics
    return {int(p.partition_index): int(p.leader_id) for p in topic.partitions}


def test_find_coordinator_on_a_cluster_names_the_leader_of_the_ids_partition(cluster_factory):
    from confluent_kafka import Producer

    cluster: ClusterProcess = cluster_factory(3, config=CONFIG)
    bootstrap = cluster.nodes[0].bootstrap
    ids = [f"cluster-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]

    def settled() -> bool:
        answers = [coordinator_answer(bootstrap, t) for t in ids]
        return all(int(a.error_code) == NONE for a in answers)

    wait_until(settled, 60, "FindCoordinator(TRANSACTION) answers")

    def matches() -> bool:
        leaders = state_partition_leaders(bootstrap)
        for transactional_id in ids:
            coordinator = coordinator_answer(bootstrap, transactional_id)
            expected = leaders.get(partition_for(transactional_id, STATE_PARTITIONS), -1)
            if int(coordinator.node_id) != expected or expected < 0:
                return False
        return True

    wait_until(matches, 30, "every id's coordinator is its partition's leader")

    # A transactional producer finds its coordinator on whichever broker that is.
    for transactional_id in ids[:3]:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        producer.init_transactions(60)
        coordinator = coordinator_answer(bootstrap, transactional_id)
        node = cluster.node(int(coordinator.node_id))
        state = describe(node.bootstrap, transactional_id)
        assert (int(state.error_code), state.transaction_state) == (NONE, "Empty")
        # Any other broker says it is not the coordinator (at once: that answer is final
        # here, so it is not retried).
        other = next(n for n in cluster.nodes if n.node_id != int(coordinator.node_id))
        answer = describe(other.bootstrap, transactional_id, RETRIABLE - {NOT_COORDINATOR})
        assert int(answer.error_code) == NOT_COORDINATOR


def test_a_new_coordinator_loads_the_ids_of_a_killed_one(cluster_factory):
    cluster: ClusterProcess = cluster_factory(3, config=CONFIG)
    bootstrap = cluster.nodes[0].bootstrap
    transactional_id = f"failover-{uuid.uuid4().hex[:6]}"
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, replication_factor=3)

    def coordinator_node() -> Any:
        found = coordinator_answer(bootstrap, transactional_id)
        return cluster.node(int(found.node_id)) if int(found.error_code) == NONE else None

    first = wait_until(coordinator_node, 60, "a transaction coordinator")
    init = init_producer_id(first.bootstrap, transactional_id)
    assert int(init.error_code) == NONE
    pid = int(init.producer_id)
    assert add_partitions_v3(first.bootstrap, transactional_id, pid, 0, {topic: [0]}) == {
        (topic, 0): NONE
    }
    first.kill()
    survivors = [n for n in cluster.nodes if n is not first]

    def moved() -> Any:
        for node in survivors:
            found = coordinator_answer(node.bootstrap, transactional_id)
            if int(found.error_code) == NONE and int(found.node_id) != first.node_id:
                state = describe(cluster.node(int(found.node_id)).bootstrap, transactional_id)
                if int(state.error_code) == NONE:
                    return state
        return None

    state = wait_until(moved, 60, "the id served by a new coordinator")
    assert (state.transaction_state, int(state.producer_id), int(state.producer_epoch)) == (
        "Ongoing",
        pid,
        0,
    )
    assert [(t.topic, t.partitions) for t in state.topics] == [(topic, (0,))]


def test_describe_producers_shows_an_open_transactions_start(txn_broker: BrokerProcess):
    """DescribeProducers (what `kafka-transactions.sh find-hanging` reads): the producer of
    an open transaction with its first offset, cleared once the transaction commits."""
    from confluent_kafka import Producer
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.describe_producers.v0.response import DescribeProducersResponse

    bootstrap = txn_broker.bootstrap
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dp-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    def described() -> dict[int, Any]:
        answer = call(
            bootstrap,
            DescribeProducersRequest(
                topics=(TopicRequest(name=topic, partition_indexes=(0, 1, 7)),)
            ),
            DescribeProducersResponse,
        )
        [found] = answer.topics
        return {int(p.partition_index): p for p in found.partitions}

    partitions = described()
    assert int(partitions[7].error_code) == UNKNOWN_TOPIC_OR_PARTITION
    assert (int(partitions[1].error_code), partitions[1].active_producers) == (NONE, ())
    [open_txn] = partitions[0].active_producers
    assert int(partitions[0].error_code) == NONE
    assert (int(open_txn.current_txn_start_offset), int(open_txn.last_sequence)) == (0, 2)

    producer.commit_transaction(30)

    def committed() -> Any:
        [entry] = described()[0].active_producers
        return entry if int(entry.current_txn_start_offset) == -1 else None

    entry = wait_until(committed, 30, "the commit marker ends the transaction on partition 0")
    assert int(entry.producer_id) == int(open_txn.producer_id)
