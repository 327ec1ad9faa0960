"""MkDocs hook: the configuration reference page's tables are rendered from the broker's
config tables at build time (raftka.broker.config.reference), never copied by hand."""

from __future__ import annotations

from typing import Any

from raftka.broker.config.reference import markdown_reference

MARKER = "<!-- config-reference -->"
PAGE = "reference/configuration.md"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} has lost its {MARKER} line; the reference goes there")
    return markdown.replace(MARKER, markdown_reference())
