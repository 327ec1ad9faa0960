"""TxnOffsetCommit against a real broker, with raw kio requests: the per-partition answers, and
OffsetFetch while the transaction's offsets are pending (KIP-447 require_stable).

A transaction's offsets become visible only through its COMMIT marker, which the transaction
coordinator writes; until that path exists these tests stop at the pending state (and its
survival of a broker restart, which replays the transactional batch from the log).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

from clients import (
    COORDINATOR_RETRIABLE,
    RawConnection,
    api_versions_v0,
    partition_for,
    retry_retriable,
    wait_until,
)
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_req
from kio.schema.add_offsets_to_txn.v3 import response as add_offsets_resp
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_coordinator_req
from kio.schema.find_coordinator.v3 import response as find_coordinator_resp
from kio.schema.init_producer_id.v4 import request as init_pid_req
from kio.schema.init_producer_id.v4 import response as init_pid_resp
from kio.schema.offset_commit.v8 import request as commit_req
from kio.schema.offset_commit.v8 import response as commit_resp
from kio.schema.offset_fetch.v7 import request as fetch7_req
from kio.schema.offset_fetch.v7 import response as fetch7_resp
from kio.schema.offset_fetch.v8 import request as fetch8_req
from kio.schema.offset_fetch.v8 import response as fetch8_resp
from kio.schema.txn_offset_commit.v0 import request as txn0_req
from kio.schema.txn_offset_commit.v0 import response as txn0_resp
from kio.schema.txn_offset_commit.v3 import request as txn3_req
from kio.schema.txn_offset_commit.v3 import response as txn3_resp
from kio.static.primitive import i8, i16, i32, i64

E = ErrorCode
#: offsets.topic.num.partitions (Kafka's default, and the test brokers').
OFFSETS_PARTITIONS = 50


def group_id() -> str:
    return f"txn-group-{uuid.uuid4().hex[:10]}"


def find_coordinator(conn: RawConnection, group: str) -> None:
    """Look the group's coordinator up (which creates `__consumer_offsets`)."""

    def found() -> bool:
        conn.send_request(find_coordinator_req.FindCoordinatorRequest(key=group, key_type=i8(0)))
        return conn.recv_response(find_coordinator_resp.FindCoordinatorResponse).error_code == 0

    wait_until(found, 30, f"a coordinator for {group}")


def begin_offsets_transaction(conn: RawConnection, txn_id: str, group: str) -> tuple[int, int]:
    """InitProducerId for a new transactional id, then AddOffsetsToTxn for `group`, as a
    producer does before `send_offsets_to_transaction`'s TxnOffsetCommit (which Kafka 3.9
    refuses for a group not added to the transaction, KIP-890). The producer id and epoch;
    a second call for the same transactional id fences the first epoch."""

    def found() -> bool:
        conn.send_request(find_coordinator_req.FindCoordinatorRequest(key=txn_id, key_type=i8(1)))
        return conn.recv_response(find_coordinator_resp.FindCoordinatorResponse).error_code == 0

    wait_until(found, 30, f"a transaction coordinator for {txn_id}")

    def init() -> Any:
        conn.send_request(
            init_pid_req.InitProducerIdRequest(
                transactional_id=txn_id,
                transaction_timeout=datetime.timedelta(minutes=1),
            )
        )
        return conn.recv_response(init_pid_resp.InitProducerIdResponse)

    # CONCURRENT_TRANSACTIONS while an earlier epoch's transaction is being aborted.
    initialized = retry_retriable(
        init, retriable=COORDINATOR_RETRIABLE | {E.concurrent_transactions}
    )
    assert initialized.error_code == E.none, initialized
    pid, epoch = int(initialized.producer_id), int(initialized.producer_epoch)

    def add() -> Any:
        conn.send_request(
            add_offsets_req.AddOffsetsToTxnRequest(
                transactional_id=txn_id,
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                group_id=group,
            )
        )
        return conn.recv_response(add_offsets_resp.AddOffsetsToTxnResponse)

    added = retry_retriable(add)
    assert added.error_code == E.none, added
    return pid, epoch


