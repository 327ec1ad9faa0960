"""The configuration reference as Markdown, rendered from the config tables themselves (the
docs site's reference page is built from it), so the page names every config the broker
accepts with the type, default, accepted values and dynamic-ness it really has."""

from __future__ import annotations

from collections.abc import Iterable

from raftka.broker.config.coordinator_configs import COORDINATOR_CONFIGS
from raftka.broker.config.group_configs import GROUP_BOUNDS, GROUP_CONFIG_DEFS, GROUP_SYNONYMS
from raftka.broker.config.kraft_configs import KRAFT_CONFIGS
from raftka.broker.config.log_configs import LOG_RETENTION_CONFIGS, LOG_STORAGE_CONFIGS
from raftka.broker.config.replication_configs import REPLICATION_CONFIGS
from raftka.broker.config.server_configs import SERVER_CONFIGS
from raftka.broker.config.topic_configs import TOPIC_CONFIG_DEFS, TOPIC_SYNONYMS
from raftka.broker.config.types import INT_MAX, LONG_MAX, ConfigDef

#: The broker config tables by area, in the order the reference lists them.
BROKER_AREAS: tuple[tuple[str, tuple[ConfigDef, ...]], ...] = (
    ("Server: identity, listeners, security, limits and quotas", SERVER_CONFIGS),
    ("Log retention and segments", LOG_RETENTION_CONFIGS),
    ("Replication and the metadata log", REPLICATION_CONFIGS),
    ("Log storage, flushing, cleaning and compression", LOG_STORAGE_CONFIGS),
    ("Coordinators: groups, transactions, share groups", COORDINATOR_CONFIGS),
    ("A Kafka KRaft node's settings", KRAFT_CONFIGS),
)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def default_text(definition: ConfigDef) -> str:
    """The default as DescribeConfigs renders it, with Java's names for the integer limits."""
    rendered = definition.render(definition.default)
    if rendered is None:
        return "(none)"
    if rendered == "":
        return "(empty)"
    if definition.default == LONG_MAX:
        return f"`{rendered}` (Long.MAX)"
    if definition.default == INT_MAX:
        return f"`{rendered}` (Integer.MAX)"
    return _code(rendered)


def accepted_text(definition: ConfigDef) -> str:
    """The values the config accepts beyond its type: choices, or its numeric bounds."""
    if definition.choices is not None:
        items = ", ".join(f"`{choice}`" for choice in definition.accepted_choices())
        return f"list of {items}" if definition.type.name == "LIST" else items
    low, high = definition.minimum, definition.maximum
    if low is not None and high is not None:
        text = f"[{low}, {high}]"
    elif low is not None:
        text = f"≥ {low}"
    elif high is not None:
        text = f"≤ {high}"
    else:
        return ""
    return text + "".join(f" or {value}" for value in definition.also)


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return lines


def broker_section(title: str, definitions: Iterable[ConfigDef]) -> list[str]:
    rows = (
        (
            f"`{d.name}`",
            d.type.name.lower(),
            default_text(d),
            accepted_text(d),
            "read-only" if d.read_only else "dynamic",
            d.doc,
        )
        for d in definitions
    )
    header = ("config", "type", "default", "accepted", "update", "meaning")
    return [f"### {title}", "", *_table(header, rows), ""]


def topic_section() -> list[str]:
    rows = (
        (
            f"`{d.name}`",
            d.type.name.lower(),
            default_text(d),
            accepted_text(d),
            _code(TOPIC_SYNONYMS.get(d.name, "")),
            d.doc,
        )
        for d in TOPIC_CONFIG_DEFS
    )
    header = ("config", "type", "default", "accepted", "broker default from", "meaning")
    return _table(header, rows)


def group_section() -> list[str]:
    def bounds(name: str) -> str:
        low_high = GROUP_BOUNDS.get(name)
        return "" if low_high is None else f"`{low_high[0]}` – `{low_high[1]}`"

    rows = (
        (
            f"`{d.name}`",
            d.type.name.lower(),
            default_text(d),
            accepted_text(d),
            _code(GROUP_SYNONYMS.get(d.name, "")),
            bounds(d.name),
            d.doc,
        )
        for d in GROUP_CONFIG_DEFS
    )
    header = (
        "config",
        "type",
        "default",
        "accepted",
        "broker default from",
        "bounded by",
        "meaning",
    )
    return _table(header, rows)


def markdown_reference() -> str:
    """Every broker, topic and group config as Markdown tables (sections of level 2 and 3)."""
    lines = ["## Broker configs", ""]
    lines += [
        "Set with `--config NAME=VALUE`, `RAFTKA_<NAME>`, or the config file (see "
        "[Configuration](../operating/configuration.md)). *dynamic* configs also change at "
        "run time, per broker or cluster-wide, without a restart (see [Dynamic broker "
        "configs](../operating/configuration.md#dynamic-broker-configs)); *read-only* ones "
        "only at start-up.",
        "",
    ]
    for title, definitions in BROKER_AREAS:
        lines += broker_section(title, definitions)
    lines += [
        "## Topic configs",
        "",
        "A topic's own value (CreateTopics, IncrementalAlterConfigs, AlterConfigs), else the "
        "broker config it falls back to, else the default.",
        "",
        *topic_section(),
        "",
        "## Group configs",
        "",
        "A group's own value (IncrementalAlterConfigs on a GROUP resource), else the broker "
        "config it falls back to; a value outside the broker's bounds is refused.",
        "",
        *group_section(),
        "",
    ]
    return "\n".join(lines)
