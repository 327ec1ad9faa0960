"""Brokers with secured listeners for the compat tests, and the client settings that reach
them: a SASL_PLAINTEXT listener with PLAIN users (each user's password is `USER-secret`),
optionally Kafka's StandardAuthorizer with `User:admin` its super user, and TLS listeners
over the test certificates of `certs.py`.

Nothing here imports pytest; the brokers come from the compat suite's `Brokers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from certs import Certificates
from harness import BrokerProcess, free_port

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER_USER = "admin"


class StartsBrokers(Protocol):
    def broker(
        self, config: dict[str, str] | None = None, *, name: str = ..., **kwargs: Any
    ) -> BrokerProcess: ...


def password(user: str) -> str:
    """The PLAIN password every secured broker here gives `user`."""
    return f"{user}-secret"


def sasl_plain_config(port: int, users: Iterable[str], *, authorizer: bool) -> dict[str, str]:
    """A SASL_PLAINTEXT listener on `port` (beside the PLAINTEXT one) for `users`; with
    `authorizer`, the StandardAuthorizer and `User:admin` its super user."""
    config = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.plain.users": ",".join(f"{user}:{password(user)}" for user in users),
    }
    if authorizer:
        config |= {"authorizer.class.name": AUTHORIZER, "super.users": f"User:{SUPER_USER}"}
    return config


def sasl_plain_client(address: str, user: str, **conf: Any) -> dict[str, Any]:
    """confluent-kafka settings for `user` on the SASL_PLAINTEXT listener at `address`."""
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password(user),
        "log_level": 0,
        **conf,
    }


@dataclass
class SaslBroker:
    """A broker with a SASL_PLAINTEXT listener on `sasl_port` (and its PLAINTEXT one)."""

    broker: BrokerProcess
    sasl_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def client(self, user: str, **conf: Any) -> dict[str, Any]:
        """confluent-kafka settings for `user` over the SASL listener."""
        return sasl_plain_client(self.address, user, **conf)


def start_sasl_broker(
    brokers: StartsBrokers,
    users: Iterable[str],
    *,
    authorizer: bool = True,
    config: Mapping[str, str] | None = None,
    name: str = "sasl-broker",
) -> SaslBroker:
    """A started broker with a SASL_PLAINTEXT listener for `users` (see `sasl_plain_config`)
    and `config` on top."""
    port = free_port()
    settings = sasl_plain_config(port, users, authorizer=authorizer) | dict(config or {})
    return SaslBroker(brokers.broker(settings, name=name), port)


def tls_listeners_config(
    certs: Certificates, ports: Mapping[str, int], protocols: Mapping[str, str]
) -> dict[str, str]:
    """Listeners named as `ports`' keys, each with the security protocol `protocols` gives
    it (its own name if absent), the broker certificate of `certs`, and the listener MTLS
    (if any) requiring a client certificate."""
    protocol_map = {"PLAINTEXT": "PLAINTEXT"} | {name: protocols.get(name, name) for name in ports}
    config = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol_map.items()),
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.truststore.location": str(certs.ca),
        # Wrong passwords are tested: answer them quickly.
        "connection.failed.authentication.delay.ms": "50",
    }
    if "MTLS" in ports:
        config["listener.name.mtls.ssl.client.auth"] = "required"
    return config
