"""The repository's one import path: the top-level folders are the packages raftka.broker,
raftka.protocol, … through the packaging's package-dir, with no links and no second name."""

from __future__ import annotations

import ast
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


def _broker_imports() -> dict[str, set[str]]:
    """Module -> the modules of broker/ it imports, counting every import statement: at
    module level, under `if TYPE_CHECKING:` and inside functions."""
    paths = {}
    for path in (REPO_ROOT / "broker").rglob("*.py"):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        paths[".".join(["raftka", *parts])] = path
    edges: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in paths:  # the longest module the name names
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]


def test_no_module_of_broker_imports_itself_through_others() -> None:
    edges = _broker_imports()
    assert len(edges) > 50, "broker/ should have been read"
    circles = _circles(edges)
    assert circles == [], "\n".join(
        f"circle: {' -> '.join(c)} (each imports another; break it with a Protocol or a "
        "module below both)"
        for c in circles
    )


def test_no_two_test_modules_share_a_file_name() -> None:
    # The test folders are not packages: pytest imports each test module by its file name,
    # so a second module of the same name anywhere under tests/ fails the suite's collection.
    listing = subprocess.run(
        ["git", "ls-files", "tests"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    by_name: dict[str, list[str]] = {}
    for path in listing.splitlines():
        name = Path(path).name
        if name.startswith("test_") and name.endswith(".py"):
            by_name.setdefault(name, []).append(path)
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
