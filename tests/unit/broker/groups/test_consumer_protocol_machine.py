"""The consumer group protocol (KIP-848) state machine: target assignment, incremental
reconciliation (revocation before assignment), member epochs, fencing, timeouts, bad input.

The machine is driven directly with the time; topics come from a dict."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pytest
import trio
import trio.testing
from clocks import WallSetByTest
from kio.schema.errors import ErrorCode

from raftka.broker.groups import CoordinatorConfig, GroupCoordinator, MemoryOffsetsLog
from raftka.broker.groups.assignors import ASSIGNORS
from raftka.broker.groups.consumer_group import (
    REGEX_REFRESH_MS,
    ConsumerConfig,
    ConsumerProtocolMachine,
    GroupProtocolState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    commit_error,
)
from raftka.broker.groups.group import ConsumerGroup, GroupState, Member
from raftka.broker.groups.rebalance import Instant, JoinRequest
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    decode_key,
)

E = ErrorCode
T = uuid.UUID(int=7)
SESSION_MS = 45_000
REBALANCE_MS = 10_000


class Topics:
    def __init__(self, **partitions: int) -> None:
        self.partitions = dict(partitions)
        self.ids = {name: uuid.UUID(int=i + 7) for i, name in enumerate(partitions)}

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        if name not in self.partitions:
            return None
        return self.ids.setdefault(name, uuid.uuid4()), self.partitions[name]

    def names(self) -> Iterable[str]:
        return list(self.partitions)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return next((n for n, i in self.ids.items() if i == topic_id), None)


class Group:
    """One group on a machine, with the time under the test's control."""

    def __init__(self, topics: Topics | None = None, **config: Any) -> None:
        self.topics = topics or Topics(t=6)
        self.groups: dict[str, ConsumerGroup] = {}
        self.epochs_stored: list[int] = []
        self.machine = ConsumerProtocolMachine(
            ConsumerConfig(assignors=dict(ASSIGNORS), **config),
            self.groups,
            self.topics,
            on_records=self._stored,
        )
        self.ms = 0.0

    def now(self) -> Instant:
        return Instant(self.ms, int(self.ms))

    def _stored(self, _group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            if isinstance(decode_key(key), ConsumerGroupMetadataKey) and value is not None:
                self.epochs_stored.append(ConsumerGroupMetadataValue.decode(value).epoch)

    def beat(
        self,
        member_id: str,
        epoch: int,
        owned: dict[uuid.UUID, list[int]] | None = None,
        *,
        version: int = 1,
        group_id: str = "g",
        **fields: Any,
    ) -> HeartbeatResult:
        if epoch == 0:
            fields.setdefault("subscribed_topic_names", ("t",))
            fields.setdefault("rebalance_timeout_ms", REBALANCE_MS)
            owned = {} if owned is None else owned
        request = HeartbeatRequest(
            group_id=group_id, member_id=member_id, member_epoch=epoch, owned=owned, **fields
        )
        return self.machine.heartbeat(request, self.now(), version)

    def join(self, member_id: str, **fields: Any) -> HeartbeatResult:
        result = self.beat(member_id, 0, **fields)
        assert result.error == E.none, result
        return result

    @property
    def state(self) -> Any:
        consumer = self.groups["g"].consumer
        assert consumer is not None
        return consumer

    def tick(self, ms: float) -> None:
        self.ms += ms
        self.machine.tick(self.now())


def parts(result: HeartbeatResult) -> set[int]:
    assert result.assignment is not None, result
    return set(result.assignment.get(T, set()))


def test_first_member_gets_every_partition_at_group_epoch_1() -> None:
    g = Group()
    joined = g.join("a")
    assert (joined.member_id, joined.member_epoch, parts(joined)) == ("a", 1, set(range(6)))
    assert joined.heartbeat_interval_ms == 5000
    assert g.epochs_stored == [1]
    assert g.state.state() == GroupProtocolState.STABLE


def test_partitions_move_only_after_the_owner_revokes_them() -> None:
    g = Group()
    g.join("a")
    b = g.join("b")
    # b is at the new epoch but gets nothing a still holds.
    assert (b.member_epoch, parts(b)) == (2, set())
    assert g.state.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    # a is asked to revoke half: its assignment shrinks, its epoch stays.
    a = g.beat("a", 1, {T: list(range(6))})
    kept = parts(a)
    assert a.member_epoch == 1 and len(kept) == 3
    assert g.state.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    # Still reporting the revoked partitions: nothing moves, b still waits.
    assert g.beat("a", 1, {T: list(range(6))}).member_epoch == 1
    assert g.beat("b", 2, {}).assignment is None
    # a acknowledges by reporting only what it kept: it reaches epoch 2, b gets the rest.
    a = g.beat("a", 1, {T: sorted(kept)})
    assert a.member_epoch == 2 and a.assignment is None
    b = g.beat("b", 2, {})
    assert parts(b) == set(range(6)) - kept
    assert g.state.members["b"].state == MemberState.STABLE
    assert g.state.state() == GroupProtocolState.STABLE


def test_a_leaving_member_releases_its_partitions_to_the_others() -> None:
    g = Group()
    g.join("a")
    g.join("b")
    kept = parts(g.beat("a", 1, {T: list(range(6))}))
    g.beat("a", 1, {T: sorted(kept)})
    b_parts = parts(g.beat("b", 2, {}))
    left = g.beat("b", -1)
    assert (left.error, left.member_epoch) == (E.none, -1)
    assert g.state.group_epoch == 3
    a = g.beat("a", 2, {T: sorted(kept)})
    assert (a.member_epoch, parts(a)) == (3, kept | b_parts)


def test_member_epoch_fencing() -> None:
    g = Group()
    g.join("a")
    g.join("b")
    kept = parts(g.beat("a", 1, {T: list(range(6))}))
    assert g.beat("a", 5, {T: sorted(kept)}).error == E.fenced_member_epoch
    g.beat("a", 1, {T: sorted(kept)})  # epoch 2 now
    # The previous epoch with owned partitions within the assignment: a lost answer.
    assert g.beat("a", 1, {T: sorted(kept)}).member_epoch == 2
    # The previous epoch owning something else is fenced; so is an older one.
    foreign = sorted(set(range(6)) - kept)[:1]
    assert g.beat("a", 1, {T: foreign}).error == E.fenced_member_epoch
    assert g.beat("nobody", 2).error == E.unknown_member_id
    # A fenced member rejoins under its id at epoch 0, owning nothing: its old incarnation
    # is removed (a new group epoch) and it joins as a new member.
    epoch = g.state.group_epoch
    rejoined = g.beat("a", 0, {})
    assert rejoined.error == E.none and rejoined.member_epoch == epoch + 2
    assert g.beat("a", rejoined.member_epoch - 1, {}).error == E.fenced_member_epoch
    assert g.beat("x", 1, group_id="unknown").error == E.group_id_not_found


def test_session_timeout_fences_a_silent_member() -> None:
    g = Group(session_timeout_ms=SESSION_MS)
    g.join("a")
    g.tick(SESSION_MS - 1)
    assert "a" in g.state.members
    g.tick(1)
    assert "a" not in g.state.members
    assert g.state.state() == GroupProtocolState.EMPTY
    assert g.groups["g"].state == GroupState.EMPTY
    assert g.beat("a", 1).error == E.unknown_member_id


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    g = Group()
    g.join("a")
    g.join("b")
    g.beat("a", 1, {T: list(range(6))})  # asked to revoke, never does
    for _ in range(REBALANCE_MS // 5000):
        g.tick(5000)
        g.beat("b", 2, {})
        if "a" not in g.state.members:
            break
        g.beat("a", 1, {T: list(range(6))})
    assert "a" not in g.state.members, "the rebalance timeout fenced a"
    g.beat("b", g.state.members["b"].member_epoch, {})
    assert g.state.members["b"].assigned == {T: set(range(6))}


def test_static_member_leaves_temporarily_and_its_next_incarnation_keeps_the_assignment() -> None:
    g = Group()
    g.join("a1", instance_id="i")
    g.join("b")
    kept = parts(g.beat("a1", 1, {T: list(range(6))}, instance_id="i"))
    g.beat("a1", 1, {T: sorted(kept)}, instance_id="i")
    epoch = g.state.group_epoch
    # The instance id in use by a live member cannot join again.
    assert g.beat("a2", 0, instance_id="i").error == E.unreleased_instance_id
    left = g.beat("a1", -2, instance_id="i")
    assert (left.error, left.member_epoch) == (E.none, -2)
    assert g.state.group_epoch == epoch, "a temporary leave does not rebalance"
    back = g.join("a2", instance_id="i")
    assert (back.member_epoch, parts(back)) == (epoch, kept)
    assert "a1" not in g.state.members
    assert g.beat("a1", 2, instance_id="i").error == E.fenced_instance_id


def test_subscription_and_partition_count_changes_bump_the_group_epoch() -> None:
    topics = Topics(t=2, u=2)
    g = Group(topics)
    g.join("a")
    assert g.state.group_epoch == 1
    g.beat("a", 1, {T: [0, 1]})
    assert g.state.group_epoch == 1, "an unchanged heartbeat does not bump"
    topics.partitions["t"] = 4
    grown = g.beat("a", 1, {T: [0, 1]})
    assert (g.state.group_epoch, parts(grown)) == (2, {0, 1, 2, 3})
    changed = g.beat("a", 2, {T: [0, 1, 2, 3]}, subscribed_topic_names=("u",))
    assert g.state.group_epoch == 3
    assert changed.member_epoch == 2 and parts(changed) == set(), "t revoked first"
    done = g.beat("a", 2, {})
    assert done.member_epoch == 3 and done.assignment == {topics.ids["u"]: {0, 1}}


def test_regex_subscription_matches_whole_names() -> None:
    topics = Topics(t=1, orders=2, orders_eu=1, __internal=1)
    g = Group(topics)
    joined = g.join("a", subscribed_topic_names=None, subscribed_topic_regex="orders.*")
    assert joined.assignment == {topics.ids["orders"]: {0, 1}, topics.ids["orders_eu"]: {0}}


def test_a_new_topic_matching_a_regex_is_assigned_within_the_refresh_interval() -> None:
    topics = Topics(orders=1)
    g = Group(topics)
    fields = {"subscribed_topic_names": None, "subscribed_topic_regex": "orders.*"}
    joined = g.join("a", **fields)
    topics.partitions["orders_eu"] = 2
    topics.ids["orders_eu"] = uuid.UUID(int=99)
    owned = {t: sorted(p) for t, p in (joined.assignment or {}).items()}
    assert g.beat("a", 1, owned).assignment is None, "matched again only after the interval"
    g.ms += REGEX_REFRESH_MS
    grown = g.beat("a", 1, owned)
    assert grown.member_epoch == 2 and grown.assignment == {
        topics.ids["orders"]: {0},
        uuid.UUID(int=99): {0, 1},
    }


@pytest.mark.timeout(20)
def test_a_backtracking_regex_is_matched_in_linear_time() -> None:
    # With a backtracking matcher `(a+)+$` against this name takes about 2**40 steps and
    # stalls the event loop; RE2 (Kafka's syntax and semantics) answers at once.
    name = "a" * 40 + "!"
    topics = Topics(**{name: 1, "aaa": 1})
    g = Group(topics)
    joined = g.join("a", subscribed_topic_names=None, subscribed_topic_regex="(a+)+$")
    assert joined.assignment == {topics.ids["aaa"]: {0}}


def test_a_regex_outside_re2_syntax_is_refused() -> None:
    # Look-behind is Python's, not RE2's: Kafka refuses it, so does the broker.
    g = Group()
    fields = {"subscribed_topic_names": None, "subscribed_topic_regex": "(?<=x)t"}
    result = g.beat("a", 0, **fields)
    assert result.error == E.invalid_regular_expression, result
    assert result.message and "(?<=x)t" in result.message
    assert g.groups == {}


class CountingMembers(dict[str, Any]):
    """A group's members that count the walks over them."""

    walks = 0

    def values(self) -> Any:
        self.walks += 1
        return super().values()


def test_a_steady_heartbeat_does_not_walk_the_membership() -> None:
    # The subscribed names and regular expressions are cached until the membership or a
    # subscription changes: a heartbeat costs O(1) in the group's size, not O(members).
    topics = Topics(orders=4, orders_eu=2)
    g = Group(topics)
    fields = {"subscribed_topic_names": None, "subscribed_topic_regex": "orders.*"}
    for member_id in "abc":
        g.join(member_id, **fields)

    def beat_all() -> None:
        for member_id, member in list(g.state.members.items()):
            owned = {t: sorted(p) for t, p in member.assigned.items()}
            assert g.beat(member_id, member.member_epoch, owned).error == E.none

    for _ in range(3):  # until every member is stable at the group's epoch
        beat_all()
    assert g.state.state() == GroupProtocolState.STABLE
    g.state.members = members = CountingMembers(g.state.members)
    stored = list(g.epochs_stored)
    beat_all()
    assert members.walks == 0
    assert g.epochs_stored == stored


def test_range_assignor_on_request() -> None:
    g = Group()
    g.join("a", server_assignor="range")
    g.join("b", server_assignor="range")
    assert g.state.assignor_name == "range"
    assert g.state.target == {"a": {T: {0, 1, 2}}, "b": {T: {3, 4, 5}}}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"group_id": ""}, E.invalid_request),
        ({"member_id": ""}, E.invalid_request),  # v1: the consumer picks its member id
        ({"instance_id": ""}, E.invalid_request),
        ({"subscribed_topic_names": ()}, E.invalid_request),
        ({"rebalance_timeout_ms": -1}, E.invalid_request),
        ({"owned": {T: [0]}}, E.invalid_request),
        ({"server_assignor": "sticky"}, E.unsupported_assignor),
        (
            {"subscribed_topic_regex": "(", "subscribed_topic_names": None},
            E.invalid_regular_expression,
        ),
    ],
)
def test_bad_join_requests_are_refused_and_change_nothing(
    fields: dict[str, Any], error: ErrorCode
) -> None:
    g = Group()
    group_id = fields.pop("group_id", "g")
    member_id = fields.pop("member_id", "a")
    result = g.beat(member_id, 0, fields.pop("owned", None), group_id=group_id, **fields)
    assert result.error == error, result
    assert result.message
    assert g.groups == {} and g.epochs_stored == []


