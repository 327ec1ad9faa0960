"""The group coordinator's state machine: transitions, errors and timeouts on a mock clock."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from clocks import WallSetByTest
from kio.schema.errors import ErrorCode

from raftka.broker.groups import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinResult,
    MemoryOffsetsLog,
    Reply,
    SyncResult,
)
from raftka.broker.groups.records import OffsetValue

E = ErrorCode
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
CONFIG = CoordinatorConfig(initial_rebalance_delay_ms=DELAY_MS, offsets_retention_ms=60_000)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (what Java and librdkafka send as metadata)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


class Harness:
    """A coordinator running on the mock clock, with shortcuts for the requests."""

    def __init__(self, coordinator: GroupCoordinator, nursery: trio.Nursery) -> None:
        self.c = coordinator
        self.nursery = nursery

    def join_nowait(
        self,
        member_id: str = "",
        group: str = "g",
        *,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        v4: bool = True,
    ) -> JoinResult | Reply[JoinResult]:
        return self.c.join_group(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            client_id="client",
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=protocols if protocols is not None else [("range", subscription("t"))],
            require_known_member_id=v4,
        )

    def start_join(self, *args: Any, **kwargs: Any) -> dict[str, JoinResult]:
        """Start a JoinGroup (through MEMBER_ID_REQUIRED); the dict fills when it answers."""
        box: dict[str, JoinResult] = {}
        outcome = self.join_nowait(*args, **kwargs)
        if isinstance(outcome, JoinResult) and outcome.error == E.member_id_required:
            outcome = self.join_nowait(outcome.member_id, *args[1:], **kwargs)
        self._resolve(outcome, box)
        return box

    def _resolve(self, outcome: Any, box: dict[str, Any]) -> None:
        if isinstance(outcome, Reply):

            async def wait() -> None:
                box["result"] = await outcome.wait()

            self.nursery.start_soon(wait)
        else:
            box["result"] = outcome

    def start_sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        group: str = "g",
        instance: str | None = None,
    ) -> dict[str, SyncResult]:
        box: dict[str, SyncResult] = {}
        self._resolve(
            self.c.sync_group(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance,
                protocol_type=None,
                protocol_name=None,
                assignments=assignments or {},
            ),
            box,
        )
        return box

    async def stable_group(self, n: int, group: str = "g", **kwargs: Any) -> list[str]:
        """n members joined and synced; returns their member ids (leader first)."""
        boxes = [self.start_join(group=group, **kwargs) for _ in range(n)]
        await wait_for(lambda: all("result" in b for b in boxes))
        results = [b["result"] for b in boxes]
        assert all(r.error == E.none for r in results), results
        leader = results[0].leader
        ids = [leader] + [r.member_id for r in results if r.member_id != leader]
        generation = results[0].generation_id
        syncs = [self.start_sync(m, generation, {x: x.encode() for x in ids}, group) for m in ids]
        await wait_for(lambda: all("result" in s for s in syncs))
        assert [s["result"].assignment for s in syncs] == [m.encode() for m in ids]
        assert self.c.groups[group].state == GroupState.STABLE
        return ids

    def group(self, group_id: str = "g") -> Any:
        return self.c.groups[group_id]


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 600) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


def run(
    test: Callable[[Harness], Awaitable[None]],
    offsets_log: MemoryOffsetsLog | None = None,
    config: CoordinatorConfig = CONFIG,
    wall: Callable[[], int] | None = None,
) -> None:
    async def main() -> None:
        kwargs: dict[str, Any] = {}
        if wall is not None:
            kwargs["clock"] = WallSetByTest(wall)
        coordinator = GroupCoordinator(offsets_log or MemoryOffsetsLog(), config, **kwargs)
        coordinator.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            await wait_for(lambda: not coordinator.is_loading())
            await test(Harness(coordinator, nursery))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- joining and syncing -----------------------------------------------------------------------


def test_first_join_needs_a_member_id_kip394() -> None:
    async def body(h: Harness) -> None:
        first = h.join_nowait()
        assert isinstance(first, JoinResult)
        assert first.error == E.member_id_required
        assert first.member_id.startswith("client-")
        assert first.member_id in h.group().pending_members
        assert h.group().state == GroupState.EMPTY

    run(body)


def test_v3_join_gets_a_member_id_without_a_round_trip() -> None:
    async def body(h: Harness) -> None:
        box = h.start_join(v4=False)
        await wait_for(lambda: "result" in box)
        assert box["result"].error == E.none
        assert box["result"].generation_id == 1

    run(body)


def test_new_group_waits_the_initial_rebalance_delay() -> None:
    async def body(h: Harness) -> None:
        start = trio.current_time()
        box = h.start_join()
        await trio.sleep(0.001)
        assert h.group().state == GroupState.PREPARING_REBALANCE
        await wait_for(lambda: "result" in box)
        assert trio.current_time() - start == pytest.approx(DELAY_MS / 1000, abs=0.05)
        result = box["result"]
        assert result.error == E.none
        assert result.generation_id == 1
        assert result.leader == result.member_id
        assert [m.member_id for m in result.members] == [result.member_id]
        assert h.group().state == GroupState.COMPLETING_REBALANCE

    run(body)


def test_initial_delay_extends_while_members_keep_joining() -> None:
    async def body(h: Harness) -> None:
        start = trio.current_time()
        a = h.start_join()
        await trio.sleep(DELAY_MS / 1000 - 0.5)
        b = h.start_join()
        await wait_for(lambda: "result" in a and "result" in b)
        assert trio.current_time() - start == pytest.approx(2 * DELAY_MS / 1000, abs=0.05)
        assert a["result"].generation_id == b["result"].generation_id == 1
        leader = a["result"].leader
        assert {len(a["result"].members), len(b["result"].members)} == {0, 2}
        assert leader in (a["result"].member_id, b["result"].member_id)

    run(body)


def test_leader_assignment_reaches_every_member_by_sync() -> None:
    async def body(h: Harness) -> None:
        a, b = h.start_join(), h.start_join()
        await wait_for(lambda: "result" in a and "result" in b)
        ra, rb = a["result"], b["result"]
        leader = ra.leader
        follower = rb.member_id if ra.member_id == leader else ra.member_id
        follower_sync = h.start_sync(follower, 1)
        await trio.sleep(1)
        assert follower_sync == {}  # waits for the leader
        leader_sync = h.start_sync(leader, 1, {leader: b"L", follower: b"F"})
        await wait_for(lambda: "result" in follower_sync and "result" in leader_sync)
        assert follower_sync["result"].assignment == b"F"
        assert leader_sync["result"].assignment == b"L"
        assert follower_sync["result"].protocol_name == "range"
        assert h.group().state == GroupState.STABLE
        # Stable: a later SyncGroup answers the member's assignment at once.
        again = h.start_sync(follower, 1)
        assert again["result"].assignment == b"F"

    run(body)


def test_follower_rejoin_in_stable_group_is_answered_without_rebalance() -> None:
    async def body(h: Harness) -> None:
        leader, follower = await h.stable_group(2)
        outcome = h.join_nowait(follower)
        assert isinstance(outcome, JoinResult)
        assert outcome.generation_id == 1 and outcome.members == ()
        assert h.group().state == GroupState.STABLE

    run(body)


def test_leader_rejoin_triggers_a_rebalance() -> None:
    async def body(h: Harness) -> None:
        leader, follower = await h.stable_group(2)
        box = h.start_join(leader)
        await trio.sleep(0.001)
        assert h.group().state == GroupState.PREPARING_REBALANCE
        assert h.c.heartbeat("g", 1, follower, None) == E.rebalance_in_progress
        follower_box = h.start_join(follower)
        await wait_for(lambda: "result" in box and "result" in follower_box)
        assert box["result"].generation_id == 2
        assert len(box["result"].members) == 2

    run(body)


def test_protocol_chosen_by_votes_among_common_protocols() -> None:
    async def body(h: Harness) -> None:
        both = [("range", b"r"), ("roundrobin", b"rr")]
        a = h.start_join(protocols=both)
        b = h.start_join(protocols=[("roundrobin", b"rr2"), ("range", b"r2")])
        c = h.start_join(protocols=[("roundrobin", b"rr3")])
        await wait_for(lambda: all("result" in x for x in (a, b, c)))
        assert {x["result"].protocol_name for x in (a, b, c)} == {"roundrobin"}
        leader_result = next(x["result"] for x in (a, b, c) if x["result"].members)
        assert sorted(m.metadata for m in leader_result.members) == [b"rr", b"rr2", b"rr3"]

    run(body)


def test_inconsistent_protocols_are_rejected() -> None:
    async def body(h: Harness) -> None:
        await h.stable_group(1)
        other = h.join_nowait(protocols=[("cooperative-sticky", b"")])
        assert isinstance(other, JoinResult) and other.error == E.inconsistent_group_protocol
        wrong_type = h.join_nowait(protocol_type="connect")
        assert isinstance(wrong_type, JoinResult)
        assert wrong_type.error == E.inconsistent_group_protocol
        empty = h.join_nowait(group="new", protocols=[])
        assert isinstance(empty, JoinResult) and empty.error == E.inconsistent_group_protocol
        assert "new" not in h.c.groups

    run(body)


def test_join_validation_errors() -> None:
    async def body(h: Harness) -> None:
        for kwargs, error in [
            ({"group": ""}, E.invalid_group_id),
            ({"group": "x" * 40_000}, E.invalid_group_id),
            ({"session_ms": 1000}, E.invalid_session_timeout),
            ({"session_ms": 2_000_000}, E.invalid_session_timeout),
        ]:
            result = h.join_nowait(**kwargs)
            assert isinstance(result, JoinResult) and result.error == error, kwargs
        unknown = h.join_nowait("someone", group="nobody")
        assert isinstance(unknown, JoinResult) and unknown.error == E.unknown_member_id
        assert not h.c.groups

    run(body)


# -- heartbeats, timeouts, leaving -------------------------------------------------------------


def test_heartbeat_errors() -> None:
    async def body(h: Harness) -> None:
        (member,) = await h.stable_group(1)
        assert h.c.heartbeat("g", 1, member, None) == E.none
        assert h.c.heartbeat("g", 0, member, None) == E.illegal_generation
        assert h.c.heartbeat("g", 1, "stranger", None) == E.unknown_member_id
        assert h.c.heartbeat("nogroup", 1, member, None) == E.unknown_member_id
        assert h.c.heartbeat("", 1, member, None) == E.invalid_group_id

    run(body)


def test_session_timeout_evicts_a_silent_member_and_rebalances() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2)
        # a keeps heartbeating, b goes silent.
        for _ in range(int(SESSION_MS / 1000) + 2):
            await trio.sleep(1)
            error = h.c.heartbeat("g", h.group().generation_id, a, None)
            if error == E.rebalance_in_progress:
                break
        assert error == E.rebalance_in_progress
        assert b not in h.group().members
        box = h.start_join(a)
        await wait_for(lambda: "result" in box)
        assert box["result"].generation_id == 2
        assert [m.member_id for m in box["result"].members] == [a]

    run(body)


def test_member_that_does_not_rejoin_in_the_rebalance_timeout_is_removed() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2)
        start = trio.current_time()
        box = h.start_join(a)

        async def heartbeats() -> None:  # b stays alive but never rejoins
            while True:
                h.c.heartbeat("g", 1, b, None)
                await trio.sleep(1)

        h.nursery.start_soon(heartbeats)
        await wait_for(lambda: "result" in box)
        assert trio.current_time() - start == pytest.approx(REBALANCE_MS / 1000, abs=0.05)
        assert list(h.group().members) == [a]
        assert h.c.heartbeat("g", 2, b, None) == E.unknown_member_id

    run(body)


def test_pending_member_expires_after_session_timeout() -> None:
    async def body(h: Harness) -> None:
        first = h.join_nowait()
        assert isinstance(first, JoinResult)
        await trio.sleep(SESSION_MS / 1000 + 0.1)
        assert first.member_id not in h.group().pending_members

    run(body)


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    async def body(h: Harness) -> None:
        a, b = h.start_join(), h.start_join()
        await wait_for(lambda: "result" in a and "result" in b)
        follower = next(x["result"].member_id for x in (a, b) if not x["result"].members)
        sync = h.start_sync(follower, 1)  # the leader never syncs
        await wait_for(lambda: "result" in sync)
        assert sync["result"].error == E.rebalance_in_progress
        assert list(h.group().members) == [follower]
        assert h.group().state == GroupState.PREPARING_REBALANCE

    run(body)


def test_sync_errors() -> None:
    async def body(h: Harness) -> None:
        member, follower = await h.stable_group(2)
        assert h.start_sync(member, 7)["result"].error == E.illegal_generation
        assert h.start_sync("stranger", 1)["result"].error == E.unknown_member_id
        assert h.start_sync(member, 1, group="none")["result"].error == E.unknown_member_id
        assert h.start_sync(member, 1, group="")["result"].error == E.invalid_group_id
        h.start_join(member)  # a leader rejoin: the group prepares a rebalance
        await trio.sleep(0)
        assert h.start_sync(follower, 1)["result"].error == E.rebalance_in_progress

    run(body)


def test_sync_during_completing_rebalance_fails_when_rebalance_restarts() -> None:
    async def body(h: Harness) -> None:
        a, b = h.start_join(), h.start_join()
        await wait_for(lambda: "result" in a and "result" in b)
        follower = next(x["result"].member_id for x in (a, b) if not x["result"].members)
        waiting = h.start_sync(follower, 1)
        h.start_join()  # a third member arrives before the leader syncs
        await wait_for(lambda: "result" in waiting)
        assert waiting["result"].error == E.rebalance_in_progress

    run(body)


def test_leave_group_rebalances_and_last_leave_empties_the_group() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2)
        assert h.c.leave_group("g", [(b, None)]) == (E.none, [E.none])
        assert h.group().state == GroupState.PREPARING_REBALANCE
        box = h.start_join(a)
        await wait_for(lambda: "result" in box)
        assert box["result"].generation_id == 2
        assert h.c.leave_group("g", [(a, None), ("stranger", None)]) == (
            E.none,
            [E.none, E.unknown_member_id],
        )
        assert h.group().state == GroupState.EMPTY
        assert h.group().generation_id == 3
        assert h.c.leave_group("nogroup", [(a, None)]) == (E.none, [E.unknown_member_id])

    run(body)


# -- static membership (KIP-345) ---------------------------------------------------------------


def test_static_member_rejoins_without_rebalance_and_keeps_its_assignment() -> None:
    async def body(h: Harness) -> None:
        a = h.start_join(instance="i-a")
        b = h.start_join(instance="i-b")
        await wait_for(lambda: "result" in a and "result" in b)
        ids = {a["result"].member_id: "i-a", b["result"].member_id: "i-b"}
        leader = a["result"].leader
        h.start_sync(leader, 1, {m: inst.encode() for m, inst in ids.items()})
        for m in ids:
            h.start_sync(m, 1)
        await wait_for(lambda: h.group().state == GroupState.STABLE)
        old_b = b["result"].member_id
        # b restarts: a fresh member id, the same instance id, within the session timeout.
        again = h.join_nowait(instance="i-b")
        assert isinstance(again, JoinResult) and again.error == E.none
        assert again.generation_id == 1 and again.member_id != old_b
        assert h.group().state == GroupState.STABLE
        sync = h.start_sync(again.member_id, 1, instance="i-b")
        assert sync["result"].assignment == b"i-b"
        # The old incarnation is fenced.
        assert h.c.heartbeat("g", 1, old_b, "i-b") == E.fenced_instance_id
        assert h.c.leave_group("g", [(old_b, "i-b")])[1] == [E.fenced_instance_id]
        # Leaving by instance id alone works.
        assert h.c.leave_group("g", [("", "i-b")])[1] == [E.none]

    run(body)


def test_static_member_with_new_protocols_in_stable_group_rebalances() -> None:
    async def body(h: Harness) -> None:
        await h.stable_group(1, instance="i-a")
        outcome = h.join_nowait(instance="i-a", protocols=[("range", subscription("t", "u"))])
        assert isinstance(outcome, Reply)
        result = await outcome.wait()
        assert result.generation_id == 2

    run(body)


# -- offsets -----------------------------------------------------------------------------------


def offsets(**by_partition: int) -> dict[tuple[str, int], OffsetValue]:
    return {
        ("t", int(p.removeprefix("p"))): OffsetValue(o, -1, "", 1000)
        for p, o in by_partition.items()
    }


def test_offset_commit_validation_and_fetch() -> None:
    async def body(h: Harness) -> None:
        (member,) = await h.stable_group(1)
        c = h.c
        assert await c.commit_offsets("g", 1, member, None, offsets(p0=5)) == E.none
        assert await c.commit_offsets("g", 0, member, None, offsets(p0=9)) == E.illegal_generation
        assert await c.commit_offsets("g", 1, "x", None, offsets(p0=9)) == E.unknown_member_id
        assert await c.commit_offsets("g", -1, "", None, offsets(p0=9)) == E.unknown_member_id
        long_id = "g" * 40_000
        assert await c.commit_offsets(long_id, -1, "", None, offsets(p0=9)) == E.invalid_group_id
        assert await c.commit_offsets("new", 3, "", None, offsets(p0=9)) == E.illegal_generation
        error, fetched = c.fetch_offsets("g", [("t", 0), ("t", 1)])
        assert error == E.none
        assert fetched[("t", 0)] is not None and fetched[("t", 0)].offset == 5
        assert fetched[("t", 1)] is None
        assert "new" not in c.groups
        # A group without members accepts simple commits (generation -1).
        assert await c.commit_offsets("simple", -1, "", None, offsets(p0=3, p1=4)) == E.none
        assert {tp: v.offset for tp, v in c.fetch_offsets("simple", None)[1].items()} == {
            ("t", 0): 3,
            ("t", 1): 4,
        }

    run(body)


def test_commit_during_completing_rebalance_is_refused() -> None:
    async def body(h: Harness) -> None:
        box = h.start_join()
        await wait_for(lambda: "result" in box)
        member = box["result"].member_id
        error = await h.c.commit_offsets("g", 1, member, None, offsets(p0=1))
        assert error == E.rebalance_in_progress

    run(body)


def test_failed_append_changes_nothing() -> None:
    store = MemoryOffsetsLog()

    async def body(h: Harness) -> None:
        store.fail_appends = True
        error = await h.c.commit_offsets("g", -1, "", None, offsets(p0=1))
        assert error == E.coordinator_not_available
        assert h.c.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None

    run(body, store)


def test_offsets_and_group_survive_a_reload() -> None:
    store = MemoryOffsetsLog(num_partitions=7)
    state: dict[str, Any] = {}

    async def first(h: Harness) -> None:
        ids = await h.stable_group(2)
        state["ids"] = ids
        assert await h.c.commit_offsets("g", 1, ids[0], None, offsets(p0=10, p1=11)) == E.none
        assert await h.c.commit_offsets("g", 1, ids[1], None, offsets(p1=12)) == E.none
        assert await h.c.commit_offsets("solo", -1, "", None, offsets(p2=2)) == E.none
        await trio.sleep(0.01)

    async def second(h: Harness) -> None:
        group = h.group()
        assert group.state == GroupState.STABLE
        assert group.generation_id == 1
        assert list(group.members) == state["ids"]
        assert group.members[state["ids"][1]].assignment == state["ids"][1].encode()
        assert {tp: v.offset for tp, v in group.offsets.items()} == {("t", 0): 10, ("t", 1): 12}
        assert h.c.heartbeat("g", 1, state["ids"][0], None) == E.none
        assert h.group("solo").state == GroupState.EMPTY

    run(first, store)
    assert list(store.batches) != []
    # Everything went to the partitions Kafka's hash rule picks.
    assert set(store.batches) <= {h_partition("g", 7), h_partition("solo", 7)}
    run(second, store)


def h_partition(group_id: str, n: int) -> int:
    from raftka.broker.groups.records import partition_for_group

    return partition_for_group(group_id, n)


def test_delete_groups_and_offsets() -> None:
    store = MemoryOffsetsLog()

    async def first(h: Harness) -> None:
        (member,) = await h.stable_group(1)
        c = h.c
        await c.commit_offsets("g", 1, member, None, offsets(p0=1))
        await c.commit_offsets("other", -1, "", None, offsets(p0=1, p1=2))
        results = await c.delete_groups(["g", "nobody", "x" * 40_000, "other"])
        assert results == {
            "g": E.non_empty_group,
            "nobody": E.group_id_not_found,
            "x" * 40_000: E.invalid_group_id,
            "other": E.none,
        }
        assert "other" not in c.groups
        # OffsetDelete: refused for subscribed topics of a live group.
        error, per_partition = await c.delete_offsets("g", [("t", 0), ("u", 0)])
        assert error == E.none
        assert per_partition == {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none}
        assert (await c.delete_offsets("nobody", [("t", 0)]))[0] == E.group_id_not_found
        c.leave_group("g", [(member, None)])
        await wait_for(lambda: h.group().state == GroupState.EMPTY)
        error, per_partition = await c.delete_offsets("g", [("t", 0)])
        assert per_partition == {("t", 0): E.none}
        assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None
        await trio.sleep(0.01)

    async def second(h: Harness) -> None:
        assert "other" not in h.c.groups
        assert h.group().offsets == {}
        assert h.group().state == GroupState.EMPTY

    run(first, store)
    run(second, store)


def test_offsets_of_an_empty_group_expire_after_retention() -> None:
    store = MemoryOffsetsLog()
    now = {"ms": 1_000_000}

    async def first(h: Harness) -> None:
        (member,) = await h.stable_group(1)
        await h.c.commit_offsets("g", 1, member, None, offsets(p0=1))
        await h.c.commit_offsets("simple", -1, "", None, offsets(p0=1))
        now["ms"] += CONFIG.offsets_retention_ms + 1
        # Not empty: kept.
        assert await h.c.expire_offsets() == 1  # only "simple" expires
        assert "simple" not in h.c.groups
        h.c.leave_group("g", [(member, None)])
        await wait_for(lambda: h.group().state == GroupState.EMPTY)
        assert await h.c.expire_offsets() == 0  # became empty just now
        now["ms"] += CONFIG.offsets_retention_ms
        assert await h.c.expire_offsets() == 1
        assert "g" not in h.c.groups
        await trio.sleep(0.01)

    async def second(h: Harness) -> None:
        assert h.c.groups == {}

    run(first, store, wall=lambda: now["ms"])
    run(second, store, wall=lambda: now["ms"])


def test_list_and_describe_groups() -> None:
    async def body(h: Harness) -> None:
        ids = await h.stable_group(2)
        await h.c.commit_offsets("simple", -1, "", None, offsets(p0=1))
        assert sorted(h.c.list_groups()) == [("g", "consumer", "Stable"), ("simple", "", "Empty")]
        assert h.c.list_groups(states=["stable"]) == [("g", "consumer", "Stable")]
        assert h.c.list_groups(types=["consumer"]) == []
        error, described = h.c.describe_group("g")
        assert error == E.none and described.state == "Stable"
        assert described.protocol == "range"
        assert [m.member_id for m in described.members] == ids
        assert described.members[0].assignment == ids[0].encode()
        assert h.c.describe_group("nobody")[1].state == "Dead"

    run(body)
