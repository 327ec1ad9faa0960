"""What a request handler may use of its broker: narrow, typed views of the broker's parts.

A handler is called with a `RequestContext`: the request's header, API key and version, the
client's address, and the `BrokerServices` — the topics it reads, the controller it sends
commands to, the group coordinator, the producer-id allocator, the broker config, this
broker's identity and its metrics. The `Broker` builds the services once; a handler reaches
nothing else.

This module sits below the coordinators, which use its views (`TopicsView`,
`ControllerClient`, ...), so it imports none of them nor the handlers: the coordinators'
types are parameters of `BrokerServices` and `RequestContext`, which
`raftka.broker.handlers.context` fixes for the handlers, and the handler table is seen
through `ApiEndpoint`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeAlias, TypeVar, cast

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from raftka.broker.cluster.quorum import QuorumView

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode
    from kio.static.protocol import RequestPayload as KioRequestPayload
    from kio.static.protocol import ResponsePayload

    from raftka.broker.clock import Clock
    from raftka.broker.cluster.commands import Command, CommandResult
    from raftka.broker.cluster.image import BrokerInfo, TopicImage
    from raftka.broker.config import BrokerConfig
    from raftka.broker.fetch_sessions import FetchSessionCache
    from raftka.broker.long_polls import LongPolls
    from raftka.broker.metrics import BrokerMetrics
    from raftka.broker.quotas import QuotaEntity
    from raftka.broker.replica import ReplicaManager
    from raftka.protocol.fetch_codec import FetchData
    from raftka.protocol.frame_reading import DecodedHeader
    from raftka.protocol.produce_codec import ProduceData

    #: A decoded request: kio's entity, or a hand-written decoder's (Produce, Fetch).
    RequestPayload: TypeAlias = KioRequestPayload | ProduceData | FetchData
    from raftka.broker.security.acl import (
        AclOperation,
        AclSet,
        Authorizer,
        ResourceType,
    )
    from raftka.broker.security.scram import ScramCredential
    from raftka.broker.security.session import Authenticator, ClientSession, Principal
    from raftka.broker.topics import Partition, Topic
    from raftka.protocol.api import EncodedResponse
    from raftka.protocol.api_keys import ApiKey
    from raftka.protocol.splice import SplicedResponse

#: The group coordinator and the transaction coordinator, as the handlers know them. A part
#: that uses neither takes a `RequestContext[object, object]`.
GroupsT = TypeVar("GroupsT", covariant=True)
TransactionsT = TypeVar("TransactionsT", covariant=True)
_GroupsIn = TypeVar("_GroupsIn", contravariant=True)
_TransactionsIn = TypeVar("_TransactionsIn", contravariant=True)


class TopicsView(Protocol):
    """The topics this broker knows of, with their partitions (local or not)."""

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, Topic]: ...

    def get(self, name: str) -> Topic | None: ...

    def partition(self, name: str, index: int) -> Partition | None: ...

    @property
    def data_dir(self) -> Path:
        """The first log directory (the metadata log's)."""
        ...

    @property
    def log_dir(self) -> str:
        """That directory's name as Kafka reports it (its absolute path)."""
        ...

    @property
    def log_dirs(self) -> Sequence[str]:
        """Every log directory (`log.dirs`) by absolute path, in the configured order."""
        ...

    def log_dir_of(self, partition_name: str) -> str | None:
        """The log directory holding the partition's folder here (None: none does)."""
        ...

    @property
    def offline_log_dirs(self) -> Mapping[str, str]:
        """Log directories an I/O error took offline -> that error."""
        ...


class MetadataView(Protocol):
    """The part of the cluster metadata image a handler reads."""

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]: ...

    @property
    def broker_configs(self) -> Mapping[str, Mapping[str, str]]:
        """Dynamic broker configs by broker id as a string ("": the cluster default)."""
        ...

    @property
    def group_configs(self) -> Mapping[str, Mapping[str, str]]:
        """Group configs by group id (Kafka 4's GROUP config resources)."""
        ...

    @property
    def topics(self) -> Mapping[str, TopicImage]:
        """Topics by name: replica lists and reassignments in progress."""
        ...

    @property
    def producer_id_floor(self) -> int:
        """No broker hands out a producer id below this."""
        ...

    @property
    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        """(user, SCRAM mechanism number) -> the stored credential."""
        ...

    @property
    def acls(self) -> AclSet:
        """The cluster's ACL bindings."""
        ...

    @property
    def client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        """Client quotas: entity -> quota key -> value."""
        ...


