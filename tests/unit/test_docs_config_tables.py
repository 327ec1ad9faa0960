"""The docs' hand-written config tables (the ones that matter most, transactions', share
groups') say no more than the config tables do: every config they name exists, and a plain
default they give is the real one. The full reference is generated and cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from raftka.broker.config import BROKER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS

DOCS = Path(__file__).resolve().parents[2] / "docs"
KNOWN = {**GROUP_CONFIGS, **TOPIC_CONFIGS, **BROKER_CONFIGS}


def config_rows() -> list[tuple[str, list[str]]]:
    """(page, cells) of every row of a table whose header starts `| config | default |`."""
    rows: list[tuple[str, list[str]]] = []
    for page in sorted(DOCS.rglob("*.md")):
        in_table = False
        for line in page.read_text().split("\n"):
            if line.startswith("| config | default |"):
                in_table = True
            elif not line.startswith("|"):
                in_table = False
            elif in_table and not line.startswith("|---"):
                rows.append((str(page.relative_to(DOCS)), [c.strip() for c in line.split("|")]))
    return rows


def named(cell: str) -> list[str]:
    """Config names of a cell, without the shorthand of a name's variants (`.hours`,
    `group.min/max.session.timeout.ms`)."""
    return [name for name in re.findall(r"`([^`]+)`", cell) if "/" not in name and name[0] != "."]


def test_the_docs_have_config_tables() -> None:
    assert len(config_rows()) > 20


def test_every_config_a_docs_table_names_exists() -> None:
    unknown = [(page, name) for page, cells in config_rows() for name in named(cells[1])]
    assert [(page, name) for page, name in unknown if name not in KNOWN] == []


def test_a_plain_default_in_a_docs_table_is_the_real_one() -> None:
    for page, cells in config_rows():
        names, default = named(cells[1]), cells[2]
        if len(names) == 1 and re.fullmatch(r"[\w.-]+", default):
            definition = KNOWN[names[0]]
            assert definition.render(definition.default) == default, (page, names[0])
