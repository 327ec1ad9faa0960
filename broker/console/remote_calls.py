"""Kafka API calls a console makes at another broker on its principal's behalf: the groups a
broker coordinates are known to it alone (ListGroups, DescribeGroups, OffsetFetch, ... answer
NOT_COORDINATOR elsewhere), so a console shows every group by asking each broker, and a
group's page asks its coordinator; a partition's end offset is asked of its leader.

The request travels over the brokers' own peer connection (authenticated by
`raft.auth.secret` when set) with the principal it is made as; the broker asked runs its
own handler with that principal, so its ACLs decide as they would for a client. Only the
APIs a console's group pages and transactions use, and those the HTTP queue API makes at a
group's coordinator and at each partition's leader (ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge, Produce), are served (FORWARDED_APIS); anything else is refused.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from raftka.broker.security.session import ClientSession, Principal
from raftka.broker.services import RequestContext
from raftka.consensus.transport import ForwardError
from raftka.protocol.api import (
    FrameError,
    decode_request,
    encode_response,
    read_prefix,
    response_type,
)
from raftka.protocol.api_keys import ApiKey
from raftka.protocol.splice import SplicedResponse, frame_bytes

if TYPE_CHECKING:
    from raftka.broker.handlers.context import BrokerServices
    from raftka.broker.security.listeners import ListenerSpec

CALL_RPC = "console.call"
CALL_TIMEOUT_S = 8.0
CLIENT_ID = "raftka-console"
#: The APIs of a console's group pages and group actions, and of its operations page's
#: transactions (each coordinator's, and each partition leader's open ones).
FORWARDED_APIS = frozenset(
    {
        ApiKey.LIST_TRANSACTIONS,
        ApiKey.DESCRIBE_TRANSACTIONS,
        ApiKey.DESCRIBE_PRODUCERS,
        ApiKey.LIST_GROUPS,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        ApiKey.SHARE_GROUP_DESCRIBE,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        ApiKey.OFFSET_FETCH,
        ApiKey.OFFSET_COMMIT,
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        ApiKey.LIST_OFFSETS,
        ApiKey.METADATA,
        # The HTTP queue API's, at a group's coordinator and at each partition's leader.
        ApiKey.SHARE_GROUP_HEARTBEAT,
        ApiKey.SHARE_FETCH,
        ApiKey.SHARE_ACKNOWLEDGE,
        ApiKey.PRODUCE,
    }
)

#: The peer transport's forward: (broker, rpc, payload, timeout) -> the answer's payload.
Forward = Callable[[int, str, bytes, float], Awaitable[bytes]]
Response = Any  # a kio response entity


def _encode_request(request: Any) -> bytes:
    header_cls = type(request).__header_schema__
    header = header_cls(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(0),
        client_id=CLIENT_ID,
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


class RemoteCalls:
    """Makes a console's calls at other brokers, and serves theirs here."""

    def __init__(
        self, services: BrokerServices, forward: Forward, listeners: Sequence[ListenerSpec]
    ) -> None:
        self.services = services
        self.forward = forward
        self.listeners = list(listeners)

    async def call(
        self, node: int, session: ClientSession | None, client_host: str, request: Any
    ) -> Response:
        """`request`'s response from broker `node`'s handler, made as `session`'s principal;
        OSError naming the broker when it does not answer."""
        caller = {
            "principal": None if session is None else str(session.principal),
            "listener": None if session is None else session.listener.name,
            "host": client_host,
        }
        payload = json.dumps(caller).encode() + b"\n" + _encode_request(request)
        try:
            raw = await self.forward(node, CALL_RPC, payload, CALL_TIMEOUT_S)
        except ForwardError as exc:
            raise OSError(f"broker {node} did not answer: {exc}") from exc
        response_cls = response_type(request.__api_key__, request.__version__)
        position = 8  # the frame's size and the correlation id
        if response_cls.__flexible__:
            position += 1  # the response header's (empty) tagged fields
        response, _ = entity_reader(response_cls)(raw, position)
        return response

    def session_of(self, principal: str | None, listener: str | None) -> ClientSession | None:
        if principal is None:
            return None
        kind, _, name = principal.partition(":")
        spec = next((s for s in self.listeners if s.name == listener), self.listeners[0])
        return ClientSession(spec, principal=Principal(kind, name), authenticated=True)

    async def serve(self, payload: bytes) -> tuple[int, bytes]:
        """Run a forwarded call's handler here as its principal; the response frame."""
        line, _, frame = payload.partition(b"\n")
        try:
            caller = json.loads(line)
            prefix = read_prefix(frame)
            if prefix.api_key not in FORWARDED_APIS:
                raise ValueError(f"api key {prefix.api_key} is not served to a console")
            header, request = decode_request(frame, prefix)
            session = self.session_of(caller["principal"], caller["listener"])
        except (ValueError, KeyError, TypeError, FrameError) as exc:
            return int(ErrorCode.invalid_request), f"bad console call: {exc}".encode()
        handler = self.services.handlers[ApiKey(prefix.api_key)]
        context = RequestContext(
            services=self.services,
            header=header,
            api_key=prefix.api_key,
            api_version=prefix.api_version,
            client_host=str(caller.get("host", "")),
            client_port=0,
            session=session,
        )
        response = await handler.serve(context, request)
        if response is None:
            return int(ErrorCode.unknown_server_error), b"no answer"
        if isinstance(response, SplicedResponse):
            # A ShareFetch's records read from the log's files: copied into the answer.
            try:
                return 0, frame_bytes(response.encode(0))
            finally:
                response.splices.close()
        return 0, encode_response(0, response)


def register(
    calls: RemoteCalls,
    register_rpc: Callable[[str, Callable[[bytes], Awaitable[tuple[int, bytes]]]], None],
) -> RemoteCalls:
    register_rpc(CALL_RPC, calls.serve)
    return calls
