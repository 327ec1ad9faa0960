"""Kafka's listeners: `NAME://HOST:PORT` entries, each with a security protocol taken from
`listener.security.protocol.map`, and the address each advertises to clients."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raftka.broker.config import BrokerConfig, ConfigError


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its name (upper case, as Kafka compares them), protocol and address."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int


def _address(text: str, what: str) -> tuple[str | None, str, int]:
    """(NAME or None, host, port) of `NAME://HOST:PORT` or `HOST:PORT`."""
    name: str | None = None
    address = text.strip()
    if "://" in address:
        name, address = address.split("://", 1)
        name = name.strip().upper()
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what}: expected NAME://HOST:PORT, got {text!r}")
    return name, host.strip("[]"), int(port)


def protocol_map(config: BrokerConfig) -> dict[str, SecurityProtocol]:
    """`listener.security.protocol.map` as {LISTENER NAME: protocol}."""
    mapping: dict[str, SecurityProtocol] = {}
    for item in filter(None, (p.strip() for p in config.get_str(_MAP).split(","))):
        name, sep, protocol = item.partition(":")
        try:
            mapping[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(
                f"{_MAP}: {item!r} is not LISTENER_NAME:PROTOCOL with a protocol of "
                f"{', '.join(p.value for p in SecurityProtocol)}"
            ) from None
        if not sep:
            raise ConfigError(f"{_MAP}: expected LISTENER_NAME:PROTOCOL, got {item!r}")
    return mapping


_MAP = "listener.security.protocol.map"


def controller_listener_names(config: BrokerConfig) -> frozenset[str]:
    """Kafka's `controller.listener.names`: listeners that are not for clients."""
    text = config.get_optional_str("controller.listener.names") or ""
    return frozenset(name.strip().upper() for name in text.split(",") if name.strip())


def controller_listener(config: BrokerConfig) -> tuple[str, int] | None:
    """(host, port) of the first of `listeners` named in `controller.listener.names`: a
    Kafka node's controller listener, which raftka takes for its Raft listener."""
    names = controller_listener_names(config)
    if not names or not config.is_set("listeners"):
        return None
    for item in filter(None, (p.strip() for p in config.get_str("listeners").split(","))):
        name, host, port = _address(item, "listeners")
        if name in names:
            return host or "0.0.0.0", port
    return None


def resolve_listeners(config: BrokerConfig, listen: tuple[str, int] | None) -> list[ListenerSpec]:
    """The listeners to open: `listen` (the `--listen` address) as a PLAINTEXT listener named
    PLAINTEXT first, then those of `listeners` if that config was given. Without either, the
    `listeners` default. Raises ConfigError naming the bad entry."""
    protocols = protocol_map(config)
    found: list[ListenerSpec] = []
    if listen is not None:
        found.append(ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, *listen))
    if config.is_set("listeners") or listen is None:
        controllers = controller_listener_names(config)
        for item in filter(None, (p.strip() for p in config.get_str("listeners").split(","))):
            name, host, port = _address(item, "listeners")
            if name is None:
                name = "PLAINTEXT"
            if name in controllers:
                continue  # the Raft listener (see controller_listener)
            protocol = protocols.get(name)
            if protocol is None:
                raise ConfigError(
                    f"listeners: listener {name} has no security protocol; add "
                    f"{name}:<PROTOCOL> to {_MAP}"
                )
            if any(existing.name == name for existing in found):
                raise ConfigError(
                    f"listeners: listener name {name} is used twice"
                    + (" (--listen is the PLAINTEXT listener)" if listen is not None else "")
                )
            found.append(ListenerSpec(name, protocol, host or "0.0.0.0", port))
    if not found:
        raise ConfigError("listeners: no listener configured")
    return found


def advertised_addresses(
    config: BrokerConfig, listeners: list[ListenerSpec], bound: dict[str, tuple[str, int]]
) -> dict[str, tuple[str, int]]:
    """Listener name -> (host, port) given to clients: `advertised.listeners` where it names
    the listener (an entry without a name is the first listener's), else the bound address."""
    advertised = dict(bound)
    text = config.get_optional_str("advertised.listeners") or ""
    names = {spec.name for spec in listeners}
    controllers = controller_listener_names(config)
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, host, port = _address(item, "advertised.listeners")
        if name in controllers:
            continue
        if name is None or (name not in names and len(listeners) == 1):
            name = listeners[0].name
        if name not in names:
            raise ConfigError(
                f"advertised.listeners: {name} is not a listener of this broker "
                f"({', '.join(sorted(names))})"
            )
        advertised[name] = (host, port)
    return advertised
