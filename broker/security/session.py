"""Who is on a connection: the `Principal` an authorizer will check, the SASL state of the
connection, and the broker-wide pieces authentication uses (users, failure delays)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import trio

from raftka.broker.config import BrokerConfig, ConfigError, jaas_config_name
from raftka.broker.security.jaas import (
    LOGIN_MODULES,
    LoginModule,
    login_module_for,
    parse_jaas_config,
    plain_users_of,
)
from raftka.broker.security.listeners import ListenerSpec
from raftka.broker.security.scram import (
    ScramCredential,
    ScramMechanism,
    ScramServer,
    password_matches,
    unknown_user_credential,
)

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: A host's failures are forgotten after this long without another.
FAILURE_MEMORY_S = 60.0
#: The delay before a failure answer grows to at most this many times the configured one.
FAILURE_DELAY_FACTOR_MAX = 32
#: PLAIN password checks (PBKDF2, milliseconds of CPU each) running at once.
PLAIN_CHECKS_AT_ONCE = 2


@dataclass(frozen=True, slots=True)
class Principal:
    """Kafka's KafkaPrincipal: `User:alice`, `User:CN=client,O=acme`, `User:ANONYMOUS`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = Principal("User", "ANONYMOUS")


@dataclass(eq=False, slots=True)
class ClientSession:
    """The security state of one connection. Handlers of SaslHandshake/SaslAuthenticate
    change it; the connection reads it before dispatching each request."""

    listener: ListenerSpec
    principal: Principal = ANONYMOUS
    #: False until SASL authentication succeeds on a SASL listener; True elsewhere.
    authenticated: bool = True
    #: The mechanism SaslHandshake chose; None before the handshake.
    mechanism: str | None = None
    scram: ScramServer | None = None
    #: Set by a handler: close the connection once this request's response is written.
    close_after_response: bool = False
    #: The tls peer's client certificate principal, if any (SSL listeners).
    certificate_subject: str | None = None

    @classmethod
    def for_listener(cls, listener: ListenerSpec, certificate_subject: str | None) -> ClientSession:
        principal = ANONYMOUS
        if certificate_subject is not None and not listener.protocol.uses_sasl:
            principal = Principal("User", certificate_subject)
        return cls(
            listener,
            principal=principal,
            authenticated=not listener.protocol.uses_sasl,
            certificate_subject=certificate_subject,
        )


def parse_plain_users(text: str | None) -> dict[str, str]:
    """`sasl.plain.users`: `USER:PASSWORD,...` (a password may contain ':')."""
    users: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        user, sep, password = item.partition(":")
        if not sep or not user:
            raise ConfigError("sasl.plain.users: expected USER:PASSWORD,... (an entry lacks ':')")
        users[user] = password
    return users


@dataclass(eq=False)
class FailureDelays:
    """Growing delays before answering failed authentications from one host: the configured
    delay, doubled for each recent failure, bounded."""

    base_s: float
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, tuple[int, float]] = field(default_factory=dict)

    def record_failure(self, host: str) -> float:
        """Count one failure from `host`; the delay before answering it, in seconds."""
        now = self.clock()
        count, last = self._failures.get(host, (0, now))
        if now - last > FAILURE_MEMORY_S:
            count = 0
        count += 1
        self._failures[host] = (count, now)
        if len(self._failures) > 10_000:  # bounded: forget the oldest half
            for old in sorted(self._failures, key=lambda h: self._failures[h][1])[:5_000]:
                del self._failures[old]
        factor: int = min(2 ** (count - 1), FAILURE_DELAY_FACTOR_MAX)
        return self.base_s * factor

    def record_success(self, host: str) -> None:
        self._failures.pop(host, None)