class ControllerClient(Protocol):
    """The cluster controller as a handler uses it: metadata reads and commands, which the
    controller forwards to the controller leader when this broker is not it."""

    @property
    def controller_id(self) -> int:
        """The metadata quorum's leader; -1 while there is none."""
        ...

    @property
    def advertised_controller_id(self) -> int:
        """The controller id clients are told: the leader while this broker is in touch with it,
        else this broker."""
        ...

    @property
    def image(self) -> MetadataView: ...

    @property
    def leader_hints(self) -> Mapping[str, tuple[int, int]]:
        """Partition name -> (leader id, leader epoch) of partitions hosted elsewhere."""
        ...

    @property
    def isr_hints(self) -> Mapping[str, tuple[int, ...]]:
        """Partition name -> in-sync replicas, as reported by leaders elsewhere."""
        ...

    async def learn_leaders(self, replicas: Iterable[int]) -> None:
        """Ask `replicas` now which partitions they lead (`leader_hints` then has what they
        answered within a short wait): for a partition no leader of is known here yet."""
        ...

    def live_brokers(self) -> list[int]: ...

    def quorum(self) -> QuorumView: ...

    async def controller_quorum(self) -> QuorumView:
        """The quorum as the controller sees it (asked of it when this broker is not it)."""
        ...

    async def elect_preferred_leaders(
        self, partitions: Sequence[tuple[str, int]], timeout_s: float
    ) -> Mapping[tuple[str, int], tuple[ErrorCode, str | None]]:
        """Elect each partition's preferred replica, waiting up to `timeout_s`: per partition
        Kafka's error code and message."""
        ...

    async def execute(self, command: Command) -> CommandResult:
        """Run an admin command on the controller; failures come back as results."""
        ...


class ProducerIdSource(Protocol):
    async def next_producer_id(self) -> int:
        """An id no broker of the cluster has handed out, before or after a restart."""
        ...


class BrokerIdentity:
    """This broker as clients see it. The advertised address is the configured listener
    until the listener is bound, then the address the broker advertises (`advertise`)."""

    __slots__ = (
        "node_id",
        "cluster_id",
        "rack",
        "_advertised_host",
        "_advertised_port",
        "_listeners",
    )

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        rack: str | None,
        advertised_host: str,
        advertised_port: int,
    ) -> None:
        self.node_id: Final = node_id
        self.cluster_id: Final = cluster_id
        self.rack: Final = rack
        self._advertised_host = advertised_host
        self._advertised_port = advertised_port
        self._listeners: dict[str, tuple[str, int]] = {}

    @property
    def advertised_host(self) -> str:
        return self._advertised_host

    @property
    def advertised_port(self) -> int:
        return self._advertised_port

    def advertise(self, host: str, port: int) -> None:
        self._advertised_host = host
        self._advertised_port = port

    def advertise_listeners(self, addresses: Mapping[str, tuple[str, int]]) -> None:
        """Listener name -> the (host, port) given to clients connected to that listener."""
        self._listeners = dict(addresses)

    def advertised_for(self, listener: str) -> tuple[str, int]:
        """The address this broker gives clients of `listener` (Kafka answers each client
        with the address of the listener it connected to)."""
        return self._listeners.get(listener, (self._advertised_host, self._advertised_port))


_Answer = TypeVar("_Answer", covariant=True)


# The answer shapes, the request context and the services are plain classes, not dataclasses:
# this module is compiled (broker/compiled.py), and mypyc cannot make a generic dataclass a
# native class; as native classes, each is made and read without a Python-level call.


class Later(Generic[_Answer]):
    """A handler's answer that is not ready when the handler returns: awaiting `answer`
    gives it (the connection runs that in a task of its own). `begun`: the request already
    took effect as far as it does before its first wait (`serve_now` did that part); if
    not, the task must start before the next request of the connection does."""

    __slots__ = ("answer", "begun")

    def __init__(self, answer: Awaitable[_Answer], begun: bool = True) -> None:
        self.answer = answer
        self.begun = begun


class Subscribed(Generic[_Answer]):
    """A handler's answer decided by a callback instead of a task: `subscribe(done)`
    arranges for `done()` to be called once, perhaps at once, from whatever code decides
    it (the Raft group whose high watermark passed the request's batches, the broker's
    `LongPolls` for a waiting fetch); `answer()` then gives it. `done` must not block.
    `subscribe` may return a function that cancels the wait (its connection ended): `done`
    is then not called; without one the wait ends by itself (a deadline of its own)."""

    __slots__ = ("subscribe", "answer")

    def __init__(
        self,
        subscribe: Callable[[Callable[[], None]], Callable[[], None] | None],
        answer: Callable[[], _Answer],
    ) -> None:
        self.subscribe = subscribe
        self.answer = answer


