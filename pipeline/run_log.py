"""The terminal and the log file of `scripts/pipeline run`: Spark's JVM, its Python workers
and py4j write to this process's stderr, so stderr becomes the log file and only the lines
meant for the user reach the terminal."""

from __future__ import annotations

import os
import sys
from typing import TextIO


def default_log_path(checkpoint: str) -> str:
    """The log beside the checkpoint (not inside it: the checkpoint is Spark's)."""
    return checkpoint.rstrip(os.sep) + ".log"


def divert_stderr(path: str) -> TextIO:
    """Point file descriptor 2 at `path` (appending), for this process and every process it
    starts from now on (the JVM inherits it); returns a stream on the former stderr, for the
    one line a stop or a failure prints there."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    sys.stderr.flush()
    terminal = os.fdopen(os.dup(2), "w", buffering=1)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 2)
    finally:
        os.close(log_fd)
    return terminal


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of an error's text (a JVM error carries its stack below),
    cut to `limit` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