class Authenticator:
    """What SASL checks against: enabled mechanisms and PLAIN users per listener, SCRAM
    credentials from the replicated cluster metadata."""

    def __init__(
        self,
        config: BrokerConfig,
        credentials: Callable[[], Mapping[tuple[str, int], ScramCredential]],
    ) -> None:
        self.config = config
        self._credentials = credentials
        self.failure_delays = FailureDelays(
            config.get_int("connection.failed.authentication.delay.ms") / 1000
        )
        self._plain_checks = trio.CapacityLimiter(PLAIN_CHECKS_AT_ONCE)
        # listener -> its PLAIN users (the configs they come from are fixed at start)
        self._plain_users: dict[str, dict[str, str]] = {}

    def validate(self, listener: str) -> None:
        """ConfigError naming a bad mechanism, `sasl.plain.users` entry or JAAS config of
        `listener`."""
        for mechanism in self.mechanisms(listener):
            if mechanism not in SUPPORTED_MECHANISMS:
                raise ConfigError(
                    f"sasl.enabled.mechanisms: {mechanism} is not supported (listener "
                    f"{listener}); supported: {', '.join(SUPPORTED_MECHANISMS)}"
                )
            self.login_module(listener, mechanism)
        self.plain_users(listener)

    def mechanisms(self, listener: str) -> list[str]:
        text = self.config.listener_value(listener, "sasl.enabled.mechanisms")
        return [m.strip().upper() for m in str(text or "").split(",") if m.strip()]

    def login_module(self, listener: str, mechanism: str) -> LoginModule | None:
        """The JAAS login module of `mechanism` on `listener`: its
        `listener.name.<listener>.<mechanism>.sasl.jaas.config`, else the broker-wide
        `sasl.jaas.config` when that is the mechanism's module; None without either."""
        name = jaas_config_name(mechanism)
        text = self.config.listener_value(listener, name)
        if not isinstance(text, str):
            return None
        broker_wide = self.config.get("sasl.jaas.config")
        if text == broker_wide:
            # One broker-wide config serves the mechanism whose login module it names.
            if parse_jaas_config(text)[0].class_name != LOGIN_MODULES[mechanism]:
                return None
            return login_module_for(text, "sasl.jaas.config", mechanism)
        return login_module_for(text, f"listener.name.{listener.lower()}.{name}", mechanism)

    def plain_users(self, listener: str) -> dict[str, str]:
        """PLAIN's users on `listener`: `sasl.plain.users` and the `user_NAME` options of
        its PlainLoginModule (which win for a name in both)."""
        users = self._plain_users.get(listener)
        if users is None:
            value = self.config.listener_value(listener, "sasl.plain.users")
            users = parse_plain_users(value if isinstance(value, str) else None)
            module = self.login_module(listener, "PLAIN")
            if module is not None:
                users.update(plain_users_of(module))
            self._plain_users[listener] = users
        return users

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._credentials().get((user, int(mechanism)))

    async def check_plain(self, listener: str, user: str, password: str) -> bool:
        """PLAIN: a `sasl.plain.users` entry, else a SCRAM credential of the user.

        Every check costs one PBKDF2 derivation, whether the user is configured, has a
        SCRAM credential or is unknown, so its duration does not tell which. The derivation
        runs in a worker thread, at most `PLAIN_CHECKS_AT_ONCE` at a time, so logins never
        stall the event loop."""
        configured = self.plain_users(listener).get(user)
        credential = None
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            credential = self.scram_credential(user, mechanism)
            if credential is not None:
                break
        return await trio.to_thread.run_sync(
            _plain_matches, user, password, configured, credential, limiter=self._plain_checks
        )


def _plain_matches(
    user: str, password: str, configured: str | None, credential: ScramCredential | None
) -> bool:
    """A PLAIN password against a configured one, else a SCRAM credential; one PBKDF2
    derivation in every case (against a stand-in credential when there is none to use)."""
    if credential is not None and configured is None:
        return password_matches(credential, password)
    # The same work as a SCRAM user's check; its answer is never a match.
    password_matches(unknown_user_credential(ScramMechanism.SCRAM_SHA_512, user), password)
    return configured is not None and hmac.compare_digest(configured.encode(), password.encode())
