"""What every admin command shares: clients with a bounded timeout, Kafka errors turned into
one clear message, and the two output forms (aligned table, one JSON document)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

if TYPE_CHECKING:
    import argparse
    from concurrent.futures import Future
    from typing import TypeAlias

    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ClusterMetadata

    #: What `add_subparsers()` returns: each command family adds its parser to it.
    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_TIMEOUT_S = 15.0

T = TypeVar("T")

# librdkafka's own codes for "no broker answered" (transport failures, local timeouts).
_UNREACHABLE_CODES = ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE")


# What a command returns: printed as a table, or as one JSON document with --output json.
Document = dict[str, Any]  # Any: a JSON object, shaped per command


class AdminError(Exception):
    """A failure the command reports as one message on stderr and exit code 1."""


#: Client properties `--command-config` may set (librdkafka's names, which the Java
#: client shares for these), and the Java-only ones translated to them.
SECURITY_PROPERTIES = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
_JAAS_OPTION = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_command_config(path: Path) -> dict[str, str]:
    """Client security properties from a Kafka-style properties file (`--command-config`).

    librdkafka's names are taken as they are; from the Java client's, `sasl.jaas.config`
    gives the user name and password and a PEM `ssl.truststore.location` the CA file.
    Raises AdminError naming an unknown property."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AdminError(f"--command-config {path}: {exc.strerror or exc}") from None
    found: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep:
            raise AdminError(f"--command-config {path}:{lineno}: expected name=value")
        if name == "sasl.jaas.config":
            for key, quoted in _JAAS_OPTION.findall(value):
                found[f"sasl.{key}"] = quoted.replace('\\"', '"')
        elif name == "ssl.truststore.location":
            found["ssl.ca.location"] = value
        elif name in ("ssl.truststore.type", "ssl.keystore.type"):
            if value.upper() != "PEM":
                raise AdminError(f"--command-config {path}: {name}={value}: only PEM is supported")
        elif name in SECURITY_PROPERTIES:
            found[name] = value
        else:
            raise AdminError(
                f"--command-config {path}:{lineno}: unknown property {name!r}; known: "
                + ", ".join(sorted(SECURITY_PROPERTIES | {"sasl.jaas.config"}))
            )
    return found


@dataclass(frozen=True)
class Target:
    """Where and how long: the bootstrap list, the bound on every client call, and the
    client security properties (security.protocol, sasl.*, ssl.*) for secured listeners."""

    bootstrap: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    security: Mapping[str, str] = field(default_factory=dict)
    #: Authentication failures the clients reported (librdkafka reports them through its
    #: error callback; the failed call itself only says no broker answered).
    auth_failures: list[str] = field(default_factory=list, compare=False)
    _clients: list[AdminClient] = field(default_factory=list, compare=False, repr=False)

    @property
    def security_protocol(self) -> str:
        return self.security.get("security.protocol", "PLAINTEXT").upper()

    def client_config(self) -> dict[str, Any]:  # Any: strings, numbers, a callback
        timeout_ms = int(self.timeout_s * 1000)
        return {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": max(timeout_ms, 10),
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            # The command prints its own message; librdkafka's connection noise would repeat it.
            "log_level": 0,
            "error_cb": self._client_error,
            **self.security,
        }

    def _client_error(self, error: KafkaError) -> None:
        if getattr(error, "name", lambda: "")() == "_AUTHENTICATION":
            self.auth_failures.append(error.str())

    def admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.client_config())
        self._clients.append(admin)
        return admin

    def unreachable(self) -> AdminError:
        for client in self._clients:
            client.poll(0)  # runs the error callbacks librdkafka has queued
        if self.auth_failures:
            return AdminError(
                f"authentication with {self.bootstrap} failed: {self.auth_failures[-1]} "
                "(check --sasl-username/--sasl-password, --sasl-mechanism and "
                "--security-protocol)"
            )
        return AdminError(
            f"no broker answered at {self.bootstrap} within {self.timeout_s:g} s "
            "(is a broker running there? --bootstrap-servers HOST:PORT)"
        )

    def metadata(self, admin: AdminClient) -> ClusterMetadata:
        """Metadata of every topic (ClusterMetadata), or AdminError naming the bootstrap
        address. Never a request naming topics: librdkafka lets the broker auto-create
        those, and an admin read must create nothing."""
        from confluent_kafka import KafkaException

        try:
            return admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self.failure(exc) from None

    def failure(self, exc: BaseException) -> AdminError:
        """An exception from a client call as the AdminError the user sees."""
        error: Any = exc.args[0] if exc.args else None  # Any: a KafkaError, or anything
        name = error.name() if hasattr(error, "name") else ""
        if name == "_AUTHENTICATION" or "Authentication failed" in kafka_error_text(exc):
            return AdminError(
                f"authentication with {self.bootstrap} failed: {kafka_error_text(exc)} (check "
                "--sasl-username/--sasl-password, --sasl-mechanism and --security-protocol)"
            )
        if name in _UNREACHABLE_CODES:
            return self.unreachable()
        return AdminError(kafka_error_text(exc))

    def result(self, future: Future[T], what: str, needs: str | None = None) -> T:
        """`future.result()` bounded by the timeout; a refusal as AdminError naming `what`,
        and for an authorization failure the ACL `needs` names (e.g. `DELETE on topic t`)."""
        import concurrent.futures

        try:
            return future.result(timeout=self.timeout_s + 5)
        except concurrent.futures.TimeoutError:
            raise self.unreachable() from None
        except Exception as exc:
            failure = str(self.failure(exc))
            if needs and "_AUTHORIZATION_FAILED" in failure and "not authorized" not in failure:
                # Some clients drop the broker's message; say which ACL is missing.
                failure += f" (an ACL allowing {needs} is needed)"
            raise AdminError(f"{what}: {failure}") from None

    def deleted(
        self,
        futures: Mapping[str, Future[object]],
        names: Sequence[str],
        what: str,
        operation: str = "",
    ) -> Document:
        """Wait for one deletion future per name: {"deleted": names}, or an AdminError naming
        every failure and what was deleted nonetheless. `operation` is the ACL operation a
        deletion needs on the resource, for an authorization failure's message."""
        failures: list[str] = []
        done: list[str] = []
        for name in names:
            needs = f"{operation} on {what} {name}" if operation else None
            try:
                self.result(futures[name], f"delete {what} {name}", needs)
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
    error: Any = exc.args[0] if exc.args else None  # Any: a KafkaError, or anything
    if hasattr(error, "name") and hasattr(error, "str"):
        return f"{error.name()}: {error.str()}"
    return str(exc)


def state_name(state: object) -> str:
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
