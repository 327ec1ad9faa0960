"""The share-partitions a partition leader keeps and the share sessions of its members.

A share-partition is loaded from its persisted state (`ShareStateStore`) the first time it
is used in a leader epoch, so a new leader continues where the last persisted state left
off; a fresh one starts at the log start or the high watermark (`share.auto.offset.reset`).
Acknowledgements are answered once the share-partition's state they produced is persisted;
several waiting writers of one share-partition share one write of its latest state. A write
is an update (what changed since the previous write) except every
`share.coordinator.snapshot.update.records.per.snapshot`-th, at load and after a failed
write: those are whole snapshots (see `persisted`).

A share session (KIP-932) is kept per (group, member) on each broker: the partitions the
member fetches from here and the epoch its next request must carry.
"""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Protocol

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.share.delivery_index import DeliveryIndex, IndexedOrder
from raftka.broker.share.partition import SharePartition
from raftka.broker.share.persisted import PersistedState, StateUpdate, fold

__all__ = ["PersistedState", "StateUpdate"]

logger = logging.getLogger("raftka.share")

#: (group id, topic id, partition index)
ShareKey = tuple[str, uuid.UUID, int]
#: (topic id, partition index)
SessionPartition = tuple[uuid.UUID, int]

FINAL_EPOCH = -1
INITIAL_EPOCH = 0


#: Kafka's default for `share.coordinator.snapshot.update.records.per.snapshot`.
UPDATES_PER_SNAPSHOT = 500


class ShareStateStore(Protocol):
    async def read(self, key: ShareKey) -> PersistedState | None:
        """The last state written for `key`, None for a share-partition never written;
        raises OSError when the store cannot answer now."""
        ...

    async def write(self, key: ShareKey, state: PersistedState) -> None:
        """Persist `state` as a whole snapshot (acks=all); raises OSError when it could not
        be."""
        ...

    async def write_update(self, key: ShareKey, update: StateUpdate) -> None:
        """Persist `update` over the stored snapshot it names (acks=all); raises OSError when
        it could not be, FencedStateEpoch-like OSError when that snapshot is no longer the
        stored one or a later state epoch is stored."""
        ...

    async def delete(self, key: ShareKey) -> None:
        """Forget `key`'s state (a tombstone, acks=all): its next use starts afresh per
        `share.auto.offset.reset`; raises OSError when it could not be."""
        ...

    async def ensure_created(self) -> None:
        """Create the store's topic if it does not exist yet (with its own partition count
        and configs); logged when it cannot be now."""
        ...

    def attach(self, manager: SharePartitionManager) -> None:
        """The manager that `tell_brokers` notices apply to on this broker."""
        ...

    async def tell_brokers(self, notice: Notice) -> None:
        """Apply `notice` to the share sessions and share-partitions of every live broker
        (this one included); brokers that do not answer are skipped (their sessions end
        with them)."""
        ...


@dataclass(frozen=True, slots=True)
class Notice:
    """What a share group's coordinator tells the partition leaders: `member_id` left the
    group (its share sessions close, releasing its records), or, with `member_id` empty,
    the group's persisted state of `topic_ids` (None: all) changed under them (their
    share-partitions are dropped and reloaded on next use)."""

    group_id: str
    member_id: str = ""
    topic_ids: tuple[str, ...] | None = None
    delivery_limit: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            [self.group_id, self.member_id, self.topic_ids, self.delivery_limit]
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Notice:
        group_id, member_id, topic_ids, delivery_limit = json.loads(raw)
        return cls(
            str(group_id),
            str(member_id),
            None if topic_ids is None else tuple(str(t) for t in topic_ids),
            int(delivery_limit),
        )


class MemoryStateStore:
    """A store for tests and for a lone broker's unit tests: lost with the process."""

    def __init__(self) -> None:
        self.states: dict[ShareKey, PersistedState] = {}
        self.manager: SharePartitionManager | None = None

    async def delete(self, key: ShareKey) -> None:
        self.states.pop(key, None)

    async def ensure_created(self) -> None:
        return None

    def attach(self, manager: SharePartitionManager) -> None:
        self.manager = manager

    async def tell_brokers(self, notice: Notice) -> None:
        if self.manager is not None:
            self.manager.apply(notice)

    async def read(self, key: ShareKey) -> PersistedState | None:
        return self.states.get(key)

    async def write(self, key: ShareKey, state: PersistedState) -> None:
        self.states[key] = state

    async def write_update(self, key: ShareKey, update: StateUpdate) -> None:
        stored = self.states.get(key)
        if stored is None or stored.snapshot_id != update.snapshot_id:
            raise OSError("the update does not follow the stored snapshot")
        if update.state_epoch < stored.state_epoch:
            raise OSError(f"state epoch {update.state_epoch} is older than the stored one")
        self.states[key] = fold(stored, [update])