class Deferred(Generic[_Answer]):
    """A handler's answer decided once the batches it proposed are written: requests read
    together are written together (group commit). The caller runs the replica manager's
    `write_proposed` before it lets any other task run, then `settle`, which gives the
    answer or `Later`."""

    __slots__ = ("settle",)

    def __init__(
        self, settle: Callable[[], _Answer | Later[_Answer] | Subscribed[_Answer]]
    ) -> None:
        self.settle = settle


class ApiEndpoint(Protocol[_GroupsIn, _TransactionsIn]):
    """One API's handler as ApiVersions advertises it and the connection dispatches to it."""

    @property
    def min_version(self) -> int: ...

    @property
    def max_version(self) -> int: ...

    def serve(
        self, context: RequestContext[_GroupsIn, _TransactionsIn], request: RequestPayload
    ) -> Awaitable[ResponsePayload | SplicedResponse | None]:
        """The response to `request`, a decoded request of this API at a version in range
        (a spliced one for Fetch, None when the client wants none: Produce with acks=0)."""
        ...

    def serve_now(
        self, context: RequestContext[_GroupsIn, _TransactionsIn], request: RequestPayload
    ) -> (
        ResponsePayload
        | SplicedResponse
        | EncodedResponse
        | None
        | Later[ResponsePayload | SplicedResponse | EncodedResponse | None]
        | Deferred[ResponsePayload | SplicedResponse | EncodedResponse | None]
        | Subscribed[ResponsePayload | SplicedResponse | EncodedResponse | None]
    ):
        """`serve`, done at once as far as it can be: the response itself when nothing had
        to wait, else `Later` (whose answer the caller must await), `Deferred` (settled
        after the proposed batches are written) or `Subscribed` (decided by a callback).
        Whatever the request changes happens in this call up to its first wait, so requests
        served one after the other take effect in that order. The answer may be a response
        that encodes itself (`EncodedResponse`), which `serve` gives as the kio entity."""
        ...


#: The coordinators an `ApiHandler`'s functions take in their context (handlers/context.py).
_Groups = TypeVar("_Groups")
_Transactions = TypeVar("_Transactions")
#: The request entities one handler serves: a union of kio's versions of one API's request.
_Req = TypeVar("_Req")
#: What the handler answers: kio's response entities (or a spliced Fetch response, or None
#: for no response at all).
_Resp = TypeVar("_Resp", bound="ResponsePayload | SplicedResponse | None")
#: What the handler's `start` answers: as `_Resp`, or a response that encodes itself.
_Now = TypeVar("_Now", bound="ResponsePayload | SplicedResponse | EncodedResponse | None")

#: Whatever `ApiEndpoint.serve_now` answers.
_ServedNow: TypeAlias = (
    "ResponsePayload | SplicedResponse | EncodedResponse | None"
    " | Later[ResponsePayload | SplicedResponse | EncodedResponse | None]"
    " | Deferred[ResponsePayload | SplicedResponse | EncodedResponse | None]"
    " | Subscribed[ResponsePayload | SplicedResponse | EncodedResponse | None]"
)


class ApiHandler(Generic[_Groups, _Transactions, _Req, _Resp, _Now]):
    """One API's handler and the versions of it this broker serves: the `ApiEndpoint` of
    the broker's handler table (broker/handlers/__init__.py). A native class of this
    compiled module, so the connection's call of `serve_now` for every request runs no
    interpreted frame. `start`: `handle` split where it first waits (see
    `ApiEndpoint.serve_now`); None: `handle` is all."""

    __slots__ = ("min_version", "max_version", "handle", "start")

    def __init__(
        self,
        min_version: int,
        max_version: int,
        handle: Callable[[RequestContext[_Groups, _Transactions], _Req], Awaitable[_Resp]],
        start: Callable[
            [RequestContext[_Groups, _Transactions], _Req],
            _Now | Later[_Now] | Deferred[_Now] | Subscribed[_Now],
        ]
        | None = None,
    ) -> None:
        self.min_version: Final = min_version
        self.max_version: Final = max_version
        self.handle: Final = handle
        self.start: Final = start

    def serve_now(
        self, context: RequestContext[_Groups, _Transactions], request: RequestPayload
    ) -> _ServedNow:
        # The connection decodes `request` by this handler's API key and a version in its
        # range, so it is one of the versions `handle` takes.
        start = self.start
        if start is not None:
            return start(context, cast("_Req", request))
        return Later(self.handle(context, cast("_Req", request)), begun=False)

    def serve(
        self, context: RequestContext[_Groups, _Transactions], request: RequestPayload
    ) -> Awaitable[ResponsePayload | SplicedResponse | None]:
        return self.handle(context, cast("_Req", request))