def test_invalid_epochs_and_leave_without_instance() -> None:
    g = Group()
    assert g.beat("a", -3).error == E.invalid_request
    assert g.beat("a", -2).error == E.invalid_request  # -2 needs an instance id


def test_v0_member_id_is_chosen_by_the_coordinator() -> None:
    g = Group()
    joined = g.beat("", 0, version=0)
    assert joined.error == E.none and joined.member_id


def test_group_max_size() -> None:
    g = Group(max_size=1)
    g.join("a")
    assert g.beat("b", 0).error == E.group_max_size_reached
    assert g.beat("a", 1).error == E.none


def test_classic_and_consumer_groups_refuse_each_other() -> None:
    g = Group()
    classic = ConsumerGroup("g", state=GroupState.STABLE)
    classic.add(Member("m", None, "c", "h", 1000, 1000, "consumer", [("range", b"")]))
    g.groups["g"] = classic
    assert g.beat("a", 0).error == E.group_id_not_found
    # An empty classic group (offsets only) is converted, its offsets kept.
    offsets_only = ConsumerGroup("h", offsets={("t", 0): None})  # type: ignore[dict-item]
    g.groups["h"] = offsets_only
    assert g.beat("a", 0, group_id="h").error == E.none
    assert offsets_only.consumer is not None and ("t", 0) in offsets_only.offsets


