"""Share-partition state in `__share_group_state`, a compacted internal topic.

A share-partition's state (start offset, state epoch, in-flight ranges with their state
and delivery count) is written as a snapshot, a record keyed by (group, topic id,
partition), followed by updates (see `persisted`), each keyed by (group, topic id,
partition, snapshot id, sequence number), all in the state partition the first three hash
to. Distinct keys keep every update of the current snapshot through compaction; a snapshot
is appended together with tombstones for the updates of the one it replaces, so compaction
removes those too, and a replay ignores updates of any snapshot but the latest.

The data partition's leader writes the state: directly when it leads that state partition,
otherwise through the state partition's leader over the peer RPCs `__share_state_write`
(snapshots, tombstones) and `__share_state_update`; a write returns once the records are
committed (a majority of the state partition's replicas hold them). A write carries its state
epoch and snapshot id beside the value (`Fence`), so the state partition's leader checks it
without decoding the value. Reads go the same way
(`__share_state_read`) and answer the folded state; a state partition's leader answers
them from a map of its partition's latest snapshots and their updates, built by replaying
the partition once per leader epoch and kept up to date by its own writes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.groups.store import NotCoordinatorError, TopicOffsetsLog
from raftka.broker.share.manager import (
    Notice,
    PersistedState,
    ShareKey,
    SharePartitionManager,
    StateUpdate,
)
from raftka.broker.share.partition import RecordState, StateBatch
from raftka.broker.share.persisted import fold
from raftka.broker.topics import SHARE_STATE_TOPIC
from raftka.consensus.transport import ForwardError, PeerTransport

if TYPE_CHECKING:
    from raftka.broker.config import BrokerConfig
    from raftka.broker.replica import ReplicaManager
    from raftka.broker.services import ControllerClient, TopicsView

logger = logging.getLogger("raftka.share")

SHARE_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1"}
SHARE_STATE_WRITE_RPC = "__share_state_write"
SHARE_STATE_READ_RPC = "__share_state_read"
SHARE_STATE_UPDATE_RPC = "__share_state_update"
#: Updates a state partition's leader keeps over one snapshot: the writers' snapshot
#: interval can be at most this, so more mean a writer gone wrong.
STORED_UPDATES_MAX = 500
SHARE_NOTICE_RPC = "__share_notice"
FORWARD_TIMEOUT_S = 15.0
#: How long a coordinator waits for each broker to apply a notice.
NOTICE_TIMEOUT_S = 3.0


def encode_key(key: ShareKey) -> bytes:
    group_id, topic_id, partition = key
    return json.dumps([group_id, str(topic_id), partition]).encode()


def encode_update_key(key: ShareKey, snapshot_id: int, sequence: int) -> bytes:
    group_id, topic_id, partition = key
    return json.dumps([group_id, str(topic_id), partition, snapshot_id, sequence]).encode()


def encode_state(state: PersistedState) -> bytes:
    """The snapshot record's value, a JSON object. `priorities` and `delays` (lists of
    [offset, value] pairs) and `snapshot_id` are written only when not empty (not 0), so a
    state without them is the record raftka has always written, and a broker that knows
    none of them ignores them."""
    doc: dict[str, object] = {
        "state_epoch": state.state_epoch,
        "start_offset": state.start_offset,
        # Tuples are JSON arrays, and a RecordState (an int) its number.
        "batches": [(b.first, b.last, b.state, b.delivery_count) for b in state.batches],
    }
    if state.priorities:
        doc["priorities"] = [list(pair) for pair in state.priorities]
    if state.delays:
        doc["delays"] = [list(pair) for pair in state.delays]
    if state.snapshot_id:
        doc["snapshot_id"] = state.snapshot_id
    return json.dumps(doc).encode()


def encode_update(update: StateUpdate) -> bytes:
    """The update record's value, a JSON object like a snapshot's, with `spans` (the
    [first, last] offsets it covers: all their state is in it)."""
    doc: dict[str, object] = {
        "state_epoch": update.state_epoch,
        "snapshot_id": update.snapshot_id,
        "start_offset": update.start_offset,
        "spans": [list(span) for span in update.spans],
        "batches": [(b.first, b.last, b.state, b.delivery_count) for b in update.batches],
    }
    if update.priorities:
        doc["priorities"] = [list(pair) for pair in update.priorities]
    if update.delays:
        doc["delays"] = [list(pair) for pair in update.delays]
    return json.dumps(doc).encode()


def decode_update(raw: bytes) -> StateUpdate:
    # A JSON object of our own encoding (encode_update); each field is converted as read.
    doc: dict[str, Any] = json.loads(raw)
    return StateUpdate(
        int(doc["state_epoch"]),
        int(doc["snapshot_id"]),
        int(doc["start_offset"]),
        tuple((int(first), int(last)) for first, last in doc["spans"]),
        tuple(
            StateBatch(int(f), int(last), RecordState(int(s)), int(c))
            for f, last, s, c in doc["batches"]
        ),
        tuple((int(o), int(p)) for o, p in doc.get("priorities", ())),
        tuple((int(o), int(at)) for o, at in doc.get("delays", ())),
    )


def decode_state(raw: bytes) -> PersistedState:
    # A JSON object of our own encoding (encode_state); each field is converted as read.
    doc: dict[str, Any] = json.loads(raw)
    return PersistedState(
        int(doc["state_epoch"]),
        int(doc["start_offset"]),
        tuple(
            StateBatch(int(f), int(last), RecordState(int(s)), int(c))
            for f, last, s, c in doc["batches"]
        ),
        tuple((int(o), int(p)) for o, p in doc.get("priorities", ())),
        tuple((int(o), int(at)) for o, at in doc.get("delays", ())),
        int(doc.get("snapshot_id", 0)),
    )


class Fence(NamedTuple):
    """What a state partition's leader checks a write against: the writer's state epoch and
    the snapshot the write is (a snapshot) or follows (an update). Passed beside the record's
    value, so the leader does not decode a value (a snapshot can be megabytes of JSON) to
    learn two numbers."""

    state_epoch: int
    snapshot_id: int

    @classmethod
    def of_request(cls, request: dict[str, Any]) -> Fence | None:
        """The fence an RPC request carries; None from a broker that sends none (the value
        is then decoded)."""
        epoch, snapshot_id = request.get("state_epoch"), request.get("snapshot_id")
        if isinstance(epoch, int) and isinstance(snapshot_id, int):
            return cls(epoch, snapshot_id)
        return None


@dataclass(slots=True)
class StoredState:
    """A share-partition's latest snapshot record and the update records that follow it."""

    snapshot: bytes
    state_epoch: int
    snapshot_id: int
    #: (key, value) of each update, in the order written.
    updates: list[tuple[bytes, bytes]] = field(default_factory=list)

    def folded(self) -> bytes:
        """The state the snapshot and its updates make, as a snapshot's value."""
        if not self.updates:
            return self.snapshot
        updates = [decode_update(value) for _, value in self.updates]
        return encode_state(fold(decode_state(self.snapshot), updates))


