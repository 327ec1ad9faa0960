"""The repository's one import path: the top-level folders are the packages raftka.broker,
raftka.protocol, … through the packaging's package-dir, with no links and no second name."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("broker", "consensus", "log", "pipeline", "protocol")


def _setuptools() -> dict[str, object]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_every_package_folder_is_packaged_under_raftka() -> None:
    setuptools = _setuptools()
    package_dir = setuptools["package-dir"]
    assert isinstance(package_dir, dict)
    found = {"raftka"}
    for name in TOP_LEVEL:
        assert package_dir[f"raftka.{name}"] == name
        for init in (REPO_ROOT / name).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO_ROOT).parts
            found.add(".".join(("raftka", *parts)))
    assert sorted(found) == sorted(setuptools["packages"]), (
        "pyproject.toml [tool.setuptools] packages must list every package folder"
    )


def test_the_repository_holds_no_symbolic_links() -> None:
    listing = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("120000")]
    assert links == []


def test_nothing_imports_a_package_under_a_second_name() -> None:
    second_name = re.compile(rf"^\s*(from|import)\s+({'|'.join(TOP_LEVEL)})(\.|\s|$)", re.M)
    offenders = []
    for path in REPO_ROOT.rglob("*.py"):
        if ".venv" in path.parts or ".git" in path.parts:
            continue
        for match in second_name.finditer(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(REPO_ROOT)}: {match.group(0).strip()}")
    assert offenders == []
