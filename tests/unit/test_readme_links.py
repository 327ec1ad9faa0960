"""The README is the landing page: every page it links to exists (the docs site's own links
are checked by `mkdocs build --strict` in scripts/test, which does not read the README), and
its commands and client snippet are ones the quick start test runs."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_every_relative_link_of_the_readme_names_a_file() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    targets = [match.group(1) for match in LINK.finditer(readme)]
    assert targets, "the README links to the docs"
    missing = [
        target for target in targets if "://" not in target and not (REPO_ROOT / target).exists()
    ]
    assert missing == []


def test_the_readme_keeps_the_dependency_list() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "## Dependencies, and why" in readme


def test_the_readme_client_snippet_is_the_one_the_quick_start_runs() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    page = (REPO_ROOT / "docs" / "getting-started.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    heredoc = re.search(r"python - <<'EOF'\n(.*?)EOF\n", page, re.DOTALL)
    assert snippet is not None and heredoc is not None
    assert snippet.group(1) == heredoc.group(1)


def commands(text: str, fence: str) -> list[str]:
    """The command lines of every `fence` block of `text`, without their comments."""
    blocks = re.findall(rf"```{fence}\n(.*?)```", text, re.DOTALL)
    return [
        line.split("  #")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.split("  #")[0].strip()
    ]


def test_the_readme_commands_after_setup_are_the_ones_the_quick_start_runs() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    page = (REPO_ROOT / "docs" / "getting-started.md").read_text()
    tried = commands(readme, "sh")
    assert tried[:2] == ["scripts/serve", "scripts/test"], tried
    ran = set(commands(page, "bash"))
    # The quick start starts the broker in the background (`scripts/serve &`).
    assert [line for line in tried[2:] if line not in ran] == []