def test_offset_commit_checks_the_member_epoch() -> None:
    g = Group()
    g.join("a")
    assert commit_error(g.state, "a", 1) == E.none
    assert commit_error(g.state, "a", 0) == E.stale_member_epoch
    assert commit_error(g.state, "a", 0, transactional=True) == E.stale_member_epoch
    assert commit_error(g.state, "", -1, transactional=True) == E.none, "TxnOffsetCommit v0-2"
    assert commit_error(g.state, "zz", 1) == E.unknown_member_id
    assert commit_error(g.state, "a", 1, api_version=8) == E.unsupported_version
    assert commit_error(g.state, "", -1) == E.unknown_member_id, "not while members consume"
    g.beat("a", -1)
    assert commit_error(g.state, "", -1) == E.none


# -- through the coordinator: classic JoinGroup, persistence of the group epoch ------------


def test_classic_join_is_refused_and_a_failover_keeps_members_and_assignments() -> None:
    offsets_log = MemoryOffsetsLog(num_partitions=3)

    async def main() -> None:
        first = GroupCoordinator(offsets_log, CoordinatorConfig(), topics=Topics(t=6))
        first.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run)
            while first.is_loading():
                await trio.sleep(0.01)
            request = HeartbeatRequest(
                "g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}
            )
            joined = await first.consumer_group_heartbeat(request, 1)
            assert (joined.error, joined.member_epoch) == (E.none, 1)
            join = JoinRequest(
                "g", "", None, "c", "h", 10_000, 10_000, "consumer", [("range", b"")], True
            )
            refused = first.join_group(**{f: getattr(join, f) for f in join.__dataclass_fields__})
            assert not isinstance(refused, trio.Event)
            assert getattr(refused, "error", None) == E.inconsistent_group_protocol
            assert first.list_typed_groups() == [("g", "consumer", "Stable", "consumer")]
            b_join = HeartbeatRequest(
                "g", "b", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}
            )
            b = await first.consumer_group_heartbeat(b_join, 1)
            assert (b.member_epoch, b.assignment) == (2, {})
            # a is asked to revoke half, and the coordinator changes before it does.
            a = await first.consumer_group_heartbeat(
                HeartbeatRequest("g", "a", 1, owned={T: list(range(6))}), 1
            )
            assert a.assignment is not None
            kept = a.assignment[T]
            assert a.member_epoch == 1 and len(kept) == 3
            nursery.cancel_scope.cancel()
        # A new coordinator over the same log knows the group, its members, their epochs
        # and what each holds: b gets nothing a has not released.
        second = GroupCoordinator(offsets_log, CoordinatorConfig(), topics=Topics(t=6))
        second.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            while second.is_loading():
                await trio.sleep(0.01)
            error, state = second.consumer_group("g")
            assert error == E.none and state is not None
            assert state.group_epoch == 3, "bumped on load: the target is computed again"
            assert state.members["a"].assigned == {T: kept}
            assert state.members["a"].pending_revocation == {T: set(range(6)) - kept}
            b = await second.consumer_group_heartbeat(HeartbeatRequest("g", "b", 2, owned={}), 1)
            assert b.error == E.none and not state.members["b"].assigned
            a = await second.consumer_group_heartbeat(
                HeartbeatRequest("g", "a", 1, owned={T: sorted(kept)}), 1
            )
            assert (a.error, a.member_epoch) == (E.none, 3)
            b = await second.consumer_group_heartbeat(HeartbeatRequest("g", "b", 2, owned={}), 1)
            assert b.member_epoch == 3 and b.assignment == {T: set(range(6)) - kept}
            stale = HeartbeatRequest("g", "a", 7, owned={T: sorted(kept)})
            assert (await second.consumer_group_heartbeat(stale, 1)).error == E.fenced_member_epoch
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_member_records_round_trip() -> None:
    from raftka.broker.groups.consumer_records import MemberAssignmentValue, MemberMetadataValue
    from raftka.broker.groups.records import MemberKey

    metadata = MemberMetadataValue(
        "i", None, "client", "/10.0.0.1", ("a", "b"), "x.*", 3000, "range"
    )
    assert MemberMetadataValue.decode(metadata.encode()) == metadata
    assignment = MemberAssignmentValue(
        5, 4, 1, {T: frozenset({0, 2})}, {uuid.UUID(int=9): frozenset({1})}
    )
    assert MemberAssignmentValue.decode(assignment.encode()) == assignment
    for kind in (True, False):
        key = MemberKey("g", "m", assignment=kind)
        assert decode_key(key.encode()) == key
    assert ConsumerGroupMetadataValue.decode(ConsumerGroupMetadataValue(7).encode()).epoch == 7


