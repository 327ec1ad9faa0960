"""A small blocking Kafka-protocol client for the admin commands that need what the
confluent-kafka admin client does not expose: raw record batches (backup), leader epochs,
a replica's own log end offset, the metadata quorum.

It speaks to any Kafka-compatible broker. Each connection negotiates versions once with
ApiVersions (v0, which every broker answers) and every request then uses the highest
version both sides know, capped by the caller where a command needs a particular form.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from raftka.broker.admin.common import AdminError, Target
from raftka.protocol.api import (
    API_VERSIONS_KEY,
    build,
    request_type,
    response_type,
    schema_module,
)

T = TypeVar("T")

Entity = Any  # Any: a kio entity of the negotiated version (kio has a class per version)
Fields = dict[str, Any]  # Any: a kio request's field values (numbers, strings, entities)

_SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = 256 * 1024 * 1024
CLIENT_ID = "raftka-admin"


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise AdminError(f"bad broker address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class WireError(AdminError):
    """The broker closed the connection, sent a frame we cannot read, or did not answer;
    `authentication` when it refused the SASL credentials."""

    def __init__(self, message: str, *, authentication: bool = False) -> None:
        super().__init__(message)
        self.authentication = authentication


SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


def _tls_context(security: Mapping[str, str]) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=security.get("ssl.ca.location"))
        if "ssl.certificate.location" in security:
            context.load_cert_chain(
                security["ssl.certificate.location"],
                security.get("ssl.key.location"),
                security.get("ssl.key.password"),
            )
    except (OSError, ssl.SSLError) as exc:
        raise AdminError(
            f"cannot load the TLS files (--ssl-ca, --ssl-cert, --ssl-key): {exc}"
        ) from None
    if security.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    return context


class WireConnection:
    """One TCP connection to one broker, requests answered in order; over TLS and
    authenticated with SASL (PLAIN, SCRAM-SHA-256/512) as `security` (client properties:
    security.protocol, sasl.*, ssl.*) asks."""

    def __init__(
        self, address: str, timeout_s: float, security: Mapping[str, str] | None = None
    ) -> None:
        self.address = address
        security = security or {}
        protocol = security.get("security.protocol", "PLAINTEXT").upper()
        host, port = parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            if protocol in ("SSL", "SASL_SSL"):
                sock = _tls_context(security).wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            raise WireError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        self._sock = sock
        self._sock.settimeout(timeout_s)
        self.timeout_s = timeout_s
        self._correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            self._authenticate(security)

    def _authenticate(self, security: Mapping[str, str]) -> None:
        from raftka.broker.security.scram import ScramClient, ScramError, ScramMechanism

        mechanism = security.get("sasl.mechanism", "PLAIN").upper()
        user, password = security.get("sasl.username", ""), security.get("sasl.password", "")
        handshake = self.request(SASL_HANDSHAKE_KEY, {"mechanism": mechanism}, version=1)
        if handshake.error_code:
            raise WireError(
                f"{self.address} does not offer SASL mechanism {mechanism} "
                f"(it offers {', '.join(handshake.mechanisms)})"
            )

        def step(token: bytes) -> bytes:
            answer = self.request(SASL_AUTHENTICATE_KEY, {"auth_bytes": token})
            if answer.error_code:
                raise WireError(
                    f"authentication with {self.address} failed: {answer.error_message}",
                    authentication=True,
                )
            return bytes(answer.auth_bytes)

        if mechanism == "PLAIN":
            step(f"\0{user}\0{password}".encode())
            return
        scram_mechanism = ScramMechanism.by_name(mechanism)
        if scram_mechanism is None:
            raise WireError(f"SASL mechanism {mechanism} is not supported by raftka's client")
        client = ScramClient(scram_mechanism, user, password)
        try:
            server_first = step(client.first())
            client.verify(step(client.final(server_first)))
        except ScramError as exc:
            raise WireError(
                f"authentication with {self.address} failed: {exc}", authentication=True
            ) from None

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _negotiate(self) -> None:
        response = self.request(API_VERSIONS_KEY, {}, version=0)
        if response.error_code:
            raise WireError(f"{self.address} refused ApiVersions: error {response.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, api_key: int, highest: int | None = None) -> int:
        """The highest version of `api_key` this broker and kio both know (≤ `highest`)."""
        if api_key not in self.versions:
            raise WireError(f"{self.address} does not serve API key {api_key}")
        low, high = self.versions[api_key]
        if highest is not None:
            high = min(high, highest)
        for version in range(high, low - 1, -1):
            if request_type(api_key, version) is not None:
                return version
        raise WireError(f"no common version of API key {api_key} with {self.address}")

    def request(
        self,
        api_key: int,
        values: Fields,
        *,
        version: int | None = None,
        response_cls: type[Entity] | None = None,
    ) -> Entity:
        """Send one request built from `values` (kio entity fields; nested entities already
        built) and return the decoded response entity (read as `response_cls` when given: a
        variant of kio's schema for a field kio cannot read as Kafka sends it)."""
        if version is None:
            version = self.version_for(api_key)
        entity = load_request_schema(api_key, version)
        body = entity(**values)
        self._correlation_id += 1
        header_cls = entity.__header_schema__
        header = header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(self._correlation_id),
            client_id=CLIENT_ID,
        )
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, header)
        entity_writer(entity)(buf, body)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        del frame
        try:
            self._sock.sendall(buf.getvalue())
            payload = self._read_frame()
        except TimeoutError:
            raise WireError(f"{self.address} did not answer within the timeout") from None
        except OSError as exc:
            raise WireError(f"connection to {self.address} failed: {exc}") from None
        (correlation_id,) = _SIZE.unpack_from(payload, 0)
        if correlation_id != self._correlation_id:
            raise WireError(f"{self.address} answered out of order")
        if response_cls is None:
            response_cls = response_type(api_key, version)
        pos = 4
        if response_cls.__flexible__ and api_key != API_VERSIONS_KEY:
            pos += 1  # the response header's (empty) tagged fields
        try:
            response, _ = entity_reader(response_cls)(payload, pos)
        except Exception as exc:  # kio raises several types for data it cannot read
            raise WireError(f"cannot decode {response_cls.__name__} from {self.address}") from exc
        return response

    def _read_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self._sock.recv(min(n - len(chunks), 1 << 20))
            if not chunk:
                raise WireError(f"{self.address} closed the connection")
            chunks += chunk
        return bytes(chunks)

    def _read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exact(4))
        if not 4 <= size <= MAX_FRAME_BYTES:
            raise WireError(f"{self.address} sent a frame of {size} bytes")
        return self._read_exact(size)


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    address: str
    rack: str | None


