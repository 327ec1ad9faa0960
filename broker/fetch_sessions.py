"""Incremental fetch sessions (KIP-227): what a consumer's Fetch may leave out.

A session remembers, for each partition a consumer fetches, its fetch position and limits
(what the consumer asked for last) and the high watermark, log start offset and last stable
offset it was last told. An incremental request then names only partitions it adds or
changes (and the ones it forgets); its response carries only partitions with records, an
error, a preferred read replica or a changed offset (`CachedPartition.must_respond`).

`FetchSessionCache.new_context` decides, as Kafka's FetchManager does, what a request is:
- session id 0 or not, epoch 0 (INITIAL): a full fetch that closes the named session and,
  once answered, opens a new one when a slot is free (`FullFetch.open_session`);
- epoch -1 (FINAL): a full fetch that closes the named session and opens none (`Sessionless`);
- any other epoch: an incremental fetch of the named session, which must exist
  (else FETCH_SESSION_ID_NOT_FOUND) and expect that epoch (else INVALID_FETCH_SESSION_EPOCH);
  a session left with no partition is closed and the request answered sessionless.

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When full, a new
session takes the slot of the least recently used one if that one is unused for two minutes,
else of the smallest session created over two minutes ago if the new one has more partitions
(Kafka's eviction rule for consumers); otherwise no session is opened and the consumer goes
on with full fetches. Pure: no I/O and no trio; time comes from the injected Clock.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from kio.schema.errors import ErrorCode

from raftka.broker.clock import Clock

#: The session id of "no session".
INVALID_SESSION_ID = 0
#: The epoch of a full request that opens a session.
INITIAL_EPOCH = 0
#: The epoch of a full request that wants no session.
FINAL_EPOCH = -1
#: A session unused this long may be evicted by any new one; created this long ago, by a
#: larger one (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).
EVICTION_MS = 120_000
_SESSION_ID_MAX = 2**31 - 1

#: A partition's key in a session: (topic name, or topic id from Fetch v13 on; partition).
PartitionKey: TypeAlias = "tuple[str | uuid.UUID, int]"


def next_epoch(epoch: int) -> int:
    """The epoch expected after `epoch` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _SESSION_ID_MAX else epoch + 1


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a session: the consumer's last request for it (whose attribute
    names are a Fetch request partition's, so the read path takes either) and what its
    last response said. `topic` is None for a topic id this broker does not know."""

    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    local_log_start_offset: int = -1
    last_stable_offset: int = -1

    def key(self, uses_topic_ids: bool) -> PartitionKey:
        if uses_topic_ids:
            assert self.topic_id is not None, "a session with topic ids keys by them"
            return (self.topic_id, self.partition)
        assert self.topic is not None, "a session without topic ids keys by name"
        return (self.topic, self.partition)

    def update_request(self, wanted: CachedPartition) -> None:
        """Take the consumer's new position and limits for this partition."""
        self.fetch_offset = wanted.fetch_offset
        self.partition_max_bytes = wanted.partition_max_bytes
        self.current_leader_epoch = wanted.current_leader_epoch
        self.log_start_offset = wanted.log_start_offset
        self.last_fetched_epoch = wanted.last_fetched_epoch

    def must_respond(
        self,
        error_code: int,
        high_watermark: int,
        log_start_offset: int,
        last_stable_offset: int,
        has_records: bool,
        preferred_read_replica: int = -1,
    ) -> bool:
        """Whether an incremental response must carry this partition's answer; remembers
        the offsets told. An error is always told and forgets the high watermark, so the
        partition is told again once the error is gone."""
        respond = has_records or error_code != 0 or preferred_read_replica >= 0
        if self.high_watermark != high_watermark:
            respond = True
            self.high_watermark = high_watermark
        if self.local_log_start_offset != log_start_offset:
            respond = True
            self.local_log_start_offset = log_start_offset
        # Kafka compares only the two above; a read_committed consumer also needs the last
        # stable offset, which a transaction's end moves after the high watermark moved.
        if self.last_stable_offset != last_stable_offset:
            respond = True
            self.last_stable_offset = last_stable_offset
        if error_code != 0:
            self.high_watermark = -1
        return respond


@dataclass(slots=True, eq=False)
class FetchSession:
    """One consumer's session. `partitions` is in fetch order: a partition that returned
    records moves to the end, so that under `max_bytes` every partition gets its turn."""

    id: int
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def update(self, wanted: Iterable[CachedPartition], forgotten: Iterable[PartitionKey]) -> None:
        """Add or update the partitions an incremental request names, then drop the ones it
        forgets (Kafka's order: a partition both named and forgotten is dropped)."""
        uses_ids = self.uses_topic_ids
        for p in wanted:
            key = p.key(uses_ids)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = p
            else:
                cached.update_request(p)
        for key in forgotten:
            self.partitions.pop(key, None)

    def moved_to_end(self, cached: CachedPartition) -> None:
        """Put a partition that returned records last in fetch order."""
        key = cached.key(self.uses_topic_ids)
        del self.partitions[key]
        self.partitions[key] = cached

    def in_order(self) -> Iterator[CachedPartition]:
        return iter(list(self.partitions.values()))