def test_kinds_listing_describing_and_an_empty_consumer_group_turning_classic() -> None:
    async def main() -> None:
        c = GroupCoordinator(
            MemoryOffsetsLog(num_partitions=3), CoordinatorConfig(), topics=Topics(t=6)
        )
        c.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            while c.is_loading():
                await trio.sleep(0.01)
            join = HeartbeatRequest(
                "g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}
            )
            assert (await c.consumer_group_heartbeat(join, 1)).error == E.none
            assert c.list_typed_groups(types=["classic"]) == []
            assert [g[0] for g in c.list_typed_groups(types=["consumer"])] == ["g"]
            # DescribeGroups sees classic groups only, as Kafka's coordinator.
            assert c.describe_group("g")[1].state == "Dead"
            assert c.consumer_group("nope")[0] == E.group_id_not_found
            left = await c.consumer_group_heartbeat(HeartbeatRequest("g", "a", -1), 1)
            assert left.error == E.none
            assert c.list_typed_groups() == [("g", "consumer", "Empty", "consumer")]
            # An empty consumer group becomes classic for the first classic member.
            answer = c.join_group(
                group_id="g",
                member_id="",
                group_instance_id=None,
                client_id="c",
                client_host="h",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=[("range", b"")],
                require_known_member_id=True,
            )
            assert getattr(answer, "error", None) == E.member_id_required
            assert c.groups["g"].consumer is None
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_consumer_group_configs_come_from_the_broker_config() -> None:
    from raftka.broker.config import BrokerConfig

    config = CoordinatorConfig.from_broker_config(
        BrokerConfig(
            {
                "group.consumer.assignors": "range, uniform",
                "group.consumer.heartbeat.interval.ms": "700",
                "group.consumer.max.size": "3",
            },
            environ={},
        )
    )
    coordinator = GroupCoordinator(MemoryOffsetsLog(), config)
    assert coordinator.consumer.config.default_assignor() == "range"
    assert coordinator.consumer.config.heartbeat_interval_ms == 700
    assert coordinator.consumer.config.max_size == 3