class WireCluster:
    """Connections to a cluster's brokers, found from the bootstrap list, opened on demand."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._connections: dict[str, WireConnection] = {}
        self.brokers: dict[int, BrokerAddress] = {}
        self.controller_id: int | None = None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> WireCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self, address: str) -> WireConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = WireConnection(address, self.target.timeout_s, self.target.security)
            self._connections[address] = connection
        return connection

    def drop(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    def any_connection(self) -> WireConnection:
        """A connection to the first bootstrap broker that answers."""
        refused: WireError | None = None
        for address in self._bootstrap_addresses():
            try:
                return self.connection(address)
            except WireError as exc:
                if exc.authentication:
                    refused = exc
                continue
        if refused is not None:
            # A broker answered but refused the credentials: say so, not "no broker answered".
            raise AdminError(
                f"{refused} (check --sasl-username/--sasl-password, --sasl-mechanism and "
                "--security-protocol)"
            )
        raise self.target.unreachable()

    def _bootstrap_addresses(self) -> Iterator[str]:
        yield from (a for a in self._connections)
        yield from (a.strip() for a in self.target.bootstrap.split(",") if a.strip())

    def to_node(self, node_id: int) -> WireConnection:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise WireError(f"broker {node_id} is not in the cluster's metadata")
        return self.connection(broker.address)

    def metadata(self, topics: Sequence[str] | None = None, *, highest: int = 12) -> Entity:
        """A Metadata response (at most v`highest`); records the brokers it names."""
        for address in list(self._bootstrap_addresses()):
            try:
                connection = self.connection(address)
                version = connection.version_for(3, highest)
                response = connection.request(3, metadata_request(version, topics), version=version)
            except WireError:
                self.drop(address)
                continue
            self.brokers = {
                b.node_id: BrokerAddress(b.node_id, f"{b.host}:{b.port}", b.rack)
                for b in response.brokers
            }
            controller = getattr(response, "controller_id", -1)
            self.controller_id = controller if controller >= 0 else None
            return response
        raise self.target.unreachable()


def metadata_request(version: int, topics: Sequence[str] | None) -> Fields:
    """Fields of a Metadata request for `topics` (None: every topic)."""
    topic_cls = schema_module(load_request_schema(3, version)).MetadataRequestTopic
    if topics is None:
        wanted: tuple[Entity, ...] | None = None if version >= 1 else ()
    else:
        wanted = tuple(build(topic_cls, name=t, topic_id=None) for t in topics)
    values: Fields = {"topics": wanted}
    if version >= 4:
        values["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        values["include_cluster_authorized_operations"] = False
    if version >= 8:
        values["include_topic_authorized_operations"] = False
    return values


LIST_OFFSETS_KEY = 2
LATEST_TIMESTAMP = -1
# Kafka's DEBUGGING_REPLICA_ID: answered by any replica from its own log, up to its log end.
DEBUGGING_REPLICA_ID = -2


def replica_log_end_offsets(
    connection: WireConnection, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int | None]:
    """The log end offset of this broker's own replica of each (topic, partition), from one
    ListOffsets request as Kafka's debugging replica (any replica answers, leader or not);
    None where the broker answered an error (it holds no replica, or does not know the topic)."""
    version = connection.version_for(LIST_OFFSETS_KEY)
    request_cls = load_request_schema(LIST_OFFSETS_KEY, version)
    module = schema_module(request_cls)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    topics = tuple(
        build(
            module.ListOffsetsTopic,
            name=topic,
            partitions=tuple(
                build(
                    module.ListOffsetsPartition,
                    partition_index=p,
                    current_leader_epoch=-1,
                    timestamp=LATEST_TIMESTAMP,
                )
                for p in indexes
            ),
        )
        for topic, indexes in by_topic.items()
    )
    values: Fields = {
        "replica_id": DEBUGGING_REPLICA_ID,
        "isolation_level": 0,
        "topics": topics,
        "timeout": datetime.timedelta(seconds=connection.timeout_s),
    }
    names = {f.name for f in dataclasses.fields(request_cls)}
    response = connection.request(
        LIST_OFFSETS_KEY, {k: v for k, v in values.items() if k in names}, version=version
    )
    offsets: dict[tuple[str, int], int | None] = {key: None for key in partitions}
    for topic in response.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if key in offsets and p.error_code == 0 and p.offset >= 0:
                offsets[key] = int(p.offset)
    return offsets


# NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT and the other codes a
# request to a partition's leader may get while leadership moves: refresh and retry.
RETRIABLE_ERRORS = frozenset({3, 5, 6, 7, 13, 56, 74, 75})
RETRIES_MAX = 20
RETRY_PAUSE_S = 0.5


class LeaderUnavailable(AdminError):
    """No leader took a request after every retry; a write may or may not have landed."""


class LeaderClient:
    """Requests to partitions' leaders, following leader changes: a refused or failed
    request refreshes the leaders from Metadata and is retried (bounded)."""

    def __init__(self, cluster: WireCluster) -> None:
        self.cluster = cluster
        self.leaders: dict[tuple[str, int], int] = {}

    def refresh(self, topics: list[str]) -> None:
        response = self.cluster.metadata(topics)
        for topic in response.topics:
            for p in topic.partitions:
                self.leaders[(topic.name, p.partition_index)] = p.leader_id

    def call(
        self,
        topic: str,
        partition: int,
        what: str,
        send: Callable[[WireConnection], tuple[int, str | None, T]],
    ) -> T:
        """`send(connection)` -> (error code, message, result) against the leader; the
        result once the code is 0, AdminError for a code that is not retriable."""
        last = "no leader"
        for attempt in range(RETRIES_MAX):
            if attempt:
                time.sleep(RETRY_PAUSE_S)
                self.refresh([topic])
            leader = self.leaders.get((topic, partition), -1)
            if leader < 0:
                continue
            try:
                code, message, result = send(self.cluster.to_node(leader))
            except WireError as exc:
                last = str(exc)
                broker = self.cluster.brokers.get(leader)
                if broker is not None:
                    self.cluster.drop(broker.address)
                continue
            if code == 0:
                return result
            last = f"error {code}" + (f": {message}" if message else "")
            if code not in RETRIABLE_ERRORS:
                raise AdminError(f"{what} {topic}[{partition}]: {last}")
        raise LeaderUnavailable(
            f"{what} {topic}[{partition}]: gave up after {RETRIES_MAX} tries ({last}; is the "
            "cluster healthy? raftka cluster status)"
        )


DESCRIBE_CLIENT_QUOTAS_KEY = 48
ALTER_CLIENT_QUOTAS_KEY = 49


def describe_client_quotas(
    connection: WireConnection,
    components: Sequence[tuple[str, int, str | None]],
    *,
    strict: bool = False,
) -> Entity:
    """A DescribeClientQuotas response for the filter's (entity type, match type, match)."""
    version = connection.version_for(DESCRIBE_CLIENT_QUOTAS_KEY)
    module = schema_module(load_request_schema(DESCRIBE_CLIENT_QUOTAS_KEY, version))
    return connection.request(
        DESCRIBE_CLIENT_QUOTAS_KEY,
        {
            "components": tuple(
                module.ComponentData(entity_type=kind, match_type=match_type, match=match)
                for kind, match_type, match in components
            ),
            "strict": strict,
        },
        version=version,
    )


def alter_client_quotas(
    connection: WireConnection,
    entries: Sequence[tuple[Sequence[tuple[str, str | None]], Mapping[str, float | None]]],
    *,
    validate_only: bool = False,
) -> Entity:
    """An AlterClientQuotas response; each entry is (entity pairs, key -> value or None to
    remove)."""
    version = connection.version_for(ALTER_CLIENT_QUOTAS_KEY)
    module = schema_module(load_request_schema(ALTER_CLIENT_QUOTAS_KEY, version))
    return connection.request(
        ALTER_CLIENT_QUOTAS_KEY,
        {
            "entries": tuple(
                module.EntryData(
                    entity=tuple(
                        module.EntityData(entity_type=kind, entity_name=name)
                        for kind, name in entity
                    ),
                    ops=tuple(
                        module.OpData(key=key, value=value or 0.0, remove=value is None)
                        for key, value in ops.items()
                    ),
                )
                for entity, ops in entries
            ),
            "validate_only": validate_only,
        },
        version=version,
    )
