"""Share-partition state in `__share_group_state`, a compacted internal topic.

Each share-partition's state (start offset, state epoch, in-flight ranges with their state
and delivery count) is one record keyed by (group, topic id, partition), in the state
partition that key hashes to. The data partition's leader writes it: directly when it leads
that state partition, otherwise through the state partition's leader over the peer RPC
`__share_state_write`; a write returns once the record is committed (a majority of the
state partition's replicas hold it). Reads go the same way (`__share_state_read`); a state
partition's leader answers them from a map of its partition's latest records, built by
replaying the partition once per leader epoch and kept up to date by its own writes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.groups.store import NotCoordinatorError, TopicOffsetsLog
from raftka.broker.share.manager import (
    Notice,
    PersistedState,
    ShareKey,
    SharePartitionManager,
)
from raftka.broker.share.partition import RecordState, StateBatch
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
SHARE_NOTICE_RPC = "__share_notice"
FORWARD_TIMEOUT_S = 15.0
#: How long a coordinator waits for each broker to apply a notice.
NOTICE_TIMEOUT_S = 3.0


def encode_key(key: ShareKey) -> bytes:
    group_id, topic_id, partition = key
    return json.dumps([group_id, str(topic_id), partition]).encode()


def encode_state(state: PersistedState) -> bytes:
    """The state record's value, a JSON object. `priorities` and `delays` (lists of
    [offset, value] pairs) are written only when not empty, so a state without them is the
    record raftka has always written, and a broker that knows neither ignores them."""
    doc: dict[str, object] = {
        "state_epoch": state.state_epoch,
        "start_offset": state.start_offset,
        "batches": [[b.first, b.last, int(b.state), b.delivery_count] for b in state.batches],
    }
    if state.priorities:
        doc["priorities"] = [list(pair) for pair in state.priorities]
    if state.delays:
        doc["delays"] = [list(pair) for pair in state.delays]
    return json.dumps(doc).encode()


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
    )


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
        # state partition -> (leader epoch, key -> latest value) for the partitions led here.
        self._latest: dict[int, tuple[int, dict[bytes, bytes]]] = {}
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
        if leader == self.node_id:
            await self.write_local(partition, raw_key, value)
        else:
            await self._forward(
                leader,
                SHARE_STATE_WRITE_RPC,
                {"partition": partition, "key": raw_key.decode(), "value": value.decode()},
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

    async def _latest_of(self, partition: int) -> dict[bytes, bytes]:
        epoch = self.log.leader_epoch(partition)
        if epoch is None:
            raise OSError(f"{SHARE_STATE_TOPIC}-{partition} is not led here")
        loaded = self._latest.get(partition)
        if loaded is not None and loaded[0] == epoch:
            return loaded[1]
        async with self._loading.setdefault(partition, trio.Lock()):
            loaded = self._latest.get(partition)
            if loaded is not None and loaded[0] == epoch:
                return loaded[1]
            # A new leader's log holds every committed record once an entry of its term is.
            if not await self.log.wait_caught_up(partition, epoch):
                raise OSError(f"{SHARE_STATE_TOPIC}-{partition} lost its leadership here")
            latest: dict[bytes, bytes] = {}
            # Replayed on the loop as the group coordinator replays its partitions: the
            # compacted topic holds about one record per share-partition.
            for raw_key, value in self.log.replay(partition):
                if value is None:
                    latest.pop(raw_key, None)
                else:
                    latest[raw_key] = value
            self._latest[partition] = (epoch, latest)
            return latest

    async def read_local(self, partition: int, raw_key: bytes) -> bytes | None:
        return (await self._latest_of(partition)).get(raw_key)

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

    async def write_local(self, partition: int, raw_key: bytes, value: bytes) -> None:
        """Append the state unless the stored one has a later state epoch (written by a
        later leader of the data partition: this writer is stale, FENCED_STATE_EPOCH).
        Writes of one key are serialized, so the check sees every earlier write."""
        async with self._key_lock(partition, raw_key):
            latest = await self._latest_of(partition)
            stored = latest.get(raw_key)
            if stored is not None:
                stored_epoch = decode_state(stored).state_epoch
                if decode_state(value).state_epoch < stored_epoch:
                    raise FencedStateEpoch(
                        f"state epoch {decode_state(value).state_epoch} is older than the "
                        f"stored {stored_epoch}: the partition has a newer leader"
                    )
            epoch = self.log.leader_epoch(partition)
            try:
                await self.log.append(partition, [(raw_key, value)], leader_epoch=epoch)
            except NotCoordinatorError as exc:
                raise OSError(str(exc)) from exc
            latest[raw_key] = value

    async def delete_local(self, partition: int, raw_key: bytes) -> None:
        """Append a tombstone for the key (compaction then drops its records)."""
        async with self._key_lock(partition, raw_key):
            latest = await self._latest_of(partition)
            epoch = self.log.leader_epoch(partition)
            try:
                await self.log.append(partition, [(raw_key, None)], leader_epoch=epoch)
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
    register_rpc(SHARE_NOTICE_RPC, store.serve_notice)
    return store
