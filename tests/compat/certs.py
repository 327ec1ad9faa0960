"""Throwaway certificates for the security tests, made with the `openssl` command line tool
(a CA, a broker certificate for 127.0.0.1 and a client certificate), without network access."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from required import missing_client


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        missing_client("the openssl command makes the test certificates and is not installed")
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ec_key_request(cwd: Path, name: str, subject: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
             cwd=cwd)  # fmt: skip


@dataclass(frozen=True)
class Certificates:
    ca: Path
    broker_keystore: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path) -> Certificates:
    """A CA, a broker key+certificate (SAN 127.0.0.1, localhost) in one PEM keystore, and a
    client certificate with subject O=acme, CN=alice-client."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=raftka-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _ec_key_request(directory, "broker", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "broker.pem", "-days", "2", "-extfile", "san.ext",
             cwd=directory)  # fmt: skip
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(
        (directory / "broker.key").read_text() + (directory / "broker.pem").read_text()
    )
    _ec_key_request(directory, "client", "/O=acme/CN=alice-client")
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "client.pem", "-days", "2", cwd=directory)  # fmt: skip
    return Certificates(
        directory / "ca.pem", keystore, directory / "client.pem", directory / "client.key"
    )
