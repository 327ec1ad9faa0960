"""Throwaway certificates for the security tests, made by `scripts/certs` (openssl: a CA, a
broker certificate for 127.0.0.1 and localhost, and a client certificate), without network
access. The security page's worked example
(docs/operating/security.md) uses the same script."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from required import missing_client

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "certs"
CLIENT = "alice-client"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    broker_keystore: Path
    client_cert: Path
    client_key: Path
    #: The client key and certificate in one PEM file (the Java client's keystore).
    client_keystore: Path
    #: The client certificate's principal on an SSL listener with client authentication.
    client_principal: str = f"User:CN={CLIENT},O=raftka"


def make_certificates(directory: Path) -> Certificates:
    """A CA, a broker key+certificate (SAN 127.0.0.1, localhost) in one PEM keystore, and a
    client certificate with subject CN=alice-client,O=raftka."""
    if shutil.which("openssl") is None:
        missing_client("the openssl command makes the test certificates and is not installed")
    subprocess.run(
        [str(SCRIPT), str(directory), "--client", CLIENT, "--days", "2"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return Certificates(
        directory / "ca.pem",
        directory / "broker-keystore.pem",
        directory / f"{CLIENT}.pem",
        directory / f"{CLIENT}.key",
        directory / f"{CLIENT}-keystore.pem",
    )
