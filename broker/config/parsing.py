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
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected name=value, got {line!r}")
        values[line[:sep].strip()] = line[sep + 1 :].strip()
    return values


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


def split_listener_config(name: str) -> tuple[str, str]:
    rest = name[len(LISTENER_PREFIX) :]
    listener, _, config_name = rest.partition(".")
    if not listener or config_name not in PER_LISTENER_CONFIGS:
        raise ConfigError(
            f"Unknown broker config {name!r}: a listener.name.<listener>.<config> override "
            f"takes one of {', '.join(sorted(PER_LISTENER_CONFIGS))}"
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
