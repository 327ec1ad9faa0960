"""Config values from outside: properties and TOML files, environment variable names,
`name=value` items, per-listener overrides, and the checks of a topic's overrides."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from raftka.broker.config.tables import TOPIC_CONFIGS
from raftka.broker.config.types import ConfigError, ConfigValue

ENV_PREFIX = "RAFTKA_"
#: Topic configs in Kafka's throttled-replicas format (see `throttled_replicas`).
THROTTLED_REPLICAS_CONFIGS = frozenset(
    {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper().replace(".", "_").replace("-", "_")


def load_config_file(path: Path) -> dict[str, str]:
    """Read a Java-style .properties file, or TOML if the name ends in .toml."""
    text = path.read_text()
    if path.suffix == ".toml":
        flat: dict[str, str] = {}

        def walk(prefix: str, table: Mapping[str, object]) -> None:
            for key, value in table.items():
                name = f"{prefix}{key}"
                if isinstance(value, Mapping):
                    walk(name + ".", value)
                else:
                    flat[name] = (
                        "true" if value is True else "false" if value is False else str(value)
                    )

        walk("", tomllib.loads(text))
        return flat
    values: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected name=value, got {line!r}")
        values[line[:sep].strip()] = _unescape(line[sep + 1 :].strip())
    return values


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) of each entry of a .properties file, comments left out;
    as in Java's Properties, a line ending in an odd number of backslashes goes on in
    the next, whose leading blanks are dropped (Kafka's JAAS configs are written so)."""
    pending: list[str] = []
    first = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip() if not pending else raw.lstrip()
        if not pending:
            if not line or line[0] in "#!":
                continue
            first = lineno
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield first, "".join(pending).strip()
        pending = []
    if pending:
        yield first, "".join(pending).strip()


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(value: str) -> str:
    """A .properties value as Java reads it: `\\t`, `\\n`, `\\uXXXX`, and a backslash
    before any other character stands for that character."""
    if "\\" not in value:
        return value
    out: list[str] = []
    at = 0
    while at < len(value):
        char = value[at]
        if char != "\\" or at + 1 >= len(value):
            out.append(char)
            at += 1
            continue
        escaped = value[at + 1]
        if escaped == "u" and len(value) >= at + 6:
            try:
                out.append(chr(int(value[at + 2 : at + 6], 16)))
                at += 6
                continue
            except ValueError:
                pass
        out.append(_PROPERTY_ESCAPES.get(escaped, escaped))
        at += 2
    return "".join(out)


LISTENER_PREFIX = "listener.name."
#: Configs a listener may override with `listener.name.<listener>.<config>`.
PER_LISTENER_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "sasl.enabled.mechanisms",
        "sasl.plain.users",
    }
)


#: Kafka's per-listener, per-mechanism JAAS config: `listener.name.<l>.<mechanism>.` + this.
JAAS_CONFIG = "sasl.jaas.config"
#: The SASL mechanisms a `listener.name.<listener>.<mechanism>.sasl.jaas.config` may name.
JAAS_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512")


def jaas_config_name(mechanism: str) -> str:
    """The per-listener config name of a mechanism's JAAS config (`plain.sasl.jaas.config`)."""
    return f"{mechanism.lower()}.{JAAS_CONFIG}"


def listener_config_definition(config_name: str) -> str:
    """The broker config a per-listener config is typed (and defaulted) as:
    `<mechanism>.sasl.jaas.config` is a `sasl.jaas.config`; others are themselves."""
    return JAAS_CONFIG if config_name.endswith("." + JAAS_CONFIG) else config_name


def split_listener_config(name: str) -> tuple[str, str]:
    rest = name[len(LISTENER_PREFIX) :]
    listener, _, config_name = rest.partition(".")
    if listener and config_name.endswith("." + JAAS_CONFIG):
        mechanism = config_name[: -len(JAAS_CONFIG) - 1]
        if mechanism not in JAAS_MECHANISMS:
            raise ConfigError(
                f"{name}: SASL mechanism {mechanism!r} is not served; a listener's JAAS config "
                f"is for one of {', '.join(JAAS_MECHANISMS)} (lower case, as Kafka names them)"
            )
        return listener.upper(), config_name
    if not listener or config_name not in PER_LISTENER_CONFIGS:
        raise ConfigError(
            f"Unknown broker config {name!r}: a listener.name.<listener>.<config> override "
            f"takes one of {', '.join(sorted(PER_LISTENER_CONFIGS))} or "
            f"<mechanism>.{JAAS_CONFIG}"
        )
    return listener.upper(), config_name


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, ConfigValue]:
    """Parse a topic's config overrides; raises ConfigError naming the bad entry."""
    parsed: dict[str, ConfigValue] = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        parsed[name] = definition.parse(raw)
        if name in THROTTLED_REPLICAS_CONFIGS:
            throttled_replicas(str(parsed[name]))
    return parsed


def throttled_replicas(value: str) -> frozenset[tuple[int, int]] | None:
    """Kafka's throttled-replicas format: None for "*" (all), else the (partition, broker)
    pairs of "P:B,P:B" (empty: none). Raises ConfigError for anything else."""
    text = value.strip()
    if text == "*":
        return None
    pairs = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        partition, sep, broker = item.partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            raise ConfigError(
                f"Invalid throttled replicas entry {item!r}: expected "
                "PARTITION:BROKER pairs separated by commas, or *"
            )
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """`name=value` command-line items as a dict; raises ConfigError on a malformed item."""
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"expected name=value, got {item!r}")
        result[name.strip()] = value.strip()
    return result
