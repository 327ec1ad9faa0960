"""The broker process: listener, connections and the background duties of its logs."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from broker.config import BrokerConfig
from broker.connection import Connection
from broker.groups import coordinator_for
from broker.handlers import HANDLERS, ApiHandler
from broker.topics import TopicManager, now_ms

logger = logging.getLogger("raftka.server")

FLUSH_CHECK_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class Listener:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        """`HOST:PORT` (or `PLAINTEXT://HOST:PORT`, Kafka's listener form)."""
        address = text.split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        return cls(host.strip("[]") or "0.0.0.0", int(port))


def read_or_create_cluster_id(data_dir: Path, node_id: int) -> str:
    """Kafka's meta.properties: a cluster id that stays with the data directory."""
    meta = data_dir / "meta.properties"
    if meta.exists():
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
    tmp.replace(meta)
    return cluster_id


class Broker:
    """A single raftka broker. `run()` serves until cancelled, then shuts down cleanly."""

    def __init__(self, config: BrokerConfig, listener: Listener, data_dir: Path) -> None:
        self.config = config
        self.listener = listener
        self.data_dir = data_dir
        self.node_id: int = config.get("node.id")
        self.handlers: Mapping[int, ApiHandler] = HANDLERS
        self.cluster_id = read_or_create_cluster_id(data_dir, self.node_id)
        self.topics = TopicManager(data_dir, config)
        self.groups = coordinator_for(self.topics, config)
        self.advertised = listener
        self.bound_port = listener.port

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        self.topics.load()
        self.groups.load()
        try:
            async with trio.open_nursery() as nursery:
                listeners = await trio.open_tcp_listeners(
                    self.listener.port, host=self.listener.host
                )
                self.bound_port = listeners[0].socket.getsockname()[1]
                advertised = self.config.get("advertised.listeners")
                self.advertised = (
                    Listener.parse(advertised)
                    if advertised
                    else Listener(self.listener.host, self.bound_port)
                )
                nursery.start_soon(self._flush_logs)
                nursery.start_soon(self._enforce_retention)
                nursery.start_soon(self.groups.run)
                logger.info(
                    "raftka: serving on %s:%d (node %d, cluster %s, data %s)",
                    self.listener.host,
                    self.bound_port,
                    self.node_id,
                    self.cluster_id,
                    self.data_dir,
                )
                task_status.started(self.bound_port)
                await trio.serve_listeners(self._serve_connection, listeners)
        finally:
            started = time.monotonic()
            self.topics.close()
            logger.info("raftka: logs flushed and closed in %.2f s", time.monotonic() - started)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        await Connection(self, stream).serve()

    async def _flush_logs(self) -> None:
        """fsync partitions per their flush.messages / flush.ms, off the event loop."""
        while True:
            await trio.sleep(FLUSH_CHECK_INTERVAL_S)
            now = now_ms()
            for partition in self.topics.all_partitions():
                if partition.log.should_flush(now):
                    job = partition.log.flush_job()
                    if job is not None:
                        await trio.to_thread.run_sync(job)

    async def _enforce_retention(self) -> None:
        interval_s = self.config.get("log.retention.check.interval.ms") / 1000
        while True:
            await trio.sleep(interval_s)
            now = now_ms()
            deleted = 0
            for partition in self.topics.all_partitions():
                deleted += partition.log.enforce_retention(now)
                await trio.lowlevel.checkpoint()
            if deleted:
                logger.info("retention deleted %d segments", deleted)