class BrokerServices(Generic[GroupsT, TransactionsT]):
    """Everything of its broker a handler may use (made once per broker; read-only)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        identity: BrokerIdentity,
        topics: TopicsView,
        controller: ControllerClient,
        groups: GroupsT,
        producer_ids: ProducerIdSource,
        handlers: Mapping[ApiKey, ApiEndpoint[GroupsT, TransactionsT]],
        metrics: BrokerMetrics,
        authenticator: Authenticator,
        transactions: TransactionsT,
        authorizer: Authorizer,
        clock: Clock,
        replica_manager: ReplicaManager,
        fetch_sessions: FetchSessionCache,
        long_polls: LongPolls,
        connection_closed: list[Callable[[ClientSession], None]] | None = None,
    ) -> None:
        self.config: Final = config
        self.identity: Final = identity
        self.topics: Final = topics
        self.controller: Final = controller
        self.groups: Final = groups
        self.producer_ids: Final = producer_ids
        # api key -> handler: what ApiVersions advertises and the connection dispatches to.
        self.handlers: Final = handlers
        # Counted per request, per produced batch and per fetched partition.
        self.metrics: Final = metrics
        # SASL: enabled mechanisms, PLAIN users, SCRAM credentials, failure delays.
        self.authenticator: Final = authenticator
        # The transaction coordinator (transactional ids, their transactions and markers).
        self.transactions: Final = transactions
        # ACL checks (allows everything unless `authorizer.class.name` is set).
        self.authorizer: Final = authorizer
        # The one source of time for connections and handlers.
        self.clock: Final = clock
        # The data path: appends, fetches, DeleteRecords and markers of the hosted partitions.
        self.replica_manager: Final = replica_manager
        # Consumers' incremental fetch sessions (KIP-227).
        self.fetch_sessions: Final = fetch_sessions
        # Fetches long-polling for data, woken by one task (`LongPolls.run`, which the
        # broker runs).
        self.long_polls: Final = long_polls
        # Told each client connection's `ClientSession` when the connection closes (what
        # was bound to the connection, such as share sessions, ends with it).
        self.connection_closed: Final[list[Callable[[ClientSession], None]]] = (
            [] if connection_closed is None else connection_closed
        )

    def replace(self, **changes: Any) -> BrokerServices[GroupsT, TransactionsT]:
        """A copy with the services named in `changes` swapped (a test substitutes one)."""
        unknown = changes.keys() - _SERVICE_NAMES
        if unknown:
            raise TypeError(f"BrokerServices has no {', '.join(sorted(unknown))}")
        current = {name: getattr(self, name) for name in _SERVICE_NAMES}
        return BrokerServices(**(current | changes))


#: `BrokerServices`' fields (as its `__init__` names them).
_SERVICE_NAMES: Final = frozenset(
    {
        "config",
        "identity",
        "topics",
        "controller",
        "groups",
        "producer_ids",
        "handlers",
        "metrics",
        "authenticator",
        "transactions",
        "authorizer",
        "clock",
        "replica_manager",
        "fetch_sessions",
        "long_polls",
        "connection_closed",
    }
)


class RequestContext(Generic[GroupsT, TransactionsT]):
    """What a handler may know about the request it serves. Handlers only read it (one is
    made per request)."""

    __slots__ = (
        "services",
        "header",
        "api_key",
        "api_version",
        "client_host",
        "client_port",
        "session",
    )

    def __init__(
        self,
        services: BrokerServices[GroupsT, TransactionsT],
        header: RequestHeaderV1 | RequestHeaderV2 | DecodedHeader,
        api_key: int,
        api_version: int,
        client_host: str,
        client_port: int,
        # The connection's security state (None only for requests made outside a connection).
        session: ClientSession | None = None,
    ) -> None:
        self.services = services
        self.header = header
        self.api_key = api_key
        self.api_version = api_version
        self.client_host = client_host
        self.client_port = client_port
        self.session = session

    @property
    def principal(self) -> Principal:
        """Who sent the request, for an authorizer: `User:ANONYMOUS` until authenticated."""
        from raftka.broker.security.session import ANONYMOUS

        return ANONYMOUS if self.session is None else self.session.principal

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal, from its host, do `operation` on the resource?"""
        return self.services.authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name
        )

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May this request's principal do `operation` on some resource of the type?"""
        return self.services.authorizer.authorize_any(
            self.principal, self.client_host, operation, resource_type
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The `*_authorized_operations` bit field for the resource."""
        return self.services.authorizer.authorized_operations(
            self.principal, self.client_host, resource_type, name
        )
