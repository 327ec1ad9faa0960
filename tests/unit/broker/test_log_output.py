"""`raftka serve --log-format`: what a line holds, as text and as JSON."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from raftka.broker.log_output import (
    JsonFormatter,
    NodeFilter,
    TextFormatter,
    configure_logging,
    formatter_for,
    partition_context,
)

RFC3339_UTC_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def emit() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    """A logger of its own writing through a handler stamped with node 7."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(NodeFilter(7))
    logger = logging.getLogger("raftka.test_log_output")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, out, handler
    logger.removeHandler(handler)
    logger.propagate = True


def lines_of(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_json_line_has_the_fields_and_the_context_from_extra(emit):
    logger, out, handler = emit
    handler.setFormatter(JsonFormatter())
    logger.info(
        "%s: leader is node %d at epoch %d",
        "orders-0",
        2,
        5,
        extra={"partition": "orders-0", "topic": "orders", "peer": 2},
    )
    logger.warning("group %s: member %s leaves", "g1", "m-1", extra={"group": "g1"})
    logger.info("node %s: sync failed", 7, extra={"raft_group": "__cluster_metadata-0"})
    first, second, third = (json.loads(line) for line in lines_of(out))
    assert first == {
        "ts": first["ts"],
        "level": "INFO",
        "logger": "raftka.test_log_output",
        "msg": "orders-0: leader is node 2 at epoch 5",
        "node": 7,
        "partition": "orders-0",
        "topic": "orders",
        "peer": 2,
    }
    assert RFC3339_UTC_MS.match(first["ts"]), first["ts"]
    assert second["level"] == "WARNING" and second["group"] == "g1" and second["node"] == 7
    assert "partition" not in second and "exc" not in second
    assert third["raft_group"] == "__cluster_metadata-0"


def test_json_exception_is_one_exc_string_on_the_same_line(emit):
    logger, out, handler = emit
    handler.setFormatter(JsonFormatter())
    try:
        raise OSError("disk full")
    except OSError:
        logger.exception("cannot append to %s", "__consumer_offsets-3")
    (line,) = lines_of(out)
    event = json.loads(line)
    assert event["level"] == "ERROR"
    assert event["msg"] == "cannot append to __consumer_offsets-3"
    assert event["exc"].startswith("Traceback (most recent call last):")
    assert event["exc"].rstrip().endswith("OSError: disk full")


def test_json_escapes_non_ascii_and_newlines(emit):
    logger, out, handler = emit
    handler.setFormatter(JsonFormatter())
    logger.info(
        "group %s: member %s joins", "grüppe\nzwei", "m\r1", extra={"group": "grüppe\nzwei"}
    )
    raw = out.getvalue()
    assert raw.count("\n") == 1 and raw.isascii()
    assert "\\u00fc" in raw and "\\n" in raw
    event = json.loads(raw)
    assert event["msg"] == "group grüppe\nzwei: member m\r1 joins"
    assert event["group"] == "grüppe\nzwei"


def test_text_format_is_unchanged(emit):
    logger, out, handler = emit
    handler.setFormatter(formatter_for("text"))
    logger.info("topic %s: hosting %d of %d partitions", "orders", 1, 1, extra={"topic": "orders"})
    (line,) = lines_of(out)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO raftka\.test_log_output: "
        r"topic orders: hosting 1 of 1 partitions",
        line,
    ), line
    record = logging.LogRecord("raftka.x", logging.INFO, __file__, 1, "plain %s", ("text",), None)
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    assert TextFormatter().format(record) == plain.format(record)


def test_text_keeps_one_line_per_event_except_a_traceback(emit):
    logger, out, handler = emit
    handler.setFormatter(formatter_for("text"))
    logger.info("group %s: member %s joins", "evil\nFAKE ERROR line", "m-1")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("handler failed")
    lines = lines_of(out)
    assert lines[0].endswith("group evil\\nFAKE ERROR line: member m-1 joins")
    assert lines[1].endswith("handler failed")
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"


def test_partition_context_names_the_partition_and_its_topic():
    assert partition_context("__consumer_offsets", 3) == {
        "partition": "__consumer_offsets-3",
        "topic": "__consumer_offsets",
    }


def test_configure_logging_stamps_every_line_with_the_node_id():
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    out = io.StringIO()
    try:
        configure_logging("info", "json", 3, stream=out)
        logging.getLogger("some.library").warning("not ours")
        logging.getLogger("raftka.x").debug("below the level")
        with pytest.raises(ValueError):
            configure_logging("chatty", "json", 3, stream=out)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
    (line,) = lines_of(out)
    assert json.loads(line)["node"] == 3 and json.loads(line)["logger"] == "some.library"