def txn_commit_v3(
    conn: RawConnection,
    group: str,
    pid: int,
    offsets: dict[tuple[str, int], int],
    *,
    epoch: int = 0,
    generation: int = -1,
    member: str = "",
    txn_id: str,
) -> dict[tuple[str, int], ErrorCode]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            txn3_req.TxnOffsetCommitRequestPartition(
                partition_index=i32(partition),
                committed_offset=i64(offset),
                committed_metadata="m",
            )
        )
    conn.send_request(
        txn3_req.TxnOffsetCommitRequest(
            transactional_id=txn_id,
            group_id=group,
            producer_id=i64(pid),
            producer_epoch=i16(epoch),
            generation_id=i32(generation),
            member_id=member,
            group_instance_id=None,
            topics=tuple(
                txn3_req.TxnOffsetCommitRequestTopic(name=name, partitions=tuple(parts))
                for name, parts in by_topic.items()
            ),
        )
    )
    response = conn.recv_response(txn3_resp.TxnOffsetCommitResponse)
    return {
        (t.name, int(p.partition_index)): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def txn_commit_until_coordinated(
    conn: RawConnection, group: str, pid: int, offsets: dict[tuple[str, int], int], **kw: Any
) -> dict[tuple[str, int], ErrorCode]:
    """TxnOffsetCommit, repeated while the coordinator is still being set up."""
    return retry_retriable(
        lambda: txn_commit_v3(conn, group, pid, offsets, **kw), codes=lambda a: a.values()
    )


def commit(conn: RawConnection, group: str, topic: str, offsets: dict[int, int]) -> None:
    def send() -> Any:
        conn.send_request(
            commit_req.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=i32(-1),
                member_id="",
                group_instance_id=None,
                topics=(
                    commit_req.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=tuple(
                            commit_req.OffsetCommitRequestPartition(
                                partition_index=i32(p),
                                committed_offset=i64(o),
                                committed_metadata="",
                            )
                            for p, o in offsets.items()
                        ),
                    ),
                ),
            )
        )
        return conn.recv_response(commit_resp.OffsetCommitResponse)

    response = retry_retriable(send)
    assert [p.error_code for t in response.topics for p in t.partitions] == [E.none] * len(offsets)