class StoredStates:
    """The share-partitions' states a sequence of `__share_group_state` records leaves:
    each key's latest snapshot and the updates of that snapshot written after it. Keys are
    the encoded (group, topic id, partition); records of other shapes are skipped."""

    def __init__(self) -> None:
        self.states: dict[bytes, StoredState] = {}

    def apply(self, raw_key: bytes, value: bytes | None) -> None:
        try:
            fields = json.loads(raw_key)
        except ValueError:
            logger.warning("%s holds a record with a key that is not JSON", SHARE_STATE_TOPIC)
            return
        if not isinstance(fields, list) or len(fields) not in (3, 5):
            return
        if len(fields) == 3:
            if value is None:
                self.states.pop(raw_key, None)
            else:
                doc = json.loads(value)
                self.states[raw_key] = StoredState(
                    value, int(doc["state_epoch"]), int(doc.get("snapshot_id", 0))
                )
            return
        # An update: of the latest snapshot, or left over from an earlier one (ignored;
        # its tombstone follows that snapshot's successor).
        base = json.dumps(fields[:3]).encode()
        stored = self.states.get(base)
        if value is not None and stored is not None and fields[3] == stored.snapshot_id:
            stored.updates.append((raw_key, value))


class FencedStateEpoch(OSError):
    """A write from a share-partition's former leader."""


