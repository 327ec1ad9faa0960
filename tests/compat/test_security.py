"""Listeners, TLS and SASL with real clients: confluent-kafka over SSL (server auth and
mTLS), SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256/512, SASL_SSL with SCRAM-SHA-512, the
`raftka users` CLI, and the broker staying healthy through wrong passwords, requests before
authentication and plaintext bytes sent to a TLS port.

Certificates are made for each module run with the `openssl` command line tool (a throwaway
CA, a broker certificate for 127.0.0.1 and a client certificate), without network access.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from brokers import Brokers
from certs import Certificates, make_certificates
from clients import run_raftka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from harness import BrokerProcess, ClusterProcess, free_port, free_ports
from secured import tls_listeners_config

CLI_TIMEOUT_S = 90
RECORDS = 5


@dataclass
class SecuredBroker:
    broker: BrokerProcess
    certs: Certificates
    ports: dict[str, int]

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client(self, listener: str, **conf: Any) -> dict[str, Any]:
        """Client settings for `listener` (SSL ones trust the test CA)."""
        protocol = {"SSL": "SSL", "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}.get(
            listener, listener
        )
        settings: dict[str, Any] = {
            "bootstrap.servers": self.address(listener),
            "security.protocol": protocol,
        }
        if "SSL" in protocol:
            settings["ssl.ca.location"] = str(self.certs.ca)
        return {**settings, **conf}


@pytest.fixture(scope="module")
def secured(module_brokers: Brokers, tmp_path_factory: pytest.TempPathFactory) -> SecuredBroker:
    certs = make_certificates(tmp_path_factory.mktemp("certs"))
    ports = free_ports(("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"))
    config = tls_listeners_config(certs, ports, {"MTLS": "SSL"})
    config["sasl.plain.users"] = "alice:alice-secret,carol:c:olon"
    return SecuredBroker(module_brokers.broker(config, name="secured-broker"), certs, ports)


def roundtrip(settings: dict[str, Any]) -> list[bytes]:
    """Produce RECORDS records to a new topic and consume them back with `settings`."""
    topic = f"sec-{uuid.uuid4().hex[:10]}"
    producer = Producer({**settings, "log_level": 0})
    for i in range(RECORDS):
        producer.produce(topic, f"value-{i}".encode())
    assert producer.flush(30) == 0, "records were not delivered"
    consumer = Consumer(
        {**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "log_level": 0}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


EXPECTED = [f"value-{i}".encode() for i in range(RECORDS)]


def auth_errors(settings: dict[str, Any]) -> list[str]:
    """What a client reports when it cannot connect with `settings`."""
    errors: list[str] = []

    def on_error(error: Any) -> None:
        errors.append(f"{error.name()}: {error.str()}")

    admin = AdminClient({**settings, "error_cb": on_error, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.5)  # error callbacks run from poll
    return errors


def raftka(*args: object) -> subprocess.CompletedProcess[str]:
    return run_raftka(*args, timeout=CLI_TIMEOUT_S)


def ok(*args: object) -> str:
    result = raftka(*args)
    assert result.returncode == 0, f"raftka {args} exited {result.returncode}: {result.stderr}"
    return result.stdout


# -- TLS ---------------------------------------------------------------------------------


def test_ssl_listener_produce_and_consume(secured: SecuredBroker) -> None:
    assert roundtrip(secured.client("SSL")) == EXPECTED


def test_metadata_gives_the_address_of_the_listener_the_client_used(
    secured: SecuredBroker,
) -> None:
    admin = AdminClient({**secured.client("SSL"), "log_level": 0})
    brokers = admin.list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secured.ports["SSL"])]
    plain = AdminClient({"bootstrap.servers": secured.broker.bootstrap})
    brokers = plain.list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secured.broker.port)]


def test_mtls_client_with_certificate_is_served(secured: SecuredBroker) -> None:
    settings = secured.client(
        "MTLS",
        **{
            "ssl.certificate.location": str(secured.certs.client_cert),
            "ssl.key.location": str(secured.certs.client_key),
        },
    )
    assert roundtrip(settings) == EXPECTED


def test_mtls_client_without_certificate_is_refused(secured: SecuredBroker) -> None:
    errors = auth_errors(secured.client("MTLS"))
    assert errors, "the client reported nothing"
    assert secured.broker.is_running()
    assert "TLS handshake failed" in secured.broker.log_tail(200)


def test_plaintext_bytes_to_a_tls_port_close_only_that_connection(
    secured: SecuredBroker,
) -> None:
    admin = AdminClient({**secured.client("SSL"), "log_level": 0})
    admin.list_topics(timeout=10)  # a TLS client, connected before and after
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10) as raw:
        raw.sendall(_api_versions_frame())
        raw.settimeout(10)
        assert raw.recv(1024) in (b"",) or True  # whatever TLS alert, then the close
        assert _closed(raw)
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10) as raw:
        raw.sendall(b"\x16\x03\x01\x00\x10" + b"\x01" * 4)  # a truncated ClientHello
    assert admin.list_topics(timeout=10).brokers
    assert roundtrip(secured.client("SSL")) == EXPECTED
    tail = secured.broker.log_tail(200)
    assert "Traceback" not in tail


# -- SASL --------------------------------------------------------------------------------


def sasl(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def test_sasl_plain_with_configured_users(secured: SecuredBroker) -> None:
    assert (
        roundtrip(secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")))
        == EXPECTED
    )
    # A password may hold ':' (only the first one separates it from the user).
    admin = AdminClient(
        {**secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "carol", "c:olon")), "log_level": 0}
    )
    assert admin.list_topics(timeout=10).brokers


def test_wrong_password_is_an_authentication_failure_and_the_broker_carries_on(
    secured: SecuredBroker,
) -> None:
    errors = auth_errors(secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "alice", "wrong")))
    assert any("Authentication failed" in e for e in errors), errors
    assert any(e.startswith("_AUTHENTICATION") for e in errors), errors
    assert secured.broker.is_running()
    assert (
        roundtrip(secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")))
        == EXPECTED
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_user_made_with_raftka_users(secured: SecuredBroker, mechanism: str) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    out = ok("users", "add", user, "--password", "s3cret!", "--mechanism", mechanism,
             "--bootstrap-servers", secured.broker.bootstrap)  # fmt: skip
    assert f"credentials of {user}" in out
    settings = secured.client("SASL_PLAINTEXT", **sasl(mechanism, user, "s3cret!"))
    assert roundtrip(settings) == EXPECTED
    wrong = auth_errors(secured.client("SASL_PLAINTEXT", **sasl(mechanism, user, "nope")))
    assert any("Authentication failed" in e for e in wrong), wrong
    # The user is listed, over the secured listener itself.
    listed = ok("users", "list", "--bootstrap-servers", secured.address("SASL_PLAINTEXT"),
                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", mechanism,
                "--sasl-username", user, "--sasl-password", "s3cret!")  # fmt: skip
    assert any(line.split()[:2] == [user, mechanism] for line in listed.splitlines()), listed


def test_sasl_ssl_with_scram_sha_512_and_user_lifecycle(secured: SecuredBroker) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    b = ("--bootstrap-servers", secured.broker.bootstrap)
    ok("users", "add", user, "--password", "first", *b)
    settings = secured.client("SASL_SSL", **sasl("SCRAM-SHA-512", user, "first"))
    assert roundtrip(settings) == EXPECTED
    # Again: a second add is refused, change sets a new password, remove ends it.
    again = raftka("users", "add", user, "--password", "other", *b)
    assert again.returncode == 1 and "raftka users change" in again.stderr
    ok("users", "change", user, "--password", "second", *b)
    assert auth_errors(secured.client("SASL_SSL", **sasl("SCRAM-SHA-512", user, "first")))
    assert (
        roundtrip(secured.client("SASL_SSL", **sasl("SCRAM-SHA-512", user, "second"))) == EXPECTED
    )
    # PLAIN accepts the same password, checked against the SCRAM credential.
    plain = AdminClient(
        {**secured.client("SASL_SSL", **sasl("PLAIN", user, "second")), "log_level": 0}
    )
    assert plain.list_topics(timeout=10).brokers
    # The raw-protocol admin commands authenticate too, here from a --command-config file.
    properties = secured.broker.base_dir / f"{user}.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={secured.certs.ca}\nssl.truststore.type=PEM\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="second";\n'
    )
    status = ok("cluster", "status", "--bootstrap-servers", secured.address("SASL_SSL"),
                "--command-config", properties, "--output", "json")  # fmt: skip
    assert '"answers": true' in status, status
    ok("users", "remove", user, *b)
    assert auth_errors(secured.client("SASL_SSL", **sasl("SCRAM-SHA-512", user, "second")))
    listed = ok("users", "list", *b)
    assert user not in listed


def test_cli_reports_authentication_failure(secured: SecuredBroker) -> None:
    result = raftka("users", "list", "--bootstrap-servers", secured.address("SASL_PLAINTEXT"),
                    "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                    "--sasl-username", "alice", "--sasl-password", "wrong",
                    "--timeout", "5")  # fmt: skip
    assert result.returncode == 1
    assert "authentication" in result.stderr and "failed" in result.stderr, result.stderr


def _api_versions_frame(api_key: int = 18, version: int = 0) -> bytes:
    client_id = b"raw"
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    body = b"" if api_key == 18 else struct.pack(">i", -1)  # Metadata v0..: topics
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_request_before_authentication_closes_the_connection(secured: SecuredBroker) -> None:
    with socket.create_connection(
        ("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=10
    ) as raw:
        # ApiVersions is answered before authentication...
        raw.sendall(_api_versions_frame())
        (size,) = struct.unpack(">i", raw.recv(4))
        assert size > 0
        received = 0
        while received < size:
            received += len(raw.recv(size - received))
        # ...Metadata is not: the connection is closed without an answer.
        raw.sendall(_api_versions_frame(api_key=3, version=1))
        assert _closed(raw)
    assert "before SASL authentication" in secured.broker.log_tail(200)
    assert (
        roundtrip(secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")))
        == EXPECTED
    )


def test_malformed_sasl_tokens_harm_no_other_connection(secured: SecuredBroker) -> None:
    admin = AdminClient(
        {
            **secured.client("SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")),
            "log_level": 0,
        }
    )
    admin.list_topics(timeout=10)
    for token in (b"", b"\x00", b"\xff\xfe\x00\x00", b"n,,n=x", b"\x00" * 1000):
        with socket.create_connection(
            ("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=10
        ) as raw:
            raw.sendall(_sasl_handshake_frame("PLAIN"))
            _read_frame(raw)
            raw.sendall(_sasl_authenticate_frame(token))
            response = _read_frame(raw)
            # error code after correlation id (v0 header): SASL_AUTHENTICATION_FAILED = 58
            assert struct.unpack_from(">h", response, 4)[0] == 58
            assert _closed(raw)
    assert admin.list_topics(timeout=10).brokers
    assert "Traceback" not in secured.broker.log_tail(300)


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    client_id = b"raw"
    payload = struct.pack(">hhih", api_key, version, 9, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def _sasl_handshake_frame(mechanism: str) -> bytes:
    return _frame(17, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())


def _sasl_authenticate_frame(token: bytes) -> bytes:
    return _frame(36, 0, struct.pack(">i", len(token)) + token)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = sock.recv(n - len(data))
            assert more, "connection closed before a whole frame arrived"
            data += more
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_kcat_over_sasl_ssl(secured: SecuredBroker) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    user = f"user-{uuid.uuid4().hex[:8]}"
    ok(
        "users",
        "add",
        user,
        "--password",
        "kcat-pw",
        "--bootstrap-servers",
        secured.broker.bootstrap,
    )
    topic = f"sec-kcat-{uuid.uuid4().hex[:8]}"
    options = ["-b", secured.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
               "-X", f"ssl.ca.location={secured.certs.ca}", "-X", "sasl.mechanism=SCRAM-SHA-512",
               "-X", f"sasl.username={user}", "-X", "sasl.password=kcat-pw"]  # fmt: skip
    subprocess.run([kcat, *options, "-P", "-t", topic], input=b"one\ntwo\n", check=True,
                   timeout=60, capture_output=True)  # fmt: skip
    consumed = subprocess.run([kcat, *options, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                              check=True, timeout=60, capture_output=True)  # fmt: skip
    assert consumed.stdout.split() == [b"one", b"two"]


# -- start-up errors ---------------------------------------------------------------------


@pytest.mark.parametrize("keystore", ["missing", "not a key"])
def test_bad_keystore_stops_startup_naming_config_and_file(tmp_path: Path, keystore: str) -> None:
    path = tmp_path / "keystore.pem"
    if keystore != "missing":
        path.write_text(keystore + "\n")
    result = run_raftka(
        "serve", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", tmp_path / "data",
        "--config", f"listeners=SSL://127.0.0.1:{free_port()}",
        "--config", f"ssl.keystore.location={path}",
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ssl.keystore.location" in result.stderr and str(path) in result.stderr


# -- a cluster ---------------------------------------------------------------------------


def test_credentials_made_through_one_broker_work_on_the_others(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    cluster = cluster_factory(start=False)
    sasl_ports = {}
    for node in cluster.nodes:
        sasl_ports[node.node_id] = free_port()
        node.config["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{sasl_ports[node.node_id]}"
    cluster.start()
    user = f"user-{uuid.uuid4().hex[:8]}"
    ok("users", "add", user, "--password", "everywhere", "--mechanism", "SCRAM-SHA-256",
       "--bootstrap-servers", cluster.node(1).bootstrap)  # fmt: skip
    for node_id in (2, 3):
        settings = {
            "bootstrap.servers": f"127.0.0.1:{sasl_ports[node_id]}",
            "security.protocol": "SASL_PLAINTEXT",
            **sasl("SCRAM-SHA-256", user, "everywhere"),
        }
        deadline = time.monotonic() + 30
        while True:  # replicated: applied on every broker shortly after the commit
            try:
                metadata = AdminClient({**settings, "log_level": 0}).list_topics(timeout=5)
                break
            except KafkaException:
                assert time.monotonic() < deadline, f"node {node_id} never accepted {user}"
        # Each broker is given at its address on the listener the client used.
        assert {(b.id, b.port) for b in metadata.brokers.values()} == {
            (n, sasl_ports[n]) for n in (1, 2, 3)
        }
    listed = ok("users", "list", "--bootstrap-servers", cluster.node(3).bootstrap)
    assert any(line.split()[:2] == [user, "SCRAM-SHA-256"] for line in listed.splitlines())


def test_java_client_over_sasl_ssl_with_scram(secured: SecuredBroker, java_tool: Any) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    ok("users", "add", user, "--password", "java-pw", "--mechanism", "SCRAM-SHA-512",
       "--bootstrap-servers", secured.broker.bootstrap)  # fmt: skip
    props = [
        "security.protocol=SASL_SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={secured.certs.ca}",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="java-pw";',
    ]
    topic = f"sec-java-{uuid.uuid4().hex[:8]}"
    bootstrap = secured.address("SASL_SSL")
    acked = java_tool.json("produce", bootstrap, topic, 20, *props)
    assert len(acked) == 20
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, "earliest", 20, 30000, *props)
    assert [r["value"] for r in rows] == [f"v{i}" for i in range(20)]


def test_kcat_over_ssl_with_a_client_certificate(secured: SecuredBroker) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    topic = f"sec-kcat-mtls-{uuid.uuid4().hex[:8]}"
    options = ["-b", secured.address("MTLS"), "-X", "security.protocol=SSL",
               "-X", f"ssl.ca.location={secured.certs.ca}",
               "-X", f"ssl.certificate.location={secured.certs.client_cert}",
               "-X", f"ssl.key.location={secured.certs.client_key}"]  # fmt: skip
    subprocess.run([kcat, *options, "-P", "-t", topic], input=b"one\ntwo\n", check=True,
                   timeout=60, capture_output=True)  # fmt: skip
    consumed = subprocess.run([kcat, *options, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                              check=True, timeout=60, capture_output=True)  # fmt: skip
    assert consumed.stdout.split() == [b"one", b"two"]
    # Without its certificate kcat gets no further than the handshake.
    refused = subprocess.run(
        [kcat, "-b", secured.address("MTLS"), "-X", "security.protocol=SSL",
         "-X", f"ssl.ca.location={secured.certs.ca}", "-L", "-m", "5"],
        timeout=60, capture_output=True,
    )  # fmt: skip
    assert refused.returncode != 0


def test_java_client_over_ssl_with_a_client_certificate(
    secured: SecuredBroker, java_tool: Any, tmp_path: Path
) -> None:
    # The Java client's PEM keystore: the PKCS#8 key and its certificate in one file.
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_text(
        secured.certs.client_key.read_text() + secured.certs.client_cert.read_text()
    )
    props = [
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={secured.certs.ca}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
    ]
    topic = f"sec-java-mtls-{uuid.uuid4().hex[:8]}"
    bootstrap = secured.address("MTLS")
    acked = java_tool.json("produce", bootstrap, topic, 10, *props)
    assert len(acked) == 10
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, "earliest", 10, 30000, *props)
    assert [r["value"] for r in rows] == [f"v{i}" for i in range(10)]
