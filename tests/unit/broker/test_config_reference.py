"""The docs' configuration reference, rendered from the config tables: every config the
broker accepts is in it once, with its real default and dynamic-ness, and the docs page keeps
the place the reference goes (the docs build itself, --strict, is a step of scripts/test)."""

from __future__ import annotations

import re
from pathlib import Path

from raftka.broker.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
)
from raftka.broker.config.reference import BROKER_AREAS, markdown_reference

REPO_ROOT = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\| `([^`]+)` \| (\w+) \| ([^|]*) \|")


def rows_by_section() -> dict[str, list[list[str]]]:
    sections: dict[str, list[list[str]]] = {}
    current = ""
    for line in markdown_reference().split("\n"):
        if line.startswith("## "):
            current = line[3:]
        elif ROW.match(line):
            sections.setdefault(current, []).append(
                [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            )
    return sections


def test_every_broker_config_is_listed_once_with_its_dynamic_ness() -> None:
    rows = rows_by_section()["Broker configs"]
    names = [row[0].strip("`") for row in rows]
    assert sorted(names) == sorted(BROKER_CONFIGS)
    assert len(names) == len(set(names))
    for row in rows:
        expected = "dynamic" if row[0].strip("`") in DYNAMIC_BROKER_CONFIGS else "read-only"
        assert row[4] == expected, row


def test_the_areas_cover_the_broker_table() -> None:
    assert sum(len(definitions) for _, definitions in BROKER_AREAS) == len(BROKER_CONFIGS)


def test_topic_and_group_configs_are_listed_with_their_defaults() -> None:
    sections = rows_by_section()
    for section, table in (("Topic configs", TOPIC_CONFIGS), ("Group configs", GROUP_CONFIGS)):
        rows = {row[0].strip("`"): row for row in sections[section]}
        assert sorted(rows) == sorted(table)
        for name, definition in table.items():
            rendered = definition.render(definition.default)
            assert rows[name][1] == definition.type.name.lower()
            if rendered:
                assert f"`{rendered}`" in rows[name][2], (name, rows[name])


def test_a_value_with_a_pipe_stays_inside_its_cell() -> None:
    for line in markdown_reference().split("\n"):
        if line.startswith("| `"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert len(cells) in (6, 7), line


def test_the_reference_page_keeps_its_place_for_the_tables() -> None:
    page = (REPO_ROOT / "docs" / "reference" / "configuration.md").read_text()
    hook = (REPO_ROOT / "docs" / "hooks" / "config_reference.py").read_text()
    marker = re.search(r'MARKER = "([^"]+)"', hook)
    assert marker is not None
    assert marker.group(1) in page
