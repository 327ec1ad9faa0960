"""What every admin command shares: clients with a bounded timeout, Kafka errors turned into
one clear message, and the two output forms (aligned table, one JSON document)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

DEFAULT_TIMEOUT_S = 15.0

# librdkafka's own codes for "no broker answered" (transport failures, local timeouts).
_UNREACHABLE_CODES = ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE")


# What a command returns: printed as a table, or as one JSON document with --output json.
Document = dict[str, Any]


class AdminError(Exception):
    """A failure the command reports as one message on stderr and exit code 1."""


@dataclass(frozen=True)
class Target:
    """Where and how long: the bootstrap list and the bound on every client call."""

    bootstrap: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    def client_config(self) -> dict[str, Any]:
        timeout_ms = int(self.timeout_s * 1000)
        return {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": max(timeout_ms, 10),
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            # The command prints its own message; librdkafka's connection noise would repeat it.
            "log_level": 0,
        }

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_config())

    def unreachable(self) -> AdminError:
        return AdminError(
            f"no broker answered at {self.bootstrap} within {self.timeout_s:g} s "
            "(is a broker running there? --bootstrap-servers HOST:PORT)"
        )

    def metadata(self, admin: Any, topic: str | None = None) -> Any:
        """Metadata (ClusterMetadata), or AdminError naming the bootstrap address."""
        from confluent_kafka import KafkaException

        try:
            return admin.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise self.failure(exc) from None

    def failure(self, exc: BaseException) -> AdminError:
        """An exception from a client call as the AdminError the user sees."""
        error: Any = exc.args[0] if exc.args else None
        name = error.name() if hasattr(error, "name") else ""
        if name in _UNREACHABLE_CODES:
            return self.unreachable()
        return AdminError(kafka_error_text(exc))

    def result(self, future: Any, what: str) -> Any:
        """`future.result()` bounded by the timeout; a refusal as AdminError naming `what`."""
        import concurrent.futures

        try:
            return future.result(timeout=self.timeout_s + 5)
        except concurrent.futures.TimeoutError:
            raise self.unreachable() from None
        except Exception as exc:
            failure = self.failure(exc)
            raise AdminError(f"{what}: {failure}") from None

    def deleted(self, futures: Mapping[str, Any], names: Sequence[str], what: str) -> Document:
        """Wait for one deletion future per name: {"deleted": names}, or an AdminError naming
        every failure and what was deleted nonetheless."""
        failures: list[str] = []
        done: list[str] = []
        for name in names:
            try:
                self.result(futures[name], f"delete {what} {name}")
                done.append(name)
            except AdminError as exc:
                failures.append(str(exc))
        if failures:
            if done:
                failures.append("deleted: " + ", ".join(done))
            raise AdminError("\n".join(failures))
        return {"deleted": list(names)}


def kafka_error_text(exc: BaseException) -> str:
    """Kafka's error name and message, e.g. `TOPIC_ALREADY_EXISTS: Topic 'x' already exists.`"""
    error: Any = exc.args[0] if exc.args else None
    if hasattr(error, "name") and hasattr(error, "str"):
        return f"{error.name()}: {error.str()}"
    return str(exc)


def state_name(state: Any) -> str:
    return str(getattr(state, "name", state))


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]], out: TextIO) -> None:
    """Columns aligned to their widest cell, two spaces apart."""
    cells = [list(header)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


def print_json(document: object, out: TextIO = sys.stdout) -> None:
    json.dump(document, out, indent=2, sort_keys=False)
    print(file=out)