class TopicShareStateStore:
    def __init__(
        self,
        node_id: int,
        topics: TopicsView,
        controller: ControllerClient,
        config: BrokerConfig,
        transport: PeerTransport,
        replica_manager: ReplicaManager | None = None,
    ) -> None:
        """The state partitions' records are appended through `replica_manager` (see
        `TopicOffsetsLog`)."""
        self.node_id = node_id
        self.controller = controller
        self.transport = transport
        self.log = TopicOffsetsLog(
            topics,
            controller,
            config,
            topic_name=SHARE_STATE_TOPIC,
            config_prefix="share.coordinator.state.topic",
            topic_configs=SHARE_STATE_TOPIC_CONFIGS,
            replica_manager=replica_manager,
        )
        # state partition -> (leader epoch, its stored states) for the partitions led here.
        self._latest: dict[int, tuple[int, StoredStates]] = {}
        self._loading: dict[int, trio.Lock] = {}
        # (state partition, key) -> the lock its writers hold from the fence check to the
        # end of their append, so a stale write cannot pass the check during another's.
        self._writing: dict[tuple[int, bytes], trio.Lock] = {}
        self.manager: SharePartitionManager | None = None

    def attach(self, manager: SharePartitionManager) -> None:
        self.manager = manager

    async def tell_brokers(self, notice: Notice) -> None:
        if self.manager is not None:
            self.manager.apply(notice)
        payload = notice.encode()

        async def tell(node_id: int) -> None:
            try:
                await self.transport.forward(node_id, SHARE_NOTICE_RPC, payload, NOTICE_TIMEOUT_S)
            except ForwardError as exc:
                logger.info("broker %s did not take a share notice: %s", node_id, exc)

        async with trio.open_nursery() as nursery:
            for node_id in sorted(self.controller.image.brokers):
                if node_id != self.node_id:
                    nursery.start_soon(tell, node_id)

    async def serve_notice(self, payload: bytes) -> tuple[int, bytes]:
        try:
            notice = Notice.decode(payload)
        except (ValueError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad share notice: {exc}".encode()
        if self.manager is not None:
            self.manager.apply(notice)
        await trio.lowlevel.checkpoint()
        return 0, b"null"

    async def ensure_created(self) -> None:
        await self.log.ensure_created()

    def partition_for(self, raw_key: bytes) -> int:
        """The state partition of a key: by the topic's own partition count once it is
        known (`ensure_topic` reads it), so keys stay where they were written."""
        return zlib.crc32(raw_key) % self.log.num_partitions

    async def _locate(self, raw_key: bytes) -> tuple[int, int]:
        """(state partition of the key, the node id of its leader); OSError while there
        is none, or while the topic is not the one the store expects."""
        topic = await self.log.ensure_topic()
        if topic is None:
            raise OSError(f"{SHARE_STATE_TOPIC} cannot be created now")
        partition = self.partition_for(raw_key)
        if not 0 <= partition < len(topic.partitions):
            raise OSError(
                f"{SHARE_STATE_TOPIC} has {len(topic.partitions)} partitions where state "
                f"partition {partition} was expected"
            )
        target = topic.partitions[partition]
        if target.is_leader:
            return partition, self.node_id
        leader = self.controller.leader_hints.get(target.name, (-1, -1))[0]
        if leader < 0 or leader == self.node_id:
            raise OSError(f"{target.name} has no leader now")
        return partition, leader

    async def read(self, key: ShareKey) -> PersistedState | None:
        raw_key = encode_key(key)
        partition, leader = await self._locate(raw_key)
        if leader == self.node_id:
            raw = await self.read_local(partition, raw_key)
        else:
            answer = await self._forward(
                leader, SHARE_STATE_READ_RPC, {"partition": partition, "key": raw_key.decode()}
            )
            raw = None if answer is None else str(answer).encode()
        return None if raw is None else decode_state(raw)

    async def write(self, key: ShareKey, state: PersistedState) -> None:
        raw_key = encode_key(key)
        partition, leader = await self._locate(raw_key)
        value = encode_state(state)
        fence = Fence(state.state_epoch, state.snapshot_id)
        if leader == self.node_id:
            await self.write_local(partition, raw_key, value, fence)
        else:
            await self._forward(
                leader,
                SHARE_STATE_WRITE_RPC,
                {"partition": partition, "key": raw_key.decode(), "value": value.decode()}
                | fence._asdict(),
            )

    async def write_update(self, key: ShareKey, update: StateUpdate) -> None:
        raw_key = encode_key(key)
        partition, leader = await self._locate(raw_key)
        value = encode_update(update)
        fence = Fence(update.state_epoch, update.snapshot_id)
        if leader == self.node_id:
            await self.write_update_local(partition, raw_key, value, fence)
        else:
            await self._forward(
                leader,
                SHARE_STATE_UPDATE_RPC,
                {"partition": partition, "key": raw_key.decode(), "value": value.decode()}
                | fence._asdict(),
            )

    async def delete(self, key: ShareKey) -> None:
        raw_key = encode_key(key)
        partition, leader = await self._locate(raw_key)
        if leader == self.node_id:
            await self.delete_local(partition, raw_key)
        else:
            await self._forward(
                leader, SHARE_STATE_WRITE_RPC, {"partition": partition, "key": raw_key.decode()}
            )

    async def _forward(self, leader: int, rpc: str, request: dict[str, object]) -> object:
        try:
            raw = await self.transport.forward(
                leader, rpc, json.dumps(request).encode(), FORWARD_TIMEOUT_S
            )
        except ForwardError as exc:
            raise OSError(f"broker {leader} did not answer {rpc}: {exc}") from exc
        return json.loads(raw)

    # -- at the state partition's leader ------------------------------------------------------

    async def _latest_of(self, partition: int) -> dict[bytes, StoredState]:
        epoch = self.log.leader_epoch(partition)
        if epoch is None:
            raise OSError(f"{SHARE_STATE_TOPIC}-{partition} is not led here")
        loaded = self._latest.get(partition)
        if loaded is not None and loaded[0] == epoch:
            return loaded[1].states
        async with self._loading.setdefault(partition, trio.Lock()):
            loaded = self._latest.get(partition)
            if loaded is not None and loaded[0] == epoch:
                return loaded[1].states
            # A new leader's log holds every committed record once an entry of its term is.
            if not await self.log.wait_caught_up(partition, epoch):
                raise OSError(f"{SHARE_STATE_TOPIC}-{partition} lost its leadership here")
            latest = StoredStates()
            # Replayed on the loop as the group coordinator replays its partitions: the
            # compacted topic holds a snapshot per share-partition and at most a snapshot
            # interval of updates.
            for raw_key, value in self.log.replay(partition):
                latest.apply(raw_key, value)
            self._latest[partition] = (epoch, latest)
            return latest.states

    async def read_local(self, partition: int, raw_key: bytes) -> bytes | None:
        """The key's state, its snapshot with its updates folded in."""
        stored = (await self._latest_of(partition)).get(raw_key)
        return None if stored is None else stored.folded()

    @contextlib.asynccontextmanager
    async def _key_lock(self, partition: int, raw_key: bytes) -> AsyncIterator[None]:
        """One writer of a key at a time; the lock goes once nobody holds or awaits it."""
        lock = self._writing.setdefault((partition, raw_key), trio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._writing.pop((partition, raw_key), None)

    async def write_local(
        self, partition: int, raw_key: bytes, value: bytes, fence: Fence | None = None
    ) -> None:
        """Append the state unless the stored one has a later state epoch (written by a
        later leader of the data partition: this writer is stale, FENCED_STATE_EPOCH).
        Writes of one key are serialized, so the check sees every earlier write. `fence`:
        the value's state epoch and snapshot id, decoded from it when not given."""
        if fence is None:
            decoded = decode_state(value)
            fence = Fence(decoded.state_epoch, decoded.snapshot_id)
        async with self._key_lock(partition, raw_key):
            latest = await self._latest_of(partition)
            stored = latest.get(raw_key)
            if stored is not None and fence.state_epoch < stored.state_epoch:
                raise FencedStateEpoch(
                    f"state epoch {fence.state_epoch} is older than the stored "
                    f"{stored.state_epoch}: the partition has a newer leader"
                )
            # In one batch: the snapshot, and tombstones for the updates it replaces.
            records: list[tuple[bytes, bytes | None]] = [(raw_key, value)]
            if stored is not None:
                records.extend((update_key, None) for update_key, _ in stored.updates)
            epoch = self.log.leader_epoch(partition)
            try:
                await self.log.append(partition, records, leader_epoch=epoch)
            except NotCoordinatorError as exc:
                raise OSError(str(exc)) from exc
            latest[raw_key] = StoredState(value, fence.state_epoch, fence.snapshot_id)

    async def write_update_local(
        self, partition: int, raw_key: bytes, value: bytes, fence: Fence | None = None
    ) -> None:
        """Append an update over the stored snapshot it names, unless that is not the
        stored one (another writer's snapshot came since: FENCED_STATE_EPOCH, as for a
        stale state epoch) or the snapshot has its most updates already. `fence`: the
        update's state epoch and snapshot id, decoded from it when not given."""
        if fence is None:
            decoded = decode_update(value)
            fence = Fence(decoded.state_epoch, decoded.snapshot_id)
        async with self._key_lock(partition, raw_key):
            latest = await self._latest_of(partition)
            stored = latest.get(raw_key)
            if stored is None or stored.snapshot_id != fence.snapshot_id:
                raise FencedStateEpoch(
                    f"the update follows snapshot {fence.snapshot_id}, which is not the "
                    "stored one: the share-partition's state was written by another since"
                )
            if fence.state_epoch != stored.state_epoch:
                raise FencedStateEpoch(
                    f"state epoch {fence.state_epoch} is not the stored "
                    f"{stored.state_epoch}: the partition has a newer leader"
                )
            if len(stored.updates) >= STORED_UPDATES_MAX:
                raise OSError(f"snapshot {stored.snapshot_id} has {STORED_UPDATES_MAX} updates")
            group_id, topic_id, index = json.loads(raw_key)
            update_key = encode_update_key(
                (group_id, topic_id, index), stored.snapshot_id, len(stored.updates) + 1
            )
            epoch = self.log.leader_epoch(partition)
            try:
                await self.log.append(partition, [(update_key, value)], leader_epoch=epoch)
            except BaseException as exc:
                # Whether the update is in the log is unknown now: no later update may follow
                # it (nor reuse its sequence number) before the writer's next snapshot.
                stored.snapshot_id = -1
                if isinstance(exc, NotCoordinatorError):
                    raise OSError(str(exc)) from exc
                raise
            stored.updates.append((update_key, value))

    async def delete_local(self, partition: int, raw_key: bytes) -> None:
        """Append a tombstone for the key and its updates (compaction then drops their
        records)."""
        async with self._key_lock(partition, raw_key):
            latest = await self._latest_of(partition)
            records: list[tuple[bytes, bytes | None]] = [(raw_key, None)]
            stored = latest.get(raw_key)
            if stored is not None:
                records.extend((update_key, None) for update_key, _ in stored.updates)
            epoch = self.log.leader_epoch(partition)
            try:
                await self.log.append(partition, records, leader_epoch=epoch)
            except NotCoordinatorError as exc:
                raise OSError(str(exc)) from exc
            latest.pop(raw_key, None)

    async def serve_read(self, payload: bytes) -> tuple[int, bytes]:
        try:
            request = json.loads(payload)
            raw = await self.read_local(int(request["partition"]), str(request["key"]).encode())
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad state read: {exc}".encode()
        except OSError as exc:
            return int(ErrorCode.not_coordinator), str(exc).encode()
        return 0, json.dumps(None if raw is None else raw.decode()).encode()

    async def serve_update(self, payload: bytes) -> tuple[int, bytes]:
        try:
            request = json.loads(payload)
            await self.write_update_local(
                int(request["partition"]),
                str(request["key"]).encode(),
                str(request["value"]).encode(),
                Fence.of_request(request),
            )
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad state update: {exc}".encode()
        except FencedStateEpoch as exc:
            return int(ErrorCode.fenced_state_epoch), str(exc).encode()
        except OSError as exc:
            return int(ErrorCode.not_coordinator), str(exc).encode()
        return 0, b"null"

    async def serve_write(self, payload: bytes) -> tuple[int, bytes]:
        try:
            request = json.loads(payload)
            if request.get("value") is None:
                await self.delete_local(int(request["partition"]), str(request["key"]).encode())
            else:
                await self.write_local(
                    int(request["partition"]),
                    str(request["key"]).encode(),
                    str(request["value"]).encode(),
                    Fence.of_request(request),
                )
        except (ValueError, KeyError, TypeError) as exc:
            return int(ErrorCode.invalid_request), f"bad state write: {exc}".encode()
        except FencedStateEpoch as exc:
            return int(ErrorCode.fenced_state_epoch), str(exc).encode()
        except OSError as exc:
            return int(ErrorCode.not_coordinator), str(exc).encode()
        return 0, b"null"


def register(
    store: TopicShareStateStore,
    register_rpc: Callable[[str, Callable[[bytes], Awaitable[tuple[int, bytes]]]], None],
) -> TopicShareStateStore:
    register_rpc(SHARE_STATE_READ_RPC, store.serve_read)
    register_rpc(SHARE_STATE_WRITE_RPC, store.serve_write)
    register_rpc(SHARE_STATE_UPDATE_RPC, store.serve_update)
    register_rpc(SHARE_NOTICE_RPC, store.serve_notice)
    return store
