"""How `raftka serve` writes its log: one line per event on stderr, as text or as JSON.

Call sites name what an event concerns through the stdlib's `extra`, e.g.
`logger.info("%s: ...", partition.name, extra={"partition": partition.name})`; the text
format leaves that out (its lines are as they always were), the JSON format gives each of
`CONTEXT_FIELDS` it finds as a field of its own. Every line carries this broker's node id.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final, TextIO

LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# What an event may concern, as call sites pass it in `extra`: partition ("orders-0"),
# consumer group id, Raft group name, peer node id, topic name.
CONTEXT_FIELDS: Final = ("partition", "group", "raft_group", "peer", "topic")


def partition_context(topic: str, index: int) -> dict[str, object]:
    """The `extra` of an event about partition `index` of `topic`."""
    return {"partition": f"{topic}-{index}", "topic": topic}


class NodeFilter(logging.Filter):
    """Stamps every record with this broker's node id (`record.node`)."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        return True


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, kept to one line per event: a newline inside a message (a group id or a
    client id may hold one) is written as `\\n`; only a traceback spans lines after it."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).replace("\r", "\\r").replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `ts` (RFC 3339 UTC, milliseconds), `level`,
    `logger`, `msg` (the formatted message), `node`, the `CONTEXT_FIELDS` the record has, and
    `exc` (the traceback as one string) when it carries an exception. Non-ASCII characters
    and newlines are escaped, so a line never breaks."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, tz=UTC)
        line: dict[str, object] = {
            "ts": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "node": getattr(record, "node", None),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info and not record.exc_text:
            # Cached like logging.Formatter does, for other handlers of the same record.
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=True, default=str)


def formatter_for(log_format: str) -> logging.Formatter:
    """The formatter of `--log-format` (ValueError for any other name than LOG_FORMATS)."""
    if log_format == "text":
        return TextFormatter()
    if log_format == "json":
        return JsonFormatter()
    raise ValueError(f"unknown log format {log_format!r} (expected one of {LOG_FORMATS})")


def configure_logging(
    level: str, log_format: str, node_id: int, stream: TextIO | None = None
) -> logging.Handler:
    """Send the root logger's records to `stream` (stderr) in `log_format`, each stamped with
    `node_id`; replaces handlers configured before. Returns the handler; ValueError for an
    unknown level or format."""
    root = logging.getLogger()
    root.setLevel(level.upper())  # first: ValueError for an unknown level changes nothing else
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter_for(log_format))
    handler.addFilter(NodeFilter(node_id))
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    return handler


__all__ = [
    "CONTEXT_FIELDS",
    "LOG_FORMATS",
    "TEXT_FORMAT",
    "JsonFormatter",
    "TextFormatter",
    "NodeFilter",
    "configure_logging",
    "formatter_for",
    "partition_context",
]
