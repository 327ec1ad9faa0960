"""The broker process: listener, connections and the background duties of its logs."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import ipaddress
import logging
import operator
import os
import resource
import socket
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from prometheus_client import CONTENT_TYPE_LATEST

from raftka.broker import compiled
from raftka.broker.clock import SYSTEM_CLOCK, Clock
from raftka.broker.cluster.controller import METADATA_GROUP, Controller
from raftka.broker.compaction import LogCleaner
from raftka.broker.config import BrokerConfig, ConfigError
from raftka.broker.connection import Connection
from raftka.broker.console.page_reads import PageReads
from raftka.broker.console.page_reads import register as register_page_reads
from raftka.broker.console.remote_calls import RemoteCalls
from raftka.broker.console.remote_calls import register as register_remote_calls
from raftka.broker.fetch_sessions import FetchSessionCache
from raftka.broker.group_commit import GroupCommit
from raftka.broker.groups import coordinator_for
from raftka.broker.groups.store import offsets_marker_listener
from raftka.broker.handlers import HANDLERS
from raftka.broker.http_endpoint import HttpEndpoint, HttpResponse
from raftka.broker.idle import IdleConnections
from raftka.broker.log_dir_failure import LogDirFailureHandler
from raftka.broker.log_directories import check_first_dir_only, ensure_directory_ids
from raftka.broker.long_polls import LongPolls
from raftka.broker.metrics import (
    BrokerInfoCollector,
    BrokerMetrics,
    BrokerStateCollector,
    FetchSessionCollector,
    LongPollCollector,
)
from raftka.broker.producer_ids import ProducerIdAllocator
from raftka.broker.queues.changes import LEADER_OPS
from raftka.broker.queues.remote import QUEUE_RPC, QueueOps
from raftka.broker.quotas import ClientQuotaManager
from raftka.broker.readiness import ReadinessPoller
from raftka.broker.replica import ReplicaManager
from raftka.broker.replication import HardStateStore
from raftka.broker.security.acl import Authorizer
from raftka.broker.security.listeners import (
    ListenerSpec,
    advertised_addresses,
    resolve_listeners,
)
from raftka.broker.security.session import Authenticator
from raftka.broker.security.tls import server_context
from raftka.broker.services import BrokerIdentity, BrokerServices
from raftka.broker.share.manager import SharePartitionManager
from raftka.broker.share.state_store import TopicShareStateStore
from raftka.broker.share.state_store import register as register_share_state
from raftka.broker.topics import Partition, TopicManager
from raftka.broker.txn import transaction_coordinator_for
from raftka.consensus.driver import RaftNode
from raftka.consensus.errors import OUT_OF_SPACE
from raftka.consensus.peer_auth import PeerAuth, load_secrets
from raftka.consensus.transport import PeerTransport

if TYPE_CHECKING:
    from raftka.broker.console.app import Console
    from raftka.broker.handlers.context import BrokerServices as HandlerServices
    from raftka.broker.queues.member import ShareMember

logger = logging.getLogger("raftka.server")

FLUSH_CHECK_INTERVAL_S = 0.05
LOG_INT64_MAX = 2**63 - 1  # flush.messages / flush.ms: never


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


@dataclass(frozen=True)
class ClusterSpec:
    """This broker's place in the cluster: its Raft address and every voter's."""

    raft_listen: Listener | None = None
    peers: dict[int, Listener] = field(default_factory=dict)
    #: This broker joins a running cluster: it is not one of the voters it starts with
    #: (every other broker in `peers`), and the metadata adds it as an observer.
    join: bool = False
    #: The cluster's id when given (`--cluster-id`): taken instead of one derived from peers.
    given_cluster_id: str | None = None
    #: The metadata voters at the cluster's first start when not every peer is one
    #: (`controller.quorum.voters` with --peers, as `--shards` sets it); the other peers
    #: register as observers of the metadata quorum.
    metadata_voters: frozenset[int] | None = None

    @classmethod
    def parse_peers(cls, text: str) -> dict[int, Listener]:
        """`1@HOST:PORT,2@HOST:PORT,...` as {node id: Raft address}."""
        peers: dict[int, Listener] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            node, sep, address = item.partition("@")
            if not sep or not node.isdigit():
                raise ValueError(f"expected NODE_ID@HOST:PORT in --peers, got {item!r}")
            peers[int(node)] = Listener.parse(address)
        return peers

    def voters(self, node_id: int) -> frozenset[int]:
        """The metadata voters until the metadata log records a change of them."""
        if self.metadata_voters is not None:
            return self.metadata_voters
        if self.join:
            return frozenset(self.peers) - {node_id}
        return frozenset(self.peers) | {node_id}

    def cluster_id(self) -> str | None:
        """A multi-broker cluster's id, the same on every broker started with these peers
        (or the one given with --cluster-id)."""
        if self.given_cluster_id is not None:
            return self.given_cluster_id
        if not self.peers:
            return None
        spec = ",".join(f"{n}@{a.host}:{a.port}" for n, a in sorted(self.peers.items()))
        digest = hashlib.sha256(spec.encode()).digest()[:16]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


# Below this many descriptors the soft limit is raised: every partition holds a few open files
# (segment, indexes) and every client connection one.
OPEN_FILES_WANTED = 100_000


#: Files a hosted partition may hold open: a segment's log, offset and time indexes, with
#: room for a second segment while it rolls and its leader-epoch and producer-state files.
FILES_PER_PARTITION = 8
#: Connections counted when `max.connections` does not bound them, and descriptors for
#: everything else (Raft peers, metadata log, sockets of the HTTP endpoint).
CONNECTIONS_COUNTED_MAX = 1_000
OPEN_FILES_HEADROOM = 512


def open_files_needed(config: BrokerConfig, log_dirs: Sequence[Path]) -> int:
    """Descriptors this broker needs: its partitions (those in `log_dirs` and the internal
    topics' configured ones) and its connections (`max.connections`, at most 1,000)."""
    partitions = 0
    for log_dir in log_dirs:
        with contextlib.suppress(OSError):
            partitions += sum(1 for entry in log_dir.iterdir() if entry.is_dir())
    partitions += sum(
        config.get_int(name)
        for name in (
            "offsets.topic.num.partitions",
            "transaction.state.log.num.partitions",
            "share.coordinator.state.topic.num.partitions",
        )
    )
    connections = min(config.get_int("max.connections"), CONNECTIONS_COUNTED_MAX)
    return partitions * FILES_PER_PARTITION + connections + OPEN_FILES_HEADROOM


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED, needed: int | None = None) -> int:
    """Raise the soft RLIMIT_NOFILE toward `wanted` (at most the hard limit), as Kafka's
    docs ask operators to; returns the soft limit now in force. Logs a warning when the
    limit stays below `needed` (default `wanted`), what the broker's partitions and
    connections need."""
    needed = wanted if needed is None else needed
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            logger.info("raised the open file limit from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("cannot raise the open file limit from %d: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < needed:
        logger.warning(
            "open file limit is %d (hard limit %d): each partition keeps files open and each"
            " client connection one; raise it (ulimit -n, LimitNOFILE=) to at least %d",
            soft,
            hard,
            needed,
        )
    return soft


def lock_data_dir(data_dir: Path) -> int:
    """Hold `<data_dir>/.lock` for this process (Kafka's log-directory lock): two brokers
    writing one data directory would corrupt each other's logs. Returns the lock's
    descriptor; raises ValueError naming the directory and the holder when it is taken."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(
            f"{data_dir} is in use by another raftka broker (pid {holder}, holding {path}); "
            "stop that broker first or use another --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def read_or_create_cluster_id(data_dir: Path, node_id: int, wanted: str | None = None) -> str:
    """Kafka's meta.properties: a cluster id that stays with the data directory."""
    meta = data_dir / "meta.properties"
    if meta.exists():
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                found = line.split("=", 1)[1].strip()
                if wanted is not None and found != wanted:
                    raise ValueError(
                        f"{data_dir} belongs to cluster {found}, not to the cluster of these "
                        f"--peers or --cluster-id ({wanted}); use another --data-dir"
                    )
                return found
    cluster_id = wanted or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
    tmp.replace(meta)
    return cluster_id


# -- connection limits (Kafka's ConnectionQuotas) ------------------------------------------


def parse_connection_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `HOST:COUNT,...` as {ip address: count}; a host
    name is resolved once, here. Raises ValueError naming the bad entry."""
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: expected HOST:COUNT, got {item!r}")
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                address = socket.gethostbyname(host)
            except OSError as exc:
                raise ValueError(
                    f"max.connections.per.ip.overrides: cannot resolve host {host!r}: {exc}"
                ) from None
        overrides[address] = int(count)
    return overrides


class ConnectionLimits:
    """`max.connections` (accepting waits while the broker holds that many client
    connections) and `max.connections.per.ip` with its overrides (a connection past an
    address's limit is closed at once)."""

    def __init__(
        self, total_max: int, per_ip_max: int, per_ip_overrides: Mapping[str, int]
    ) -> None:
        self.total_max = total_max
        self.per_ip_max = per_ip_max
        self.per_ip_overrides = dict(per_ip_overrides)
        self.total = 0
        self.by_ip: dict[str, int] = {}
        #: The address each counted connection was counted under, until it closes.
        self.counted: dict[trio.SocketStream, str] = {}
        self._closed = trio.Event()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        return cls(
            config.get_int("max.connections"),
            config.get_int("max.connections.per.ip"),
            parse_connection_overrides(config.get_str("max.connections.per.ip.overrides")),
        )

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take the broker's current `max.connections` and `max.connections.per.ip` (dynamic
        configs): a raised total lets a waiting accept go on; connections already open
        beyond a lowered limit stay open, as in Kafka."""
        self.total_max = config.get_int("max.connections")
        self.per_ip_max = config.get_int("max.connections.per.ip")
        self._closed.set()
        self._closed = trio.Event()

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.per_ip_max)

    async def wait_for_room(self) -> None:
        """Return once the broker holds fewer than `max.connections` connections."""
        while self.total >= self.total_max:
            await self._closed.wait()

    def try_open(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (nothing counted) if `ip` is at its limit."""
        count = self.by_ip.get(ip, 0)
        if count >= self.limit_for(ip):
            return False
        self.by_ip[ip] = count + 1
        self.total += 1
        return True

    def release(self, stream: trio.SocketStream) -> None:
        """`stream`, accepted by a LimitedListener, has closed."""
        ip = self.counted.pop(stream, None)
        if ip is not None:
            self.closed(ip)

    def closed(self, ip: str) -> None:
        count = self.by_ip.get(ip, 0) - 1
        if count > 0:
            self.by_ip[ip] = count
        else:
            self.by_ip.pop(ip, None)
        self.total -= 1
        self._closed.set()
        self._closed = trio.Event()


class LimitedListener(trio.abc.Listener[trio.SocketStream]):
    """A TCP listener that honours `ConnectionLimits`: it does not accept while the broker
    is full, and closes at once a connection whose address is at its limit."""

    def __init__(self, inner: trio.SocketListener, limits: ConnectionLimits) -> None:
        self.inner = inner
        self.limits = limits
        self.socket = inner.socket

    async def accept(self) -> trio.SocketStream:
        while True:
            await self.limits.wait_for_room()
            stream = await self.inner.accept()
            ip = peer_ip(stream)
            if self.limits.try_open(ip):
                self.limits.counted[stream] = ip
                return stream
            logger.info(
                "closing connection from %s: the address already has the maximum of %d"
                " connections (max.connections.per.ip)",
                ip,
                self.limits.limit_for(ip),
            )
            await trio.aclose_forcefully(stream)

    async def aclose(self) -> None:
        await self.inner.aclose()


def peer_ip(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return "?"


def peer_auth_from(config: BrokerConfig, cluster_id: str) -> PeerAuth | None:
    """The Raft transport's authentication from `raft.auth.secret(.file)`; None when unset.
    A bad value raises ConfigError naming the config."""
    try:
        accepted = load_secrets(
            config.get_optional_str("raft.auth.secret"),
            config.get_optional_str("raft.auth.secret.file"),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return None if accepted is None else PeerAuth(accepted, cluster_id)


RAFT_TLS_LISTENER = "RAFT"  # listener.name.raft.ssl.* overrides apply to the Raft port
HTTP_TLS_LISTENER = "HTTP"  # listener.name.http.ssl.* overrides apply to the HTTP endpoints


def http_tls_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context of the metrics and console endpoints when `http.security.protocol`
    is SSL; ConfigError naming a missing or unreadable keystore."""
    if config.get_str("http.security.protocol") != "SSL":
        return None
    return server_context(config, HTTP_TLS_LISTENER)


def raft_tls_contexts(config: BrokerConfig) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """(server, client) TLS contexts of the Raft transport when `raft.security.protocol` is
    SSL: the broker's keystore on both sides, the truststore checking the other side's
    certificate both ways (and the host name a peer is dialled at). ConfigError naming what
    is missing."""
    if config.get_str("raft.security.protocol") != "SSL":
        return None
    if not (config.is_set("raft.auth.secret") or config.is_set("raft.auth.secret.file")):
        raise ConfigError(
            "raft.security.protocol=SSL needs raft.auth.secret (or raft.auth.secret.file) as "
            "well: a certificate from the truststore's CA does not say a peer is a broker of "
            "this cluster"
        )
    server = server_context(config, RAFT_TLS_LISTENER)
    server.verify_mode = ssl.CERT_REQUIRED

    def value(name: str) -> str | None:
        found = config.listener_value(RAFT_TLS_LISTENER, name)
        return found if isinstance(found, str) and found else None

    keystore, truststore = value("ssl.keystore.location"), value("ssl.truststore.location")
    if keystore is None or truststore is None:
        raise ConfigError(
            "raft.security.protocol=SSL needs ssl.keystore.location and "
            "ssl.truststore.location (PEM files): the Raft transport does not take inline "
            "key material"
        )
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=truststore)
    try:
        client.load_cert_chain(keystore, password=value("ssl.key.password"))
    except ssl.SSLError as exc:
        raise ConfigError(f"ssl.keystore.location: cannot load {keystore}: {exc}") from None
    return server, client


class Broker:
    """One raftka broker. `run()` serves until cancelled, then shuts down cleanly.

    `listener` (the `--listen` address) is a PLAINTEXT listener named PLAINTEXT, served
    before those of the `listeners` config if that is set; None: only `listeners`. A bad
    listener, keystore or SASL config raises ConfigError (a ValueError) naming it."""

    def __init__(
        self,
        config: BrokerConfig,
        listener: Listener | None,
        data_dir: Path,
        cluster: ClusterSpec | None = None,
        clock: Clock = SYSTEM_CLOCK,
        more_log_dirs: Sequence[Path] = (),
    ) -> None:
        """`data_dir` is the first log directory (the metadata log, Raft state and producer
        ids live there too), `more_log_dirs` the others (`log.dirs`, JBOD)."""
        self.config = config
        self.clock = clock
        self.listeners: list[ListenerSpec] = resolve_listeners(
            config, None if listener is None else (listener.host, listener.port)
        )
        first = self.listeners[0]
        self.listener = listener or Listener(first.host, first.port)
        self.tls_contexts: dict[str, ssl.SSLContext] = {
            spec.name: server_context(config, spec.name)
            for spec in self.listeners
            if spec.protocol.uses_tls
        }
        self.data_dir = data_dir
        self.more_log_dirs = list(more_log_dirs)
        check_first_dir_only([data_dir, *self.more_log_dirs])
        self._data_dir_lock = lock_data_dir(data_dir)
        # What is opened here is closed again when a later step raises: a broker that
        # never ran must not keep its data directory's lock or stores.
        with contextlib.ExitStack() as opened:
            opened.callback(os.close, self._data_dir_lock)
            #: The locks of `more_log_dirs` (`run` closes them with the first one's).
            self._more_log_dir_locks: list[int] = []
            for log_dir in self.more_log_dirs:
                self._more_log_dir_locks.append(lock_data_dir(log_dir))
                opened.callback(os.close, self._more_log_dir_locks[-1])
            self.cluster = cluster or ClusterSpec()
            self.node_id: int = config.get_int("node.id")
            if (
                self.cluster.join
                and self.cluster.given_cluster_id is None
                and not (data_dir / "meta.properties").exists()
            ):
                raise ValueError(
                    "--join needs --cluster-id: the id of the running cluster this broker joins"
                    " (`raftka cluster status` shows it)"
                )
            # A joiner's --peers are not the cluster's original ones: no id is derived from them.
            self.cluster_id = read_or_create_cluster_id(
                data_dir,
                self.node_id,
                self.cluster.given_cluster_id if self.cluster.join else self.cluster.cluster_id(),
            )
            #: Absolute path -> directory.id of every log directory (KIP-858's ids).
            self.directory_ids = ensure_directory_ids(
                [data_dir, *self.more_log_dirs], self.cluster_id, self.node_id
            )
            raft_listen = self.cluster.raft_listen or Listener("127.0.0.1", 0)
            raft_tls = raft_tls_contexts(config)
            self.transport = PeerTransport(
                self.node_id,
                (raft_listen.host, raft_listen.port),
                {n: (a.host, a.port) for n, a in self.cluster.peers.items()},
                auth=peer_auth_from(config, self.cluster_id),
                tls_server=None if raft_tls is None else raft_tls[0],
                tls_client=None if raft_tls is None else raft_tls[1],
                admit_joiners=bool(self.cluster.peers),
            )
            self.hard_states = HardStateStore(data_dir / "raft.lmdb")
            opened.callback(self.hard_states.close)
            self.log_dir_failures = LogDirFailureHandler(METADATA_GROUP)
            self.node = RaftNode(
                self.node_id,
                self.transport,
                seed=self.node_id,
                hard_states=self.hard_states,
                on_sync_failure=self.log_dir_failures,
            )
            self.topics = TopicManager(
                data_dir, config, self.node, self.hard_states, self.more_log_dirs
            )
            self.log_dir_failures.topics = self.topics
            opened.callback(self.topics.close)
            self.controller = Controller(
                self.node,
                self.cluster.voters(self.node_id),
                data_dir,
                config,
                self.topics,
                self.hard_states,
            )
            opened.callback(self.controller.close)
            self.producer_ids = ProducerIdAllocator(
                data_dir / "producer-ids.lmdb",
                self.node_id,
                floor=lambda: self.controller.image.producer_id_floor,
            )
            opened.callback(self.producer_ids.close)
            self.replica_manager = ReplicaManager(self.topics, self.controller, self.clock)
            self.replica_manager.on_log_dir_failure = self.log_dir_failures
            self.groups = coordinator_for(
                self.topics, self.controller, config, self.replica_manager, self.clock
            )
            self.replica_manager.marker_listeners.append(
                offsets_marker_listener(self.groups.on_transaction_completed)
            )
            self.groups.share_partitions = SharePartitionManager(
                register_share_state(
                    TopicShareStateStore(
                        self.node_id,
                        self.topics,
                        self.controller,
                        config,
                        self.transport,
                        self.replica_manager,
                    ),
                    self.controller.register_rpc,
                ),
                config.get_int("share.coordinator.snapshot.update.records.per.snapshot"),
            )
            share_partitions = self.groups.share_partitions
            self.topics.leadership_listeners.append(
                lambda p: share_partitions.on_leadership(
                    p.topic.topic_id, p.index, p.leader_epoch if p.is_leader else None
                )
            )
            self.bound_port = self.listener.port
            #: Listener name -> the port it is bound to (known once `run` has bound them).
            self.bound_ports: dict[str, int] = {}
            self.registered = False
            self.metrics = BrokerMetrics(
                {key: key.kafka_name for key in HANDLERS},
                live_topics=lambda: self.topics.topics,
            )
            self.metrics.registry.register(
                BrokerStateCollector(self.topics, self.controller, self.groups, self.node)
            )
            metrics_listen = config.get_str("metrics.listen")
            self.http: HttpEndpoint | None = None
            self.http_tls = http_tls_context(config)
            if metrics_listen:
                try:
                    address = Listener.parse(metrics_listen)
                except ValueError as exc:
                    raise ValueError(f"metrics.listen: {exc}") from None
                self.http = HttpEndpoint(
                    address.host,
                    address.port,
                    {
                        "/metrics": self._metrics,
                        "/healthz": self._health,
                        "/readyz": self._readiness,
                    },
                    tls=self.http_tls,
                )
            # Until the listener is bound the configured address stands in for the advertised one.
            self.identity = BrokerIdentity(
                self.node_id,
                self.cluster_id,
                config.get_optional_str("broker.rack"),
                self.listener.host,
                self.listener.port,
            )
            self.metrics.registry.register(
                BrokerInfoCollector(self.node_id, self.identity.rack, socket.gethostname())
            )
            self.authenticator = Authenticator(
                config, lambda: self.controller.image.scram_credentials
            )
            for spec in self.listeners:
                if spec.protocol.uses_sasl:
                    self.authenticator.validate(spec.name)
            self.authorizer = Authorizer.from_config(config, lambda: self.controller.image.acls)
            # Asked before every request: a partial of an attrgetter runs no Python frame.
            self.quotas = ClientQuotaManager.from_config(
                config,
                functools.partial(operator.attrgetter("controller.image.client_quotas"), self),
                clock,
            )
            self.connection_limits = ConnectionLimits.from_config(config)
            self.controller.publisher.config_listeners.append(
                lambda: self.connection_limits.reconfigure(config)
            )
            self.idle = IdleConnections(config.get_int("connections.max.idle.ms"))
            self.fetch_sessions = FetchSessionCache(
                config.get_int("max.incremental.fetch.session.cache.slots"), clock
            )
            self.metrics.registry.register(FetchSessionCollector(self.fetch_sessions))
            self.transactions = transaction_coordinator_for(
                self.node_id,
                self.topics,
                self.controller,
                self.transport,
                config,
                self.producer_ids,
                self.replica_manager,
            )
            self.services: HandlerServices = BrokerServices(
                config=config,
                identity=self.identity,
                topics=self.topics,
                controller=self.controller,
                groups=self.groups,
                producer_ids=self.producer_ids,
                handlers=HANDLERS,
                metrics=self.metrics,
                authenticator=self.authenticator,
                transactions=self.transactions,
                authorizer=self.authorizer,
                clock=clock,
                replica_manager=self.replica_manager,
                fetch_sessions=self.fetch_sessions,
                long_polls=LongPolls(),
            )
            self.metrics.registry.register(LongPollCollector(self.services.long_polls))
            self.services.connection_closed.append(
                lambda session: share_partitions.connection_closed(
                    session, config.get_int("group.share.delivery.count.limit")
                )
            )
            self.group_commit = GroupCommit(self.replica_manager.write_proposed)
            self.poller = ReadinessPoller(
                self.group_commit,
                self.metrics,
                self.services.long_polls,
                config.get_int("request.linger.us"),
            )
            # Any broker may be asked for a page of a partition it hosts by another's console.
            self.page_reads = register_page_reads(
                PageReads(self.services, self.node.transport.forward), self.controller.register_rpc
            )
            self.remote_calls = register_remote_calls(
                RemoteCalls(self.services, self.node.transport.forward, self.listeners),
                self.controller.register_rpc,
            )
            self.console: Console | None = None
            self.console_http = self._console_endpoint(config.get_str("console.listen"))
            self._serve_queues()
            opened.pop_all()  # the broker's now: `close` (or `run`, which calls it) closes them
        self._closed = False

    def _serve_queues(self) -> None:
        """The queue API on each HTTP endpoint (metrics.listen, console.listen), under
        /queues, /openapi.json and /docs; the console answers the other paths."""
        sasl = [spec for spec in self.listeners if spec.protocol.uses_sasl]
        members: dict[tuple[str, str], ShareMember] = {}
        # Served whether or not this broker has an endpoint: another's may ask it.
        ops = QueueOps(self.services, self.remote_calls)
        ops.ops.update(LEADER_OPS)
        self.controller.register_rpc(QUEUE_RPC, ops.serve)
        endpoints = [e for e in (self.http, self.console_http) if e is not None]
        if not endpoints:
            return
        # Imported only for an endpoint: the queue API calls the handlers as the console does,
        # through the console's calls, which load kio's request entities of every API they use.
        from raftka.broker.queues.api import QueueApi, error_answer

        for endpoint in endpoints:
            endpoint.app = QueueApi(
                self.services, sasl[0] if sasl else None, endpoint.app, members, ops
            )
            endpoint.error_answer = error_answer

    def _console_endpoint(self, listen: str) -> HttpEndpoint | None:
        """The console's own endpoint for `console.listen`; None when it is off or served
        by the metrics endpoint (the same address). ValueError naming a bad address."""
        if not listen:
            return None
        try:
            address = Listener.parse(listen)
        except ValueError as exc:
            raise ValueError(f"console.listen: {exc}") from None
        # Imported here: the console's pages and the kio request entities of every API they
        # call take a fifth of a broker's start, and most brokers serve no console.
        from raftka.broker.console.app import Console

        sasl = [spec for spec in self.listeners if spec.protocol.uses_sasl]
        console = self.console = Console(
            self.services,
            sasl[0] if sasl else None,
            tls=self.http_tls is not None,
            page_reads=self.page_reads,
            remote=self.remote_calls,
            unreachable=self.node.transport.unreachable_peers,
        )
        metrics = self.http
        if (
            metrics is not None
            and address.port != 0
            and (metrics.host, metrics.port)
            == (
                address.host,
                address.port,
            )
        ):
            metrics.app = console
            return None
        return HttpEndpoint(
            address.host, address.port, {}, console, "console.listen", tls=self.http_tls
        )

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        raise_open_file_limit(
            needed=open_files_needed(self.config, [self.data_dir, *self.more_log_dirs])
        )
        try:
            async with trio.open_nursery() as nursery:
                if self.http is not None:
                    # First: /healthz answers, and /readyz says why not, while the broker
                    # waits for the cluster.
                    await nursery.start(self.http.run)
                    nursery.start_soon(self.metrics.measure_event_loop_lag)
                if self.console_http is not None:
                    await nursery.start(self.console_http.run)
                if self.console is not None:
                    nursery.start_soon(self.console.run)
                if self.cluster.peers:
                    await nursery.start(self.transport.run)
                await nursery.start(self.node.run)
                await nursery.start(self.controller.apply_metadata)
                bound: dict[str, list[trio.SocketListener]] = {}
                for spec in self.listeners:
                    bound[spec.name] = await trio.open_tcp_listeners(spec.port, host=spec.host)
                    self.bound_ports[spec.name] = bound[spec.name][0].socket.getsockname()[1]
                self.bound_port = self.bound_ports[self.listeners[0].name]
                addresses = advertised_addresses(
                    self.config,
                    self.listeners,
                    {s.name: (s.host, self.bound_ports[s.name]) for s in self.listeners},
                )
                self.identity.advertise_listeners(addresses)
                host, port = addresses[self.listeners[0].name]
                self.identity.advertise(host, port)
                await self.controller.register(
                    host, port, self.identity.rack, addresses, self._raft_address()
                )
                self.registered = True
                self.groups.load()
                self.transactions.load()
                nursery.start_soon(self._flush_logs)
                nursery.start_soon(self.controller.save_snapshots)
                nursery.start_soon(self._enforce_retention)
                cleaner = LogCleaner(self.topics, self.config)
                cleaner.on_log_dir_failure = self.log_dir_failures
                nursery.start_soon(cleaner.run)
                nursery.start_soon(self.groups.run)
                nursery.start_soon(self.transactions.run)
                if self.cluster.peers:
                    nursery.start_soon(self.controller.gossip_leaders)
                    nursery.start_soon(self.controller.reassignments.run)
                    if self.config.get_bool("auto.leader.rebalance.enable"):
                        nursery.start_soon(
                            self.controller.elections.rebalance,
                            self.config.get_int("leader.imbalance.check.interval.seconds"),
                            self.config.get_int("leader.imbalance.per.broker.percentage"),
                        )
                logger.info(
                    "raftka: serving on %s (node %d, cluster %s, data %s; %s)",
                    ", ".join(
                        f"{s.name}://{s.host}:{self.bound_ports[s.name]}"
                        + ("" if s.name == s.protocol else f" ({s.protocol})")
                        for s in self.listeners
                    ),
                    self.node_id,
                    self.cluster_id,
                    ",".join(str(d) for d in (self.data_dir, *self.more_log_dirs)),
                    compiled.status,
                )
                nursery.start_soon(self.idle.run)
                nursery.start_soon(self.group_commit.run)
                nursery.start_soon(self.poller.run)
                nursery.start_soon(self.services.long_polls.run)
                for spec in self.listeners:
                    serve = functools.partial(self._serve_connection, spec)
                    limited = [LimitedListener(s, self.connection_limits) for s in bound[spec.name]]
                    nursery.start_soon(trio.serve_listeners, serve, limited)
                task_status.started(self.bound_port)
        finally:
            started = self.clock.now_s()
            self.close()
            logger.info("raftka: logs flushed and closed in %.2f s", self.clock.now_s() - started)

    def close(self) -> None:
        """Close the logs and stores and give back the data directories' locks; `run` does
        this when it ends, and a broker that never ran (or ran only its parts) must be closed
        by its owner. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.topics.close()
        self.controller.close()
        self.hard_states.close()
        self.producer_ids.close()
        os.close(self._data_dir_lock)  # the lock goes with it
        for lock in self._more_log_dir_locks:
            os.close(lock)

    def _raft_address(self) -> tuple[str, int] | None:
        """Where other brokers reach this one's Raft transport: its own --peers entry, else
        the --raft-listen address (with the bound port)."""
        if not self.cluster.peers:
            return None
        own = self.cluster.peers.get(self.node_id)
        if own is not None:
            return own.host, own.port
        listen = self.cluster.raft_listen or Listener("127.0.0.1", 0)
        return listen.host, self.transport.port or listen.port

    async def hand_over_leadership(self) -> None:
        """First step of a clean shutdown, while the broker still runs: move every Raft group it
        leads to an up-to-date follower so clients fail over without an election timeout."""
        if not self.cluster.peers:
            return
        started = self.clock.now_s()
        await self.node.shutdown(timeout_s=3.0)
        logger.info("raftka: leadership handed over in %.2f s", self.clock.now_s() - started)

    def not_ready_reason(self) -> str | None:
        """Why the broker cannot serve its share of the cluster yet (None: it can): it must
        be registered with the cluster, know a leader of the metadata Raft group and of
        every partition it hosts, and have no log directory offline."""
        if not self.registered or self.node_id not in self.controller.image.brokers:
            return f"broker {self.node_id} is not registered with the cluster"
        if self.controller.raft.leader_id is None:
            return "no leader known for the metadata Raft group (no controller)"
        for log_dir in self.topics.offline_log_dirs:
            return f"log directory {log_dir} is offline after an I/O error (restart to recover)"
        for partition in self.topics.all_partitions():
            if self.node_id not in partition.replicas:
                continue
            if partition.offline:
                return f"partition {partition.name} is offline here (its log is lost)"
            if partition.raft is None:
                return f"partition {partition.name} is still being opened"
            if partition.raft.leader_id is None:
                return f"no leader known for partition {partition.name}"
        return None

    def _metrics(self) -> HttpResponse:
        return HttpResponse(HTTPStatus.OK, self.metrics.exposition(), CONTENT_TYPE_LATEST)

    def _health(self) -> HttpResponse:
        return HttpResponse.text(HTTPStatus.OK, "ok")

    def _readiness(self) -> HttpResponse:
        reason = self.not_ready_reason()
        if reason is None:
            return HttpResponse.text(HTTPStatus.OK, "ready")
        return HttpResponse.text(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {reason}")

    async def _serve_connection(self, listener: ListenerSpec, stream: trio.SocketStream) -> None:
        try:
            context = self.tls_contexts.get(listener.name)
            if context is None:
                await Connection(
                    self.services,
                    stream,
                    listener,
                    self.quotas,
                    idle=self.idle,
                    group_commit=self.group_commit,
                    poller=self.poller,
                ).serve()
                return
            tls = trio.SSLStream(stream, context, server_side=True)
            await Connection(
                self.services,
                tls,
                listener,
                self.quotas,
                idle=self.idle,
                group_commit=self.group_commit,
            ).serve()
        finally:
            self.connection_limits.release(stream)

    async def _flush_logs(self) -> None:
        """fsync partitions per flush.ms (and flush.messages left pending by an idle
        partition), off the event loop. Acknowledgements that depend on an fsync wait for
        the Raft driver's sync tickets, not for this loop."""
        while True:
            await trio.sleep(FLUSH_CHECK_INTERVAL_S)
            now = self.clock.wall_ms()
            for partition in self._partitions_flushed_on_schedule():
                log = partition.log
                if log is not None and log.should_flush(now):
                    async with self.node.sync_lock:
                        try:
                            # The job's making writes the indexes' pending entries: a disk
                            # failing under them is met here, before any fsync.
                            job = log.flush_job()
                            if job is not None:
                                await trio.to_thread.run_sync(job)
                        except OSError as exc:
                            if exc.errno not in OUT_OF_SPACE:
                                # Never retried: the directory goes offline.
                                self.log_dir_failures(partition.name, exc)
                                continue
                            # A full disk: the segments stay dirty; the next round retries.
                            logger.error(
                                "flush of %s failed: %s",
                                partition.name,
                                exc,
                                extra={"partition": partition.name},
                            )

    def _partitions_flushed_on_schedule(self) -> list[Partition]:
        """Local partitions of the topics whose flush.messages or flush.ms is finite; under
        Kafka's defaults (both unlimited) none, so an idle broker with thousands of
        partitions does not look at each of them 20 times a second."""
        found: list[Partition] = []
        for topic in list(self.topics.topics.values()):
            config = topic.config
            if (
                config.get_int("flush.messages") < LOG_INT64_MAX
                or config.get_int("flush.ms") < LOG_INT64_MAX
            ):
                found += [p for p in topic.partitions if p.log is not None]
        return found

    async def _enforce_retention(self) -> None:
        interval_s = self.config.get_int("log.retention.check.interval.ms") / 1000
        while True:
            await trio.sleep(interval_s)
            now = self.clock.wall_ms()
            deleted = 0
            for partition in list(self.topics.local_partitions()):
                if partition.log is not None and partition.raft is not None:
                    # Committed data only; a follower that lacks what goes is sent a snapshot.
                    try:
                        deleted += partition.log.enforce_retention(
                            now, partition.raft.deletable_end()
                        )
                    except OSError as exc:
                        if exc.errno not in OUT_OF_SPACE:
                            self.log_dir_failures(partition.name, exc)
                        else:
                            logger.error(
                                "retention of %s failed: %s",
                                partition.name,
                                exc,
                                extra={"partition": partition.name},
                            )
                await trio.lowlevel.checkpoint()
            if deleted:
                logger.info("retention deleted %d segments", deleted)