def fetch_v7(
    conn: RawConnection, group: str, topic: str, partitions: list[int], require_stable: bool
) -> dict[int, tuple[int, ErrorCode]]:
    def send() -> Any:
        conn.send_request(
            fetch7_req.OffsetFetchRequest(
                group_id=group,
                topics=(
                    fetch7_req.OffsetFetchRequestTopic(
                        name=topic, partition_indexes=tuple(i32(p) for p in partitions)
                    ),
                ),
                require_stable=require_stable,
            )
        )
        return conn.recv_response(fetch7_resp.OffsetFetchResponse)

    response = retry_retriable(send)
    assert response.error_code == E.none
    return {
        int(p.partition_index): (int(p.committed_offset), p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def fetch_v8(
    conn: RawConnection, group: str, topic: str, partitions: list[int], require_stable: bool
) -> dict[int, tuple[int, ErrorCode]]:
    def send() -> Any:
        conn.send_request(
            fetch8_req.OffsetFetchRequest(
                groups=(
                    fetch8_req.OffsetFetchRequestGroup(
                        group_id=group,
                        topics=(
                            fetch8_req.OffsetFetchRequestTopics(
                                name=topic, partition_indexes=tuple(i32(p) for p in partitions)
                            ),
                        ),
                    ),
                ),
                require_stable=require_stable,
            )
        )
        return conn.recv_response(fetch8_resp.OffsetFetchResponse)

    (answer,) = retry_retriable(send).groups
    assert answer.error_code == E.none
    return {
        int(p.partition_index): (int(p.committed_offset), p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def test_txn_offset_commit_answers_per_partition_and_stays_pending(
    bootstrap: str, new_topic: Callable[..., str], on_raftka: bool
) -> None:
    # raftka serves 0-3; Kafka 3.9 serves 0-4, whose v4 adds only the TRANSACTION_ABORTABLE error
    # (KIP-890). What follows is sent as v0 and v3, which both serve.
    low, high = api_versions_v0(bootstrap)[28]
    assert low == 0 and high >= 3, (low, high)
    if on_raftka:
        assert high == 3
    topic = new_topic(partitions=2)
    group = group_id()
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    with RawConnection(bootstrap) as conn:
        find_coordinator(conn, group)
        commit(conn, group, topic, {0: 5})
        pid, epoch = begin_offsets_transaction(conn, txn_id, group)
        # Without AddOffsetsToTxn the commit is refused and writes nothing (KIP-890): a
        # producer id that is not the transactional id's, then a group not added.
        unknown = txn_commit_until_coordinated(
            conn, group, pid + 1000, {(topic, 0): 9}, txn_id=txn_id
        )
        assert unknown == {(topic, 0): E.invalid_producer_id_mapping}
        # Kafka verifies the group's __consumer_offsets partition, not the group: another
        # group kept in the same partition as `group` would count as added.
        other = group_id()
        while partition_for(other, OFFSETS_PARTITIONS) == partition_for(group, OFFSETS_PARTITIONS):
            other = group_id()
        find_coordinator(conn, other)
        not_added = txn_commit_until_coordinated(
            conn, other, pid, {(topic, 0): 9}, epoch=epoch, txn_id=txn_id
        )
        assert not_added == {(topic, 0): E.invalid_txn_state}
        answers = txn_commit_until_coordinated(
            conn,
            group,
            pid,
            {(topic, 0): 10, (topic, 1): 20, (topic, 7): 1, ("no-such-topic", 0): 1},
            epoch=epoch,
            txn_id=txn_id,
        )
        assert answers == {
            (topic, 0): E.none,
            (topic, 1): E.none,
            (topic, 7): E.unknown_topic_or_partition,
            ("no-such-topic", 0): E.unknown_topic_or_partition,
        }
        # Pending: the last committed offset, or UNSTABLE_OFFSET_COMMIT when asked for stable.
        for fetch in (fetch_v7, fetch_v8):
            assert fetch(conn, group, topic, [0, 1], False) == {
                0: (5, E.none),
                1: (-1, E.none),
            }
            assert fetch(conn, group, topic, [0, 1], True) == {
                0: (-1, E.unstable_offset_commit),
                1: (-1, E.unstable_offset_commit),
            }
        # v0 carries no generation: accepted for the same group.
        conn.send_request(
            txn0_req.TxnOffsetCommitRequest(
                transactional_id=txn_id,
                group_id=group,
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                topics=(
                    txn0_req.TxnOffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            txn0_req.TxnOffsetCommitRequestPartition(
                                partition_index=i32(0),
                                committed_offset=i64(3),
                                committed_metadata=None,
                            ),
                        ),
                    ),
                ),
            )
        )
        v0 = conn.recv_response(txn0_resp.TxnOffsetCommitResponse)
        assert [p.error_code for t in v0.topics for p in t.partitions] == [E.none]
        # The transaction is checked first (Kafka 3.9's order), then the group: a group not
        # added answers INVALID_TXN_STATE whatever its generation; an added group that does
        # not exist, asked with a generation, answers UNKNOWN_MEMBER_ID (as Kafka 3.9 does).
        # Neither writes anything.
        refused = txn_commit_until_coordinated(
            conn, other, pid, {(topic, 0): 1}, epoch=epoch, generation=3, txn_id=txn_id
        )
        assert refused == {(topic, 0): E.invalid_txn_state}
        ghost = group_id()
        find_coordinator(conn, ghost)
        pid, epoch = begin_offsets_transaction(conn, f"{txn_id}-g", ghost)
        refused = txn_commit_until_coordinated(
            conn, ghost, pid, {(topic, 0): 1}, epoch=epoch, generation=3, txn_id=f"{txn_id}-g"
        )
        assert refused == {(topic, 0): E.unknown_member_id}
        assert fetch_v7(conn, other, topic, [0], False) == {0: (-1, E.none)}
        assert fetch_v7(conn, ghost, topic, [0], False) == {0: (-1, E.none)}


def test_pending_txn_offsets_survive_a_restart_and_fence_old_epochs(
    broker_factory: Callable[..., Any], new_topic: Callable[..., str]
) -> None:
    broker = broker_factory()
    topic = new_topic(partitions=2, bootstrap=broker.bootstrap)
    group = group_id()
    with RawConnection(broker.bootstrap) as conn:
        find_coordinator(conn, group)
        commit(conn, group, topic, {0: 5})
        txn_id = f"txn-{uuid.uuid4().hex[:8]}"
        pid, old_epoch = begin_offsets_transaction(conn, txn_id, group)
        # A second InitProducerId fences the first epoch (and aborts its transaction).
        again, epoch = begin_offsets_transaction(conn, txn_id, group)
        assert again == pid and epoch > old_epoch, (again, epoch)
        answer = txn_commit_until_coordinated(
            conn, group, pid, {(topic, 0): 10}, epoch=epoch, txn_id=txn_id
        )
        assert answer == {(topic, 0): E.none}
        # An older epoch of the same producer is a fenced instance.
        stale = txn_commit_v3(conn, group, pid, {(topic, 1): 1}, epoch=old_epoch, txn_id=txn_id)
        assert stale == {(topic, 1): E.invalid_producer_epoch}
    broker.restart()
    with RawConnection(broker.bootstrap) as conn:
        find_coordinator(conn, group)

        def fetch_all() -> Any:
            conn.send_request(
                fetch7_req.OffsetFetchRequest(group_id=group, topics=None, require_stable=False)
            )
            return conn.recv_response(fetch7_resp.OffsetFetchResponse)

        assert retry_retriable(fetch_all).error_code == E.none, f"{group} after the restart"
        # Replayed from the log: the transaction is still open, the committed offset stays.
        assert fetch_v7(conn, group, topic, [0, 1], False) == {0: (5, E.none), 1: (-1, E.none)}
        assert fetch_v7(conn, group, topic, [0], True) == {0: (-1, E.unstable_offset_commit)}