def test_an_empty_consumer_group_expires_with_its_offsets_and_stays_gone() -> None:
    from raftka.broker.groups.records import OffsetValue

    offsets_log = MemoryOffsetsLog(num_partitions=3)
    wall = [1_000_000]
    config = CoordinatorConfig(offsets_retention_ms=60_000)

    async def main() -> None:
        c = GroupCoordinator(
            offsets_log, config, topics=Topics(t=6), clock=WallSetByTest(lambda: wall[0])
        )
        c.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            while c.is_loading():
                await trio.sleep(0.01)
            join = HeartbeatRequest(
                "g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}
            )
            epoch = (await c.consumer_group_heartbeat(join, 1)).member_epoch
            committed = {("t", 0): OffsetValue(5, -1, "", wall[0])}
            assert await c.commit_offsets("g", epoch, "a", None, committed) == E.none
            assert await c.expire_offsets() == 0, "a group with members keeps its offsets"
            await c.consumer_group_heartbeat(HeartbeatRequest("g", "a", -1), 1)
            wall[0] += 60_000
            assert await c.expire_offsets() == 1
            assert "g" not in c.groups
            await trio.sleep(1)  # the tombstones are written
            nursery.cancel_scope.cancel()
        again = GroupCoordinator(offsets_log, config, topics=Topics(t=6))
        again.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(again.run)
            while again.is_loading():
                await trio.sleep(0.01)
            assert "g" not in again.groups
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
