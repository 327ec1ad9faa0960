"""HTTPS on the broker's HTTP endpoints (`http.security.protocol=SSL`): /healthz, /metrics
and the web console answer over TLS with the broker's keystore to a client that trusts its
CA; a client that does not is refused by its own certificate check; plain HTTP to the port
gets no HTTP answer and leaves the endpoint serving; the console's session cookie is sent
back over TLS only; client certificates are asked for when
`listener.name.http.ssl.client.auth=required`; a broker told to use TLS without a keystore
does not start and says which config is missing."""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from brokers import Brokers
from certs import Certificates, make_certificates
from harness import free_port
from secured import password, start_sasl_broker

TIMEOUT_S = 10


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("http-certs"))


def get(url: str, context: ssl.SSLContext) -> tuple[int, str]:
    with urllib.request.urlopen(url, context=context, timeout=TIMEOUT_S) as answer:
        return answer.status, answer.read().decode()


def test_metrics_and_console_answer_over_tls_only(
    module_brokers: Brokers, certificates: Certificates
) -> None:
    metrics_port, console_port = free_port(), free_port()
    module_brokers.broker(
        {
            "metrics.listen": f"127.0.0.1:{metrics_port}",
            "console.listen": f"127.0.0.1:{console_port}",
            "http.security.protocol": "SSL",
            "ssl.keystore.location": str(certificates.broker_keystore),
        },
        name="https-broker",
    )
    trusted = ssl.create_default_context(cafile=str(certificates.ca))
    assert get(f"https://127.0.0.1:{metrics_port}/healthz", trusted)[0] == 200
    status, metrics = get(f"https://127.0.0.1:{metrics_port}/metrics", trusted)
    assert status == 200 and "raftka_" in metrics, metrics[:500]
    status, page = get(f"https://127.0.0.1:{console_port}/", trusted)
    assert status == 200 and "<html" in page.lower(), page[:500]

    # The system's CAs do not vouch for the test CA's broker certificate.
    with pytest.raises(urllib.error.URLError) as refused:
        get(f"https://127.0.0.1:{console_port}/", ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError), refused.value

    # Plain HTTP to a TLS port is not answered in HTTP (the handshake fails)...
    with socket.create_connection(("127.0.0.1", metrics_port), timeout=TIMEOUT_S) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        try:
            while chunk := plain.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
    assert not received.startswith(b"HTTP/"), received[:200]
    # ...and the endpoint goes on serving.
    assert get(f"https://127.0.0.1:{metrics_port}/healthz", trusted)[0] == 200


def test_client_certificates_are_required_when_configured(
    module_brokers: Brokers, certificates: Certificates
) -> None:
    metrics_port = free_port()
    module_brokers.broker(
        {
            "metrics.listen": f"127.0.0.1:{metrics_port}",
            "http.security.protocol": "SSL",
            "ssl.keystore.location": str(certificates.broker_keystore),
            "listener.name.http.ssl.truststore.location": str(certificates.ca),
            "listener.name.http.ssl.client.auth": "required",
        },
        name="mtls-broker",
    )
    url = f"https://127.0.0.1:{metrics_port}/healthz"
    anonymous = ssl.create_default_context(cafile=str(certificates.ca))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        get(url, anonymous)
    with_certificate = ssl.create_default_context(cafile=str(certificates.ca))
    with_certificate.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
    assert get(url, with_certificate)[0] == 200


def test_tls_without_a_keystore_does_not_start(tmp_path: Path) -> None:
    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftka.broker",
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(tmp_path / "data"),
            "--config",
            f"metrics.listen=127.0.0.1:{free_port()}",
            "--config",
            "http.security.protocol=SSL",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "listener HTTP uses TLS but has no keystore" in started.stderr, started.stderr[-2000:]
    assert "ssl.keystore.location" in started.stderr


def test_the_consoles_session_cookie_is_secure_over_tls(
    module_brokers: Brokers, certificates: Certificates
) -> None:
    console_port = free_port()
    start_sasl_broker(
        module_brokers,
        ("alice",),
        config={
            "console.listen": f"127.0.0.1:{console_port}",
            "http.security.protocol": "SSL",
            "ssl.keystore.location": str(certificates.broker_keystore),
        },
        name="https-sasl-broker",
    )
    trusted = ssl.create_default_context(cafile=str(certificates.ca))
    status, page = get(f"https://127.0.0.1:{console_port}/login", trusted)
    assert status == 200, page[:500]
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:2000]
    form = {"csrf": found.group(1), "username": "alice", "password": password("alice")}
    connection = http.client.HTTPSConnection("127.0.0.1", console_port, context=trusted)
    try:
        connection.request(
            "POST",
            "/login",
            urllib.parse.urlencode(form),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        answer = connection.getresponse()
        assert answer.status == 303, (answer.status, answer.read()[:500])
        cookie = answer.getheader("Set-Cookie") or ""
    finally:
        connection.close()
    assert "HttpOnly" in cookie and "; Secure" in cookie, cookie
