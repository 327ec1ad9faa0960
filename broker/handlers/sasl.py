"""SaslHandshake and SaslAuthenticate (KIP-152): PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

The connection serves these one at a time until the client is authenticated. Any failure
is answered with Kafka's error and a message, after a delay that grows with repeated
failures from the same host, and the connection is closed once the answer is written.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.handlers.common import response_entity
from raftka.broker.security.scram import ScramError, ScramMechanism, ScramServer
from raftka.broker.security.session import Principal
from raftka.protocol.api import build

if TYPE_CHECKING:
    from raftka.broker.handlers.context import RequestContext
    from raftka.broker.security.session import ClientSession
    from raftka.protocol.messages.requests import SaslAuthenticateRequest, SaslHandshakeRequest
    from raftka.protocol.messages.responses import SaslAuthenticateResponse, SaslHandshakeResponse

logger = logging.getLogger("raftka.sasl")


def _session(context: RequestContext) -> ClientSession:
    assert context.session is not None, "SASL requests are served on connections only"
    return context.session


async def handle_sasl_handshake(
    context: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    session = _session(context)
    entity: type[SaslHandshakeResponse] = response_entity(context)
    enabled = context.services.authenticator.mechanisms(session.listener.name)

    def refuse(code: ErrorCode, why: str) -> SaslHandshakeResponse:
        logger.warning("closing connection from %s: %s", context.client_host, why)
        session.close_after_response = True
        return build(entity, error_code=code, mechanisms=tuple(enabled))

    if not session.listener.protocol.uses_sasl:
        return refuse(
            ErrorCode.illegal_sasl_state,
            f"SaslHandshake on listener {session.listener.name}, which is "
            f"{session.listener.protocol} (no SASL)",
        )
    if session.authenticated or session.mechanism is not None:
        return refuse(ErrorCode.illegal_sasl_state, "a second SaslHandshake (re-authentication)")
    if context.api_version == 0:
        # v0 is followed by unframed SASL tokens, which raftka does not read.
        return refuse(
            ErrorCode.unsupported_version,
            "SaslHandshake v0 (unframed SASL tokens) is not supported; clients since Kafka "
            "1.0 use SaslHandshake v1 with SaslAuthenticate",
        )
    mechanism = request.mechanism.upper()
    if mechanism not in enabled:
        return refuse(
            ErrorCode.unsupported_sasl_mechanism,
            f"SASL mechanism {request.mechanism!r} is not enabled on listener "
            f"{session.listener.name} (sasl.enabled.mechanisms={','.join(enabled)})",
        )
    session.mechanism = mechanism
    return build(entity, error_code=ErrorCode.none, mechanisms=tuple(enabled))


async def handle_sasl_authenticate(
    context: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    session = _session(context)
    entity: type[SaslAuthenticateResponse] = response_entity(context)
    authenticator = context.services.authenticator
    host = context.client_host

    def answer(auth_bytes: bytes = b"") -> SaslAuthenticateResponse:
        return build(
            entity,
            error_code=ErrorCode.none,
            error_message=None,
            auth_bytes=auth_bytes,
            session_lifetime=datetime.timedelta(0),
        )

    async def fail(code: ErrorCode, message: str) -> SaslAuthenticateResponse:
        session.close_after_response = True
        delay_s = authenticator.failure_delays.record_failure(host)
        logger.warning(
            "authentication failed for %s on listener %s (%s): %s",
            context.client_host,
            session.listener.name,
            session.mechanism,
            message,
        )
        await trio.sleep(delay_s)
        return build(
            entity,
            error_code=code,
            error_message=message,
            auth_bytes=b"",
            session_lifetime=datetime.timedelta(0),
        )

    def succeed(user: str, auth_bytes: bytes = b"") -> SaslAuthenticateResponse:
        session.principal = Principal("User", user)
        session.authenticated = True
        session.scram = None
        authenticator.failure_delays.record_success(host)
        logger.debug("%s authenticated as User:%s with %s", host, user, session.mechanism)
        return answer(auth_bytes)

    if session.authenticated or session.mechanism is None:
        session.close_after_response = True
        return build(
            entity,
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate must follow a successful SaslHandshake "
            "(re-authentication is not supported)",
            auth_bytes=b"",
            session_lifetime=datetime.timedelta(0),
        )
    token: bytes = request.auth_bytes
    if session.mechanism == "PLAIN":
        parts = token.split(b"\0")
        if len(parts) != 3:
            return await fail(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: malformed PLAIN token (expected authzid NUL user NUL "
                "password)",
            )
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            return await fail(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: PLAIN token is not UTF-8",
            )
        if authzid and authzid != user:
            return await fail(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
            )
        if not user or not await authenticator.check_plain(session.listener.name, user, password):
            return await fail(
                ErrorCode.sasl_authentication_failed,
                "Authentication failed: Invalid username or password",
            )
        return succeed(user)
    mechanism = ScramMechanism.by_name(session.mechanism)
    assert mechanism is not None, f"handshake accepted an unknown mechanism {session.mechanism}"
    try:
        if session.scram is None:
            scram = ScramServer(mechanism)
            user = scram.parse_first(token)
            session.scram = scram
            return answer(scram.respond_first(authenticator.scram_credential(user, mechanism)))
        final = session.scram.final(token)
        user = session.scram.username or ""
        return succeed(user, final)
    except ScramError as exc:
        return await fail(
            ErrorCode.sasl_authentication_failed,
            f"Authentication failed during authentication due to {exc} with SASL mechanism "
            f"{mechanism.mechanism_name}",
        )