@dataclass(eq=False)
class LedSharePartition:
    key: ShareKey
    leader_epoch: int
    state: SharePartition
    state_epoch: int
    persisted_version: int = 0
    write_lock: trio.Lock = field(default_factory=trio.Lock)
    #: The last snapshot written, which the updates since name.
    snapshot_id: int = 0
    updates_since_snapshot: int = 0
    #: The next write is a whole snapshot (none written yet, or a write failed: whether
    #: that update was stored is unknown).
    needs_snapshot: bool = True
    # A write of this state failed: it holds changes whose requests were answered with an
    # error, so it is never written again (the next use reloads what was persisted).
    write_failed: bool = False
    # On a priority or fair topic (or fifo with delays): which record to acquire next
    # (built from the log once loaded).
    index: DeliveryIndex | None = None


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[SessionPartition]
    last_used_ms: float = 0.0
    # The client connection that opened the session (its `ClientSession`; None for calls
    # made outside a connection): the session ends when that connection closes.
    connection: object | None = None


class SharePartitionManager:
    def __init__(
        self, store: ShareStateStore, updates_per_snapshot: int = UPDATES_PER_SNAPSHOT
    ) -> None:
        """`updates_per_snapshot`: updates written between two snapshots of a
        share-partition (0: every write is a snapshot)."""
        self.store = store
        self.updates_per_snapshot = updates_per_snapshot
        self.partitions: dict[ShareKey, LedSharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        # A connection -> the (group, member) sessions it opened that are still open.
        self._by_connection: dict[object, set[tuple[str, str]]] = {}
        self._loading: dict[ShareKey, trio.Lock] = {}
        # Set (and replaced) whenever records may have become available to fetch.
        self.released = trio.Event()
        store.attach(self)

    def notify_released(self) -> None:
        self.released.set()
        self.released = trio.Event()

    async def get(
        self,
        key: ShareKey,
        leader_epoch: int,
        log_start: int,
        high_watermark: int,
        reset: str,
        order: IndexedOrder | None = None,
    ) -> LedSharePartition:
        """The share-partition at this leader epoch, loaded from the store on first use;
        OSError when its state cannot be read now. With an `order` (a priority or fair
        topic, or a fifo topic honouring delays) it has an empty delivery index from its
        start offset, for the caller to fill from the log; a topic whose order changed
        reloads it."""

        def current(led: LedSharePartition | None) -> bool:
            indexed = None if led is None or led.index is None else led.index.order
            return led is not None and led.leader_epoch == leader_epoch and indexed == order

        led = self.partitions.get(key)
        if led is not None and current(led):
            return led
        lock = self._loading.setdefault(key, trio.Lock())
        async with lock:
            led = self.partitions.get(key)
            if led is not None and current(led):
                return led
            persisted = await self.store.read(key)
            if persisted is None:
                start = log_start if reset == "earliest" else high_watermark
                state = SharePartition(start)
                state_epoch = 0
            else:
                state = SharePartition(
                    persisted.start_offset,
                    persisted.batches,
                    persisted.priorities,
                    persisted.delays,
                )
                state_epoch = persisted.state_epoch + 1
            state.move_start(log_start)
            if persisted is not None:
                # Acquisitions are not persisted: what was held at the last write is
                # available again, its delivery count as of that write (KIP-932).
                logger.info(
                    "share-partition %s-%d of %s loaded at leader epoch %d: state epoch %d, "
                    "start %d, %d state batches",
                    key[1],
                    key[2],
                    key[0],
                    leader_epoch,
                    state_epoch,
                    state.start_offset,
                    len(persisted.batches),
                )
            led = LedSharePartition(key, leader_epoch, state, state_epoch)
            if order is not None:
                state.left_acquired = []
                led.index = DeliveryIndex(order, state.start_offset)
            # Written at once: its state epoch fences a former leader's writes, and a new
            # share-partition's start stays where it was put.
            version = state.version
            await self._write_snapshot(led)
            led.persisted_version = version
            self.partitions[key] = led
            return led

    @staticmethod
    def _snapshot(led: LedSharePartition) -> PersistedState:
        state = led.state
        return PersistedState(
            led.state_epoch,
            state.start_offset,
            tuple(state.state_batches()),
            tuple(state.kept_priorities()),
            tuple(state.kept_delays()),
            led.snapshot_id,
        )

    async def _write_snapshot(self, led: LedSharePartition) -> None:
        led.needs_snapshot = True
        led.snapshot_id = 1 + secrets.randbits(62)
        led.state.clear_changes()
        await self.store.write(led.key, self._snapshot(led))
        led.updates_since_snapshot = 0
        led.needs_snapshot = False

    async def _write_update(self, led: LedSharePartition) -> None:
        state = led.state
        changes = state.take_changes()
        update = StateUpdate(
            led.state_epoch,
            led.snapshot_id,
            state.start_offset,
            changes.spans,
            changes.batches,
            changes.priorities,
            changes.delays,
        )
        led.needs_snapshot = True  # until this one is known to be stored
        await self.store.write_update(led.key, update)
        led.updates_since_snapshot += 1
        led.needs_snapshot = False

    async def persist(self, led: LedSharePartition) -> None:
        """Write the share-partition's state as it is now (or find a later write already
        did); OSError when it could not be written (the share-partition is then dropped so
        its next use reloads what was persisted). After a failed write, every later write
        of the same `led` fails too: its state still holds the changes the failed write's
        requests were told did not happen (an acknowledgement answered with an error must
        leave its records to come back, as Kafka rolls a failed state write back)."""
        wanted = led.state.version
        async with led.write_lock:
            if led.persisted_version >= wanted:
                return
            if led.write_failed:
                raise OSError("an earlier write of this share-partition's state failed")
            version = led.state.version
            try:
                if led.needs_snapshot or led.updates_since_snapshot >= self.updates_per_snapshot:
                    await self._write_snapshot(led)
                else:
                    await self._write_update(led)
            except OSError as exc:
                led.write_failed = True
                if self.partitions.get(led.key) is led:
                    del self.partitions[led.key]
                logger.info(
                    "share-partition %s-%d of %s: its state could not be written (%s); "
                    "its next use reloads what was persisted",
                    led.key[1],
                    led.key[2],
                    led.key[0],
                    exc,
                )
                raise
            led.persisted_version = version

    def on_leadership(self, topic_id: uuid.UUID, index: int, leader_epoch: int | None) -> None:
        """A partition's leadership changed (`leader_epoch` None: not led here): forget its
        share-partitions of other epochs; the next use reloads the persisted state."""
        stale = [
            key
            for key, led in self.partitions.items()
            if key[1] == topic_id and key[2] == index and led.leader_epoch != leader_epoch
        ]
        for key in stale:
            del self.partitions[key]

    # -- share sessions -------------------------------------------------------------------------

    def open_session(
        self,
        group_id: str,
        member_id: str,
        partitions: set[SessionPartition],
        delivery_limit: int,
        sessions_max: int,
        connection: object | None = None,
    ) -> ShareSession | None:
        """Epoch 0: a new session, replacing the member's previous one (whose records are
        released); None when `sessions_max` other sessions are open here. It lasts until
        the member's final epoch, until `connection` (the client's, which opened it)
        closes, or until it is idle too long; not until the member leaves its group: a
        leaving client may send its last acknowledgements after the leave (as Kafka's
        share session cache does, KAFKA-19015)."""
        self.close_session(group_id, member_id, delivery_limit)
        if len(self.sessions) >= sessions_max:
            return None
        key = (group_id, member_id)
        session = ShareSession(1, set(partitions), connection=connection)
        self.sessions[key] = session
        if connection is not None:
            self._by_connection.setdefault(connection, set()).add(key)
        return session

    def connection_closed(self, connection: object, delivery_limit: int) -> None:
        """A client connection closed: the sessions it opened end, and the records their
        members acquired are available at once. A session the member opened again on
        another connection is not this one's and stays."""
        for group_id, member_id in sorted(self._by_connection.pop(connection, ())):
            self.close_session(group_id, member_id, delivery_limit)

    def evict_idle(self, now_ms: float, idle_ms: int, delivery_limit: int) -> None:
        """Close the sessions unused for `idle_ms` (their members died or left)."""
        idle = [k for k, s in self.sessions.items() if s.last_used_ms + idle_ms <= now_ms]
        for group_id, member_id in idle:
            self.close_session(group_id, member_id, delivery_limit)

    def session_error(self, group_id: str, member_id: str, epoch: int) -> ErrorCode:
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.share_session_not_found
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return ErrorCode.invalid_share_session_epoch
        return ErrorCode.none

    def close_session(self, group_id: str, member_id: str, delivery_limit: int) -> None:
        """The member's session here ends: its acquired records are available again."""
        key = (group_id, member_id)
        session = self.sessions.pop(key, None)
        if session is None:
            return
        opened_by = self._by_connection.get(session.connection)
        if opened_by is not None:
            opened_by.discard(key)
            if not opened_by:
                del self._by_connection[session.connection]
        released = 0
        for topic_id, index in session.partitions:
            led = self.partitions.get((group_id, topic_id, index))
            if led is not None:
                released += led.state.release_member(member_id, delivery_limit)
        if released:
            self.notify_released()

    def apply(self, notice: Notice) -> None:
        """A coordinator's notice (see `Notice`), on this broker."""
        if notice.member_id:
            self.close_session(notice.group_id, notice.member_id, notice.delivery_limit)
            return
        stale = [
            key
            for key in self.partitions
            if key[0] == notice.group_id
            and (notice.topic_ids is None or str(key[1]) in notice.topic_ids)
        ]
        for key in stale:
            del self.partitions[key]

    def describe(self, group_id: str) -> list[tuple[ShareKey, LedSharePartition]]:
        return sorted(
            ((k, led) for k, led in self.partitions.items() if k[0] == group_id),
            key=lambda item: (str(item[0][1]), item[0][2]),
        )