@dataclass(frozen=True, slots=True)
class SessionError:
    """Answer with this top-level error, session id 0 and no partitions."""

    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class Sessionless:
    """Read the request's partitions; answer with session id 0."""


@dataclass(frozen=True, slots=True)
class FullFetch:
    """Read the request's partitions, then `open_session` with them once answered."""


#: The one of each: they hold nothing (and a dataclass's constructor, compiled, runs as
#: Python: one per fetch).
SESSIONLESS: Final = Sessionless()
FULL_FETCH: Final = FullFetch()


@dataclass(frozen=True, slots=True)
class IncrementalFetch:
    """Read the session's partitions; answer with those `must_respond` picks, if the
    session still expects `response_epoch` then (else INVALID_FETCH_SESSION_EPOCH)."""

    session: FetchSession
    response_epoch: int


FetchContext: TypeAlias = SessionError | Sessionless | FullFetch | IncrementalFetch


class FetchSessionCache:
    """The broker's fetch sessions, at most `max_sessions` (0: none is ever opened)."""

    def __init__(
        self,
        max_sessions: int,
        clock: Clock,
        eviction_ms: int = EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_sessions = max_sessions
        self._clock = clock
        self._eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        # Insertion order is last-use order: `touch` moves a session to the end.
        self._sessions: dict[int, FetchSession] = {}
        self._partitions_cached = 0
        #: Sessions evicted to make room for another (IncrementalFetchSessionEvictionsPerSec).
        self.evictions = 0
        #: Requests answered from a session (incremental fetches).
        self.incremental_fetches = 0

    @property
    def size(self) -> int:
        """Open sessions (NumIncrementalFetchSessions)."""
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        """Partitions over all sessions (NumIncrementalFetchPartitionsCached)."""
        return self._partitions_cached

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._partitions_cached -= len(session.partitions)
        return session

    def new_context(
        self,
        session_id: int,
        epoch: int,
        uses_topic_ids: bool,
        wanted: Iterable[CachedPartition],
        forgotten: Iterable[PartitionKey],
    ) -> FetchContext:
        """What a consumer's Fetch is (see the module's docstring); an incremental one
        updates its session and advances its epoch now, before anything is read."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full request closes the session it names
            if epoch == FINAL_EPOCH or self.max_sessions <= 0:
                return SESSIONLESS
            return FULL_FETCH
        session = self._sessions.get(session_id)
        if session is None:
            return SessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionError(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionError(ErrorCode.fetch_session_topic_id_error)
        before = len(session.partitions)
        session.update(wanted, forgotten)
        self._partitions_cached += len(session.partitions) - before
        if not session.partitions:
            self.remove(session.id)
            return SESSIONLESS
        self._touch(session)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return IncrementalFetch(session, session.epoch)

    def open_session(self, partitions: list[CachedPartition], uses_topic_ids: bool) -> int:
        """A new session of `partitions` (their answers already recorded), its id; or 0
        when no slot is free and none may be evicted for it."""
        if len(self._sessions) >= self.max_sessions and not self._evict_for(len(partitions)):
            return INVALID_SESSION_ID
        now_ms = self._now_ms()
        session = FetchSession(
            id=self._new_session_id(),
            uses_topic_ids=uses_topic_ids,
            created_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
            partitions={p.key(uses_topic_ids): p for p in partitions},
        )
        self._sessions[session.id] = session
        self._partitions_cached += len(session.partitions)
        return session.id

    def _touch(self, session: FetchSession) -> None:
        session.last_used_ms = self._now_ms()
        del self._sessions[session.id]
        self._sessions[session.id] = session

    def _evict_for(self, size: int) -> bool:
        """Free one slot for a session of `size` partitions, if Kafka's rule allows."""
        if not self._sessions or self.max_sessions <= 0:
            return False
        now_ms = self._now_ms()
        least_recent = next(iter(self._sessions.values()))
        if now_ms - least_recent.last_used_ms > self._eviction_ms:
            victim: FetchSession | None = least_recent
        else:
            # Among sessions older than the eviction time, the smallest (then lowest id)
            # gives way to a strictly larger new one.
            old = [s for s in self._sessions.values() if now_ms - s.created_ms > self._eviction_ms]
            victim = min(old, key=lambda s: (len(s.partitions), s.id), default=None)
            if victim is not None and size <= len(victim.partitions):
                victim = None
        if victim is None:
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _SESSION_ID_MAX - 1)
            if session_id not in self._sessions:
                return session_id

    def _now_ms(self) -> int:
        return int(self._clock.now_s() * 1000)
