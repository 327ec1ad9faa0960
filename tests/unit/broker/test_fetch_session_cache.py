"""The fetch session cache (KIP-227) on its own: what a request is, what an incremental
response carries, and which session gives way when the cache is full (Kafka's rules)."""

from __future__ import annotations

import random
import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.clock import ManualClock
from raftka.broker.fetch_sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    CachedPartition,
    FetchSessionCache,
    FullFetch,
    IncrementalFetch,
    SessionError,
    Sessionless,
    next_epoch,
)


def _wanted(topic: str, partition: int, fetch_offset: int = 0) -> CachedPartition:
    return CachedPartition(topic, None, partition, fetch_offset, 1 << 20)


def _open(cache: FetchSessionCache, partitions: int, topic: str = "t") -> int:
    assert isinstance(cache.new_context(0, 0, False, (), ()), FullFetch)
    return cache.open_session([_wanted(topic, p) for p in range(partitions)], False)


def _cache(slots: int = 10) -> tuple[FetchSessionCache, ManualClock]:
    clock = ManualClock()
    return FetchSessionCache(slots, clock, rng=random.Random(7)), clock


def test_a_full_fetch_opens_a_session_that_expects_epoch_one() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 3)
    assert session_id != 0
    assert cache.size == 1 and cache.partitions_cached == 3
    context = cache.new_context(session_id, 1, False, (), ())
    assert isinstance(context, IncrementalFetch)
    assert context.response_epoch == 2 and context.session.epoch == 2
    assert cache.incremental_fetches == 1


def test_the_final_epoch_is_sessionless_and_closes_the_named_session() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 2)
    assert isinstance(cache.new_context(session_id, FINAL_EPOCH, False, (), ()), Sessionless)
    assert cache.size == 0 and cache.partitions_cached == 0


def test_a_full_fetch_naming_a_session_closes_it_before_opening_another() -> None:
    cache, _ = _cache()
    first = _open(cache, 2)
    assert isinstance(cache.new_context(first, 0, False, (), ()), FullFetch)
    assert cache.get(first) is None
    second = cache.open_session([_wanted("t", 0)], False)
    assert second not in (0, first) and cache.size == 1


def test_unknown_session_and_wrong_epoch_are_errors() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 1)
    unknown = cache.new_context(session_id + 1, 1, False, (), ())
    assert unknown == SessionError(ErrorCode.fetch_session_id_not_found)
    wrong = cache.new_context(session_id, 5, False, (), ())
    assert wrong == SessionError(ErrorCode.invalid_fetch_session_epoch)
    # A request with topic ids cannot continue a session of topic names.
    ids = cache.new_context(session_id, 1, True, (), ())
    assert ids == SessionError(ErrorCode.fetch_session_topic_id_error)
    # The errors left the session as it was.
    assert isinstance(cache.new_context(session_id, 1, False, (), ()), IncrementalFetch)


def test_incremental_requests_add_update_and_forget_partitions() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 2)
    context = cache.new_context(
        session_id, 1, False, [_wanted("t", 1, fetch_offset=40), _wanted("u", 0)], [("t", 0)]
    )
    assert isinstance(context, IncrementalFetch)
    positions = {(p.topic, p.partition): p.fetch_offset for p in context.session.in_order()}
    assert positions == {("t", 1): 40, ("u", 0): 0}
    assert cache.partitions_cached == 2


def test_a_session_left_empty_is_closed() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 1)
    assert isinstance(cache.new_context(session_id, 1, False, (), [("t", 0)]), Sessionless)
    assert cache.size == 0 and cache.partitions_cached == 0


def test_sessions_keyed_by_topic_id() -> None:
    cache, _ = _cache()
    known, unknown = uuid.uuid4(), uuid.uuid4()
    session_id = cache.open_session(
        [CachedPartition("t", known, 0, 0, 100), CachedPartition(None, unknown, 0, 0, 100)], True
    )
    context = cache.new_context(
        session_id, 1, True, [CachedPartition("t", known, 0, 9, 100)], [(unknown, 0)]
    )
    assert isinstance(context, IncrementalFetch)
    assert [(p.topic_id, p.fetch_offset) for p in context.session.in_order()] == [(known, 9)]


def test_what_an_incremental_response_carries() -> None:
    cached = _wanted("t", 0)
    # First told: everything is new.
    assert cached.must_respond(0, 10, 0, 10, has_records=False)
    # Nothing changed: left out.
    assert not cached.must_respond(0, 10, 0, 10, has_records=False)
    # Records, a moved high watermark, log start or last stable offset: carried.
    assert cached.must_respond(0, 10, 0, 10, has_records=True)
    assert cached.must_respond(0, 11, 0, 10, has_records=False)
    assert cached.must_respond(0, 11, 5, 10, has_records=False)
    assert cached.must_respond(0, 11, 5, 11, has_records=False)
    assert not cached.must_respond(0, 11, 5, 11, has_records=False)
    # An error is always carried, and the partition is told again once it clears.
    assert cached.must_respond(int(ErrorCode.not_leader_or_follower), -1, -1, -1, False)
    assert cached.must_respond(int(ErrorCode.not_leader_or_follower), -1, -1, -1, False)
    assert cached.must_respond(0, 11, 5, 11, has_records=False)
    assert not cached.must_respond(0, 11, 5, 11, has_records=False)
    # A preferred read replica is always carried.
    assert cached.must_respond(0, 11, 5, 11, False, preferred_read_replica=2)


def test_partitions_that_returned_records_go_last() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 3)
    context = cache.new_context(session_id, 1, False, (), ())
    assert isinstance(context, IncrementalFetch)
    first = next(context.session.in_order())
    context.session.moved_to_end(first)
    assert [p.partition for p in context.session.in_order()] == [1, 2, 0]


def test_no_slots_means_no_sessions() -> None:
    cache, _ = _cache(slots=0)
    assert isinstance(cache.new_context(0, 0, False, (), ()), Sessionless)
    assert cache.open_session([_wanted("t", 0)], False) == 0


def test_a_full_cache_evicts_a_session_unused_for_the_eviction_time() -> None:
    cache, clock = _cache(slots=2)
    stale = _open(cache, 50)
    clock.advance(1)
    busy = _open(cache, 50)
    # Not yet: both were used recently and neither is older than the eviction time.
    assert _open(cache, 1) == 0
    clock.advance(EVICTION_MS / 1000 - 0.5)
    assert isinstance(cache.new_context(busy, 1, False, (), ()), IncrementalFetch)
    clock.advance(1)
    newcomer = _open(cache, 1)
    assert newcomer != 0 and cache.evictions == 1
    assert cache.get(stale) is None and cache.get(busy) is not None


def test_a_full_cache_evicts_an_old_smaller_session_for_a_larger_one() -> None:
    cache, clock = _cache(slots=2)
    small = _open(cache, 2)
    large = _open(cache, 20)
    clock.advance(EVICTION_MS / 1000 + 1)
    # Both in use, both older than the eviction time.
    for session_id in (small, large):
        session = cache.get(session_id)
        assert session is not None
        assert isinstance(
            cache.new_context(session_id, session.epoch, False, (), ()), IncrementalFetch
        )
    # A session no larger than the smallest does not displace it.
    assert _open(cache, 2) == 0
    assert _open(cache, 3) != 0
    assert cache.get(small) is None and cache.get(large) is not None
    assert cache.evictions == 1


def test_young_sessions_are_not_evicted_for_larger_ones() -> None:
    cache, clock = _cache(slots=1)
    _open(cache, 1)
    clock.advance(10)
    assert _open(cache, 500) == 0


def test_next_epoch_wraps_to_one_and_keeps_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
